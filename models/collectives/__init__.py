"""Collective algorithms over the transport interface, with closed-form costs.

Each algorithm is one `base.Algorithm` record (its DES generator `run`, its
closed form `cost`, the transport kind it needs, its rank check and fallback,
its source). `registry` lists the built-in records and appends the plug-ins'
(`CXLSIM_PLUGINS`); `registry.lookup(collective, name, P)` finds one. The two
engines take records: `runner.run` simulates one call on a transport (the
DES), `analytic.closed_form` / `analytic.cost` evaluate its closed form;
`selectors.select` mimics MPICH's and Open MPI's default choice. See
docs/collectives.md.
"""
from cxlsim.models.collectives.registry import algorithm, algorithms, lookup, names, network_algorithms

__all__ = ["algorithm", "algorithms", "lookup", "names", "network_algorithms"]
