"""The library's pool step protocol in the replay's DES: who waits for whom inside its pool calls.

Where ranks share CPUs (`cxlsim replay --cpus`), a pool call hands the CPU over wherever one rank waits for another,
so the replay must wait where the library's kernels wait (cxlsim/emulator/cxl_coll_core.h). A call is a sequence
of steps, numbered by epoch on every rank alike; each rank has one flag, which only grows:

- a **sync** step (barrier; a zero-byte allgather) takes the next epoch e, publishes e and waits until every other
  rank's flag is at least e;
- a **data** step (allgather, allreduce, alltoall, reduce_scatter: per chunk of at most one slot; the large allreduce
  is two, its reduce-scatter and its gather) first *claims* the next data round: its buffer is round % 2, and a rank
  may write into it only once every other rank finished the step that last used it (flag >= that step's epoch + 1),
  which it waits for unless an earlier wait proved it (`known_done`); then it publishes e and waits for every other
  rank's e, which proves every step before e done;
- a **bcast** step takes two epochs, e and e + 1: the root claims as a data step does, publishes e and returns
  without waiting; each reader claims without writing (no wait), waits for the root's e alone and then publishes
  its acknowledgement e + 1.

So a bcast's root waits for nobody in the call itself, and a rank's next write into a buffer may wait for a reader's
acknowledgement of a bcast two data rounds back. Measured (np 2, both ranks pinned to one CPU, 3000 iterations of
each pattern of 64 KiB allreduce R, 4 KiB allgather G and bcast B, 8-byte allreduce r): each rank was switched away
1.0 times an iteration for GB, Br, Gr, rB, 1.5 for RG and rR, 2.0 for RGB, RBr, RGr, GBr, RB and BR, and 3.0 for
RGBr and GBrR, each as many as this protocol gives with a hand-over at every unmet wait; the model that had every
rank wait for every other at each call gave 1.5 for GBr, RB, BR and 2.5 for RGBr and GBrR.

The kernel's time (the call's price) is split evenly between its steps: a rank spends its share after the step's
wait, except a bcast's root, which spends it before it publishes (it copies the data in first). Without shared CPUs
a priced call is still one wait for every rank and then its price (PricedPlan.run), which the profile's bench
measured. Time is ns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["Step", "SYNC", "DATA", "BCAST", "SLOT_BYTES", "steps_of", "PoolFlags"]

SYNC, DATA, BCAST = "sync", "data", "bcast"
SLOT_BYTES = 1 << 20
"""The library's default pool bytes per rank and buffer (CXLSIM_MPI_SLOT, cxlsim/mpi/settings.c): a call larger than
this runs in chunks, a step each (alltoall and reduce_scatter: this / P per destination)."""


@dataclass(frozen=True)
class Step:
    """One step of a pool call: SYNC, DATA or BCAST (from `root`)."""

    kind: str
    root: int = 0


def steps_of(kind: str, size_bytes: int, ranks: int, large_bytes: int, slot_bytes: int = SLOT_BYTES, root: int = 0,
             counts: tuple = ()) -> tuple:
    """The steps of one library pool call of traced `kind` (bytes as the trace counts them: allgather and alltoall per
    rank or destination, bcast and allreduce the whole vector, reducescatter `counts` per rank), at `ranks` ranks,
    with the large allreduce from `large_bytes` and `slot_bytes` per rank and buffer."""
    if kind == "barrier":
        return (Step(SYNC),)
    if kind == "allgather":
        return (Step(SYNC),) if size_bytes == 0 else (Step(DATA),) * math.ceil(size_bytes / slot_bytes)
    if kind == "bcast":
        return (Step(BCAST, root),) * math.ceil(size_bytes / slot_bytes)
    if kind == "allreduce":
        chunks = [min(slot_bytes, size_bytes - off) for off in range(0, size_bytes, slot_bytes)]
        return tuple(Step(DATA) for n in chunks for _ in range(2 if n >= large_bytes and ranks > 1 else 1))
    per_destination = (counts[0] if counts else size_bytes // max(ranks, 1)) if kind == "reducescatter" else size_bytes
    if kind in ("alltoall", "reducescatter"):
        room = max(slot_bytes // max(ranks, 1), 1)
        return (Step(DATA),) * math.ceil(per_destination / room)
    raise ValueError(f"steps_of: {kind!r} is not a collective the library runs on its pool")


@dataclass
class _RankState:
    epoch: int = 0
    round: int = 0
    known_done: int = 0
    buffer_epoch: list = field(default_factory=lambda: [0, 0])


class PoolFlags:
    """The flags and step state of one pool's ranks in a SimPy environment."""

    def __init__(self, env, ranks: int):
        self.env, self.ranks = env, ranks
        self.flag = [0] * ranks
        self.state = [_RankState() for _ in range(ranks)]
        self._waiting = []  # (ranks, value, event): every flag of `ranks` >= value triggers `event`

    def _reached(self, ranks, value: int) -> bool:
        return all(self.flag[o] >= value for o in ranks)

    def until(self, ranks, value: int):
        """An event that succeeds once every flag of `ranks` is at least `value` (at once if it is)."""
        event = self.env.event()
        if self._reached(ranks, value):
            event.succeed()
        else:
            self._waiting.append((ranks, value, event))
        return event

    def publish(self, r: int, value: int) -> None:
        self.flag[r] = max(self.flag[r], value)
        ready = [w for w in self._waiting if self._reached(w[0], w[1])]
        if ready:
            self._waiting = [w for w in self._waiting if not self._reached(w[0], w[1])]
            for _, _, event in ready:
                event.succeed()

    def _others(self, r: int):
        return [o for o in range(self.ranks) if o != r]

    def _claim(self, r: int, will_write: bool, waited):
        """Generator: take the next data round; a writer first waits until every other rank finished the step that
        last used its buffer (unless known)."""
        st = self.state[r]
        following = st.round + 1
        last = st.buffer_epoch[following & 1]
        if will_write and last > st.known_done:
            yield from waited(self.until(self._others(r), last + 1), "pool")
            st.known_done = last
        st.round = following
        st.epoch += 1
        st.buffer_epoch[following & 1] = st.epoch

    def step(self, r: int, step: Step, waited, work, share_ns: float):
        """Generator: rank r runs one step, `waited(event, 'pool')` at each of its waits and `work(share_ns)` for its
        part of the kernel (the engine's generators)."""
        st = self.state[r]
        if step.kind == BCAST:
            is_root = r == step.root
            yield from self._claim(r, is_root, waited)
            e = st.epoch
            if is_root:
                yield from work(share_ns)
                self.publish(r, e)
            else:
                yield from waited(self.until([step.root], e), "pool")
                yield from work(share_ns)
                self.publish(r, e + 1)
            st.epoch += 1
            return
        if step.kind == DATA:
            yield from self._claim(r, True, waited)
        else:
            st.epoch += 1
        e = st.epoch
        self.publish(r, e)
        yield from waited(self.until(self._others(r), e), "pool")
        st.known_done = max(st.known_done, e - 1)
        yield from work(share_ns)
