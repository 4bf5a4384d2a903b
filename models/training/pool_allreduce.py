"""Data-parallel all-reduces on a CXL pool: what ddp and horovod run with `pool=` (a CXL pool preset).

Every node has one worker, a rank of the CXL pool transport (one rank per
host; a two-level switch tree when one switch has too few ports and the preset
allows it), in hw coherence by default (CXL 3.x back-invalidation: a worker
waiting for a slower one sleeps instead of polling). Each bucket or fused buffer
is one pool all-reduce (models/collectives/pool_collectives.py): `cxl_pool`
(every worker folds every block) or `cxl_pool_large` (reduce-scatter through the
pool, then an allgather of the shares), whichever has the lower closed form on
this pool at that size (`pool_collective_forms.select_pool`), or, given
`large_bytes`, the emulator's rule (cxlsim/emulator: a buffer of at least
`large_bytes` bytes takes the large one). Its fold runs on the worker's
endpoint (a GPU's, or the host's when the job says so). Pool transfers move in
chunks of `POOL_CHUNK_BYTES`, as the pool store's.

The pool is a preset name (`get_cxl_preset`) or a CXLPoolPreset object, e.g.
the local-host pool of a calibration profile (cxlsim.calibrate.local_preset),
which is how cxlsim/train_projection.py projects an emulated run.
"""
from __future__ import annotations

import math

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.models.collectives import pool_collective_forms
from cxlsim.models.collectives.registry import algorithm
from cxlsim.models.training.core import Option
from cxlsim.models.training.pool_store import POOL_CHUNK_BYTES

__all__ = ["POOL", "PoolAllreduce", "resolve_collective"]

POOL = Option(name="pool", flag="--pool", parse=str,
              help="put the store (sync, with --aggregation workers) or the all-reduces (ddp, horovod) on this CXL "
                   "pool preset, e.g. cxl3-pool")
"""The --pool option, shared by the modes that can use a CXL pool."""


def resolve_collective(collective: str | None, pool: str | None) -> str:
    """The collective engine of a ddp or horovod run: 'flow' by default, 'des' (the only one) with a pool."""
    if pool is None:
        return "flow" if collective is None else collective
    if collective not in (None, "des"):
        raise InputError(f"collective: the all-reduce on a CXL pool (pool={pool!r}) runs in the DES only; "
                         f"expected 'des', got {collective!r}")
    return "des"


class PoolAllreduce:
    """The pool transport of a training cluster and the pool all-reduce each size runs on it."""

    def __init__(self, spec, pool, *, coherence: Coherence | str = Coherence.HW, large_bytes: int | None = None,
                 slot_bytes: int | None = None, call_overhead_ns: float = 0.0):
        """pool: a CXL pool preset name or a CXLPoolPreset. large_bytes: None picks each size's algorithm by
        closed form; an integer >= 0 applies the emulator's threshold (cxl_pool_large from that size on).
        slot_bytes: None runs any size as one call; an integer >= 64 runs a larger buffer as consecutive
        calls of at most that many bytes, as the emulator does with a buffer larger than its pool slot.
        call_overhead_ns: CPU time each all-reduce call costs before it starts (e.g. the emulator's hand-off
        of a ddp bucket to its communication thread), ns."""
        if spec.size != spec.worker_hosts:
            raise InputError(f"pool: a CXL pool runs one worker per node; the cluster has {spec.size} GPUs on "
                             f"{spec.worker_hosts} nodes")
        if large_bytes is not None and (isinstance(large_bytes, bool) or not isinstance(large_bytes, int)
                                        or large_bytes < 0):
            raise InputError(f"large_bytes: expected a size >= 0 B or None, got {large_bytes!r}")
        if slot_bytes is not None and (isinstance(slot_bytes, bool) or not isinstance(slot_bytes, int)
                                       or slot_bytes < 64):
            raise InputError(f"slot_bytes: expected a size >= 64 B or None, got {slot_bytes!r}")
        self.slot_bytes = slot_bytes
        if not (isinstance(call_overhead_ns, (int, float)) and 0 <= call_overhead_ns < math.inf):
            raise InputError(f"call_overhead_ns: expected a time >= 0 ns, got {call_overhead_ns!r}")
        self.call_overhead_ns = float(call_overhead_ns)
        preset = get_cxl_preset(pool) if isinstance(pool, str) else pool
        self.pool = pool if isinstance(pool, str) else preset.name
        self.coherence = Coherence.parse(coherence)
        self.large_bytes = large_bytes
        kw = dict(coherence=self.coherence, chunk_bytes=POOL_CHUNK_BYTES)
        try:
            self.transport = CXLPoolTransport(preset, spec.size, **kw)
        except InputError as exc:
            if "switch tree" not in str(exc) or preset.max_switch_levels < 2:
                raise
            self.transport = CXLPoolTransport(preset, spec.size, switch_levels=2, **kw)
        self.figures = self.transport.figures()
        self._chosen = {}
        self.used = set()
        """Names of the pool algorithms that ran."""

    def algorithm(self, size_bytes: int):
        """The pool all-reduce record for a buffer of `size_bytes`."""
        algo = self._chosen.get(size_bytes)
        if algo is None:
            if self.large_bytes is None:
                name, _ = pool_collective_forms.select_pool("allreduce", self.figures, self.transport.size,
                                                            size_bytes)
            else:
                name = "cxl_pool_large" if size_bytes >= self.large_bytes else "cxl_pool"
            algo = self._chosen[size_bytes] = algorithm("allreduce", name)
        self.used.add(algo.name)
        return algo

    def allreduce(self, ep, size_bytes: int, vector):
        """Generator: one worker's part of the all-reduce of `size_bytes` (in slot-sized calls when
        `slot_bytes` is set); returns the reduced labels (of the last call)."""
        if self.call_overhead_ns:
            yield ep.transport.compute(ep.rank, self.call_overhead_ns)
        limit = self.slot_bytes or max(size_bytes, 1)
        out, left = None, size_bytes
        while True:
            part = min(left, limit)
            out = yield from self.algorithm(part).run(ep, part, vector, None)
            left -= part
            if left <= 0:
                return out

    def details(self) -> dict:
        fig = self.figures
        out = {"pool": self.pool, "coherence": self.coherence.value, "switch_levels": 2 if fig.leaf_hosts else 1,
               "allreduce": "/".join(sorted(self.used)) or "none", "pool_chunk_bytes": POOL_CHUNK_BYTES}
        if self.large_bytes is not None:
            out["allreduce_large_bytes"] = self.large_bytes
        if self.slot_bytes is not None:
            out["slot_bytes"] = self.slot_bytes
        if self.call_overhead_ns:
            out["call_overhead_ns"] = self.call_overhead_ns
        return out
