"""The time terms the pool collectives' closed forms share: line counts, a rank's store and load costs, ns.

On a pool's `PoolFigures` (`CXLPoolTransport.figures()`), by the pool transport's rules
(`cxlsim.fabric.cxl_transport`): a rank issues one 64-byte line every 64/b ns (b the host bandwidth), a
streamed write is acknowledged 2 path after its last line is issued (or `writeback_ns` after its first),
and in flush mode a publish writes its lines back (clflushopt) and an acquire drops the writer's lines
before its loads. `uncongested` says where no transfer ever queues, so that the algebraic forms are exact;
`HW_CHUNKS` is how many chunk transfers an hw fixed point (`pool_hw_steps`) takes on before the algebraic
forms stand instead.
"""
from __future__ import annotations

from cxlsim.coherence import Coherence
from cxlsim.fabric.cxl import CACHE_LINE_BYTES, line_span
from cxlsim.models.collectives import pool_collectives as pc

__all__ = ["LINE", "HW_CHUNKS", "uncongested", "lines_of", "issue_ns", "flush_mode", "store_shift_ns",
           "row_store_shift_ns", "reads_ns"]

LINE = CACHE_LINE_BYTES
"""Bytes per cache line, the unit every pool access moves."""

HW_CHUNKS = 250_000
"""Most chunk transfers an hw step form takes on (a pass each, about 1 s in all); above it the algebraic form
stands, with its note."""


def uncongested(fig, p: int) -> bool:
    """Whether no transfer ever queues: one switch and P x host bandwidth within the devices' together."""
    return not fig.leaf_hosts and p * fig.host_bw_bytes_per_ns <= fig.device_bw_bytes_per_ns * (1 + 1e-12)


def lines_of(offset: int, size: int) -> int:
    """The cache lines the `size` bytes at `offset` span."""
    return line_span(offset, size)[1]


def issue_ns(fig, lines: int) -> float:
    """How long a rank takes to issue `lines` lines at its host bandwidth, ns."""
    return lines * LINE / fig.host_bw_bytes_per_ns


def flush_mode(fig) -> bool:
    """Whether the pool runs in flush mode (software coherence)."""
    return Coherence.parse(fig.coherence) == Coherence.FLUSH


def store_shift_ns(fig, pieces, flushed_lines: int, zero_copy: bool = False) -> float:
    """What storing the (offset, bytes) `pieces` of a line-aligned slot one after the other (streamed;
    zero-copy: written back by the publish's clflushopt), and in flush mode the publish's clflushopt of
    `flushed_lines` lines, add before the step's sfence, ns."""
    issued = ack = 0.0
    for offset, n in pieces:
        if n:
            start, issued = issued, issued + issue_ns(fig, lines_of(offset, n))
            ack = max(ack, issued + 2 * fig.path_ns, start + fig.writeback_ns)
    if not flush_mode(fig):
        return 0.0 if zero_copy else ack
    if not flushed_lines:
        return ack
    cpu = (0.0 if zero_copy else issued) + flushed_lines * fig.flush_ns_per_line
    return max(cpu, ack, cpu + fig.invalidate_ns)


def row_store_shift_ns(fig, size: int, keep=(0, 0)) -> float:
    """`store_shift_ns` of storing an s-byte row (or vector) from offset 0 but bytes [keep) and writing it back whole."""
    return store_shift_ns(fig, pc.row_pieces(*keep, size), lines_of(0, size))


def reads_ns(fig, own_lines: int, other_lines: list, load: bool = True) -> float:
    """One rank's acquire (flush mode) and loads (unless not `load`) of its own range and the others' (line
    counts), ns."""
    t = 0.0
    if flush_mode(fig):
        flushed = sum(other_lines)
        t += flushed * fig.flush_ns_per_line + (fig.invalidate_ns if flushed else 0.0) + fig.fence_ns
    lines = own_lines + sum(other_lines)
    if lines and load:
        t += fig.load_ns + issue_ns(fig, lines)
    return t
