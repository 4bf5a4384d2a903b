"""OSU text format: reading real OMB output, writing our own, and round trips."""
import os

import pytest

from cxlsim.emulator.osu import ALLGATHER_COLUMNS, OSUTable, format_osu, parse_osu, read_osu
from cxlsim.errors import InputError

DATA = os.path.join(os.path.dirname(__file__), "data")

LATENCY = """# OSU MPI Latency Test v7.3
# Size          Latency (us)
0                       1.05
1                       1.07
4194304               350.12
"""
BW = """
# OSU MPI Bandwidth Test v5.9
# Size      Bandwidth (MB/s)
1                       3.47
1048576             11210.77
"""


def test_reads_real_osu_allgather_sample():
    [table] = read_osu(os.path.join(DATA, "osu_allgather_np2_mpich5.txt"))
    assert table.kind == "allgather" and table.title.endswith("v5.3")
    assert table.columns == ALLGATHER_COLUMNS
    assert table.sizes == [2**i for i in range(21)]
    assert table.column("Avg Latency(us)")[-1] == 163.01
    assert table.column("iterations")[0] == 1000 and table.column("Iterations")[-1] == 100


def test_reads_latency_and_bw():
    [lat] = parse_osu(LATENCY)
    [bw] = parse_osu(BW)
    assert lat.kind == "latency" and lat.sizes == [0, 1, 4194304] and lat.column("Latency (us)")[2] == 350.12
    assert bw.kind == "bw" and bw.column("Bandwidth (MB/s)") == [3.47, 11210.77]


def test_round_trip_of_our_format():
    table = OSUTable(title="cxlsim pool allgather v0.1 (np 2)", columns=ALLGATHER_COLUMNS + ("MPI/pool",),
                     rows=((1, 0.31, 0.29, 0.33, 1000, 4.2), (1048576, 78.73, 78.43, 79.04, 100, 1.9)))
    [back] = parse_osu(format_osu(table))
    assert back == table


def test_several_tables_in_one_text():
    two = format_osu(OSUTable(title="A allgather", columns=("Size", "Avg Latency(us)"), rows=((1, 1.0),))) + "\n" + \
        format_osu(OSUTable(title="B allgather", columns=("Size", "Avg Latency(us)"), rows=((2, 2.0),)))
    tables = parse_osu(two)
    assert [t.title for t in tables] == ["A allgather", "B allgather"] and tables[1].rows == ((2, 2.0),)


@pytest.mark.parametrize("text, line", [
    ("# OSU x\n# Size  Latency (us)\n1  1.0\nabc 2.0\n", 4),
    ("# OSU x\n# Size  Latency (us)\n1  1.0\n2  2.0  3.0\n", 4),
    ("# OSU x\n1\n", 2),
    ("# OSU x\n# Size  Latency (us)\n-1  1.0\n", 3),
])
def test_malformed_lines_are_named(text, line):
    with pytest.raises(InputError, match=f"bad.txt:{line}:"):
        parse_osu(text, source="bad.txt")


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(InputError, match="no OSU data rows"):
        parse_osu("# only a header\n", source="e.txt")
    with pytest.raises(InputError, match="cannot read"):
        read_osu(str(tmp_path / "missing.txt"))
    with pytest.raises(InputError, match="no column 'Bandwidth'"):
        parse_osu(LATENCY)[0].column("Bandwidth")
