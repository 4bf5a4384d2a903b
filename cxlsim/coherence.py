"""The vocabulary of a shared CXL pool: its coherence modes and the operations its event logs record.

Two coherence modes (`Coherence`):
- `HW`: CXL 3.x HDM-DB, where back-invalidation keeps every host's caches
  coherent; a writer's plain stores and a flag store suffice.
- `FLUSH`: a pool without multi-host coherence; writers write back their lines
  (clflushopt/clwb + fence) before publishing a flag, readers invalidate theirs
  before reading.

`PoolEvent` numbers the operations that the emulator's kernels (`CXL_EV_*` in
`cxlsim/emulator/cxl_ops.h`), its pure-Python twin and the DES pool all log,
so their logs compare entry by entry.

This module and the input-parsing code (config, CLI options) are the only
places that spell the modes as strings; everything else uses the enum.
"""
from __future__ import annotations

from enum import Enum, IntEnum

from cxlsim.errors import InputError

__all__ = ["Coherence", "PoolEvent"]


class Coherence(str, Enum):
    """How a pool's readers see its writers' data (a str enum: `Coherence.HW == "hw"`)."""

    HW = "hw"
    FLUSH = "flush"

    @classmethod
    def parse(cls, value, where: str = "coherence") -> "Coherence":
        """The mode named by `value` (a Coherence or its string); InputError naming `where` otherwise."""
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(c.value for c in cls)
            raise InputError(f"{where}: expected one of {names}, got {value!r}") from None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The spellings accepted on input, for argparse choices and error messages."""
        return tuple(c.value for c in cls)

    def __str__(self) -> str:
        return self.value


class PoolEvent(IntEnum):
    """Operation codes of a pool event log; arguments are (offset, bytes) or (flag offset, epoch)."""

    WRITE = 1          # offset, bytes: data stores into the rank's slot
    WRITEBACK = 2      # offset, bytes: clwb, lines stay cached
    FLUSH = 3          # offset, bytes: clflush/clflushopt, write back and drop
    SFENCE = 4
    MFENCE = 5
    FLAG_STORE = 6     # flag offset, epoch
    POLL_CACHED = 7    # flag offset, epoch: plain loads until the flag arrives
    POLL_FLUSHED = 8   # flag offset, epoch: invalidate + mfence + load until it arrives
    READ = 9           # offset, bytes: data loads
