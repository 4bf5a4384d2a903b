"""Trace replay: a recorded MPI application projected onto network, pool and hybrid fabrics.

Modules: `trace` (the format-independent calls), `simgrid` (SimGrid time-independent
traces), `engine` (the DES replay), `analysis` (totals, per-call times, the critical
path), `fabrics` (a --fabric spec to a transport), `output` (CSV, JSON, plots), `cli`
(`cxlsim replay`), `stencil` (a generated 3-D stencil trace).
"""
