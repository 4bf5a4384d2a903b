"""The traced run's pool collectives priced by a `local-host` calibration profile.

A trace recorded under the interposition library (`cxlsim mpi run --trace`) ran its point-to-point
through MPI (priced by a `--from-osu` network profile, `cxlsim.replay.fabrics`) and most of its
collectives on the library's pool on this host. `--fabric NET.json+LOCAL.json` replays the messages
on the network profile and prices each collective the library ran on the pool with the local-host
profile's DES model of the emulator's kernels (`cxlsim.calibrate.collectives.predict_collective`;
allgather `cxlsim.calibrate.des.predict_local`), the model `cxlsim calibrate` validates against the
emulator per collective (`validation_collectives.csv`).

Which collectives ran on the pool: the library's stats (`cxlsim mpi run --stats`, the table world
rank 0 prints on stderr at MPI_Finalize), given with `--library-stats FILE`, or without it the
`cxlsim_mpi_stats.txt` the library writes into its trace directory (`stats_beside`; the fabric line
names the file it used). A traced kind whose
every call ran on the pool, on one node, is priced by the profile; a kind with no pool call runs its
network algorithm on the network profile; a kind with some calls on the pool and some not is refused
(the trace does not say which call was which), and so are stats whose call counts are not the
trace's. Without stats every kind the library runs on the pool (`POOL_KINDS`) is priced, and the
fabric line says it is assumed. The coherence mode is the stats' (without them hw, the library's
default).

How a call is priced (`PricedPlan`): the pool collectives of the library wait for every rank, so
every rank leaves a call at the last rank's entry + T, where T is the profile's time of the call
from a common start (the DES's bench loop: mean over ranks of the last of three calls) without the
profile's per-call software overhead, which is the Python bench's (`collective_overhead_ns`,
120-340 ns) and not the C library's (33-59 ns at np 1, docs/mpi.md), which no profile measures and
which is not charged. The allreduce's T, where the profile has collectives jobs, the trace is of the
profile's np and the run's stats header gives its flag round trip (fast or slow), is the profile's jobs'
price at that round trip (`cxlsim.calibrate.price_spread.price_at`: its placement's jobs as priced, or the
other placement's moved to it by the call's flag round trips; a call's kernel time follows the placement its stretch of the machine had, so
the profile's own model price is not repeatable between calibrations); else the model's. The rank's CPU is held for T (the kernel copies and polls). Approximations,
said in the notes: a broadcast's root also waits for the last rank (the library's root may leave
sooner); the library's inline allreduce in hw mode (inputs up to INLINE_MAX_BYTES: 112 B in the fast
placement or at np > 2, 168 B in the slow one; one line transfer in series per call fewer than the
slot path) is priced as the slot path; a trace of more ranks than the profile's np (2) is priced at that np
with the per-block figures (outside the np the profile was validated at).

A call's lines, cold or warm (`PoolPricing.plans`, measured by benchmarks/replay_coll_kinds.py): the profile's copy
curves come from a bench that repeats one call on the same buffers, so a small call finds its send and receive
buffers and its slots' lines still in the core's caches (warm). In an app whose calls differ, a call after a larger
one finds them evicted (cold) and copies at the rate the same curves show for sizes past the caches: on this host
(32 KiB L1d) the profile's copy-in and broadcast curves run 0.05-0.07 ns/B up to 4-8 KiB and 0.14-0.15 ns/B from
16 KiB on. A traced collective is cold where no call of its kind and size ran before it on the communicator, or a
collective that moved at least EVICTING_BYTES per rank ran since the last one (`cold_calls`); a cold call below
COLD_REFERENCE_BYTES costs its price plus, for each of its copy curves, what its bytes take at that curve's
per-byte time at COLD_REFERENCE_BYTES beyond what the curve gives at its size (`cold_extra_ns`; never less).
Measured at np 2 (coll_timed's calls, fast placement, loaded machine): a 4 KiB bcast after the 64 KiB allreduce
0.92-0.95 us (reader) against 0.52-0.53 after a barrier, a 4 KiB allgather 1.02-1.07 against 0.71 alone; the
rule adds 0.39 and 0.35 us; the 64 KiB allreduce itself cost the same in the app, alone and back to back. Where the
run's probe found the slow placement its library copies calls from NT_SLOW_MIN_BYTES into the pool with
non-temporal stores, and those sizes are not charged (measured there: no excess against alone).
Units: ns, bytes.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

from cxlsim import config
from cxlsim.calibrate.collectives import COLLECTIVES as PROFILE_COLLECTIVES
from cxlsim.calibrate.collectives import predict_collective
from cxlsim.calibrate.des import predict_local
from cxlsim.calibrate.local_model import LocalModel
from cxlsim.calibrate.patterns import pattern_name
from cxlsim.calibrate.price_spread import price_at
from cxlsim.calibrate.profile import load_profile, profile_placement
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.replay.pool_steps import DATA, SLOT_BYTES, Step, steps_of
from cxlsim.replay.simgrid import LIBRARY_STATS_NAME

INLINE_MAX_BYTES = 168  # the largest inline allreduce (cxlsim/mpi/pools.c INLINE_SLOW_BYTES, slow placement)

__all__ = ["POOL_KINDS", "LIBRARY_NAMES", "PoolPricing", "PricedPlan", "read_library_stats", "stats_beside",
           "calibrate_local_host", "cold_calls", "footprint_bytes", "COLD_REFERENCE_BYTES", "EVICTING_BYTES",
           "NT_SLOW_MIN_BYTES"]

POOL_KINDS = {"allgather": "allgather", "allreduce": "allreduce", "reducescatter": "reduce_scatter",
              "bcast": "broadcast", "alltoall": "alltoall", "barrier": "barrier"}
"""Traced kind -> the profile's collective, for every kind the library runs on its pool."""
LIBRARY_NAMES = {"MPI_Allgather": "allgather", "MPI_Allreduce": "allreduce",
                 "MPI_Reduce_scatter_block": "reducescatter", "MPI_Bcast": "bcast", "MPI_Alltoall": "alltoall",
                 "MPI_Barrier": "barrier"}
"""The library's stats rows (cxlsim/mpi/stats.c) -> traced kind."""
COLD_REFERENCE_BYTES = 64 << 10
"""The size whose per-byte copy time prices a cold call's bytes (module docstring): past this host's 32 KiB L1d
with its slot lines, and below the sizes where the emulator's copy-ins turn non-temporal (the profile's copy-in
curve falls from 0.13 to 0.04 ns/B between 128 and 256 KiB)."""
NT_SLOW_MIN_BYTES = 2048
"""The smallest call the library copies into its pool with non-temporal stores in the slow placement
(cxlsim/mpi/pools.c NT_SLOW_MIN_BYTES; plain stores in the fast one): such copies keep no line cached, so a cold
call of this size or more costs them no more in a run the library's probe found slow (measured, slow placement:
the 4 KiB bcast after the 64 KiB allreduce +0.03 us, the allgather -0.05 us, against alone)."""
EVICTING_BYTES = 16 << 10
"""A collective whose copies move at least this many bytes per rank (`footprint_bytes`) leaves the next other
call's lines cold: the profile's copy curves turn from their warm to their cold per-byte time between 8 and
16 KiB (module docstring)."""
ALLREDUCE_LARGE_BYTES = 64 << 10
"""The library's default CXLSIM_MPI_ALLREDUCE_LARGE (cxlsim/mpi/settings.c): from it allreduce takes the
large (reduce-scatter + gather) algorithm. The stats' header gives the run's own (`allreduce large N B`);
without stats this default is assumed, and the fabric line says so."""

_HEADER = re.compile(r"cxlsim-mpi stats: (\d+) ranks.*coherence (\w+)")
_LARGE = re.compile(r"cxlsim-mpi stats: .*allreduce large (\d+) B")
_SLOT = re.compile(r"cxlsim-mpi stats: .*slot (\d+) B")
_PLACEMENT = re.compile(r"cxlsim-mpi stats: .*placement (?:(fast|slow|disturbed) \(flag round trip (\d+(?:\.\d+)?) ns\)"
                        r"|(not probed))")
_ROW = re.compile(r"^\s*(MPI_\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)")


def calibrate_local_host(directory: str, timeout_s: float = 1800.0) -> str:
    """A fresh local-host profile of this machine (`cxlsim calibrate --np 2 --no-mpi --timing --output DIR`, a few
    minutes), to price a local run's pool collectives: its path. subprocess.CalledProcessError if it fails,
    TimeoutExpired after `timeout_s` (s)."""
    subprocess.run([sys.executable, "-m", "cxlsim", "calibrate", "--np", "2", "--no-mpi", "--timing", "--output",
                    directory], check=True, capture_output=True, text=True, timeout=timeout_s)
    return os.path.join(directory, "profile.json")


def stats_beside(trace_path: str) -> str | None:
    """The library's stats file in the trace's directory (`trace_path` a directory or an index file in one), the
    `DIR/cxlsim_mpi_stats.txt` that `CXLSIM_MPI_TRACE=DIR` writes at MPI_Finalize; None if there is none."""
    directory = trace_path if os.path.isdir(trace_path) else os.path.dirname(os.path.abspath(trace_path))
    path = os.path.join(directory, LIBRARY_STATS_NAME)
    return path if os.path.isfile(path) else None


def read_library_stats(path: str, origin: str = "--library-stats") -> dict:
    """The library's stats table (`cxlsim mpi run --stats`'s stderr, or the file it writes beside its trace) at
    `path`: {'ranks': P, 'coherence': Coherence, 'allreduce_large_bytes': the run's threshold (None: a header
    without it), 'slot_bytes': its pool bytes per rank and buffer (None: a header without it), 'placement': {'class': 'fast' | 'slow' | 'disturbed', 'roundtrip_ns'} as the library's probe
    classed the run's host ({'class': 'not probed', 'roundtrip_ns': None} where it did not probe; None: a header
    without it), 'rows': {traced kind: {'calls', 'pool', 'hier', 'fallback'}}, 'source': where it came from,
    for the fabric line}; `origin` says how it was named (the option, or found beside the trace)."""
    text = config.read_text(path, "--library-stats")
    header = _HEADER.search(text)
    if header is None:
        raise InputError(f"--library-stats {path}: no 'cxlsim-mpi stats: N ranks, ...; coherence MODE' line "
                         "(the table `cxlsim mpi run --stats` prints on stderr)")
    rows = {}
    for number, line in enumerate(text.splitlines(), start=1):
        m = _ROW.match(line)
        if m is None:
            continue
        if m.group(1) not in LIBRARY_NAMES:
            raise InputError(f"{path}:{number}: {m.group(1)}: not a collective of the library's stats "
                             f"(known: {', '.join(LIBRARY_NAMES)})")
        calls, _, _, pool, hier, fallback = (int(m.group(i)) for i in range(2, 8))
        rows[LIBRARY_NAMES[m.group(1)]] = {"calls": calls, "pool": pool, "hier": hier, "fallback": fallback}
    large, slot = _LARGE.search(text), _SLOT.search(text)
    placed = _PLACEMENT.search(text)
    return {"ranks": int(header.group(1)), "coherence": Coherence.parse(header.group(2), f"{path}: coherence"),
            "allreduce_large_bytes": int(large.group(1)) if large else None,
            "slot_bytes": int(slot.group(1)) if slot else None, "rows": rows,
            "placement": (None if placed is None else {"class": "not probed", "roundtrip_ns": None} if placed.group(3)
                          else {"class": placed.group(1), "roundtrip_ns": float(placed.group(2))}),
            "source": f"{origin} {path}"}


def footprint_bytes(call, ranks: int) -> int:
    """The bytes one rank's copies move in traced collective `call` (allgather, alltoall: P blocks; else its size)."""
    return call.size_bytes * (ranks if call.kind in ("allgather", "alltoall") else 1)


def cold_calls(collectives: list, ranks: int) -> list:
    """Per traced collective of `collectives` (the sequence every rank runs), whether it runs cold (module
    docstring): no earlier call of its kind and size, or one of at least EVICTING_BYTES (`footprint_bytes`) since
    the last one."""
    last, out = {}, []
    for k, c in enumerate(collectives):
        key = (c.kind, c.size_bytes)
        before = last.get(key)
        out.append(before is None or any(footprint_bytes(x, ranks) >= EVICTING_BYTES
                                         for x in collectives[before + 1:k]))
        last[key] = k
    return out


@dataclasses.dataclass
class PricedPlan:
    """One traced collective priced by the profile: every rank leaves at the last entry + `cost_ns`.

    Runs where a `cxlsim.replay.collectives.Plan` runs (`run(ep, tag)`); holds the call's arrivals, so a
    fresh one per replay."""

    kind: str
    collective: str
    size_bytes: int
    cost_ns: float
    ranks: int
    note: str = ""
    algorithm: str = "local-host profile"
    on_pool: bool = False
    cold_ns: float = 0.0
    """What `cost_ns` holds for the call's cold lines (PoolPricing.cold_extra_ns; 0: warm, or nothing to add)."""
    steps: tuple = (Step(DATA),)
    """The library's steps of the call (`cxlsim.replay.pool_steps.steps_of`): on shared CPUs (`cxlsim replay --cpus`)
    each waits where the kernel's step does, with cost_ns / len(steps) of the kernel (`PoolFlags.step`)."""
    arrived: int = 0
    all_in: object = None

    def run(self, ep, tag: int):
        """Generator: wait for every rank, then hold this rank's CPU for the call's time (`tag` unused)."""
        if self.all_in is None:
            self.all_in = ep.transport.env.event()
        self.arrived += 1
        if self.arrived == self.ranks:
            self.all_in.succeed()
        yield self.all_in
        yield ep.compute(self.cost_ns)


class PoolPricing:
    """The local-host profile at `path` pricing the traced kinds the library ran on the pool."""

    def __init__(self, path: str, ranks: int, stats: dict | None = None, trace=None):
        profile = load_profile(path)
        if profile["kind"] != "local-host":
            raise InputError(f"--fabric ...+{path}: the part after '+' prices the library's pool collectives: "
                             f"expected a local-host profile (cxlsim calibrate), got a {profile['kind']} one")
        model = LocalModel.from_dict(profile["model"])
        self.fitted_np, self.ranks = model.np, ranks
        self.name = os.path.basename(path)
        # the kernel alone: the profile's per-call overheads are the Python bench's, not the library's
        self.model = dataclasses.replace(model, np=ranks, overhead_ns=dict(model.overhead_ns, copy=0.0),
                                         collective_overhead_ns={c: 0.0 for c in PROFILE_COLLECTIVES})
        self.coherence = stats["coherence"] if stats else Coherence.HW
        self.kinds = self._kinds(stats, trace) if stats else set(POOL_KINDS)
        self.assumed = stats is None
        self.source = stats.get("source", "--library-stats") if stats else None
        given = stats.get("allreduce_large_bytes") if stats else None
        self.large_bytes = ALLREDUCE_LARGE_BYTES if given is None else given
        slot = stats.get("slot_bytes") if stats else None
        self.slot_bytes = SLOT_BYTES if slot is None else slot
        self.large_assumed = given is None
        self.profile_placement = profile_placement(profile)
        self.run_placement = stats.get("placement") if stats else None
        self._profile, self._costs, self._rules = profile, {}, set()
        run = self.run_placement or {}
        has_jobs = bool((profile.get("collectives") or {}).get("jobs"))
        self.at_roundtrip_ns = (run["roundtrip_ns"] if has_jobs and ranks == self.fitted_np
                                and run.get("class") in ("fast", "slow") and run.get("roundtrip_ns") else None)
        """The traced run's flag round trip (ns), at which the allreduce is priced from the profile's jobs
        (calibrate.price_spread.price_at), where the profile has collectives jobs, the trace is of the profile's
        np and the stats header gives a fast or slow round trip; else None (the profile's model prices it)."""
        if self.at_roundtrip_ns and trace is not None and "allreduce" in self.kinds:  # the rules, for the line
            for size in sorted({c.size_bytes for calls in trace.ranks for c in calls if c.kind == "allreduce"}):
                self.cost_ns("allreduce", size)

    def _kinds(self, stats: dict, trace) -> set:
        """The traced kinds every call of which ran on the pool, by the stats (see the module docstring); without a
        `trace` (pricing a run that was not traced), the kinds the stats say ran on the pool alone, counts unchecked."""
        if stats["ranks"] != self.ranks:
            raise InputError(f"--library-stats: the stats are of {stats['ranks']} ranks, the trace has {self.ranks}")
        if trace is None:
            return {kind for kind, row in stats["rows"].items() if row["pool"] and row["pool"] == row["calls"]}
        traced = {}
        for calls in trace.ranks:
            for c in calls:
                if c.kind in POOL_KINDS:
                    traced[c.kind] = traced.get(c.kind, 0) + 1
        kinds = set()
        for kind in sorted(set(traced) | set(stats["rows"])):
            row = stats["rows"].get(kind, {"calls": 0, "pool": 0, "hier": 0, "fallback": 0})
            if row["calls"] != traced.get(kind, 0):
                raise InputError(f"--library-stats: {kind}: the stats count {row['calls']} calls (summed over "
                                 f"ranks), the trace {traced.get(kind, 0)}; they are not of the same run")
            if row["hier"]:
                raise InputError(f"--library-stats: {kind}: {row['hier']} calls took the library's many-node "
                                 "path (pool in each node, MPI between), which a local-host profile does not price")
            if row["pool"] and row["pool"] != row["calls"]:
                raise InputError(f"--library-stats: {kind}: {row['pool']} of {row['calls']} calls ran on the pool "
                                 f"and {row['fallback']} fell back to MPI; the trace does not say which call was which")
            if row["pool"]:
                kinds.add(kind)
        return kinds

    def describe(self) -> str:
        """What the profile prices and how, for the fabric line."""
        kinds = ", ".join(sorted(self.kinds)) or "none"
        source = ("assumed: every kind the library runs on its pool (no --library-stats)" if self.assumed
                  else f"those every call of which ran on the pool, by the library's stats: {self.source}")
        np_note = (f"; priced at np {self.ranks}, outside the profile's np {self.fitted_np}"
                   if self.ranks != self.fitted_np else "")
        large = (f"; allreduce large from {self.large_bytes} B"
                 + (" (the library's default, assumed: not in the stats)" if self.large_assumed else " (the run's)"))
        at = (f"; allreduce priced at the run's flag round trip {self.at_roundtrip_ns:.0f} ns from the profile's "
              f"jobs (calibrate.price_spread.price_at: {'; '.join(sorted(self._rules)) or 'the median of the run placement jobs prices'})"
              if self.at_roundtrip_ns else "; allreduce priced by the profile's model (no jobs in the profile, no "
              "fast or slow round trip in the run's stats, or another np)")
        return (f"collectives on the pool by local-host profile {self.name} ({self.coherence.value}): {kinds} "
                f"({source}); each rank leaves at the last entry + the profile's kernel time (no per-call "
                f"overhead), plus a cold call's copies at the profile's per-byte time at {COLD_REFERENCE_BYTES} B "
                f"(after a call of {EVICTING_BYTES} B or more, or the first of its kind and size)"
                f"{large}{np_note}{at}; {self.placements()}")

    def placements(self) -> str:
        """The profile's host placement beside the traced run's (the library's probe, in its stats header), and a
        WARNING where both are known (fast or slow) and differ: the prices are then another placement's."""
        def said(placement, derived):
            if placement is None:
                return "not known"
            if placement["roundtrip_ns"] is None:
                return "not probed by the library (no placement)"
            how = ", from its model's hw round trip" if derived else ""
            return f"{placement['class']} (flag round trip {placement['roundtrip_ns']:.0f} ns{how})"
        prof, run = self.profile_placement, self.run_placement
        text = (f"placement: the profile's {said(prof, prof is not None and not prof.get('recorded', True))}, the "
                f"run's {said(run, False) if run else 'not known (no placement in the stats header)'}")
        known = ("fast", "slow")
        if prof and run and prof["class"] in known and run["class"] in known and prof["class"] != run["class"]:
            text += (f"; WARNING: the profile was measured in the {prof['class']} placement and the traced run ran in "
                     f"the {run['class']} one, so its collective prices are another placement's")
        return text

    def cost_ns(self, kind: str, size_bytes: int) -> float:
        """The profile's time of one call of traced `kind` (the kernel from a common start), ns."""
        key = (kind, size_bytes)
        if key not in self._costs:
            collective = POOL_KINDS[kind]
            size = 0 if kind == "barrier" else size_bytes
            if collective == "allgather":
                cost = predict_local(self.model, self.coherence, "copy", size)
            elif collective == "allreduce" and self.at_roundtrip_ns:
                got = price_at(self._profile, self.coherence, collective, size, self.large_bytes,
                               self.at_roundtrip_ns)
                cost = got["price_ns"]
                self._rules.add(f"{size} B: {got['rule']}, jobs' range {got['low_ns']:.0f}-{got['high_ns']:.0f} ns")
            else:
                cost = predict_collective(self.model, self.coherence, collective, size, self.large_bytes)
            self._costs[key] = cost
        return self._costs[key]

    def cold_extra_ns(self, kind: str, size_bytes: int) -> float:
        """What one call of traced `kind` at `size_bytes` adds when its lines are cold (module docstring), ns: per copy
        curve of its kernel (allgather: the concurrent copy-in and copy-out; else its copy pattern), its bytes at the
        curve's per-byte time at COLD_REFERENCE_BYTES less the curve at its size, never below 0; 0 from
        COLD_REFERENCE_BYTES on, where the profile lacks the curve there, or where the run's library streamed the
        copies (`NT_SLOW_MIN_BYTES`)."""
        if kind == "barrier" or not 0 < size_bytes < COLD_REFERENCE_BYTES or self._streamed(size_bytes):
            return 0.0
        mode, model = self.coherence.value, self.model
        if kind == "allgather":
            curves = [lambda n, part=part: model.concurrent_ns(part, n, mode) for part in ("copyin", "copyout")]
        else:
            name = pattern_name(POOL_KINDS[kind], size_bytes, self.large_bytes)
            curves = [lambda n: model.pattern_ns(name, n, mode)] if name else []
        extra = 0.0
        for curve in curves:
            warm, cold = curve(size_bytes), curve(COLD_REFERENCE_BYTES)
            if warm is not None and cold is not None:
                extra += max(0.0, size_bytes * cold / COLD_REFERENCE_BYTES - warm)
        return extra

    def _streamed(self, size_bytes: int) -> bool:
        """Whether the traced run's library copied `size_bytes` into its pool with non-temporal stores (at np 2, its
        probe saw the slow placement and the size is NT_SLOW_MIN_BYTES or more; at np > 2 it keeps plain stores,
        cxlsim/mpi/pools.c), which keep no line in the cache, warm or cold."""
        return (self.ranks == 2 and bool(self.run_placement) and self.run_placement.get("class") == "slow"
                and size_bytes >= NT_SLOW_MIN_BYTES)

    def plans(self, collectives: list, ranks: int) -> list:
        """Per traced collective of `collectives` (the sequence every rank runs), its PricedPlan (`plan`), cold ones
        (`cold_calls`) with `cold_extra_ns` added, or None (a network plan)."""
        return [self.plan(c, ranks, cold) for c, cold in zip(collectives, cold_calls(collectives, ranks))]

    def plan(self, call, ranks: int, cold: bool = False) -> PricedPlan | None:
        """The PricedPlan of a traced collective the library ran on the pool, else None (a network plan); `cold`:
        its lines are cold (`cold_extra_ns` added)."""
        if call.kind not in self.kinds or (call.kind == "reducescatter" and len(set(call.counts)) > 1):
            return None
        notes = []
        if call.kind == "bcast":
            notes.append("bcast on the local-host profile: the root also waits for the last rank (by turns, --cpus: "
                         "it waits where the library's steps do)")
        if call.kind == "allreduce" and call.size_bytes <= INLINE_MAX_BYTES and self.coherence == Coherence.HW:
            notes.append(f"allreduce of <= {INLINE_MAX_BYTES} B on the local-host profile: priced as the slot path "
                         "(the library's inline path, up to 112 B in the fast placement or 168 B in the slow one, "
                         "saves one line transfer in series per call)")
        extra = self.cold_extra_ns(call.kind, call.size_bytes) if cold else 0.0
        steps = steps_of(call.kind, call.size_bytes, ranks, self.large_bytes, self.slot_bytes, call.root, call.counts)
        return PricedPlan(call.kind, POOL_KINDS[call.kind], call.size_bytes,
                          self.cost_ns(call.kind, call.size_bytes) + extra, ranks, "; ".join(notes),
                          steps=steps, cold_ns=extra)
