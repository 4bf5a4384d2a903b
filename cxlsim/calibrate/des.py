"""The local-host model in the DES: flag ping-pong and bare sync, the path solve, the predictions.

`predict_local` runs osu_allgather's loop (`cxl_pool`, `cxl_pool_zero_copy`) on a
`CXLPoolTransport` of `local_preset`; `predict_injected` adds the charges cxl_ops.h documents
(flags +L per wait, +L per block read one block after the other, copies at min(host, B)) as a
DES workload on the same transport. Units: ns, bytes, bytes/ns.
"""
from __future__ import annotations

import numpy as np

from cxlsim.calibrate.collective_blocks import EXCHANGE_GAP_NS, SYMMETRIC
from cxlsim.calibrate.local_model import GiB, MIN_PATH_NS, LocalModel, local_preset
from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.errors import InputError, RunError
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.fabric.pool_transport import ExtraCharges
from cxlsim.models.collectives import pool_collectives as pc
from cxlsim.models.collectives.cxl_pool import cxl_pool, cxl_pool_zero_copy

FLUSH_CHARGED = SYMMETRIC
"""Collectives whose flush-mode waits are charged up to the measured symmetric flag exchange (`charged_exchange`)."""


def _transport(preset, nranks: int, coherence: str):
    return CXLPoolTransport(preset, nranks, coherence=coherence, pool_bytes=GiB)


def _publish(t, rank: int, value) -> object:
    """The emulator's cxl_publish for a 0-byte call: sfence, flag store, flush mode: write back the flag."""
    yield t.fence(rank, PoolEvent.SFENCE)
    yield t.pool_write(rank, rank * 64, 8, value, streaming=False)
    if t.coherence == Coherence.FLUSH:
        yield t.flush(rank, rank * 64, 8)


def des_pingpong_ns(preset, coherence: str, iterations: tuple[int, int] = (4, 12)) -> float:
    """The DES's flag round trip on a 2-host pool of `preset`: rank 0 publishes and waits for rank 1,
    rank 1 waits and publishes (flag_pingpong's protocol); steady state, ns per round trip."""
    ends = []
    for n in iterations:
        t = _transport(preset, 2, coherence)
        done = {}

        def rank0(n=n, t=t, done=done):
            for i in range(1, n + 1):
                yield from _publish(t, 0, i)
                yield t.wait_flags(0, [64], i)
            done[0] = t.env.now

        def rank1(n=n, t=t):
            for i in range(1, n + 1):
                yield t.wait_flags(1, [0], i)
                yield from _publish(t, 1, i)
        t.run({0: rank0(), 1: rank1()})
        ends.append(done[0])
    return (ends[1] - ends[0]) / (iterations[1] - iterations[0])


PATH_RULES = ("sync", "pingpong")
AUTO_PATH_RULE = {Coherence.HW: "sync", Coherence.FLUSH: "pingpong"}
"""path_rule='auto' (the default of `fit_local`): per mode. hw: the DES's stores wait for the
line's ownership before the CPU goes on, where x86 posts them, so in the symmetric exchange of
the allgather's sync the DES takes a whole round trip where the machine takes one hop; the
'sync' rule makes that exchange cost the measured hop. flush: every poll is a clflushopt,
mfence and load from memory, about a third of the round trip, so the symmetric exchange is not
one hop either way; the 'pingpong' rule reproduces the primitive as measured."""


def des_sync_ns(preset, coherence: str) -> float:
    """The DES's bare sync at np = 2 (a 0-byte zero-copy call, the emulator's barrier: both ranks
    publish and wait at once), steady state, ns per call."""
    return _des_loop(_transport(preset, 2, coherence), cxl_pool_zero_copy, 0, 0.0)


def solve_path_ns(model: LocalModel, size_bytes: int, coherence: str, roundtrip_ns: float,
                  rule: str = "pingpong") -> tuple[float, float]:
    """The path for which the DES reproduces the measured flag round trip `roundtrip_ns`.

    rule 'pingpong' (the default): the DES's own ping-pong (`des_pingpong_ns`) equals the round trip;
    rule 'sync': the DES's bare sync (`des_sync_ns`, where both ranks' flags cross
    at once, one flag hop each) equals half of it, one hop. Both are linear in the path, so two
    runs give it exactly, unless an acknowledgement of `flush_ack_ns` outlasts the path's own (a
    max() in the DES: then it is piecewise linear and the solve bisects). Returns (path_ns, the
    DES's figure at that path, in the rule's terms: a round trip for 'pingpong', twice the sync
    for 'sync'). A negative solution is clamped to MIN_PATH_NS and the second value then shows
    the over-prediction.
    """
    if rule not in PATH_RULES:
        raise InputError(f"path rule: expected one of {PATH_RULES}, got {rule!r}")

    def figure(path):
        preset = local_preset(model, size_bytes, path, coherence)
        return des_pingpong_ns(preset, coherence) if rule == "pingpong" else 2 * des_sync_ns(preset, coherence)
    p0, p1 = 10.0, 110.0
    r0, r1 = figure(p0), figure(p1)
    slope = (r1 - r0) / (p1 - p0)
    if slope <= 0:
        raise RunError(f"the DES flag round trip does not grow with the path ({r0} -> {r1} ns)")
    path = max(p0 + (roundtrip_ns - r0) / slope, MIN_PATH_NS)
    got = figure(path)
    if abs(got - roundtrip_ns) <= 1e-6 * roundtrip_ns or path == MIN_PATH_NS and got >= roundtrip_ns:
        return path, got
    lo, hi = MIN_PATH_NS, max(p1, path)  # not linear: bisect the non-decreasing figure(path)
    if figure(lo) >= roundtrip_ns:
        return lo, figure(lo)
    while figure(hi) < roundtrip_ns:
        if hi > 1e6:
            raise RunError(f"the DES flag round trip stays below {roundtrip_ns:.0f} ns at any path")
        hi *= 2
    for _ in range(48):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if figure(mid) < roundtrip_ns else (lo, mid)
    return hi, figure(hi)


def charged_exchange(collective: str, coherence: Coherence) -> bool:
    """Whether the DES's waits in this collective's calls are charged up to the measured symmetric flag
    exchange: in flush mode every collective whose steps are symmetric exchanges (`FLUSH_CHARGED`: the
    allgather's one step and `collective_blocks.SYMMETRIC`, the barrier among them); in hw mode none.

    Chosen by an A/B on held-out runs (19:00-19:06, load 3.7-4.7): flush allreduce, reduce_scatter and
    alltoall at 4 B-4 KiB were 12-25% short uncharged and within a median 4-8% charged (a flush poll is a
    clflushopt, an mfence and a load from memory, so a core polling its peer's line while both publish
    costs what the probe costs); hw ones were within a median 3.8-5.4% uncharged in the slow placement and
    10-30% over charged there (x86 posts the flag store, and in a call the line moves while the rank
    still copies, which the probe's clock spin does not). The flush allgather (copy and zero-copy: every
    rank publishes its block and polls the other's at once, the same step) was 12-28% short at 1 B-2 KiB
    uncharged in session 24's two quiet runs, medians 8.2-9.6%; re-predicted charged, 3.9-6.9%. The hw
    barrier was charged too until session 29: re-predicted on five profiles of that session (17:00-17:35 UTC,
    load 0.1-0.9; the same jobs), fast-placement medians charged -> uncharged 15.2 -> 4.4, 20.2 -> 5.2,
    22.8 -> 4.2, 13.2 -> 5.5 and 6.8 -> 8.1%, the one slow-placement figure 10.8 -> 1.4% (the charge made
    the 180 ns barrier 210-230 ns)."""
    return coherence == Coherence.FLUSH and collective in FLUSH_CHARGED


class ExchangeCharges(ExtraCharges):
    """`extra_ns` of CPU after every flag wait: what a symmetric flag exchange costs on this machine beyond
    the DES's own (`exchange_charge_ns`)."""

    def __init__(self, extra_ns: float):
        self.extra_ns = extra_ns

    def after_wait(self, rank: int) -> float:
        return self.extra_ns


def des_exchange_ns(model: LocalModel, coherence: Coherence, charge_ns: float = 0.0,
                    gap_ns: float = EXCHANGE_GAP_NS, counts: tuple[int, int] = (4, 12)) -> float:
    """The DES's `flag_exchange` loop at np 2: per rank, pool barriers back to back with `gap_ns` of CPU
    after each, every wait charged `charge_ns`; steady state, ns per exchange (the gap included)."""
    ends = []
    for n in counts:
        t = _transport(local_preset(model, 1, model.path_ns[coherence], coherence), model.np, coherence)
        t.charges = ExchangeCharges(charge_ns)
        done = {}

        def rank_proc(r, t=t, n=n, done=done):
            ep = t.endpoint(r)
            for _ in range(n):
                yield from pc.barrier(ep, 0, r)
                yield ep.compute(gap_ns)
            done[r] = t.env.now
        t.run({r: rank_proc(r) for r in range(model.np)})
        ends.append(max(done.values()))
    return (ends[1] - ends[0]) / (counts[1] - counts[0])


def exchange_charge_ns(model: LocalModel, coherence: Coherence) -> float:
    """CPU ns to charge after each wait of a symmetric flag exchange so that the DES's exchange loop
    (`des_exchange_ns`) takes what the measured one took (`LocalModel.exchange_ns`): the loop has one wait
    per exchange on every rank, so its time grows by exactly the charge. 0 without the primitive, or where
    the DES's own exchange is already as slow (a charge is CPU time: never negative)."""
    measured = model.exchange_ns.get(coherence) if model.np == 2 else None
    if measured is None:
        return 0.0
    return max(measured - des_exchange_ns(model, coherence), 0.0)


def _des_loop(t, algorithm, m: int, overhead_ns: float, calls: int = 3) -> float:
    """osu_allgather's loop in the DES: per rank, `calls` x (timed: overhead + call; untimed: barrier,
    itself overhead + a 0-byte zero-copy call); returns the mean over ranks of the last timed call, ns.
    A transport with `InjectedCharges` is told what each rank's current call reads."""
    spans = {}
    marks = t.charges.call_bytes if isinstance(t.charges, InjectedCharges) else None

    def rank_proc(r):
        ep = t.endpoint(r)
        for _ in range(calls):
            t0 = t.env.now
            yield ep.compute(overhead_ns)
            if marks is not None:
                marks[r] = m
            yield from algorithm(ep, m, r)
            spans[r] = t.env.now - t0
            yield ep.compute(overhead_ns)
            if marks is not None:
                marks[r] = 0
            yield from cxl_pool_zero_copy(ep, 0, ("barrier", r))
    t.run({r: rank_proc(r) for r in range(t.size)})
    return float(np.mean(list(spans.values())))


def _algorithm(side: str):
    if side == "copy":
        return cxl_pool
    if side == "zero-copy":
        return cxl_pool_zero_copy
    raise InputError(f"side: expected 'copy' or 'zero-copy', got {side!r}")


def predict_local(model: LocalModel, coherence: str, side: str, size_bytes: int, nranks: int | None = None) -> float:
    """DES prediction (ns) of the bench's per-call time for `side` ('copy' or 'zero-copy') and size.

    copy: overhead + cxl_pool; zero-copy: overhead + cxl_pool_zero_copy + the application's write
    pass (n) and read pass (np x n), as the bench's zero-copy step does them. In flush mode at np 2 every
    flag wait is charged up to the measured symmetric flag exchange (`charged_exchange`), where the
    model has it (`LocalModel.exchange_ns`).
    """
    algorithm = _algorithm(side)
    t = _transport(local_preset(model, size_bytes, model.path_ns[coherence], coherence), nranks or model.np,
                   coherence)
    if charged_exchange("allgather", coherence) and t.size == 2:
        t.charges = ExchangeCharges(exchange_charge_ns(model, coherence))
    ns = _des_loop(t, algorithm, size_bytes, model.overhead_ns[side])
    return ns + (model.app_ns(size_bytes, coherence) if side == "zero-copy" else 0.0)


class InjectedCharges(ExtraCharges):
    """The emulator's injected charges (cxl_ops.h) on top of the pool protocol, for a transport of
    `nranks` ranks with pool figures `fig`: +L once the flags are seen, and per block read (one block
    after the other, the CPU blocked as by the emulator's memcpy) L before it and the load and its
    copy at the host bandwidth after it; zero-copy calls with bytes: np x L after the flags. Flag
    polls get nothing extra. `call_bytes[rank]` is the size of the rank's current call (0 between calls)."""

    def __init__(self, fig, nranks: int, latency_ns: float, zero_copy: bool):
        self.fig, self.nranks, self.latency_ns, self.zero_copy = fig, nranks, latency_ns, zero_copy
        self.call_bytes = [0] * nranks

    def after_wait(self, rank: int) -> float:
        return self.latency_ns * (1 + (self.nranks if self.zero_copy and self.call_bytes[rank] else 0))

    def read(self, rank: int, offset_bytes: int, size_bytes: int) -> tuple[float, float]:
        if offset_bytes < self.nranks * 64:  # a flag line (PoolLayout: flags first)
            return 0.0, 0.0
        lines = -(-size_bytes // 64)
        return self.latency_ns, self.fig.load_ns + lines * 64 / self.fig.host_bw_bytes_per_ns


def _injected_transport(preset, nranks: int, coherence: str, latency_ns: float, zero_copy: bool):
    """A CXLPoolTransport with the emulator's injected charges (`InjectedCharges`). Copies are paced by
    the preset's host bandwidth (min(host, B))."""
    t = CXLPoolTransport(preset, nranks, coherence=coherence, pool_bytes=GiB)
    t.charges = InjectedCharges(t.figures(), nranks, latency_ns, zero_copy)
    return t


def predict_injected(model: LocalModel, coherence: str, side: str, size_bytes: int, latency_ns: float,
                     bw_bytes_per_ns: float) -> float:
    """DES prediction (ns) of the bench's per-call time under injected CXL timing (L, B)."""
    cap = bw_bytes_per_ns if side == "copy" else 0.0  # zero-copy loads and stores are never paced
    preset = local_preset(model, size_bytes, model.path_ns[coherence], coherence, bw_cap_bytes_per_ns=cap)
    t = _injected_transport(preset, model.np, coherence, latency_ns, side == "zero-copy")
    ns = _des_loop(t, _algorithm(side), size_bytes, model.overhead_ns[side])
    return ns + (model.app_ns(size_bytes, coherence) if side == "zero-copy" else 0.0)
