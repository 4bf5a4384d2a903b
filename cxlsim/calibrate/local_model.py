"""The `local-host` model: this machine's primitives (`LocalModel`) as a CXL pool preset (`local_preset`).

No switch, no media latency, a host-to-pool path (solved in `des`), host bandwidth, flush and
fence costs per size and coherence mode. Units: ns, bytes, bytes/ns.

Rank scaling. The primitives are measured with `PRIMITIVE_RANKS` (2) processes: the
concurrent copy moves its own block in and both blocks out, the read pass covers two
blocks, the concurrent write-back and invalidation two slots. `LocalModel.np` is the
rank count a prediction is for (the fit's np, or a projection's): its figures per block
and per line are the primitives' divided by what they covered, so at P ranks every rank
copies in one block and copies out (or reads) P, the DES's pool protocol, and the time
grows with P as the pool's closed form says. The pool has one head per switch port left
and seven per host, so its device never limits, at any P: one host's memory serves its
cores' copies.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from cxlsim.calibrate.profile import check_keys
from cxlsim.coherence import Coherence

MIN_PATH_NS = 0.01  # the transport divides by the load latency, so the path is never exactly 0
GiB = 1 << 30
PRIMITIVE_RANKS = 2
"""Processes the primitives (concurrent copy, read pass) run with."""
HEADS_PER_HOST = 7
"""Device heads per host of the local-host pool (14 at np = 2, the 16 ports of one switch less the hosts'),
so the device's bandwidth, heads x the host's, never limits."""


def _curve(points: dict):
    """Piecewise-linear interpolation of {size: ns} in size (clamped outside), as a function."""
    xs = np.array(sorted(int(k) for k in points), float)
    ys = np.array([points[k] if k in points else points[str(int(k))] for k in sorted(points, key=int)], float)

    def at(size):
        return float(np.interp(float(size), xs, ys))
    return at


FREE_REDUCE_BW = 1e6
"""Bytes per ns of a reduction the DES charges nothing for (B/ns): where the fold costs no more than what the
call's model already holds."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalModel:
    """A `local-host` CXL pool: this machine's primitives, ready to map onto a CXLPoolPreset.

    Curves are {size_bytes (str): ns} and are interpolated linearly between sizes.
    """

    np: int
    """Ranks the allgather runs on: the fit's np, or a projection's (the primitives' figures are per
    block and per line, so they hold at any np; see the module docstring)."""
    path_ns: dict
    """Host-to-pool path per coherence mode ({'hw': ns, 'flush': ns}), solved from the flag round trip
    (`solve_path_ns`)."""
    roundtrip_ns: dict
    """Measured flag round trip per coherence mode (median of undisturbed batches), ns."""
    flush_ns_per_line: float
    """clflushopt per line (mean of the writer's dirty and the reader's clean lines), ns."""
    fence_ns: dict
    """A fence per mode, ns: 'hw' the sfence after write-backs (the publish's), the intercept of its
    flush line; 'flush' a bare mfence (profiles without `flush_ack_ns`: the intercept of the
    invalidation's mfence line, acknowledgement included)."""
    overhead_ns: dict
    """Per-call software overhead: np = 1 zero-byte call of the same path, {'copy': ns, 'zero-copy': ns}."""
    copy_bw_curve: dict
    """ns to memcpy n bytes (n / copy_bandwidth(n)), by size."""
    write_pass_curve: dict
    """ns of the application's store of an n-byte block beyond a 0-byte one (`_kernels.write_block`, as the bench does), by size."""
    read_pass_curve: dict
    """ns of read_pass over np blocks of n bytes beyond np empty blocks, by size."""
    remote_curves: dict = dataclasses.field(default_factory=dict)
    """Per mode, {kind: {size: ns}} of the two-process primitives (`_remote_rank`), kinds: 'copy'
    (memcpy out of n bytes another process just wrote; flush mode: written back, so from memory),
    'read' (read_pass of such bytes), 'copyin' (memcpy into n bytes another process has just read,
    so every store invalidates its copy), 'store' (the bench's write_block of such bytes beyond a 0-byte
    one); {} = use the local curves."""
    flush_ack_ns: dict = dataclasses.field(default_factory=dict)
    """Flush mode's clflushopt acknowledgements, ns from the last one's issue until a fence may pass:
    'invalidate' (clean lines: the intercept of clflushopt + mfence over clean lines, less a bare
    mfence) and 'writeback' (dirty lines: the same over just-stored lines); the DES's fences wait
    for them (CXLHostParams.invalidate_ns / writeback_ns). {} = none (not measured)."""
    concurrent_curves: dict = dataclasses.field(default_factory=dict)
    """Per mode, {kind: {size: ns}} of the concurrent-copy primitive (`PoolKernel.concurrent_copy`:
    both ranks at once write their block, then copy out the others' blocks and their own from send /
    read in place every block of the round), the ranks' medians joined by `measure.join_ranks` (max
    before the publish, mean after): 'copyin', 'copyout' (memcpy of all np blocks: the others' out of the
    pool, its own from send, as the copy-mode kernel),
    'writeback' (own slot + sfence) and 'invalidate' (the others' slots + mfence) of the copy
    variant, 'storein' and 'readout' of the read variant (the zero-copy view's copy-in from send, streamed
    where the view streams, and the read of the rows: the others' blocks in place, its own from send);
    {} = use the one-process curves and `remote_curves`."""
    fold_curves: dict = dataclasses.field(default_factory=dict)
    """{'dtype op' (e.g. 'float32 sum'): {size: ns}}: the pool kernels' fold of two blocks of n bytes into
    an output, one process, the blocks in its cache, beyond a one-element fold (`collective_measure.measure_fold`);
    {} = not measured."""
    pattern_curves: dict = dataclasses.field(default_factory=dict)
    """Per mode, {pattern: {size: ns}}: the data time of each pool collective's own copies at np = 2
    (`patterns.join_pattern_ranks`'s 'data': the slowest copy-in plus the ranks' mean copy-out, per
    step); {} = not measured."""
    pattern_maintenance_curves: dict = dataclasses.field(default_factory=dict)
    """The same patterns' cache maintenance (flush mode: write-back before the flag, invalidation after
    it; `join_pattern_ranks`'s 'maintenance'), {} = not measured."""
    pattern_load_curves: dict = dataclasses.field(default_factory=dict)
    """The part of each pattern's data time its fold step takes (the kernel's own fold, in place: its loads,
    arithmetic and stores, both ranks at once; `join_pattern_ranks`'s 'loads'); {} = not measured (then the fold
    primitive is charged beyond a one-process read pass of its blocks)."""
    collective_overhead_ns: dict = dataclasses.field(default_factory=dict)
    """{collective: ns}: the per-call software overhead of the bench's step of each pool collective beyond
    allgather (np = 1, a 0-byte call, `collective_measure.measure_call_overheads`); {} = not measured."""
    rank_overhead_ns: dict = dataclasses.field(default_factory=dict)
    """{collective: [ns per rank]}: the same overhead rank by rank, where a job's blocks measured it so (the
    ranks' software can differ by 2x in one block: 330 against 630 ns, and the call waits for the slower
    rank's publish; `collectives.row_model` sets it in the fast placement only); {} = every rank at
    `collective_overhead_ns`."""
    exchange_ns: dict = dataclasses.field(default_factory=dict)
    """Per mode, ns: the symmetric flag exchange (`_probes.flag_exchange`: every rank publishes and polls at
    once, back to back, `collective_blocks.EXCHANGE_GAP_NS` of software between), np = 2, the gap included;
    {} = not measured (then the DES's own exchange at the solved path stands)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "LocalModel":
        fields = dataclasses.fields(cls)
        check_keys("local-host model", data, [f.name for f in fields if f.default_factory is dataclasses.MISSING])
        return cls(**{f.name: data[f.name] for f in fields if f.name in data})

    def fold_ns(self, size_bytes: int, fold_class: str = "float32 sum"):
        """The fold primitive of two n-byte blocks of `fold_class` (ns beyond a one-element fold), or None."""
        curve = self.fold_curves.get(fold_class)
        return max(_curve(curve)(size_bytes), 0.0) if curve else None

    def reduce_bw(self, size_bytes: int, fold_class: str = "float32 sum"):
        """Bytes of one operand folded per ns, for the DES's reduction of n-byte operands (`Transport.reduce`),
        or None without a fold primitive: the DES reads every block already (at the host bandwidth), so
        its reduction is the fold primitive less the one-process read pass of the two blocks it covers.
        (Where a call's copy pattern folds, its data time holds the kernel's own fold and nothing is charged
        beyond it: `collectives.collective_preset`, FREE_REDUCE_BW.)"""
        fold = self.fold_ns(size_bytes, fold_class)
        if fold is None or size_bytes <= 0:
            return None
        beyond_reads = fold - max(_curve(self.read_pass_curve)(size_bytes), 0.0)
        return size_bytes / beyond_reads if beyond_reads > 1e-3 else FREE_REDUCE_BW

    def copy_ns(self, size_bytes: int) -> float:
        return max(_curve(self.copy_bw_curve)(size_bytes), 1e-3)

    def remote_ns(self, kind: str, size_bytes: int, coherence: str, local: float) -> float:
        """The two-process primitive `kind` at this size and mode, or `local` if it was not measured."""
        curve = self.remote_curves.get(coherence, {}).get(kind)
        return max(_curve(curve)(size_bytes), local, 1e-3) if curve else local

    def concurrent_ns(self, kind: str, size_bytes: int, coherence: str):
        """The concurrent-copy primitive `kind` at this size and mode (ns), or None if not measured."""
        curve = self.concurrent_curves.get(coherence, {}).get(kind)
        return max(_curve(curve)(size_bytes), 0.0) if curve else None

    def pattern_ns(self, pattern: str, size_bytes: int, coherence: str, part: str = "data"):
        """The pattern primitive's data time (part 'maintenance': its cache maintenance) at this size and
        mode (ns, interpolated between measured sizes), or None if not measured or outside the measured
        sizes (no extrapolation)."""
        curves = {"data": self.pattern_curves, "maintenance": self.pattern_maintenance_curves,
                  "loads": self.pattern_load_curves}[part]
        curve = curves.get(coherence, {}).get(pattern)
        if not curve or not min(int(k) for k in curve) <= size_bytes <= max(int(k) for k in curve):
            return None
        return max(_curve(curve)(size_bytes), 0.0)

    def flush_line_ns(self, size_bytes: int, coherence: Coherence = Coherence.FLUSH) -> float:
        """clflushopt per line for an n-byte call: the one-process line fit, or, if larger, the
        concurrent primitive's write-back of the own slot plus invalidation of the other's, less
        what the DES charges around them anyway (a fence each, and the acknowledgements of
        `flush_ack_ns` the fences wait for), over the 2 x lines the DES flushes (np = 2: W own,
        W other). Dirty lines written back while the other core does the same, and lines
        invalidated right after, cost more than a lone core's flush loop over its cache."""
        wb = self.concurrent_ns("writeback", size_bytes, coherence)
        inv = self.concurrent_ns("invalidate", size_bytes, coherence)
        if coherence != Coherence.FLUSH or wb is None or inv is None or size_bytes <= 0:
            return self.flush_ns_per_line
        lines = -(-int(size_bytes) // 64)
        fixed = 2 * self.fence_ns[coherence] + self.flush_ack_ns.get("writeback", 0.0) \
            + self.flush_ack_ns.get("invalidate", 0.0)
        return max(self.flush_ns_per_line, (wb + inv - fixed) / (PRIMITIVE_RANKS * lines))

    def host_bw(self, size_bytes: int, coherence: Coherence = Coherence.HW, path_ns: float = 0.0) -> float:
        """Host bandwidth for an n-byte call, bytes/ns, so that the DES's copies of a call (the block
        in, np blocks out, each W = 64 ceil(n/64) bytes at this bandwidth) take what the measured
        copies take.

        With the concurrent-copy primitive (`concurrent_curves`): its copy-in plus copy-out time,
        measured with every rank copying at once as in the allgather (own block in, every block
        out, one of them freshly written by the other core, which meanwhile does the same),
        less what the DES already charges as latency around those copies at this `path_ns`:
        the write's 2 x path until acked and the reads' load (2 x path), so the line transfers
        between the cores (which the flag round trip, hence the path, already holds) are not
        counted twice. In flush mode with `flush_ack_ns` only the load's 2 x path: there the
        write is acknowledged no sooner than the write-back's `writeback_ns`, which is measured
        in its own phase and outlasts the write's 2 x path.
        Without it (np != 2, or not measured) the blend of one-process figures: own block in and out at
        the local memcpy time of n bytes, the np - 1 others' blocks at the remote-copy time."""
        lines = max(-(-int(size_bytes) // 64), 1)
        cin = self.concurrent_ns("copyin", size_bytes, coherence)
        cout = self.concurrent_ns("copyout", size_bytes, coherence)
        if cin is not None and cout is not None:
            charged = 2 * path_ns if coherence == Coherence.FLUSH and self.flush_ack_ns else 4 * path_ns
            return (1 + PRIMITIVE_RANKS) * lines * 64 / max(cin + cout - charged, 1e-3)
        local = self.copy_ns(size_bytes)
        total = (self.remote_ns("copyin", size_bytes, coherence, local) + local
                 + (self.np - 1) * self.remote_ns("copy", size_bytes, coherence, local))
        return (1 + self.np) * lines * 64 / total

    def app_ns(self, size_bytes: int, coherence: Coherence = Coherence.HW) -> float:
        """The zero-copy bench's own work beyond a 0-byte call: the block's way into the slot (n), read pass of
        the np blocks (own block at the local read-pass time, the others' at the remote one; the measured
        read of `PRIMITIVE_RANKS` blocks scaled to np).

        With the concurrent primitive (the view's data movement, `patterns.view_rounds`: the kernel's copy-in
        from send, streamed where the view streams, and the read of the rows, own block from send, both ranks
        at once): its copy-in, and the larger of its read and the one-process read pass (the bench's own
        `read_pass`, called from Python)."""
        if size_bytes <= 0:
            return 0.0
        store = self.concurrent_ns("storein", size_bytes, coherence)
        read = self.concurrent_ns("readout", size_bytes, coherence)
        if store is not None and read is not None:  # both ranks at once, as in the bench
            return store + max(read, _curve(self.read_pass_curve)(size_bytes)) * self.np / PRIMITIVE_RANKS
        local_read = max(_curve(self.read_pass_curve)(size_bytes), 0.0) / PRIMITIVE_RANKS
        remote_read = self.remote_ns("read", size_bytes, coherence, local_read)
        store = self.remote_ns("store", size_bytes, coherence, max(_curve(self.write_pass_curve)(size_bytes), 0.0))
        return store + local_read + (self.np - 1) * remote_read


def local_preset(model: LocalModel, size_bytes: int, path_ns: float, coherence: str, *,
                 bw_cap_bytes_per_ns: float = 0.0, extra_latency_ns: float = 0.0, host_bw_bytes_per_ns: float = 0.0):
    """The `local-host` CXLPoolPreset for calls of `size_bytes`: no switch latency, no media latency,
    a core-to-pool path of `path_ns`, host bandwidth from the copy curve at that size (the allgather's
    bytes, `LocalModel.host_bw`; `host_bw_bytes_per_ns` if > 0; capped at `bw_cap_bytes_per_ns` if > 0),
    flush and fence from the microbenchmark, a device that never limits (one host's copies are the
    bottleneck on one machine)."""
    from cxlsim.fabric.cxl import CXLDeviceParams, CXLLinkParams, CXLSwitchParams
    from cxlsim.fabric.cxl_presets import CXLPoolPreset
    from cxlsim.fabric.host import HostParams

    bw = host_bw_bytes_per_ns if host_bw_bytes_per_ns > 0 else model.host_bw(size_bytes, coherence,
                                                                               max(path_ns, MIN_PATH_NS))
    flush = coherence == Coherence.FLUSH  # only flush mode's writes and clflushopts wait for memory
    if bw_cap_bytes_per_ns > 0:
        bw = min(bw, bw_cap_bytes_per_ns)
    return CXLPoolPreset(
        name="local-host", generation="local",
        switch=CXLSwitchParams(hop_latency_ns=0.0, port_bw_bytes_per_ns=bw,
                               lanes=16 * (1 + HEADS_PER_HOST) * model.np, lanes_per_port=16),
        device=CXLDeviceParams(media_latency_ns=extra_latency_ns, media_bw_bytes_per_ns=1e6,
                               heads=HEADS_PER_HOST * model.np, capacity_bytes=GiB),
        link=CXLLinkParams(latency_ns=0.0, retimers=0, retimer_latency_ns=0.0),
        host_path=dataclasses.replace(_host_path(), port_latency_ns=max(path_ns, MIN_PATH_NS),
                                      flush_ns_per_line=model.flush_line_ns(size_bytes, coherence),
                                      fence_ns=model.fence_ns[coherence],
                                      invalidate_ns=model.flush_ack_ns.get("invalidate", 0.0) if flush else 0.0,
                                      writeback_ns=model.flush_ack_ns.get("writeback", 0.0) if flush else 0.0),
        host=HostParams(memcpy_bw_bytes_per_ns=bw, reduce_bw_bytes_per_ns=bw / 2),
        coherence_modes=tuple(Coherence), max_switch_levels=1, snoop_filter_lines=1 << 24,
        source="cxlsim calibrate: this machine's primitives (flag round trip, flush, copy bandwidth)")


def _host_path():
    from cxlsim.fabric.cxl import CXLHostParams

    return CXLHostParams(port_latency_ns=0.0, outstanding_lines=1 << 20, hit_latency_ns=0.0,
                         flush_ns_per_line=0.0, fence_ns=0.0)
