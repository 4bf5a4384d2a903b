"""Trace replay: a recorded MPI application projected onto network, pool and hybrid fabrics.

Modules: `trace` (the format-independent calls), `simgrid` (SimGrid time-independent
traces), `engine` (the DES replay), `analysis` (totals, per-call times, the critical
path), `fabrics` (a --fabric spec to a transport), `output` (CSV, JSON, plots), `cli`
(`cxlsim replay`), `pool_messages` (point-to-point over a CXL pool), `collectives`
(how each traced collective runs), `generate` (traces of mini-app patterns).
"""
