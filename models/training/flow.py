"""Flow-level twins of the all-reduce modes: the ring all-reduce's cost by recurrence, and the step loop.

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

`run_steps` is the per-step loop that DDP and Horovod run on it
(`collective="flow"`, the `COLLECTIVE` option): each step's schedule returns
every rank's communication end, which starts its next step.

>>> from cxlsim.models.collectives import analytic
>>> cm = analytic.CostModel(overhead_ns=100.0, gap_ns=100.0, beta_ns_per_byte=0.1, path_latency_ns=50.0, links=2,
...                         store_and_forward=False, chunk_bytes=1 << 20, copy_ns_per_byte=0.1, reduce_ns_per_byte=0.5)
>>> ends = ring_allreduce(cm, [0, 1], 1000, [0.0, 0.0], [0.01, 0.01])
>>> ends == [2 * cm.T(500) + 500 * 0.01] * 2   # P = 2: one reduce-scatter step and one allgather step
True
"""
from __future__ import annotations

from cxlsim.errors import InputError, RunError
from cxlsim.fabric import topology
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network import build
from cxlsim.fabric.presets import get_preset
from cxlsim.models.collectives import analytic
from cxlsim.models.training.core import Option, StepLog

__all__ = ["ring_allreduce", "COLLECTIVES", "COLLECTIVE", "check_collective", "cost_model", "run_steps"]

COLLECTIVES = ("flow", "des")
"""How the all-reduce modes cost a ring: this module's recurrence, or every message on the DES transport."""
COLLECTIVE = Option(name="collective", flag="--collective", parse=str, choices=COLLECTIVES,
                    help="ring all-reduce as the flow-level recurrence (flow, default) or as DES messages (des); "
                         "tested equal within 2%%")


def check_collective(collective) -> None:
    if collective not in COLLECTIVES:
        raise InputError(f"collective: expected one of {', '.join(COLLECTIVES)}, got {collective!r}")


def cost_model(spec, chunk_bytes: int):
    """LogGP figures of the training star of `spec`'s worker hosts (analytic.CostModel)."""
    net = build(topology.star(spec.worker_hosts), get_preset(spec.interconnect), Environment())
    return analytic.CostModel.from_network(net, chunk_bytes)


def run_steps(spec, job, steps, J, backward_fraction, failure, schedule) -> StepLog:
    """The flow-level step loop: `schedule(s, bstart, bwd, cend)` returns each rank's communication end (ns).

    Every rank's step s starts when its step s - 1 ended; its backward pass starts at bstart and
    lasts bwd; its compute ends at cend. A failed worker stalls the synchronous run (RunError).
    """
    W = spec.size
    if failure is not None:
        raise RunError(f"training run stalled: worker {failure.worker} failed at iteration {failure.step} and "
                       "this synchronous mode waits for every worker (no elastic recovery is modelled)")
    log = StepLog(W)
    t = [0.0] * W
    for s in range(steps):
        its = [float(job.iteration_ns[w] * J[s, w]) for w in range(W)]
        bwd = [it * backward_fraction for it in its]
        bstart = [t[w] + its[w] - bwd[w] for w in range(W)]
        cend = [t[w] + its[w] for w in range(W)]
        ends = schedule(s, bstart, bwd, cend)
        for w in range(W):
            end = max(cend[w], ends[w])
            log.add(w, t[w], cend[w], end)
            t[w] = end
    return log


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
