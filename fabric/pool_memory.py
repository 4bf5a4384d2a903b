"""What a simulated pool holds: one payload label per written region, so tests can check who read what.

A region is (offset, size) in bytes. Storing a region replaces every region
it overlaps (and any zero-byte region at its offset). Reading returns the
label of the region written at exactly that offset and size, None if nothing
was, and otherwise a tuple of the labels of the overlapping regions (in
address order), so a misaligned or stale read shows.

Regions never overlap (a store removes what it overlaps), so they are kept
sorted by offset and a store or read looks only at the regions from the one
before its offset to its end (bisection), not at every region.
"""
from __future__ import annotations

from bisect import bisect_left, insort

__all__ = ["PoolMemory"]


class PoolMemory:
    """Payload labels by region (offset and size in bytes)."""

    __slots__ = ("_regions", "_starts")

    def __init__(self):
        self._regions = {}  # offset -> (size, label)
        self._starts = []   # the offsets, sorted

    def _overlapping(self, offset: int, size: int, zero_at_offset: bool) -> list[int]:
        """Offsets, in order, of the regions that overlap [offset, offset + size), and of the one at
        `offset` (a zero-byte one only if `zero_at_offset`, else any)."""
        end = offset + size
        starts, regions = self._starts, self._regions
        i = bisect_left(starts, offset)
        if i:  # only the region just before the offset can reach into the range
            i -= 1
        out = []
        for k in range(i, len(starts)):
            off = starts[k]
            if off >= end and off != offset:
                break
            sz = regions[off][0]
            if off < end and off + sz > offset or off == offset and (sz == 0 or not zero_at_offset):
                out.append(off)
        return out

    def value(self, offset: int, size: int):
        """The label a read of [offset, offset + size) sees (see the module docstring)."""
        hit = self._regions.get(offset)
        if hit is not None and hit[0] == size:
            return hit[1]
        over = tuple(self._regions[off][1] for off in self._overlapping(offset, size, zero_at_offset=True))
        return over or None

    def store(self, offset: int, size: int, label) -> None:
        """[offset, offset + size) now holds `label`."""
        regions, starts = self._regions, self._starts
        gone = self._overlapping(offset, size, zero_at_offset=False)
        if gone:
            i = bisect_left(starts, gone[0])
            del starts[i:i + len(gone)]
            for off in gone:
                del regions[off]
        regions[offset] = (size, label)
        insort(starts, offset)
