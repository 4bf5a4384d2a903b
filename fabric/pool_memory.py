"""What a simulated pool holds: one payload label per written region, so tests can check who read what.

A region is (offset, size) in bytes. Storing a region replaces every region
it overlaps (and any zero-byte region at its offset). Reading returns the
label of the region written at exactly that offset and size, None if nothing
was, and otherwise a tuple of the labels of the overlapping regions (in
address order), so a misaligned or stale read shows.
"""
from __future__ import annotations

__all__ = ["PoolMemory"]


class PoolMemory:
    """Payload labels by region (offset and size in bytes)."""

    __slots__ = ("_regions",)

    def __init__(self):
        self._regions = {}  # offset -> (size, label)

    def value(self, offset: int, size: int):
        """The label a read of [offset, offset + size) sees (see the module docstring)."""
        hit = self._regions.get(offset)
        if hit is not None and hit[0] == size:
            return hit[1]
        end = offset + size
        over = tuple(label for off, (sz, label) in sorted(self._regions.items())
                     if off < end and off + sz > offset or (sz == 0 and off == offset))
        return over or None

    def store(self, offset: int, size: int, label) -> None:
        """[offset, offset + size) now holds `label`."""
        end = offset + size
        for off in [o for o, (sz, _) in self._regions.items() if o < end and o + sz > offset or o == offset]:
            del self._regions[off]
        self._regions[offset] = (size, label)
