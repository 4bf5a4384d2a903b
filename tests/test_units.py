import pytest

from cxlsim.errors import InputError
from cxlsim.units import (UnitError, format_bandwidth, format_size, format_time, parse_bandwidth, parse_option,
                          parse_size, parse_sizes, parse_time)


@pytest.mark.parametrize("text, expected", [
    (64, 64), ("64", 64), ("4KiB", 4096), ("1 MiB", 1 << 20), ("1MB", 10**6), ("0", 0), ("2 GiB", 2 << 30),
    ("1.5 KiB", 1536), ("3B", 3), ("1 kB", 1000),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["-3", "1.5", "4 KB/s", "abc", "", "1Mb", "1 MIB!", -1, None, True, "1e400"])
def test_parse_size_rejects(bad):
    with pytest.raises(UnitError, match="expected a size"):
        parse_size(bad)


def test_unit_error_is_input_error():
    assert issubclass(UnitError, InputError)


@pytest.mark.parametrize("text, ns", [("250ns", 250.0), ("1.5 us", 1500.0), ("2ms", 2e6), ("1 s", 1e9), ("3µs", 3000.0)])
def test_parse_time(text, ns):
    assert parse_time(text) == pytest.approx(ns)


@pytest.mark.parametrize("bad", ["250", "1.5 hours", "-3 ns", "ns", 5])
def test_parse_time_rejects(bad):
    with pytest.raises(UnitError, match="time"):
        parse_time(bad)


@pytest.mark.parametrize("text, bytes_per_ns", [
    ("25 GB/s", 25.0), ("200Gb/s", 25.0), ("100 Gbit/s", 12.5), ("1 GiB/s", 2**30 / 1e9), ("500 MB/s", 0.5),
])
def test_parse_bandwidth(text, bytes_per_ns):
    assert parse_bandwidth(text) == pytest.approx(bytes_per_ns)


@pytest.mark.parametrize("bad", ["-3", "25 GB", "0 GB/s", "fast", "25 gB/s", 25])
def test_parse_bandwidth_rejects(bad):
    with pytest.raises(UnitError, match="bandwidth"):
        parse_bandwidth(bad)


def test_formats_round_trip():
    for size in (0, 1, 63, 4096, 1 << 20, 3 << 30, 1000):
        assert parse_size(format_size(size)) == size
    assert format_time(1500.0) == "1.50 us" and parse_time(format_time(1500.0)) == 1500.0
    assert parse_bandwidth(format_bandwidth(25.0)) == 25.0


def test_parse_sizes():
    assert parse_sizes("1B:1MiB") == [2**i for i in range(21)]
    assert parse_sizes("0:4") == [0, 1, 2, 4]
    assert parse_sizes("1,4KiB,65") == [1, 4096, 65]
    for bad in ("4:1", "1:2:3", "", "x:4"):
        with pytest.raises(UnitError):
            parse_sizes(bad)


def test_parse_option_names_the_flag_and_keeps_none():
    assert parse_option("--protocol-switch", "8KiB", parse_size) == 8192
    assert parse_option("--protocol-switch", None, parse_size) is None
    with pytest.raises(InputError, match=r"^--protocol-switch: ") as info:
        parse_option("--protocol-switch", "eight", parse_size)
    assert not isinstance(info.value, UnitError) and "eight" in str(info.value)
