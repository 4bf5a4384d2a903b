"""Units at the edges: parse and format sizes, times and bandwidths.

Inside cxlsim, time is float nanoseconds, sizes are int bytes and bandwidth is
bytes per nanosecond (which equals decimal GB/s). Text from users, scenario
files and command lines is converted here and nowhere else.

>>> parse_size("4KiB"), parse_size("1 MB"), parse_size(64)
(4096, 1000000, 64)
>>> parse_time("1.5 us"), parse_time("250ns")
(1500.0, 250.0)
>>> parse_bandwidth("25 GB/s"), parse_bandwidth("200Gb/s")
(25.0, 25.0)
>>> format_size(1048576), format_time(1500.0), format_bandwidth(25.0)
('1 MiB', '1.50 us', '25 GB/s')
>>> parse_sizes("1B:8B")
[1, 2, 4, 8]
"""
from __future__ import annotations

import math
import re

from cxlsim.errors import InputError

__all__ = [
    "UnitError",
    "parse_size",
    "parse_sizes",
    "parse_time",
    "parse_bandwidth",
    "format_size",
    "format_time",
    "format_bandwidth",
]


class UnitError(InputError):
    """A quantity could not be parsed; the message says what was expected."""


def parse_option(flag: str, text, parse):
    """`parse(text)` for the command-line option `flag` (None stays None); a value that does not parse is an
    InputError naming the flag."""
    if text is None:
        return None
    try:
        return parse(text)
    except UnitError as exc:
        raise InputError(f"{flag}: {exc}") from None


_SIZE_FACTORS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_TIME_FACTORS_NS = {"ps": 1e-3, "ns": 1.0, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9}
_PREFIX = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_NUMBER = r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"


def _fail(kind: str, example: str, value) -> UnitError:
    return UnitError(f"expected a {kind} like {example!r}, got {value!r}")


def parse_size(value) -> int:
    """Return a size in bytes from an int or text such as '64', '4KiB', '1 MiB', '1MB'."""
    if isinstance(value, bool):
        raise _fail("size", "4 KiB", value)
    if isinstance(value, int):
        if value < 0:
            raise _fail("size", "4 KiB", value)
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if not isinstance(value, str):
        raise _fail("size", "4 KiB", value)
    m = re.fullmatch(_NUMBER + r"\s*([A-Za-z]*)", value.strip())
    if not m or m.group(2).lower() not in _SIZE_FACTORS or m.group(2) in ("b", "kb", "Kb", "Mb", "Gb", "Tb"):
        # A lower-case 'b' means bits; sizes are bytes, so refuse it rather than guess.
        raise _fail("size", "4 KiB", value)
    number = float(m.group(1))
    size = number * _SIZE_FACTORS[m.group(2).lower()]
    if number < 0 or not math.isfinite(size) or abs(size - round(size)) > 1e-6:
        raise _fail("size (a whole, non-negative number of bytes)", "4 KiB", value)
    return int(round(size))


def parse_sizes(text: str) -> list[int]:
    """Return a list of sizes in bytes from 'LO:HI' (doubling, as OSU does) or 'A,B,C'.

    'LO:HI' starts at LO and doubles while the size is at most HI; LO=0 yields 0
    and then continues from 1.
    """
    if not isinstance(text, str) or not text.strip():
        raise _fail("size list", "1B:1MiB", text)
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 2:
            raise _fail("size range", "1B:1MiB", text)
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        if hi < lo:
            raise UnitError(f"size range {text!r}: the upper end {hi} B is below the lower end {lo} B")
        sizes, size = [], lo
        if size == 0:
            sizes.append(0)
            size = 1
        while size <= hi:
            sizes.append(size)
            size *= 2
        return sizes
    return [parse_size(part) for part in text.split(",")]


def parse_time(value) -> float:
    """Return a time in nanoseconds from text such as '250ns', '1.5 us', '2 ms'. A unit is required."""
    if not isinstance(value, str):
        raise _fail("time with a unit", "250 ns", value)
    m = re.fullmatch(_NUMBER + r"\s*([a-zµμ]+)", value.strip())
    if not m or m.group(2) not in _TIME_FACTORS_NS:
        raise _fail("time with a unit", "250 ns", value)
    ns = float(m.group(1)) * _TIME_FACTORS_NS[m.group(2)]
    if ns < 0 or not math.isfinite(ns):
        raise _fail("non-negative time", "250 ns", value)
    return ns


def parse_bandwidth(value) -> float:
    """Return a bandwidth in bytes per ns (= GB/s) from text such as '25 GB/s', '200Gb/s', '12 GiB/s'.

    'B' is bytes and 'b' is bits, as usual.
    """
    if not isinstance(value, str):
        raise _fail("bandwidth", "25 GB/s", value)
    m = re.fullmatch(_NUMBER + r"\s*(|k|K|M|G|T|Ki|Mi|Gi|Ti)(B|b|bit)(?:/s|ps)", value.strip())
    if not m:
        raise _fail("bandwidth", "25 GB/s", value)
    per_s = float(m.group(1)) * _PREFIX[m.group(2)]
    if m.group(3) in ("b", "bit"):
        per_s /= 8.0
    if per_s <= 0 or not math.isfinite(per_s):
        raise _fail("positive bandwidth", "25 GB/s", value)
    return per_s / 1e9


def format_size(size_bytes: int) -> str:
    """Format bytes with the largest binary unit that divides them exactly ('4 KiB', '1 MiB', '65 B')."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size_bytes >= factor and size_bytes % factor == 0:
            return f"{size_bytes // factor} {unit}"
    return f"{size_bytes} B"


def format_time(ns: float) -> str:
    """Format nanoseconds with a unit that keeps the number readable ('250.0 ns', '1.50 us')."""
    for unit, factor in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= factor:
            return f"{ns / factor:.2f} {unit}"
    return f"{ns:.1f} ns"


def format_bandwidth(bytes_per_ns: float) -> str:
    """Format bytes per ns as decimal GB/s or MB/s ('25 GB/s')."""
    gb_per_s = bytes_per_ns
    if gb_per_s >= 1:
        return f"{gb_per_s:.3g} GB/s"
    return f"{gb_per_s * 1e3:.3g} MB/s"
