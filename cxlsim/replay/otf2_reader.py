"""Reading OTF2 archives (Score-P's trace format) into a replayable `Trace` (optional extra `otf2`).

`read(anchor, in_place=None)` reads `traces.otf2` (the anchor file, or the directory holding
it) with the `otf2` package (`pip install cxlsim[otf2]`). Ranks: the locations of the MPI
`COMM_LOCATIONS` group, in its order (else every location, in definition order); a
communicator's rank i is member i of its group, translated to that world rank.

Events, per location, in time order:
- `Enter`/`Leave` of a region named `MPI_*` bracket one MPI call. The time between the
  end of one call that communicated and the start of the next is a compute gap, in timer
  ticks (`host_speed_flops_per_s` is the timer resolution, so a gap's seconds are exact).
  MPI calls that record no communication event (MPI_Comm_rank, a test that completed
  nothing) stay inside the gap. The trace starts when MPI_Init or MPI_Init_thread returns (at
  the location's first event if it has neither) and ends when MPI_Finalize is entered.
- `MpiSend`/`MpiRecv`: send/recv (peer, tag, bytes). `MpiIsend` is an isend and its
  `MpiIsendComplete` the wait of that request. `MpiIrecvRequest` posts an irecv whose source,
  tag and bytes come from its completion `MpiIrecv` (OTF2 records them there), which is the
  wait; a cancelled receive is dropped.
- `MpiCollectiveEnd`: a collective on its communicator, which must span every rank (the
  replay runs collectives on MPI_COMM_WORLD). Its bytes are Score-P's per-rank totals
  (`scorep_mpi_coll_bytes_*`, Score-P 8-9), from which the size in the replay's convention
  (`Call.size_bytes`) is derived with P ranks and s the per-rank block or vector:

  | op | sent, received (not in place) | in place | the replay's size |
  |---|---|---|---|
  | barrier | 0, 0 | | 0 |
  | bcast | root P*s, s; others 0, s | | s (a non-root's received) |
  | reduce, gather | root s, P*s; others s, 0 | root 0, (P-1)*s | s (a non-root's sent) |
  | scatter | root P*s, s; others 0, s | root (P-1)*s, 0 | s (a non-root's received) |
  | allreduce, allgather, alltoall, reduce_scatter_block | P*s, P*s | (P-1)*s, (P-1)*s | s (reducescatter: P*s) |

  For the symmetric ones MPI_IN_PLACE changes the factor and the event does not say which
  was used: a count divisible by only one of P and P-1 has one reading; one divisible by
  both (always at P = 2) is refused unless `in_place` says which (`--otf2-in-place`).
  The v-collectives, scan, exscan, reduce_scatter (with counts) and alltoallw are refused, and
  so are non-blocking collectives, matched receives (MpiMrecv, MpiImrecv) and one-sided (RMA)
  events: the replay has no model for them.

Every refusal names the archive, the location (rank), the event's index on it and the field.
"""
from __future__ import annotations

import os

from cxlsim.errors import InputError
from cxlsim.replay.trace import Call, Trace

__all__ = ["read", "available"]

_UNDEFINED_ROOT = 0xFFFFFFFF
_SYMMETRIC = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "ALLTOALL": "alltoall",
              "REDUCE_SCATTER_BLOCK": "reducescatter"}
_ROOTED = {"BCAST": "bcast", "REDUCE": "reduce", "GATHER": "gather", "SCATTER": "scatter"}
_START = ("MPI_Init", "MPI_Init_thread")
_REFUSED = ("NonBlockingCollectiveRequest", "NonBlockingCollectiveComplete", "MpiImrecv", "MpiImrecvRequest",
            "MpiMrecv")
"""MPI events the replay has no model for: refused, never skipped."""


def available() -> bool:
    """True when the `otf2` package (the optional extra) imports."""
    try:
        import otf2  # noqa: F401
    except ImportError:
        return False
    return True


def _anchor(path: str) -> str:
    if os.path.isdir(path):
        path = os.path.join(path, "traces.otf2")
    if not os.path.isfile(path):
        raise InputError(f"{path}: no OTF2 anchor file (traces.otf2)")
    return path


class _Where:
    """Names an event: the archive, the location and rank, the event's index on it."""

    def __init__(self, anchor: str, rank: int, name: str):
        self.file = f"{anchor}[rank {rank}, location {name!r}]"

    def fail(self, index: int, event, field: str, message: str):
        raise InputError(f"{self.file}:{index}: {type(event).__name__} field '{field}': {message}")


def _symmetric_size(value: int, p: int, in_place, where, index, event, field) -> int:
    """s from a symmetric collective's per-rank total P*s (not in place) or (P-1)*s (in place)."""
    readings = {}
    if value % p == 0:
        readings[False] = value // p
    if p > 1 and value % (p - 1) == 0:
        readings[True] = value // (p - 1)
    if in_place is not None:
        if in_place not in readings:
            where.fail(index, event, field, f"{value} B is not {'(P-1)' if in_place else 'P'} x a block at "
                                            f"P={p}, as --otf2-in-place {'yes' if in_place else 'no'} says")
        return readings[in_place]
    if not readings:
        where.fail(index, event, field, f"{value} B is neither P x nor (P-1) x a block at P={p}")
    if len(readings) == 2 and readings[True] != readings[False]:
        where.fail(index, event, field, f"{value} B at P={p} reads as {readings[False]} B per rank (not in place) "
                                        f"or {readings[True]} B (MPI_IN_PLACE), which the event does not record; "
                                        "say which with --otf2-in-place yes|no")
    return next(iter(readings.values()))


def _collective(event, index, where, p, me, rank_of, in_place):
    op = str(event.collective_op).rsplit(".", 1)[-1]  # CollectiveOp.ALLREDUCE -> ALLREDUCE
    comm = event.communicator
    members = comm.group.members if comm is not None else ()
    if len(members) != p:
        where.fail(index, event, "communicator", f"{op.lower()} on {comm.name if comm else None!r} with "
                                                 f"{len(members)} of {p} ranks; the replay runs collectives on "
                                                 "MPI_COMM_WORLD only")
    sent, received = int(event.size_sent), int(event.size_received)
    if op == "BARRIER":
        return Call("barrier", where.file, index)
    if op in _SYMMETRIC:
        s = _symmetric_size(sent, p, in_place, where, index, event, "size_sent")
        kind = _SYMMETRIC[op]
        if kind == "reducescatter":
            return Call(kind, where.file, index, size_bytes=p * s, counts=(s,) * p)
        return Call(kind, where.file, index, size_bytes=s)
    if op in _ROOTED:
        if event.root == _UNDEFINED_ROOT or not 0 <= event.root < p:
            where.fail(index, event, "root", f"expected a rank of the communicator, got {event.root}")
        root = rank_of(members[event.root])
        kind = _ROOTED[op]
        if me != root:
            s = received if kind in ("bcast", "scatter") else sent
        elif kind == "bcast":
            if sent % p:
                where.fail(index, event, "size_sent", f"a bcast root's {sent} B is not P={p} x the vector")
            s = sent // p
        elif kind == "scatter":
            s = received if received else _symmetric_size(sent, p, True, where, index, event, "size_sent")
        else:  # reduce, gather at the root
            s = sent if sent else _symmetric_size(received, p, True, where, index, event, "size_received")
        return Call(kind, where.file, index, size_bytes=s, root=root)
    where.fail(index, event, "collective_op", f"{op.lower()} is not replayed (it loses the per-rank sizes or "
                                              "has no algorithm here)")


def _location_calls(events, where, p, me, rank_of, in_place):
    """One location's events (index, event) -> its Calls (see the module docstring)."""
    from otf2 import events as ev
    from otf2.events import (Enter, Leave, MpiCollectiveEnd, MpiIrecv, MpiIrecvRequest, MpiIsend,
                             MpiIsendComplete, MpiRecv, MpiRequestCancelled, MpiSend)

    refused = tuple(getattr(ev, name) for name in _REFUSED if hasattr(ev, name))

    def peer(event, field, value):
        members = event.communicator.group.members
        if not 0 <= value < len(members):
            where.fail(index, event, field, f"rank {value} is not in communicator {event.communicator.name!r} "
                                            f"of {len(members)} ranks")
        return rank_of(members[value])

    completions = {}  # irecv request id -> its MpiIrecv event (source, tag and bytes are known there)
    cancelled = set()
    for _, event in events:
        if isinstance(event, MpiIrecv):
            completions.setdefault(event.request_id, event)
        elif isinstance(event, MpiRequestCancelled):
            cancelled.add(event.request_id)
    calls, pending, isends = [], [], {}
    has_init = any(isinstance(e, Enter) and e.region.name in _START for _, e in events)
    started, mark, depth, call_start = not has_init, (events[0][1].time if events else 0), 0, None
    for index, event in events:
        if isinstance(event, Enter) and event.region.name.startswith("MPI_"):
            if event.region.name == "MPI_Finalize":
                break
            depth += 1
            if depth == 1:
                call_start, pending = event.time, []
            continue
        if isinstance(event, Leave) and event.region.name.startswith("MPI_"):
            depth -= 1
            if event.region.name in _START:
                started, mark = True, event.time
            elif depth == 0 and pending and started:
                if call_start > mark:
                    calls.append(Call("compute", where.file, pending[0].line, amount=float(call_start - mark)))
                calls.extend(pending)
                mark = event.time
            continue
        if not started:
            continue
        if isinstance(event, MpiSend):
            pending.append(Call("send", where.file, index, peer=peer(event, "receiver", event.receiver),
                                tag=event.msg_tag, size_bytes=int(event.msg_length)))
        elif isinstance(event, MpiIsend):
            dst = peer(event, "receiver", event.receiver)
            isends[event.request_id] = (dst, event.msg_tag)
            pending.append(Call("isend", where.file, index, peer=dst, tag=event.msg_tag,
                                size_bytes=int(event.msg_length)))
        elif isinstance(event, MpiIsendComplete):
            if event.request_id not in isends:
                where.fail(index, event, "request_id", f"{event.request_id} names no isend posted before")
            dst, tag = isends.pop(event.request_id)
            pending.append(Call("wait", where.file, index, src=me, dst=dst, tag=tag))
        elif isinstance(event, MpiRecv):
            pending.append(Call("recv", where.file, index, peer=peer(event, "sender", event.sender),
                                tag=event.msg_tag, size_bytes=int(event.msg_length)))
        elif isinstance(event, MpiIrecvRequest):
            done = completions.get(event.request_id)
            if done is None:
                if event.request_id in cancelled:
                    continue
                where.fail(index, event, "request_id", f"{event.request_id}: the receive never completes "
                                                       "(no MpiIrecv of this request)")
            pending.append(Call("irecv", where.file, index, peer=peer(done, "sender", done.sender),
                                tag=done.msg_tag, size_bytes=int(done.msg_length)))
        elif isinstance(event, MpiIrecv):
            pending.append(Call("wait", where.file, index, src=peer(event, "sender", event.sender), dst=me,
                                tag=event.msg_tag))
        elif isinstance(event, MpiCollectiveEnd):
            pending.append(_collective(event, index, where, p, me, rank_of, in_place))
        elif isinstance(event, refused) or type(event).__name__.startswith("Rma"):
            where.fail(index, event, "event", f"{type(event).__name__} is not replayed (non-blocking collectives, "
                                              "matched receives and one-sided communication are not modelled)")
    return calls


def read(path: str, in_place: bool | None = None) -> Trace:
    """The Trace of the OTF2 archive at `path` (its traces.otf2 or the directory holding it)."""
    if not available():
        raise InputError(f"{path}: reading OTF2 needs the otf2 package: pip install 'cxlsim[otf2]'")
    import otf2
    from otf2.enums import GroupType, Paradigm

    anchor = _anchor(path)
    try:
        archive = otf2.reader.open(anchor)
    except Exception as exc:  # the package raises its own error types for a damaged archive
        raise InputError(f"{anchor}: not a readable OTF2 archive: {exc}") from None
    with archive as trace:
        defs = trace.definitions
        world = [g for g in defs.groups if g.group_type == GroupType.COMM_LOCATIONS and g.paradigm == Paradigm.MPI]
        locations = list(world[0].members) if world else list(defs.locations)
        if not locations:
            raise InputError(f"{anchor}: the archive defines no locations")
        index_of = {id(loc): r for r, loc in enumerate(locations)}

        def rank_of(member) -> int:
            if isinstance(member, int):
                return member
            return index_of[id(member)]

        per_location = {id(loc): [] for loc in locations}
        counts = {id(loc): 0 for loc in locations}
        for location, event in trace.events:
            key = id(location)
            if key in per_location:
                counts[key] += 1
                per_location[key].append((counts[key], event))
        p = len(locations)
        ranks = []
        for r, loc in enumerate(locations):
            where = _Where(anchor, r, loc.name)
            ranks.append(_location_calls(per_location[id(loc)], where, p, r, rank_of, in_place))
        resolution = float(trace.timer_resolution)
    return Trace(ranks, [f"{anchor}[rank {r}]" for r in range(p)], anchor, resolution)
