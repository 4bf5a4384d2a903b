"""Workloads on the simulated fabric: collectives and data-parallel training."""
