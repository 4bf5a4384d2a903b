"""`cxlsim bench allreduce|reduce_scatter|broadcast|alltoall|barrier`: OSU tables, validation, refusals, MPI."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from cxlsim.emulator.bench import AllgatherSide, BenchPlan, run_plan
from cxlsim.emulator._kernels import checksum_of_fill
from cxlsim.emulator.bench_collectives import CollectiveSide, pattern, read_pass_holds
from cxlsim.emulator.launch import RankFailure, run_local
from cxlsim.emulator.osu import parse_osu
from cxlsim.errors import InputError


def cxlsim(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "cxlsim", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("collective, sizes, rows", [
    ("allreduce", "4:64", [4, 8, 16, 32, 64]), ("reduce_scatter", "8,4KiB", [8, 4096]),
    ("broadcast", "1,8KiB", [1, 8192]), ("alltoall", "1:4", [1, 2, 4]), ("barrier", None, [0])])
def test_each_collective_prints_an_osu_table_with_the_round_spread(collective, sizes, rows):
    args = ["bench", collective, "--np", "2", "--repeat", "2", "--iterations", "10", "--warmup", "1", "--validate"]
    out = cxlsim(*args, *(["--sizes", sizes] if sizes else []))
    assert out.returncode == 0, out.stderr
    (table,) = parse_osu(out.stdout)
    assert table.title.startswith(f"cxlsim pool {collective} ") and "np 2" in table.title
    assert table.sizes == rows
    assert "Round Min(us)" in table.columns and all(v > 0 for v in table.column("Avg Latency(us)"))
    assert "2 interleaved round(s)" in out.stdout


@pytest.mark.parametrize("args, needle", [
    (["allreduce", "--sizes", "6"], "multiple of 4 bytes"),
    (["reduce_scatter", "--np", "2", "--sizes", "4"], "gives no float to each of 2 ranks"),
    (["reduce_scatter", "--zero-copy"], "unrecognized arguments: --zero-copy"),
    (["barrier", "--sizes", "4"], "unrecognized arguments: --sizes"),
    (["allreduce", "--allreduce-large", "1x"], "--allreduce-large: expected one size"),
    (["alltoall", "--allreduce-large", "0"], "unrecognized arguments: --allreduce-large"),
])
def test_bad_arguments_exit_2_naming_them(args, needle):
    out = cxlsim("bench", *args, "--repeat", "1")
    assert out.returncode == 2 and needle in out.stderr, out.stderr


@pytest.mark.parametrize("collective", ["broadcast", "alltoall"])
def test_zero_copy_broadcast_and_alltoall_run_validated_from_the_cli(collective):
    out = cxlsim("bench", collective, "--np", "2", "--zero-copy", "--sizes", "1,4KiB,64KiB", "--repeat", "1",
                 "--iterations", "10", "--warmup", "1", "--validate")
    assert out.returncode == 0, out.stderr
    (table,) = parse_osu(out.stdout)
    assert "zero-copy" in table.title and table.sizes == [1, 4096, 65536]


def test_plans_refuse_sides_a_collective_does_not_have():
    with pytest.raises(InputError, match="'zero-copy': reduce_scatter runs on the pool"):
        BenchPlan(sizes=(8,), sides=("zero-copy",), collective="reduce_scatter")
    with pytest.raises(InputError, match="only allgather has a bare-sync side"):
        BenchPlan(sizes=(8,), sides=("sync",), collective="broadcast")
    with pytest.raises(InputError, match="collective: expected one of"):
        BenchPlan(sizes=(8,), collective="gather")


def _copy_read(comm, collective, n):
    """A validated copy-read run (a wrong result raises), then, beside allgather, one iteration's checksum:
    what its read pass took over the received buffer."""
    plan = BenchPlan(sizes=(n,), sides=("copy-read",), iterations=3, warmup=1, validate=True, collective=collective)
    rows = run_plan(comm, plan)
    if collective == "allgather":
        return rows[0]["side"], None
    side = CollectiveSide(collective, "copy-read", comm, None, n, True)
    side.before(0)
    side.op()
    side.after(0)
    return rows[0]["side"], side.checksum


@pytest.mark.parametrize("collective", ["allgather", "broadcast", "alltoall"])
def test_copy_read_times_the_copy_call_and_a_read_pass_over_its_result(collective):
    n = 4096
    got = run_local(2, _copy_read, (collective, n), slot_bytes=2 * n, timeout_s=30)
    assert [side for side, _ in got] == ["copy-read"] * 2
    checksums = [checksum for _, checksum in got]
    if collective == "broadcast":  # the root reads nothing; the other rank reads the root's data
        assert checksums == [None, checksum_of_fill(pattern(0, 0), n)]
    elif collective == "alltoall":  # rank me receives block me of every rank s: pattern(s + 7 me, 0)
        assert checksums == [sum(checksum_of_fill(pattern(s + 7 * me, 0), n) for s in range(2)) % 2**64
                             for me in range(2)]


def _stale_broadcast(comm):
    """The broadcast side with a check that runs without the call: validation must catch the stale buffer."""
    side = CollectiveSide("broadcast", "copy", comm, None, 64, True)
    side.before(0)
    side.op()
    side.after(0)
    side.before(1)
    side.after(1)  # no call in between: rank 1 still holds iteration 0's data


def test_validation_catches_data_a_call_did_not_deliver():
    with pytest.raises(RankFailure, match="copy broadcast of 64 B, iteration 1: element 0 holds"):
        run_local(2, _stale_broadcast, slot_bytes=256, timeout_s=20)


def _rows(comm):
    plan = BenchPlan(sizes=(64, 4096), iterations=5, warmup=1, validate=True, collective="alltoall")
    return run_plan(comm, plan)


def test_run_plan_rows_are_the_same_on_every_rank():
    rows = run_local(3, _rows, slot_bytes=3 * 4096, timeout_s=30)
    assert rows[0] == rows[1] == rows[2] and [r["size_bytes"] for r in rows[0]] == [64, 4096]
    assert all(np.isfinite(r["avg_us"]) and r["avg_us"] > 0 for r in rows[0])


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpiexec") is None and not os.path.exists(
    os.path.join(os.path.dirname(sys.executable), "mpiexec")), reason="no mpiexec (install cxlsim[mpi])")
def test_the_mpi_baseline_adds_a_ratio_column_and_the_mpi_table():
    out = cxlsim("bench", "allreduce", "--np", "2", "--baseline", "mpi", "--sizes", "4,4KiB", "--iterations", "10",
                 "--warmup", "1", "--repeat", "1", "--validate", timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout
    pool, mpi = parse_osu(out.stdout)
    assert "MPI/pool" in pool.columns and all(v > 0 for v in pool.column("MPI/pool"))
    assert mpi.title.startswith("MPI_Allreduce through mpi4py") and mpi.sizes == [4, 4096]


def test_the_allreduce_threshold_is_an_option_and_the_header_says_it():
    out = cxlsim("bench", "allreduce", "--np", "2", "--sizes", "4KiB", "--iterations", "5", "--warmup", "1",
                 "--repeat", "1", "--validate", "--allreduce-large", "2KiB")
    assert out.returncode == 0, out.stderr
    assert "# large algorithm (reduce-scatter + allgather) from 2 KiB per chunk" in out.stdout


def _steps_per_allreduce(comm, count):
    before = comm.epoch
    comm.allreduce(np.ones(count, np.float64), np.empty(count), "sum")
    return comm.epoch - before


@pytest.mark.parametrize("large, steps", [(0, 2), (1 << 20, 1)])
def test_the_communicators_threshold_picks_the_algorithm(large, steps):
    out = run_local(2, _steps_per_allreduce, (512,), slot_bytes=8192, allreduce_large_bytes=large, timeout_s=20)
    assert out == [steps, steps]  # the large algorithm is two steps (reduce-scatter, then allgather), the small one


def _spoiled_read_side(comm, collective, name, spoil):
    """A validated side whose result is spoiled before its check: 'stale' runs the check of iteration 1 after
    iteration 0's call, 'swapped' swaps the two received blocks (same checksum, blocks misplaced)."""
    n = 64
    side = (AllgatherSide(name, comm, None, n, True) if collective == "allgather" else
            CollectiveSide(collective, name, comm, None, n, True))
    side.before(0)
    side.op()
    if spoil == "swapped":
        side.recv[:] = np.roll(side.recv, n)
        side.after(0)
    else:
        side.after(0)
        side.before(1)
        side.after(1)


@pytest.mark.parametrize("collective, name, spoil, message", [
    ("allgather", "copy-read", "stale", "copy-read allgather of 64 B, iteration 1: block 0 holds"),
    ("allgather", "copy-read", "swapped", "copy-read allgather of 64 B, iteration 0: block 0 holds"),
    ("allgather", "zero-copy", "stale", "zero-copy allgather of 64 B, iteration 1: block 0 holds"),
    ("alltoall", "copy-read", "stale", "copy-read alltoall of 64 B, iteration 1: element 0 holds"),
    ("alltoall", "copy-read", "swapped", "copy-read alltoall of 64 B, iteration 0: element 0 holds"),
    ("broadcast", "copy-read", "stale", "copy-read broadcast of 64 B, iteration 1: element 0 holds")])
def test_the_read_pass_check_catches_stale_and_misplaced_blocks(collective, name, spoil, message):
    """The copy-read and zero-copy sides are checked from their read pass's checksum and each block's ends
    (bench_collectives.read_pass_holds); a wrong result still gets the full comparison's message."""
    with pytest.raises(RankFailure, match=message):
        run_local(2, _spoiled_read_side, (collective, name, spoil), slot_bytes=256, timeout_s=20)


def test_read_pass_holds_needs_the_checksum_and_each_blocks_ends():
    blocks = np.array([[3] * 8, [5] * 8], np.uint8)
    good = checksum_of_fill(3, 8) + checksum_of_fill(5, 8)
    assert read_pass_holds(good, blocks, [3, 5], 8)
    assert not read_pass_holds(good + 1, blocks, [3, 5], 8)  # torn or stale: the checksum differs
    assert not read_pass_holds(good, blocks[::-1], [3, 5], 8)  # swapped: same checksum, ends differ
