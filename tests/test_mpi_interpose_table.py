"""benchmarks/mpi_interpose.py's table: the target is judged on the median over block pairs."""
import importlib.util
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "mpi_interpose.py"


def _bench():
    spec = importlib.util.spec_from_file_location("mpi_interpose", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _job(means, blocks, probe=100.0):
    key = ("allreduce", 512)
    return {"rows": {key: (*means, 0.2, 0.6)}, "blocks": {key: blocks},
            "row_placements": {key: ("fast", "fast")}, "row_probes": {key: (probe, probe)}}


def test_one_descheduled_block_moves_the_loops_mean_but_not_the_pairs_median(capsys):
    bench = _bench()
    # five pairs, MPI 3x the pool in four; one pool block hit by a 1 ms stall (200 calls: +5 us a call)
    blocks = [(0.2, 0.6), (0.2, 0.6), (5.2, 0.6), (0.2, 0.6), (0.2, 0.6)]
    pool_mean = sum(p for p, _ in blocks) / 5
    job = _job((pool_mean, 0.6), blocks)
    assert bench.block_pair_ratios([job], ("allreduce", 512)) == pytest.approx([3.0, 3.0, 0.6 / 5.2, 3.0, 3.0])
    bench.print_table({"hw": [job]}, ("hw",), [512], {}, "fast")
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("allreduce"))
    cells = row.split()
    assert cells[5] == "3.00" and cells[6] == "0.12-3.00" and cells[7] == "(5)"
    assert cells[8] == "met"
    assert float(cells[9]) < 2  # the loops' means: 0.6 / 1.2 = 0.5x


def test_the_pairs_of_every_kept_round_count_and_a_miss_is_a_miss(capsys):
    bench = _bench()
    slow = [(0.4, 0.6)] * 5  # 1.5x in every pair: below 2x up to 4 KiB
    jobs = [_job((0.4, 0.6), slow), _job((0.4, 0.6), slow)]
    bench.print_table({"hw": jobs}, ("hw",), [512], {}, "fast")
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("allreduce"))
    assert "1.50-1.50 (10)" in row and "MISS" in row
