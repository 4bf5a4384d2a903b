"""Flow-level cost of the ring all-reduce with per-rank start times and per-rank reduction speeds.

The DES of models/collectives runs every message of a ring all-reduce as
chunks through the fabric. Baselines that issue many all-reduces per step
(Horovod with 1 ms fusion cycles: hundreds per step) are too slow that way,
so they can use this per-rank recurrence instead (`collective="flow"`).

It is the LogGP rule of `analytic.ring_recurrence` (and `pairwise_steps`):
rank r, whose source is r - 1, finishes ring step j at

    t_r' = max(max(t_{r-1} + arrive(k), t_r + o) + receive(k), t_r + busy(k)) + red_r

with k = ceil(s / P) bytes per step, red_r the reduction of k bytes at rank
r's own speed (its GPU: heterogeneous clusters reduce at different speeds) in
the P - 1 reduce-scatter steps and 0 in the P - 1 allgather steps, and
shared-memory terms on edges whose two ranks share a host. Ranks may start at
different times (a bucket is ready on one GPU before another). On an
uncongested fabric (one ring flow per link: a star with the ring's hosts)
this is the DES's own arithmetic, so the two agree to rounding; the tests
check the whole DDP and Horovod runs against the DES (within 2%).

>>> from cxlsim.models.collectives import analytic
>>> cm = analytic.CostModel(overhead_ns=100.0, gap_ns=100.0, beta_ns_per_byte=0.1, path_latency_ns=50.0, links=2,
...                         store_and_forward=False, chunk_bytes=1 << 20, copy_ns_per_byte=0.1, reduce_ns_per_byte=0.5)
>>> ends = ring_allreduce(cm, [0, 1], 1000, [0.0, 0.0], [0.01, 0.01])
>>> ends == [2 * cm.T(500) + 500 * 0.01] * 2   # P = 2: one reduce-scatter step and one allgather step
True
"""
from __future__ import annotations

__all__ = ["ring_allreduce"]


def ring_allreduce(cm, host_of, size_bytes: int, start_ns, reduce_ns_per_byte) -> list:
    """Per-rank finish times (ns) of a ring all-reduce of `size_bytes` per rank started at `start_ns`."""
    p = len(host_of)
    t = [float(x) for x in start_ns]
    if p == 1:
        return t
    k = -(-size_bytes // p)
    o = cm.overhead_ns
    into = [host_of[(r - 1) % p] == host_of[r] for r in range(p)]  # is edge (r-1 -> r) on one host?
    arrive = [cm.arrive(k, x) for x in into]
    receive = [cm.receive(k, x) for x in into]
    busy = [cm.busy(k, into[(r + 1) % p]) for r in range(p)]
    red = [k * x for x in reduce_ns_per_byte]
    rng = range(p)
    for step in range(2 * (p - 1)):
        reducing = step < p - 1
        prev = t
        t = [0.0] * p
        for r in rng:
            mine = prev[r]
            got = prev[r - 1] + arrive[r]
            if mine + o > got:
                got = mine + o
            got += receive[r]
            if mine + busy[r] > got:
                got = mine + busy[r]
            t[r] = got + red[r] if reducing else got
    return t
