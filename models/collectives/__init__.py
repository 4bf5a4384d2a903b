"""Collective algorithms over the transport interface, with closed-form costs."""
