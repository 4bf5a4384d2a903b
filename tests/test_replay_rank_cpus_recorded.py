"""The ranks' own CPU records (tests/data/traces/src/cpu_record.h) as rank_cpus.read_recorded reads them."""
import pytest

from cxlsim.errors import InputError
from cxlsim.replay.rank_cpus import read_recorded


def write(tmp_path, rank, text):
    (tmp_path / f"rank{rank}.cpus.txt").write_text(text)


def test_records_give_each_rank_its_usual_cpu_and_the_moves(tmp_path):
    write(tmp_path, 0, "cpu_ns 1000 waited_ns 20 switches 3 sleeps 0\ncpus 0 0 1 0\n")
    write(tmp_path, 1, "cpu_ns 2000 waited_ns 0 switches 0 sleeps 1\ncpus 1 1 1 1\n")
    got = read_recorded(str(tmp_path), 2)
    assert got.cpu_map(2) == (0, 1)
    assert got.moves == 2  # rank 0: 0->1, 1->0
    assert got.sched[0].switches == 3 and got.sched[1].sleeps == 1


@pytest.mark.parametrize("text, where", [
    ("cpu_ns 1 waited_ns 2 switches 3\ncpus 0\n", ":1:"),
    ("cpu_ns 1 waited_ns x switches 3 sleeps 0\ncpus 0\n", ":1:"),
    ("cpu_ns 1 waited_ns 2 switches 3 sleeps 0\ncpu 0 1\n", ":2:"),
    ("cpu_ns 1 waited_ns 2 switches 3 sleeps 0\ncpus 0 -1\n", ":2:"),
    ("cpu_ns 1 waited_ns 2 switches 3 sleeps 0\n", "expected 2 lines"),
])
def test_a_malformed_record_is_refused_naming_the_file_and_line(tmp_path, text, where):
    write(tmp_path, 0, text)
    with pytest.raises(InputError) as e:
        read_recorded(str(tmp_path), 1)
    assert "rank0.cpus.txt" in str(e.value) and where in str(e.value)


def test_a_missing_record_names_the_rank(tmp_path):
    write(tmp_path, 0, "cpu_ns 1 waited_ns 2 switches 3 sleeps 0\ncpus 0\n")
    with pytest.raises(InputError, match="rank 1's CPU record"):
        read_recorded(str(tmp_path), 2)
