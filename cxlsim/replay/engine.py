"""The DES replay: every rank's traced calls run as one SimPy process on a fabric's transport.

`replay(trace, transport, ...)` runs each rank's sequence:
- `compute` gaps occupy the rank's CPU for flops / trace host speed x the
  rank's compute scale (`transport.compute`, so they never overlap the
  rank's message overheads: receive overheads of messages landing during a
  gap delay it, and that delay is recorded as a `progress` segment, counted
  as communication); `sleep` waits without the CPU;
- point-to-point calls go through `transport.send`/`recv` and are matched as
  MPI matches them (`Matcher`): a receive takes the earliest arrived message
  whose source and tag match (-333 any source, -444 any tag), else waits, and
  an arriving message goes to the earliest posted matching receive. A send
  completes locally (the transport's eager protocol: the sender is free once
  its last byte has left). `isend`/`irecv` post a request named by
  (src, dst, tag); `wait` completes the oldest request of that name, `waitall`
  every pending one, `test` completes one if it is done. `sendRecv` sends and
  receives with tag 0, as SimGrid replays it;
- collectives run their `Plan` (cxlsim.replay.collectives); each gets its own
  tag range, so collectives in flight at once never take each other's messages.
  With `priced` (a library trace on `NET.json+LOCAL.json`), those the traced
  library ran on its pool run as the local-host profile's `PricedPlan` instead
  (cxlsim.replay.pool_profile).

On a CXL pool fabric (a transport of kind 'pool', one rank per host or K) the
messages go through the pool's send/recv protocol with flags
(cxlsim.replay.pool_messages), whose mailboxes sit above the pool
collectives' regions; allgather, barrier, allreduce, alltoall and
reducescatter run the pool's own algorithms (cxlsim.replay.pool_plans). On a hybrid pod fabric (kind 'hybrid') they go
over the network between pods and, inside a pod, through the pod's pool or over
the network, whichever is cheaper for the size (cxlsim.replay.pod_routes), and
allgather, allreduce, bcast, alltoall and barrier run the pods collectives
(cxlsim.replay.pods). On both, `--placement` names the host each trace rank runs
on (cxlsim.replay.placed).

Every call is recorded as a segment (start_ns, end_ns, kind, dep_rank,
dep_ns): `dep` names what the call may have waited for, the rank and time at
which the last message it received was sent (receives), or the last rank to
enter the collective (collectives). `cxlsim.replay.analysis` walks these back
into the critical path. Time is ns, sizes bytes.
"""
from __future__ import annotations

import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import simpy

from cxlsim.errors import InputError, RunError
from cxlsim.models.collectives import runner
from cxlsim.models.collectives.base import HYBRID, POOL
from cxlsim.replay.collectives import plan
from cxlsim.replay.cpu_sharing import NOTE as SHARING_NOTE
from cxlsim.replay.cpu_sharing import CMA_BYTES, CPUSharing, SharedCPUs
from cxlsim.replay.placed import Placed, check_one_to_one
from cxlsim.replay.pod_routes import MessageRoute
from cxlsim.replay.pods import CPU_NOTE, PodMessages, mailbox_floor, pod_figures, pods_plans
from cxlsim.replay.pool_messages import PoolMessages
from cxlsim.replay.pool_plans import RegionPlan, pool_plan, regions_of
from cxlsim.replay.pool_plans import mailbox_floor as pool_mailbox_floor
from cxlsim.replay.pool_profile import PricedPlan
from cxlsim.replay.pool_steps import PoolFlags
from cxlsim.replay.simgrid import request_key
from cxlsim.replay.trace import ANY_SOURCE, ANY_TAG, COLLECTIVES, Trace, check_collectives

__all__ = ["Timeline", "Matcher", "replay", "P2P_TAG", "COLLECTIVE_TAG_STRIDE"]

P2P_TAG = -1
"""The transport tag of every replayed point-to-point message (the trace's tag travels in the envelope)."""
COLLECTIVE_TAG_STRIDE = 10000
"""Collective k runs with transport tags from (k + 1) * COLLECTIVE_TAG_STRIDE."""


@dataclass
class Timeline:
    """What one replay on one fabric did."""

    segments: list
    """segments[r]: rank r's calls as (start_ns, end_ns, kind, dep_rank, dep_ns); dep_rank is -1 if none."""
    finish_ns: list
    """When each rank finished its last call."""
    events: int
    """SimPy events the replay scheduled."""
    wall_s: float
    notes: list = field(default_factory=list)
    """What the replay approximated or chose (algorithm notes, once each)."""
    algorithms: dict = field(default_factory=dict)
    """{traced kind: sorted algorithm names used}."""
    cpu_ns: list | None = None
    """With shared CPUs (`sharing`): the CPU time each rank ran (ns), else None."""
    switches: list | None = None
    """With shared CPUs: the times each rank's CPU turned to another task while it stayed runnable."""

    @property
    def total_ns(self) -> float:
        return max(self.finish_ns) if self.finish_ns else 0.0


class Matcher:
    """MPI message matching on top of a transport, for one communicator (the world).

    An envelope is (src, dst, tag, size_bytes, sent_ns). A message is received
    from the transport as soon as it lands (the receiver's overhead is booked on
    its CPU then, as a progress engine would), and then matched.
    """

    def __init__(self, transport, cpus: SharedCPUs | None = None):
        self.transport = transport
        self.env = transport.env
        self.cpus = cpus
        """With shared CPUs: a send of CMA_BYTES or more completes only once its receiver has polled after the
        match (MPICH's CMA path: the receiver copies and ACKs in its progress; cxlsim.replay.cpu_sharing)."""
        self.acks = {}                 # id(envelope) -> the event its receiver's ACK fires
        self.posted = [[] for _ in range(transport.size)]      # per rank: [(src, tag, event)] in posting order
        self.unexpected = [[] for _ in range(transport.size)]  # per rank: envelopes in arrival order
        self.messages = 0

    def send(self, src: int, dst: int, tag: int, size_bytes: int):
        """Post a send; the event fires on local completion (with shared CPUs, for CMA_BYTES or more, also on the
        receiver's ACK)."""
        envelope = (src, dst, tag, size_bytes, self.env.now)
        self.messages += 1
        t = self.transport
        if dst == src:
            done = t.copy(src, size_bytes)
            done.callbacks.append(lambda _e: self._deliver(envelope))
            return done
        done = t.send(src, dst, size_bytes, envelope, P2P_TAG)
        t.recv(dst, src, P2P_TAG).callbacks.append(self._landed)
        if self.cpus is not None and size_bytes >= CMA_BYTES:
            acked = self.acks[id(envelope)] = simpy.Event(self.env)
            return simpy.AllOf(self.env, [done, acked])
        return done

    def _landed(self, event):
        self._deliver(event.value)

    def _deliver(self, envelope):
        src, dst, tag = envelope[0], envelope[1], envelope[2]
        posted = self.posted[dst]
        for i, (want_src, want_tag, event) in enumerate(posted):
            if (want_src == ANY_SOURCE or want_src == src) and (want_tag == ANY_TAG or want_tag == tag):
                del posted[i]
                event.succeed(envelope)
                self._matched(envelope)
                return
        self.unexpected[dst].append(envelope)

    def recv(self, rank: int, src: int, tag: int):
        """Post a receive; the event fires with the matched envelope."""
        event = simpy.Event(self.env)
        arrived = self.unexpected[rank]
        for i, envelope in enumerate(arrived):
            if (src == ANY_SOURCE or src == envelope[0]) and (tag == ANY_TAG or tag == envelope[2]):
                del arrived[i]
                self._matched(envelope)
                return event.succeed(envelope)
        self.posted[rank].append((src, tag, event))
        return event

    def _matched(self, envelope):
        acked = self.acks.pop(id(envelope), None)
        if acked is not None:
            self.cpus.next_poll(envelope[1]).callbacks.append(lambda _e: acked.succeed())

    def pending(self) -> str:
        """Unmatched receives, for a deadlock message."""
        waiting = [(rank, src, tag) for rank, posted in enumerate(self.posted) for src, tag, _ in posted]
        return f"unmatched receives (rank, src, tag): {waiting[:8]}" if waiting else "no unmatched receive"


def _scales(compute_scale, p: int) -> list:
    if isinstance(compute_scale, (int, float)):
        scales = [float(compute_scale)] * p
    else:
        scales = [float(x) for x in compute_scale]
    if len(scales) != p:
        raise InputError(f"--compute-scale: expected one factor or {p} (one per rank), got {len(scales)}")
    bad = [x for x in scales if not x >= 0 or x == float("inf")]
    if bad:
        raise InputError(f"--compute-scale: expected factors >= 0, got {bad[0]!r}")
    return scales


def replay(trace: Trace, transport, *, library: str = "mpich", compute_scale=1.0,
           host_speed_flops_per_s: float | None = None, context: runner.Context | None = None,
           step_factors=None, at=(), priced=None, sharing: CPUSharing | None = None) -> Timeline:
    """Replay `trace` on `transport` (one rank per trace rank); return the Timeline.

    `host_speed_flops_per_s` (default: the trace's) converts compute flops to time;
    `compute_scale` is one factor or one per rank; `step_factors[k][r]`, if given,
    multiplies rank r's compute gaps after its k-th collective (stragglers,
    cxlsim.replay.stragglers); `context` carries the host groups for hierarchical
    algorithms; `at[r]`, on a pool or pod transport, is the fabric rank trace rank r
    runs as (`--placement`, cxlsim.replay.placed; () is the identity); `priced`, on a network transport,
    prices the collectives the traced library ran on its pool (cxlsim.replay.pool_profile.PoolPricing);
    `sharing`, on a network transport, runs the ranks on the traced run's CPUs by turns
    (cxlsim.replay.cpu_sharing; the time a rank waits for its CPU in a compute gap is a `descheduled` segment).
    """
    p = trace.size
    if transport.size != p:
        raise InputError(f"--placement: the fabric runs {transport.size} ranks but the trace has {p}")
    speed = host_speed_flops_per_s or trace.host_speed_flops_per_s
    if speed is None and any(c.kind == "compute" and c.amount for calls in trace.ranks for c in calls):
        raise InputError("--trace-host-speed: the trace's compute is in flops at the tracing host's speed "
                         "(smpi/host-speed), which no sidecar gives; set it (e.g. --trace-host-speed 20kf)")
    ns_per_flop = 1e9 / speed if speed else 0.0
    scales = _scales(compute_scale, p)
    steps = check_collectives(trace) + 1
    if step_factors is not None and (len(step_factors) < steps or any(len(row) != p for row in step_factors)):
        raise InputError(f"step factors: expected {steps} steps x {p} ranks of compute multipliers")
    ctx = context or runner.Context()
    on_pool = transport.kind == POOL
    if priced is not None and transport.kind in (POOL, HYBRID):
        raise InputError("a local-host profile prices a traced library's pool collectives beside a network "
                         "profile's messages; this fabric is a pool or pods")
    if sharing is not None and transport.kind in (POOL, HYBRID):
        raise InputError("--cpus: ranks sharing the traced run's CPUs replay the run as it went, on a network "
                         "fabric or profile; this fabric is a pool or pods")
    at = tuple(at) or tuple(range(p))
    placed = at != tuple(range(p))
    if placed:
        if transport.kind not in (POOL, HYBRID):
            raise InputError("--placement: a network transport places its ranks itself; `at` is for pool and "
                             "pod fabrics")
        check_one_to_one(at, p, "--placement")
    # a collective runs among fabric ranks, so its root is the fabric rank the traced root runs as
    collectives = [c._replace(root=at[c.root]) for c in trace.ranks[0] if c.kind in COLLECTIVES]
    extra_notes, regions = [], []
    route = None
    if transport.kind == HYBRID:
        fig = pod_figures(transport)
        plans = pods_plans(collectives, transport.pods, transport.hosts, library, ctx, fig)
        route = MessageRoute(fig.pool, fig.network)
        messages = PodMessages(transport, low_bytes=mailbox_floor(transport), route=route)
        extra_notes.append(CPU_NOTE)
    elif on_pool:
        figures = transport.figures()
        plans = [pool_plan(c, p, library, ctx, figures) for c in collectives]
        regions = regions_of(transport)
        messages = PoolMessages(transport, low_bytes=pool_mailbox_floor(transport))
    else:
        pool_calls = priced.plans(collectives, p) if priced else [None] * len(collectives)
        plans = [pl or plan(c, p, library, ctx, False) for c, pl in zip(collectives, pool_calls)]
        messages = transport
    if placed:
        messages = Placed(messages, at)
    env = transport.env
    cpus = SharedCPUs(env, p, sharing) if sharing is not None else None
    pool_flags = PoolFlags(env, p)  # the library's pool, where its calls run by turns
    if cpus is not None:
        extra_notes.append(SHARING_NOTE)
    matcher = Matcher(messages, cpus)
    segments = [[] for _ in range(p)]
    entered = [[0.0] * p for _ in plans]
    finish = [0.0] * p

    def rank_process(r):
        record = segments[r].append
        requests = defaultdict(deque)   # (src, dst, tag) -> deque of (event, is_recv)
        order = []                      # every pending request, in posting order
        tested = set()
        k = 0
        scale = ns_per_flop * scales[r]
        host = at[r]

        def serve(ns):
            return transport.compute(host, ns)

        def waited(event, kind="mpi"):
            """Generator: wait for `event` (its value returned); with shared CPUs, poll, then take the CPU back."""
            if cpus is None:
                return (yield event)
            cpus.wait(r, kind)
            value = yield event
            yield cpus.take(r)
            return value

        def work(ns):
            """Generator: `ns` of this rank's CPU; returns the time it waited for a shared CPU meanwhile."""
            if cpus is None:
                yield transport.compute(host, ns)
                return 0.0
            before = cpus.queued_ns[r]
            yield from cpus.work(r, ns, serve)
            return cpus.queued_ns[r] - before

        if cpus is not None:
            yield cpus.take(r)
            if env.now > 0:  # another rank of its CPU ran first
                record((0.0, env.now, "descheduled", -1, 0.0))
        for c in trace.ranks[r]:
            kind = c.kind
            start = env.now
            dep_rank, dep_ns = -1, 0.0
            if kind == "compute":
                if c.amount:
                    nominal = c.amount * scale * (step_factors[k][r] if step_factors is not None else 1.0)
                    queued = yield from work(nominal)
                    if queued > 0:  # the rank waited for its shared CPU
                        record((start, start + queued, "descheduled", -1, 0.0))
                        start += queued
                    if env.now - start > nominal * (1 + 1e-12):  # the CPU first handled messages that landed
                        record((start, env.now - nominal, "progress", -1, 0.0))
                        start = env.now - nominal
            elif kind == "sleep":
                yield from waited(env.timeout(c.amount * 1e9), "sleep")
            elif kind == "send":
                yield from waited(matcher.send(r, c.peer, c.tag, c.size_bytes), "local")
            elif kind == "recv":
                envelope = yield from waited(matcher.recv(r, c.peer, c.tag))
                dep_rank, dep_ns = envelope[0], envelope[4]
            elif kind == "isend" or kind == "irecv":
                event = (matcher.send(r, c.peer, c.tag, c.size_bytes) if kind == "isend"
                         else matcher.recv(r, c.peer, c.tag))
                request = (event, kind == "irecv")
                requests[request_key(r, c)].append(request)
                order.append(request)
            elif kind == "sendrecv":
                sent = matcher.send(r, c.peer, 0, c.size_bytes)
                received = matcher.recv(r, c.src, 0)
                yield from waited(simpy.AllOf(env, [sent, received]))
                envelope = received.value
                dep_rank, dep_ns = envelope[0], envelope[4]
            elif kind == "wait" or kind == "test":
                key = request_key(r, c)
                queue = requests.get(key)
                if queue and (kind == "wait" or queue[0][0].processed):
                    event, is_recv = queue.popleft()
                    order.remove((event, is_recv))
                    value = yield from waited(event, "mpi" if is_recv and kind == "wait" else "local")
                    if is_recv:
                        dep_rank, dep_ns = value[0], value[4]
                    if kind == "test":
                        tested.add(key)
                elif kind == "wait" and key not in tested:
                    raise RunError(f"{c.where}: wait names no pending request")
            elif kind == "waitall":
                if order:
                    yield from waited(simpy.AllOf(env, [event for event, _ in order]),
                                      "mpi" if any(is_recv for _, is_recv in order) else "local")
                    received = [event.value for event, is_recv in order if is_recv]
                    if received:
                        last = max(received, key=lambda e: e[4])
                        dep_rank, dep_ns = last[0], last[4]
                    order.clear()
                    requests.clear()
            else:  # a collective
                entered[k][r] = start
                this = plans[k]
                if isinstance(this, RegionPlan):
                    ep = regions[this.region].endpoint(host)
                else:
                    ep = transport.endpoint(host) if this.on_pool else messages.endpoint(r)
                if cpus is None:
                    yield from this.run(ep, (k + 1) * COLLECTIVE_TAG_STRIDE)
                elif isinstance(this, PricedPlan):  # the library's pool call: its steps, waiting where they wait
                    for step in this.steps:
                        yield from pool_flags.step(r, step, waited, work, this.cost_ns / len(this.steps))
                else:
                    cpus.wait(r, "mpi")
                    yield from this.run(ep, (k + 1) * COLLECTIVE_TAG_STRIDE)
                    yield cpus.take(r)
                if c.amount:
                    yield from work(c.amount * ns_per_flop * scales[r])
                dep_rank = k  # resolved to the last rank in once every rank has entered
                k += 1
            record((start, env.now, kind, dep_rank, dep_ns))
        finish[r] = env.now
        if cpus is not None:
            cpus.done(r)

    begin_events, begin = getattr(env, "events", 0), time.perf_counter()
    try:
        transport.run({r: rank_process(r) for r in range(p)})
    except RunError as exc:
        raise RunError(f"{exc}; point-to-point: {matcher.pending()}") from None
    wall = time.perf_counter() - begin
    last_in = [max(range(p), key=times.__getitem__) for times in entered]
    for segs in segments:
        for i, (start, end, kind, k, _) in enumerate(segs):
            if kind in COLLECTIVES:
                segs[i] = (start, end, kind, last_in[k], entered[k][last_in[k]])
    notes, algorithms = list(extra_notes), defaultdict(set)
    if route is not None and route.used:
        notes.append(route.note())
    for pl in plans:
        algorithms[pl.kind].add(pl.algorithm)
        if pl.note and pl.note not in notes:
            notes.append(pl.note)
    return Timeline(segments, finish, getattr(env, "events", 0) - begin_events, wall, notes,
                    {k: sorted(v) for k, v in algorithms.items()}, cpus and cpus.ran_ns[:p], cpus and cpus.switches[:p])
