"""Trace replay: a recorded MPI application projected onto network, pool and hybrid fabrics.

Modules: `trace` (the format-independent calls), `simgrid` (SimGrid time-independent
traces), `engine` (the DES replay), `analysis` (totals, per-call times, the critical
path), `fabrics` (a --fabric spec to a transport), `output` (CSV, JSON, plots), `cli`
(`cxlsim replay`), `pool_messages` (point-to-point over a CXL pool), `pool_bandwidth` (osu_bw and
osu_mbw_mr windows on that protocol, with their closed form), `collectives` (how each traced collective
runs), `pool_profile` (a traced run's pool collectives priced by a local-host profile), `cpu_sharing` and
`rank_cpus` (ranks taking turns on fewer CPUs, and where each ran), `generate` (traces of mini-app patterns).
"""
