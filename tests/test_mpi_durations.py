"""cxlsim.mpi.durations: the reader of the library's rank<r>.durations.tsv (the format: docs/mpi.md)."""
from __future__ import annotations

import pytest

from cxlsim.errors import InputError
from cxlsim.mpi import durations

HEADER = "line\tstart_ns\tduration_ns\tpath\tsetup\n"


def write(tmp_path, rows: str):
    rank_file = tmp_path / "rank0.txt"
    rank_file.write_text("0 init\n0 allreduce 8 0\n0 wait 0 1 1\n0 wait 1 0 1\n")
    (tmp_path / "rank0.durations.tsv").write_text(rows)
    return str(rank_file)


def test_reads_rows_by_line_with_end_and_fallback_reason(tmp_path):
    rank_file = write(tmp_path, HEADER + "2\t1000\t412\tpool\t1\n3\t2000\t50\tmpi\t0\n4\t2000\t50\tmpi\t0\n")
    times = durations.read(rank_file)
    assert times[2] == durations.CallTime(2, 1000, 412, "pool", True) and times[2].end_ns == 1412
    assert times[3][1:] == times[4][1:]
    rank_file = write(tmp_path, HEADER + "2\t1000\t412\tfallback:datatype\t0\n")
    assert durations.read(rank_file)[2].path == "fallback:datatype"


@pytest.mark.parametrize("rows, message", [
    ("line start_ns\n", ":1: expected the header"),
    (HEADER + "2\t1000\t412\tpool\n", ":2: expected 5 tab-separated fields"),
    (HEADER + "2\t1000\tx\tpool\t0\n", ":2: line, start_ns, duration_ns and setup must be integers"),
    (HEADER + "2\t1000\t-1\tpool\t0\n", ":2: expected a new line number"),
    (HEADER + "2\t1000\t1\tshm\t0\n", ":2: expected a new line number"),
    (HEADER + "2\t1000\t1\tpool\t0\n2\t1000\t1\tpool\t0\n", ":3: expected a new line number"),
])
def test_refuses_a_malformed_file_naming_its_line(tmp_path, rows, message):
    rank_file = write(tmp_path, rows)
    with pytest.raises(InputError, match=message):
        durations.read(rank_file)


def test_refuses_a_trace_without_durations(tmp_path):
    rank_file = tmp_path / "rank3.txt"
    rank_file.write_text("3 init\n")
    with pytest.raises(InputError, match="rank3.durations.tsv not found"):
        durations.read(str(rank_file))
