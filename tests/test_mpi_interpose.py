"""libcxlsim_mpi.so under the mpich wheel's mpiexec: every replaced collective against MPICH's own,
the fallbacks, mpi4py's large-count calls, failures that end the job, traces, settings, the build.

The C programs (mpi_interpose_check.c, mpi_interpose_apps.c beside this file) are compiled at
test time with the environment's mpicc. The check program compares each MPI_* call (through the
library) with the PMPI_* call (MPICH itself) on the same data; the stats printed at MPI_Finalize
show which calls ran on the pool.
"""
from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from cxlsim.errors import InputError
from cxlsim.mpi import build as mpibuild
from cxlsim.mpi import leftovers
from cxlsim.mpi.settings import check_environment, environment

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _beside_python(name: str) -> str | None:
    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.access(path, os.X_OK) else shutil.which(name)


MPIEXEC = _beside_python("mpiexec")
MPICC = _beside_python("mpicc")
pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(MPIEXEC is None or MPICC is None, reason="no mpiexec/mpicc (install cxlsim[mpi])")]
COLLECTIVES = ("MPI_Allgather", "MPI_Allreduce", "MPI_Reduce_scatter_block", "MPI_Bcast", "MPI_Alltoall",
               "MPI_Barrier")


@pytest.fixture(scope="module")
def library() -> Path:
    return mpibuild.build()


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("mpi_programs")
    built = {}
    for name in ("mpi_interpose_check", "mpi_interpose_apps"):
        built[name] = out / name
        subprocess.run([MPICC, "-O2", "-Wall", str(HERE / f"{name}.c"), "-o", str(built[name])], check=True,
                       timeout=120)
    return built


def run_mpi(library: Path, np: int, argv: list[str], timeout: float = 120, **settings: str):
    """Run argv under mpiexec -n np with the library preloaded; kill the whole session on a timeout. A failed
    job's MPICH segments are removed, as `cxlsim mpi run` removes them (cxlsim/mpi/leftovers.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CXLSIM_MPI_")}
    env.update(settings)
    env["LD_PRELOAD"] = str(library)
    before = leftovers.segments()
    proc = subprocess.Popen([MPIEXEC, "-n", str(np), *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and its ranks: the session this test started
        proc.communicate()
        leftovers.remove_left_by_job(before)
        raise
    if proc.returncode != 0:
        leftovers.remove_left_by_job(before)
    return proc.returncode, out, err


class Took(NamedTuple):
    """One row of a rank's call durations (rank<r>.durations.tsv, docs/mpi.md)."""

    line: int
    start_ns: int
    duration_ns: int
    path: str
    setup: bool
    gap_cpu_ns: int
    """-1 where the tracer read no CPU clock (the node's ranks had a CPU each)."""

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


def read_durations(rank_file: Path) -> dict[int, Took]:
    """The rows of the durations file beside rank_file (replay reads them with cxlsim.replay.call_times), by line."""
    rows = (rank_file.parent / (rank_file.stem + ".durations.tsv")).read_text().splitlines()
    assert rows[0].split("\t") == ["line", "start_ns", "duration_ns", "path", "setup", "gap_cpu_ns"], rows[0]
    out = {}
    for row in rows[1:]:
        line, start, duration, path, setup, gap_cpu = row.split("\t")
        assert int(line) not in out and int(duration) >= 0 and setup in ("0", "1") and int(gap_cpu) >= -1, row
        out[int(line)] = Took(int(line), int(start), int(duration), path, setup == "1", int(gap_cpu))
    return out


def parse_stats(text: str) -> dict[str, dict]:
    """The stats table printed at MPI_Finalize: collective -> its counters and fallback reasons."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^(MPI_\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*(.*)$", line)
        if m and m.group(1) in COLLECTIVES:
            reasons = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", m.group(8)))
            rows[m.group(1)] = dict(calls=int(m.group(2)), c_calls=int(m.group(3)), bytes=int(m.group(4)),
                                    pool=int(m.group(5)), hier=int(m.group(6)), fallback=int(m.group(7)),
                                    reasons=reasons)
    return rows


def cxlsim_segments() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("cxlsim-")}
    except OSError:
        return set()


def leaked(before: set[str]) -> list[str]:
    """Segments that appeared since `before` and whose owner process is gone."""
    out = []
    for name in cxlsim_segments() - before:
        pid = int(name.split("-")[1])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            out.append(name)
        except PermissionError:
            pass
    return out


# np, coherence, slot bytes, allreduce large-algorithm threshold, quick: small slots make calls
# go through in chunks, a small threshold takes reduce-scatter + allgather.
CASES = [
    pytest.param(1, "hw", 1 << 20, 65536, False, id="np1-hw"),
    pytest.param(2, "hw", 1 << 20, 65536, False, id="np2-hw"),
    pytest.param(2, "flush", 1024, 256, True, id="np2-flush-chunked-large"),
    pytest.param(2, "hw", 64, 65536, True, id="np2-hw-64B-chunks-through-the-inline-area"),
    pytest.param(3, "hw", 4096, 1024, True, id="np3-hw-chunked", marks=pytest.mark.slow),
    pytest.param(4, "flush", 1 << 20, 0, True, id="np4-flush-large", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("np, coherence, slot, large, quick", CASES)
def test_collectives_match_mpich(library, programs, np, coherence, slot, large, quick):
    before = cxlsim_segments()
    rc, out, err = run_mpi(library, np, [str(programs["mpi_interpose_check"])] + (["quick"] if quick else []),
                           CXLSIM_MPI_STATS="1", CXLSIM_MPI_COHERENCE=coherence, CXLSIM_MPI_SLOT=str(slot),
                           CXLSIM_MPI_ALLREDUCE_LARGE=str(large))
    assert rc == 0, err
    checks, failures = map(int, re.search(r"checks (\d+) failures (\d+)", out).groups())
    assert failures == 0 and checks > 500, out + err
    stats = parse_stats(err)
    assert set(stats) == set(COLLECTIVES), err
    assert f"coherence {coherence}, slot {slot} B" in err
    for name, row in stats.items():
        assert row["pool"] > 0 and row["hier"] == 0, (name, row)
        assert row["pool"] + row["fallback"] == row["calls"] and row["c_calls"] == 0
    # the only fallbacks: types with two basic types (MPI_2INT and a struct) and a user-defined op
    nsizes = 3 if quick else 11
    assert stats["MPI_Allgather"]["reasons"] == {"datatype": np * (2 * 2 * nsizes + 1)}
    assert stats["MPI_Allreduce"]["reasons"] == {"op": np}
    assert set(stats["MPI_Bcast"]["reasons"]) == {"datatype"} == set(stats["MPI_Alltoall"]["reasons"])
    assert stats["MPI_Reduce_scatter_block"]["fallback"] == 0 == stats["MPI_Barrier"]["fallback"]
    assert not leaked(before)


HAS_NODE0 = os.path.isdir("/sys/devices/system/node/node0")


@pytest.mark.parametrize("backend", ["file", pytest.param("numa:0", marks=pytest.mark.skipif(
    not HAS_NODE0, reason="no NUMA node 0")), "dax"])
def test_pool_backends(library, programs, tmp_path, backend):
    """file: creates and removes its file; numa:0 binds the pages; dax: on an ordinary file is refused
    at set-up, every rank says why and every call falls back (reason setup), still right."""
    path = tmp_path / "pool.bin"
    if backend == "dax":
        path.write_bytes(b"")
    spec = f"{backend}:{path}" if backend in ("file", "dax") else backend
    rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_check"]), "quick"], CXLSIM_MPI_POOL=spec,
                           CXLSIM_MPI_STATS="1")
    assert rc == 0 and re.search(r"checks \d+ failures 0", out), out + err
    stats = parse_stats(err)
    if backend == "dax":
        assert "the file is not on a filesystem mounted with 'dax'" in err
        assert all(stats[name]["pool"] == 0 and stats[name]["reasons"].get("setup", 0) > 0 for name in COLLECTIVES)
    else:
        assert all(stats[name]["pool"] > 0 for name in COLLECTIVES)
        assert not path.exists()  # the library created it, so it removed it once both ranks were in
        assert not list(tmp_path.glob("pool.bin.*"))  # nor a file beside it that a second communicator took


@pytest.mark.parametrize("np, coherence", [(3, "hw"), (2, "hw"), pytest.param(3, "flush", marks=pytest.mark.slow)])
def test_back_to_back_mixed_collectives_with_late_ranks(library, programs, np, coherence):
    """400 collectives of every kind, no barrier between them, random delays per rank, small slots:
    catches a rank writing a buffer another rank still reads (a broken reuse wait fails it at np 3);
    at np 2 the small allreduces above the inline limit take the prefetching wait."""
    rc, out, err = run_mpi(library, np, [str(programs["mpi_interpose_apps"]), "stress"], CXLSIM_MPI_SLOT="8192",
                           CXLSIM_MPI_COHERENCE=coherence, CXLSIM_MPI_STATS="1")
    assert rc == 0 and "stress wrong elements 0" in out, out + err
    stats = parse_stats(err)
    assert all(stats[name]["fallback"] == 0 for name in COLLECTIVES if name != "MPI_Barrier")


@pytest.mark.parametrize("np", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_fake_nodes_take_the_hierarchical_path(library, programs, np, tmp_path):
    """CXLSIM_MPI_FAKE_NODES=2: rank r on node r % 2 (not contiguous); allgather and allreduce run
    pool-in-node + PMPI-between-leaders, the rest falls back with reason node; the trace's durations
    name each call's path as the stats count it."""
    rc, out, err = run_mpi(library, np, [str(programs["mpi_interpose_check"]), "quick"], CXLSIM_MPI_STATS="1",
                           CXLSIM_MPI_FAKE_NODES="2", CXLSIM_MPI_ALLREDUCE_LARGE="1024", CXLSIM_MPI_SLOT="4096",
                           CXLSIM_MPI_TRACE=str(tmp_path / "trace"))
    assert rc == 0, err
    assert re.search(r"checks \d+ failures 0", out), out + err
    stats = parse_stats(err)
    for name in ("MPI_Allgather", "MPI_Allreduce"):
        # every call but those of a one-rank split communicator (np 3: rank 1 alone), which is flat
        assert 0 < stats[name]["hier"] <= stats[name]["pool"], stats[name]
        assert stats[name]["hier"] == stats[name]["pool"] or np % 2, stats[name]
        assert set(stats[name]["reasons"]) <= {"datatype", "op"}
    for name in ("MPI_Bcast", "MPI_Alltoall", "MPI_Reduce_scatter_block", "MPI_Barrier"):
        assert stats[name]["hier"] == 0 and stats[name]["reasons"].get("node", 0) > 0, stats[name]
    assert_durations_agree_with_stats(tmp_path / "trace", np, stats)


def shared_file(path: Path, mib: int = 64) -> Path:
    """A shared pool's memory: a sparse file that exists before the job (the library never creates or grows it)."""
    with open(path, "wb") as f:
        f.truncate(mib << 20)
    return path


def fill_with_epochs(path: Path, value: int) -> None:
    """Write `value` into every 8-byte word of the pool's memory: header, flags, data and the inline area's epoch
    words. A job whose epochs start at 0 would take every line of the inline area for an arrival (value >= its
    first epochs) and fold the stale payload."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.write(struct.pack("<Q", value) * (size // 8))


@pytest.mark.parametrize("np, coherence", [(2, "flush"), (3, "hw"), pytest.param(4, "hw", marks=pytest.mark.slow)])
def test_shared_pool_takes_the_pool_path_across_fake_nodes(library, programs, np, coherence, tmp_path):
    """CXLSIM_MPI_POOL_SHARED=1 on one file: every node's ranks map: the communicator that spans the fake nodes runs
    every collective on the pool (not hierarchical, no reason "node"), with right answers; the file stays."""
    memory = shared_file(tmp_path / "cxl_memory")
    before = cxlsim_segments()
    rc, out, err = run_mpi(library, np, [str(programs["mpi_interpose_check"]), "quick"], CXLSIM_MPI_STATS="1",
                           CXLSIM_MPI_FAKE_NODES="2", CXLSIM_MPI_POOL=f"file:{memory}", CXLSIM_MPI_POOL_SHARED="1",
                           CXLSIM_MPI_ALLREDUCE_LARGE="1024", CXLSIM_MPI_SLOT="4096", CXLSIM_MPI_COHERENCE=coherence)
    assert rc == 0 and re.search(r"checks \d+ failures 0", out), out + err
    stats = parse_stats(err)
    assert set(stats) == set(COLLECTIVES) and f"pool file:{memory} (shared), coherence {coherence}" in err, err
    for name, row in stats.items():
        assert row["pool"] > 0 and row["hier"] == 0, (name, row)
        assert set(row["reasons"]) <= {"datatype", "op"}, (name, row)
    assert memory.stat().st_size == 64 << 20 and not leaked(before)


@pytest.mark.parametrize("shared", ["1", "0"])
def test_pool_memory_left_by_an_earlier_job_is_never_taken_for_an_arrival(library, programs, tmp_path, shared):
    """DAX memory outlives a job: a second job on the same memory, then a third after every word of it was set to
    an epoch a job starting at 0 would wait for, give right answers (the epochs start from the job nonce). Without
    the nonce the third job's small allreduces fold the stale inline lines (the pool's creator clears the flags, not
    the inline area): 2 wrong checks at np 2 (an existing file: pool, before the nonce)."""
    memory = shared_file(tmp_path / "cxl_memory")
    settings = dict(CXLSIM_MPI_STATS="1", CXLSIM_MPI_POOL=f"file:{memory}", CXLSIM_MPI_POOL_SHARED=shared,
                    CXLSIM_MPI_COHERENCE="hw")
    if shared == "1":
        settings["CXLSIM_MPI_FAKE_NODES"] = "2"
    for job in ("first", "second", "stale"):
        if job == "stale":
            fill_with_epochs(memory, 1000)
        rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_check"]), "quick"], **settings)
        assert rc == 0 and re.search(r"checks \d+ failures 0", out), (job, out + err)
        stats = parse_stats(err)
        assert all(stats[name]["pool"] > 0 and stats[name]["hier"] == 0 for name in COLLECTIVES), (job, err)


def test_shared_pool_on_different_memory_falls_back_on_every_rank(library, programs, tmp_path):
    """Each fake node names its own file (as each host names its own device): the ranks see no common header and
    nonce, so the communicator that spans them falls back on every rank, reason unshared, with right answers and
    no hang; the split communicators (one node each: ranks 0, 2 and 1, 3) still run on their pools."""
    check = str(programs["mpi_interpose_check"])
    blocks = []
    for r in range(4):
        memory = shared_file(tmp_path / f"node{r % 2}")
        blocks += ([":"] if r else []) + (["-n", "1"] if r else []) + ["-env", "CXLSIM_MPI_POOL", f"file:{memory}",
                                                                        check, "quick"]
    rc, out, err = run_mpi(library, 1, blocks, timeout=90, CXLSIM_MPI_STATS="1", CXLSIM_MPI_FAKE_NODES="2",
                           CXLSIM_MPI_POOL_SHARED="1")
    assert rc == 0 and re.search(r"checks \d+ failures 0", out), out + err
    assert err.count("the ranks do not map the same memory") == 2, err  # said by the ranks of node 1
    stats = parse_stats(err)
    for name, row in stats.items():
        unshared = row["reasons"].get("unshared", 0)
        assert unshared > 0 and unshared % 4 == 0 and row["pool"] > 0 and row["hier"] == 0, (name, row)
        assert set(row["reasons"]) <= {"datatype", "op", "unshared"}, (name, row)


def test_shared_pool_too_small_for_the_world_falls_back_naming_the_arena(library, programs, tmp_path):
    """World rank 0's arena is the first half of the memory: 4 MiB leaves 2 MiB, short of the 2-rank world pool's
    2.1 MB region (512 KiB slots), so that communicator falls back on both ranks (reason setup), while the split
    communicators' one-rank regions (1.06 MB) fit the arenas of world ranks 0 and 1."""
    memory = shared_file(tmp_path / "cxl_memory", 4)
    rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_check"]), "quick"], CXLSIM_MPI_STATS="1",
                           CXLSIM_MPI_POOL=f"file:{memory}", CXLSIM_MPI_POOL_SHARED="1", CXLSIM_MPI_SLOT="524288")
    assert rc == 0 and re.search(r"checks \d+ failures 0", out), out + err
    assert "world rank 0's arena (2097152 of the memory's 4194304 bytes, 2 world ranks) has no room for a " in err
    stats = parse_stats(err)
    for name, row in stats.items():
        assert row["reasons"].get("setup", 0) > 0 and row["pool"] > 0, (name, row)


def test_shared_pool_regions_of_freed_communicators_are_reused(library, programs, tmp_path):
    """World rank 0's arena (64 KiB of 128: 4 KiB slots, 28 KiB regions at np 2) holds the world's pool and one
    more: 20 communicators split, used and freed in turn each take the region the last one gave back."""
    memory = tmp_path / "cxl_memory"
    with open(memory, "wb") as f:
        f.truncate(128 << 10)
    rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_apps"]), "comms"], CXLSIM_MPI_STATS="1",
                           CXLSIM_MPI_POOL=f"file:{memory}", CXLSIM_MPI_POOL_SHARED="1", CXLSIM_MPI_SLOT="4096")
    assert rc == 0 and "comms wrong 0" in out, out + err
    assert parse_stats(err)["MPI_Allreduce"]["pool"] == 2 * 21, err


def test_shared_pool_needs_file_or_dax_memory(library, programs):
    rc, out, err = run_mpi(library, 1, [str(programs["mpi_interpose_apps"]), "trace"], CXLSIM_MPI_POOL_SHARED="1")
    assert rc != 0 and "CXLSIM_MPI_POOL: expected 'file:PATH' or 'dax:PATH' with CXLSIM_MPI_POOL_SHARED=1" in err
    with pytest.raises(InputError, match="CXLSIM_MPI_POOL: expected 'file:PATH' or 'dax:PATH'"):
        check_environment({"CXLSIM_MPI_POOL_SHARED": "1", "CXLSIM_MPI_POOL": "numa:0"})
    check_environment({"CXLSIM_MPI_POOL_SHARED": "1", "CXLSIM_MPI_POOL": "file:/x"})
    assert environment(pool="file:/x", pool_shared=True)["CXLSIM_MPI_POOL_SHARED"] == "1"
    with pytest.raises(InputError, match="CXLSIM_MPI_POOL: expected 'file:PATH' or 'dax:PATH'"):
        check_environment(environment(pool_shared=True))  # (the pool may come from the caller's environment)


MPI4PY_SCRIPT = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    r, P = comm.rank, comm.size
    a = np.arange(5, dtype=np.float64) + r
    out = np.empty(5 * P)
    comm.Allgather(a, out)
    assert (out.reshape(P, 5) == np.arange(5) + np.arange(P)[:, None]).all()
    s = np.empty(5)
    comm.Allreduce(a, s, op=MPI.SUM)
    assert (s == P * np.arange(5) + P * (P - 1) / 2).all()
    i = np.array([r, -r, 7], dtype=np.int32)
    comm.Allreduce(MPI.IN_PLACE, i, op=MPI.MAX)
    assert list(i) == [P - 1, 0, 7]
    b = np.arange(7, dtype=np.int64) if r == 0 else np.zeros(7, dtype=np.int64)
    comm.Bcast(b, root=0)
    assert (b == np.arange(7)).all()
    x = np.arange(3 * P, dtype=np.int32) + 100 * r
    y = np.empty_like(x)
    comm.Alltoall(x, y)
    assert (y.reshape(P, 3) == 100 * np.arange(P)[:, None] + np.arange(3 * r, 3 * r + 3)).all()
    z = np.empty(3, dtype=np.float32)
    comm.Reduce_scatter_block(np.full(3 * P, r + 1, dtype=np.float32), z, op=MPI.SUM)
    assert (z == P * (P + 1) / 2).all()
    comm.Barrier()
    print("mpi4py ok", r, flush=True)
""")


def test_mpi4py_buffer_api_runs_on_the_pool(library, tmp_path):
    script = tmp_path / "app.py"
    script.write_text(MPI4PY_SCRIPT)
    rc, out, err = run_mpi(library, 2, [sys.executable, str(script)], CXLSIM_MPI_STATS="1")
    assert rc == 0, err
    assert out.count("mpi4py ok") == 2  # (the two ranks' lines may interleave)
    stats = parse_stats(err)
    for name in COLLECTIVES:
        row = stats[name]
        assert row["pool"] == row["calls"] >= 2, (name, row)
        if name != "MPI_Barrier":
            assert row["c_calls"] == row["calls"], (name, row)  # mpi4py 4 calls the _c forms


THREADS_SCRIPT = textwrap.dedent("""
    import threading
    import numpy as np
    from mpi4py import MPI

    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE
    comms = [MPI.COMM_WORLD.Dup() for _ in range(2)]
    P, errors = MPI.COMM_WORLD.size, []

    def work(k):
        comm = comms[k]
        for i in range(300):
            a = np.full(33, comm.rank + i + k, dtype=np.int64)
            out = np.empty_like(a)
            comm.Allreduce(a, out, op=MPI.SUM)
            if not (out == P * (i + k) + P * (P - 1) // 2).all():
                errors.append((k, i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    print("threads ok", flush=True)
""")


def test_threads_on_two_communicators_run_at_once_on_their_pools(library, tmp_path):
    script = tmp_path / "threads.py"
    script.write_text(THREADS_SCRIPT)
    rc, out, err = run_mpi(library, 2, [sys.executable, str(script)], CXLSIM_MPI_STATS="1")
    assert rc == 0, err
    assert out.count("threads ok") == 2
    row = parse_stats(err)["MPI_Allreduce"]
    assert row["calls"] == 2 * 2 * 300 and row["pool"] == row["calls"], row  # each dup has its own pool


@pytest.mark.slow
def test_killed_rank_fails_the_job_and_leaves_no_segment(library, programs):
    before = cxlsim_segments()
    t0 = time.monotonic()
    rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_apps"]), "kill"], timeout=90,
                           CXLSIM_MPI_TIMEOUT="20")
    assert rc != 0
    assert time.monotonic() - t0 < 80
    assert not leaked(before)


def test_timeout_aborts_naming_the_missing_rank(library, programs):
    rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_apps"]), "late", "6"], timeout=90,
                           CXLSIM_MPI_TIMEOUT="1")
    assert rc != 0
    assert "cxlsim-mpi: MPI_Allreduce timed out: rank 0 (world 0)" in err, err
    assert "for rank 1 (world 1)" in err, err


def test_trace_is_simgrid_time_independent_and_replay_reads_it(library, programs, tmp_path):
    from cxlsim.replay.simgrid import read

    directory = tmp_path / "trace"
    rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_apps"]), "trace"], CXLSIM_MPI_TRACE=str(directory))
    assert rc == 0, err
    for rank in (0, 1):
        lines = (directory / f"rank{rank}.txt").read_text().splitlines()
        assert all(line.startswith(f"{rank} ") for line in lines)
        actions = [line.split(" ", 1)[1] for line in lines if line.split()[1] != "compute"]
        peer = 1 - rank
        p2p = ["send 1 0 64"] if rank == 0 else ["recv 0 0 64"]
        waits = [f"wait {rank} {peer} 1", f"wait {peer} {rank} 1"]  # the isend's request, then the irecv's
        assert actions == ["init", *p2p, f"isend {peer} 1 32", f"irecv {peer} 1 32", *waits,
                           f"sendRecv 16 {peer} 16 {peer}", "allreduce 64 0", "bcast 64 0", "barrier", "finalize"]
        computes = [float(line.split()[2]) for line in lines if line.split()[1] == "compute"]
        assert max(computes) > 100_000  # the 2e6-iteration loop before the allreduce: ns = flops at 1 Gf/s
    trace = read(str(directory))  # cxlsim replay's reader: SimGrid 3.32 format, the sidecar's host speed
    kinds = [[c.kind for c in calls if c.kind != "compute"] for calls in trace.ranks]
    assert kinds[0] == ["send", "isend", "irecv", "wait", "wait", "sendrecv", "allreduce", "bcast", "barrier"]
    assert kinds[1][0] == "recv" and kinds[1][1:] == kinds[0][1:]
    assert [c.size_bytes for c in trace.ranks[0] if c.kind == "allreduce"] == [64]
    # the stats beside the trace, without CXLSIM_MPI_STATS: the file only, nothing on stderr
    assert "cxlsim-mpi stats" not in err
    stats = parse_stats((directory / "cxlsim_mpi_stats.txt").read_text())
    assert stats["MPI_Allreduce"]["pool"] == stats["MPI_Allreduce"]["calls"] == 2
    assert stats["MPI_Bcast"]["pool"] == 2 and stats["MPI_Barrier"]["pool"] == 2


def test_trace_durations_give_every_call_its_time_on_one_clock(library, programs, tmp_path):
    """rank<r>.durations.tsv: one row per action line a call wrote (not init, not compute), in order; a
    call's lines share its time (the Waitall's two waits); calls do not overlap on a rank and the compute
    line between two calls fits in the gap between them; the path and the pool set-up are the call's;
    and on the ranks' common clock no rank leaves a collective before every rank it needs has entered it
    (rank 1 sleeps 20 ms before the barrier, so rank 0's barrier lasts until rank 1 arrives)."""
    directory = tmp_path / "trace"
    rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_apps"]), "trace"], CXLSIM_MPI_TRACE=str(directory))
    assert rc == 0, err
    calls = {}
    for rank in (0, 1):
        rank_file = directory / f"rank{rank}.txt"
        lines = rank_file.read_text().splitlines()
        times = read_durations(rank_file)
        assert sorted(times) == [n for n, line in enumerate(lines, start=1) if line.split()[1] not in ("init",
                                                                                                    "compute")]
        kinds = {lines[n - 1].split()[1]: t for n, t in times.items()}
        assert [times[n].path for n in sorted(times)] == ["mpi"] * 6 + ["pool"] * 3 + ["mpi"]
        assert [n for n in sorted(times) if times[n].setup] == [min(n for n in times if times[n].path == "pool")]
        waits = [t for n, t in sorted(times.items()) if lines[n - 1].split()[1] == "wait"]
        assert len(waits) == 2 and waits[0][1:] == waits[1][1:]  # one Waitall: one start, one duration
        starts = sorted({t.start_ns: t for t in times.values()}.values(), key=lambda t: t.start_ns)
        for before, after in zip(starts, starts[1:]):
            assert before.end_ns <= after.start_ns
            gap = [line for line in lines[before.line:after.line - 1] if line.split()[1] == "compute"]
            assert sum(float(line.split()[2]) for line in gap) <= after.start_ns - before.end_ns
        calls[rank] = kinds
    for kind in ("allreduce", "barrier"):  # every rank's data or arrival is needed
        assert min(calls[r][kind].end_ns for r in (0, 1)) >= max(calls[r][kind].start_ns for r in (0, 1)), kind
    assert calls[1]["bcast"].end_ns >= calls[0]["bcast"].start_ns  # the root's data
    assert calls[1]["barrier"].start_ns >= calls[1]["bcast"].end_ns + 20_000_000
    assert calls[0]["barrier"].end_ns >= calls[1]["barrier"].start_ns
    # cxlsim replay reads the trace and its durations: the Waitall's two wait lines are one call
    from cxlsim.replay.call_times import read_durations as replay_durations
    from cxlsim.replay.simgrid import read

    timed = replay_durations(read(str(directory)))
    assert [len(t.lines) for t in timed[0] if t.kind == "wait"] == [2]


def test_a_trace_longer_than_the_record_arena_keeps_every_line_in_order(library, programs, tmp_path):
    """80,000 calls a rank (5.4 MB of records, past trace.c's 4 MiB arena, so formatted and written once during
    the run and once at MPI_Finalize): every action line is there in the program's order, each durations row
    names its own line, and the calls' starts only grow."""
    directory = tmp_path / "trace"
    rounds = 40_000
    rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_apps"]), "long", str(rounds)],
                           CXLSIM_MPI_TRACE=str(directory))
    assert rc == 0 and "long wrong 0" in out, err
    for rank in (0, 1):
        rank_file = directory / f"rank{rank}.txt"
        lines = rank_file.read_text().splitlines()
        actions = [line.split(" ", 1)[1] for line in lines if line.split()[1] != "compute"]
        assert actions == ["init", *["allreduce 8 0", "bcast 8 0"] * rounds, "finalize"]
        times = read_durations(rank_file)
        assert sorted(times) == [n for n, line in enumerate(lines, start=1) if line.split()[1] not in ("init",
                                                                                                    "compute")]
        starts = [times[n].start_ns for n in sorted(times)]
        assert all(a < b for a, b in zip(starts, starts[1:]))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs: one run with a CPU a rank")
def test_where_ranks_outnumber_the_cpus_compute_is_each_gap_s_cpu_time(library, programs, tmp_path):
    """Both ranks bound to CPU 0: each durations row gives the CPU time of the compute before it, and that is the
    compute line; rank 1's 20 ms usleep before the barrier is wall time but no CPU time. With a CPU each (bound to
    0 and 1) no CPU clock is read: -1, and the compute lines are the wall gaps."""
    for binding, shared in (("user:0,0", True), ("user:0,1", False)):
        directory = tmp_path / binding.replace(":", "-").replace(",", "-")
        rc, out, err = run_mpi(library, 2, ["-bind-to", binding, str(programs["mpi_interpose_apps"]), "trace"],
                               CXLSIM_MPI_TRACE=str(directory))
        assert rc == 0, err
        for rank in (0, 1):
            rank_file = directory / f"rank{rank}.txt"
            lines = rank_file.read_text().splitlines()
            times = read_durations(rank_file)
            computes = {n + 1: float(line.split()[2]) for n, line in enumerate(lines) if line.split()[1] == "compute"}
            ordered = sorted(times)
            calls = ordered[:1] + [n for m, n in zip(ordered, ordered[1:]) if times[n].start_ns != times[m].start_ns]
            for before, after in zip(calls, calls[1:]):  # a call's first line each (a Waitall writes two)
                wall = times[after].start_ns - times[before].end_ns
                compute = sum(computes.get(n, 0.0) for n in range(before + 1, after))
                if shared:
                    assert times[after].gap_cpu_ns == compute <= wall + 1, (binding, rank, after)
                else:
                    assert times[after].gap_cpu_ns == -1 and compute <= wall, (binding, rank, after)
            barrier = next(n for n in ordered if lines[n - 1].split()[1] == "barrier")
            previous = ordered[ordered.index(barrier) - 1]
            slept = times[barrier].start_ns - times[previous].end_ns
            if rank == 1:
                assert slept >= 20_000_000
                assert (times[barrier].gap_cpu_ns < 5_000_000) if shared else computes[barrier - 1] >= 20_000_000


def test_stats_beside_the_trace_are_the_stderr_stats(library, programs, tmp_path):
    """CXLSIM_MPI_TRACE=DIR with CXLSIM_MPI_STATS=1: DIR/cxlsim_mpi_stats.txt holds exactly the table
    printed on stderr (rank 0's, summed over ranks), and no temporary file is left beside it."""
    directory = tmp_path / "trace"
    rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_check"]), "quick"], CXLSIM_MPI_STATS="1",
                           CXLSIM_MPI_TRACE=str(directory))
    assert rc == 0 and re.search(r"checks \d+ failures 0", out), out + err
    text = (directory / "cxlsim_mpi_stats.txt").read_text()
    assert text.startswith("cxlsim-mpi stats: 2 ranks") and text.count("\n") == 2 + len(COLLECTIVES)
    assert text in err
    assert parse_stats(text) == parse_stats(err) and parse_stats(text)["MPI_Allgather"]["pool"] > 0
    assert sorted(p.name for p in directory.iterdir()) == ["cxlsim_mpi_stats.txt", "rank0.durations.tsv", "rank0.txt",
                                                           "rank1.durations.tsv", "rank1.txt", "trace.meta.json"]
    assert_durations_agree_with_stats(directory, 2, parse_stats(text))


def assert_durations_agree_with_stats(directory: Path, nranks: int, stats: dict) -> None:
    """The durations' paths, summed over ranks per collective, are the stats' counts: the calls on the
    pool (flat and hierarchical), those on the many-node path, and each fallback reason."""
    kinds = {"allgather": "MPI_Allgather", "allreduce": "MPI_Allreduce", "reducescatter": "MPI_Reduce_scatter_block",
             "bcast": "MPI_Bcast", "alltoall": "MPI_Alltoall", "barrier": "MPI_Barrier"}
    paths = {name: {} for name in kinds.values()}
    for rank in range(nranks):
        rank_file = directory / f"rank{rank}.txt"
        lines = rank_file.read_text().splitlines()
        for line, took in read_durations(rank_file).items():
            kind = lines[line - 1].split()[1]
            if kind in kinds:
                paths[kinds[kind]][took.path] = paths[kinds[kind]].get(took.path, 0) + 1
    for name, counts in paths.items():
        row = stats[name]
        assert counts.get("pool", 0) + counts.get("hier", 0) == row["pool"], (name, counts, row)
        assert counts.get("hier", 0) == row["hier"] and sum(counts.values()) == row["calls"], (name, counts, row)
        assert {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("fallback:")} == row["reasons"], \
            (name, counts, row)


PROBE_LOG = re.compile(r"cxlsim-mpi\[0\]: pool placement probe: flag round trip (\d+) ns, (fast|slow|disturbed)")
ANY_PROBE_LOG = re.compile(r"cxlsim-mpi\[\d+\]: pool placement probe: flag round trip \d+ ns, (fast|slow|disturbed)")
PLACEMENT = re.compile(r"^cxlsim-mpi stats: .*, allreduce large \d+ B, placement (.*)$", re.M)


@pytest.mark.parametrize("np, coherence", [(2, "hw"), (2, "flush"), (1, "hw"), (3, "hw"), (4, "hw")])
def test_stats_header_ends_with_the_probed_placement(library, programs, np, coherence):
    """The header's last part is the placement the pool set-up's probe found: its class and round trip as
    the probe logged them (CXLSIM_MPI_VERBOSE=2, rank 0's first probe; "mixed" if the probes disagree), or
    "not probed" where no pool probes (flush mode, one rank). At np 3-4 ranks 0 and 1 probe, and the
    result passes (the probe moved every rank's epoch alike)."""
    rc, out, err = run_mpi(library, np, [str(programs["mpi_interpose_check"]), "quick"], CXLSIM_MPI_STATS="1",
                           CXLSIM_MPI_VERBOSE="2", CXLSIM_MPI_COHERENCE=coherence)
    assert rc == 0 and re.search(r"checks \d+ failures 0", out), out + err
    got = PLACEMENT.findall(err)
    assert len(got) == 1, err
    probes = PROBE_LOG.findall(err)
    if np == 1 or coherence != "hw":
        assert probes == [] and got == ["not probed"], err
        return
    assert probes, err
    if np > 2:
        assert "(ranks 0 and 1)" in err and "(np > 2: the fast placement's, whatever the probe)" in err, err
    first_ns, first_class = probes[0]
    classes = set(ANY_PROBE_LOG.findall(err))  # at np > 2 a sub-communicator without world rank 0 probes too
    expected = first_class if len(classes) == 1 else "mixed"
    assert got[0].startswith(f"{expected} (flag round trip {first_ns} ns"), (got, probes)
    if expected != "mixed":
        assert got[0] == f"{expected} (flag round trip {first_ns} ns)"


def test_trace_writes_reduce_gather_and_scatter_alike_on_every_rank_and_ssend_as_send(library, programs, tmp_path):
    from cxlsim.replay import engine, fabrics
    from cxlsim.replay.simgrid import read

    directory = tmp_path / "trace"
    rc, out, err = run_mpi(library, 3, [str(programs["mpi_interpose_apps"]), "rooted"], CXLSIM_MPI_TRACE=str(directory))
    assert rc == 0, err  # the results were right
    for rank in range(3):
        lines = (directory / f"rank{rank}.txt").read_text().splitlines()
        actions = [line.split(" ", 1)[1] for line in lines if line.split()[1] != "compute"]
        # 3 longs = 24 B; the in-place gather root writes its recvcount's block, as the others their sendcount's
        sends = {0: ["send 1 5 8", "isend 1 6 8", "wait 0 1 6"], 1: ["recv 0 5 8", "recv 0 6 8"], 2: []}[rank]
        assert actions == ["init", "reduce 24 0 1", "gather 24 24 1", "scatter 24 24 1", *sends, "finalize"]
    trace = read(str(directory))
    assert [(c.kind, c.size_bytes, c.root) for c in trace.ranks[2] if c.kind != "compute"] == \
        [(k, 24, 1) for k in ("reduce", "gather", "scatter")]
    assert engine.replay(trace, fabrics.resolve("ib-hdr", 3).make()).total_ns > 0


def test_trace_writes_a_wait_per_request_that_waitany_waitsome_and_tests_complete(library, programs, tmp_path):
    from cxlsim.replay.simgrid import read

    directory = tmp_path / "trace"
    rc, out, err = run_mpi(library, 2, [str(programs["mpi_interpose_apps"]), "complete"],
                           CXLSIM_MPI_TRACE=str(directory))
    assert rc == 0, err
    lines = (directory / "rank1.txt").read_text().splitlines()
    actions = [line.split(" ", 1)[1] for line in lines if line.split()[1] != "compute"]
    expected = ["init"]
    for round_ in range(6):
        tag = 10 + 2 * round_
        expected += [f"irecv 0 {tag} 16", f"irecv 0 {tag + 1} 8", "barrier"]
        expected += sorted([f"wait 0 1 {tag}", f"wait 0 1 {tag + 1}"])  # each completed request once
    expected.append("finalize")
    # Waitany, Waitsome, Testany and Testsome may complete the two in either order
    assert [a if not a.startswith("wait") else "wait" for a in actions] == \
        [a if not a.startswith("wait") else "wait" for a in expected]
    for round_ in range(6):
        tag = 10 + 2 * round_
        assert sum(a in (f"wait 0 1 {tag}", f"wait 0 1 {tag + 1}") for a in actions) == 2
    # a test that completes nothing writes no line: never two compute lines in a row
    kinds = [line.split()[1] for line in lines]
    assert not any(a == b == "compute" for a, b in zip(kinds, kinds[1:]))
    trace = read(str(directory))
    assert [c.kind for c in trace.ranks[1]].count("wait") == 12
    from cxlsim.replay import engine, fabrics
    timeline = engine.replay(trace, fabrics.resolve("ib-hdr", 2).make())
    assert timeline.total_ns > 0


def test_bad_setting_aborts_naming_the_variable(library, programs):
    rc, out, err = run_mpi(library, 1, [str(programs["mpi_interpose_apps"]), "trace"], CXLSIM_MPI_COHERENCE="fast")
    assert rc != 0
    assert "cxlsim-mpi: CXLSIM_MPI_COHERENCE: expected 'hw' or 'flush', got 'fast'" in err
    rc, out, err = run_mpi(library, 1, [str(programs["mpi_interpose_apps"]), "trace"], CXLSIM_MPI_FAKE_NODE="2")
    assert rc != 0 and "CXLSIM_MPI_FAKE_NODE: expected no such setting" in err


def test_settings_from_options_with_units():
    env = environment(pool="shm", coherence="flush", slot="64KiB", allreduce_large="4KiB", pool_latency="250ns",
                      pool_bandwidth="32GB/s", timeout=5, verbose=2, stats=True, trace="t", disable=True, fake_nodes=3)
    assert env["CXLSIM_MPI_SLOT"] == "65536" and env["CXLSIM_MPI_ALLREDUCE_LARGE"] == "4096"
    assert float(env["CXLSIM_MPI_LATENCY_NS"]) == 250.0 and float(env["CXLSIM_MPI_BANDWIDTH"]) == 32.0
    assert env["CXLSIM_MPI_COHERENCE"] == "flush" and env["CXLSIM_MPI_TRACE"] == os.path.abspath("t")
    check_environment(env)
    for kwargs, message in (({"slot": "8"}, "--slot"), ({"slot": "lots"}, "--slot"),
                            ({"pool_latency": "250"}, "--pool-latency"), ({"coherence": "fast"}, "--coherence"),
                            ({"pool": "ram"}, "--pool"), ({"timeout": 0}, "--timeout"),
                            ({"fake_nodes": -1}, "--fake-nodes")):
        with pytest.raises(InputError, match=message):
            environment(**kwargs)
    with pytest.raises(InputError, match="CXLSIM_MPI_POOL: --pool numa:4095: no NUMA node 4095"):
        check_environment({"CXLSIM_MPI_POOL": "numa:4095"})
    with pytest.raises(InputError, match="CXLSIM_MPI_SLOTS: not a setting"):
        check_environment({"CXLSIM_MPI_SLOTS": "4096"})
    with pytest.raises(InputError, match="CXLSIM_MPI_TIMEOUT: expected a number > 0"):
        check_environment({"CXLSIM_MPI_TIMEOUT": "-1"})


def test_cli_run_sets_the_library_and_settings(library, programs):
    cmd = [sys.executable, "-m", "cxlsim", "mpi", "run", "--stats", "--slot", "4KiB", "--",
           MPIEXEC, "-n", "2", str(programs["mpi_interpose_check"]), "quick"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CXLSIM_MPI_")}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    assert "failures 0" in done.stdout and "slot 4096 B" in done.stderr
    built = subprocess.run([sys.executable, "-m", "cxlsim", "mpi", "build"], capture_output=True, text=True,
                           timeout=180)
    assert built.returncode == 0 and built.stdout.strip() == str(library)
    empty = subprocess.run([sys.executable, "-m", "cxlsim", "mpi", "run", "--"], capture_output=True,
                           text=True, timeout=60)
    assert empty.returncode == 2 and "give the command after --" in empty.stderr


def test_build_key_follows_sources_and_mpi(library):
    tools = mpibuild.toolchain()
    files = mpibuild.sources()
    key = mpibuild.build_key(tools, files)
    assert library.parent.name == key
    assert tools.library_version.startswith("MPICH")
    other_mpi = mpibuild.Toolchain(mpicc=tools.mpicc, show=tools.show, library_version=tools.library_version + "x")
    other_flags = mpibuild.Toolchain(mpicc=tools.mpicc, show=tools.show + " -DX", library_version=tools.library_version)
    assert len({key, mpibuild.build_key(other_mpi, files), mpibuild.build_key(other_flags, files)}) == 3
    assert mpibuild.build_key(tools, files[:-1]) != key
    mtime = library.stat().st_mtime_ns
    assert mpibuild.build() == library and library.stat().st_mtime_ns == mtime  # a cache hit compiles nothing


def installed_tree(dest: Path, setup_py: Path = ROOT / "setup.py") -> Path:
    """The files a non-editable install puts in site-packages, from setup.py's own packages,
    package_dir and package_data (setup() is captured, nothing is compiled)."""
    import types
    from unittest import mock

    import setuptools

    captured = {}
    # Cython is a build requirement only (pip's isolated build environment): stand in for it.
    cython, cython_build = types.ModuleType("Cython"), types.ModuleType("Cython.Build")
    cython_build.cythonize = lambda *a, **kw: []
    cython.Build = cython_build
    saved = setuptools.setup, os.getcwd()
    setuptools.setup = lambda **kw: captured.update(kw)
    try:
        os.chdir(ROOT)
        with mock.patch.dict(sys.modules, {"Cython": cython, "Cython.Build": cython_build}):
            runpy.run_path(str(setup_py))
    finally:
        setuptools.setup = saved[0]
        os.chdir(saved[1])
    package_dir, package_data = captured["package_dir"], captured.get("package_data", {})
    for package in captured["packages"]:
        parts = package.split(".")
        k = next(k for k in range(len(parts), -1, -1) if ".".join(parts[:k]) in package_dir or k == 0)
        source = ROOT / package_dir.get(".".join(parts[:k]), "") / Path(*parts[k:])
        target = dest / Path(*parts)
        target.mkdir(parents=True, exist_ok=True)
        for pattern in ["*.py"] + package_data.get(package, []):
            for f in source.glob(pattern):
                (target / f.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, target / f.relative_to(source))
    return dest


def test_non_editable_install_ships_the_sources(tmp_path):
    """setup.py must install cxlsim.mpi with its C files (pip install -e would hide a gap)."""
    tree = installed_tree(tmp_path / "site")
    shipped = sorted(p.name for p in (tree / "cxlsim" / "mpi").glob("*.[ch]"))
    assert "collectives.c" in shipped and "cxlsim_mpi.h" in shipped and (tree / "cxlsim/emulator/cxl_coll.h").exists(), (
        "setup.py does not install the library's sources: it needs 'cxlsim.mpi' in packages and "
        "'cxlsim.mpi': ['*.c', '*.h'] in package_data")
    code = ("from cxlsim.mpi import build as b; t = b.toolchain(); "
            "print(b.MPI_DIR); print(b.build_key(t, b.sources()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    where, key = done.stdout.split()
    assert Path(where) == tree / "cxlsim" / "mpi"
    assert key == mpibuild.build_key(mpibuild.toolchain(), mpibuild.sources())  # the same bytes: the same library


def test_mpi_run_error_names_the_command_and_the_option(capsys):
    from cxlsim import cli

    assert cli.main(["mpi", "run", "--pool", "bogus", "--", "true"]) == 2
    assert capsys.readouterr().err.startswith("cxlsim mpi: error: --pool: expected")


LAYOUT_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "cxl_pool.h"
#include "cxl_coll.h"
int main(int argc, char **argv)
{
    cxl_layout_t l;
    char err[256];
    if (cxl_layout_plan((uint32_t)atoi(argv[1]), strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10), &l, err,
                        sizeof err)) return 2;
    printf("%llu %llu %llu %llu %llu %llu %u\n", (unsigned long long)l.slot_stride, (unsigned long long)l.flags_offset,
           (unsigned long long)l.data_offset, (unsigned long long)l.inline_offset, (unsigned long long)l.total_bytes,
           (unsigned long long)(2 * CXL_COLL_LINES_PER_HALF * CXL_LINE), CXL_POOL_INLINE_AREA_BYTES);
    return 0;
}
"""


def test_pool_layout_is_the_same_in_c_and_python(tmp_path):
    """pool.py's SegmentLayout and cxl_pool.h's cxl_layout_plan place every region alike, and the inline
    area holds the line-flag allreduce's two halves per rank (cxl_coll_reduce.h), after the data."""
    from cxlsim.emulator import pool as poolmod
    src = tmp_path / "layout.c"
    src.write_text(LAYOUT_PROGRAM)
    exe = tmp_path / "layout"
    subprocess.run([MPICC, "-O1", "-I", str(ROOT / "cxlsim" / "emulator"), str(src), "-o", str(exe)], check=True,
                   timeout=120)
    for nranks, slot, align in ((1, 0, poolmod.PAGE), (2, 1 << 20, poolmod.PAGE), (5, 65, poolmod.PAGE),
                                (3, 1000, poolmod.DAX_ALIGN)):
        out = subprocess.run([str(exe), str(nranks), str(slot), str(align)], capture_output=True, text=True,
                             check=True).stdout.split()
        stride, flags, data, inline, total, kernel_area, pool_area = map(int, out)
        lay = poolmod.SegmentLayout.plan(nranks, slot, align=align)
        assert (lay.slot_stride, lay.flags_offset, lay.data_offset, lay.inline_offset, lay.total_bytes) == (
            stride, flags, data, inline, total)
        assert kernel_area == pool_area == poolmod.INLINE_AREA_BYTES
        assert lay.inline_offset == lay.data_offset + 2 * nranks * lay.slot_stride
        assert lay.total_bytes >= lay.inline_offset + nranks * poolmod.INLINE_AREA_BYTES


def test_line_flag_allreduce_gives_the_slot_paths_bits_at_the_area_edges():
    """benchmarks/allreduce_split.py folds float32 inputs on every path (np 2, no MPI: the kernel's line-flag
    and slot paths, the candidate protocols) and compares the results bitwise: one line, the first byte of
    a second line, the fifth and the last line, past them, and a size only the candidates' lines hold."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "allreduce_split.py"), "--batches", "1",
                           "--iterations", "20", "--sizes", "4B,56B,60B,280B,284B,560B,564B,4KiB"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if re.match(r"^\s+\d+ [KM]?i?B ", line)]
    sizes = ["4", "56", "60", "280", "284", "560", "564", "4"]
    assert [row.split()[0] for row in rows] == sizes * 2, done.stdout  # the mean table, the per-call table
    assert "RESULTS DIFFER" not in done.stdout, done.stdout


def test_benchmark_placement_rule():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from mpi_interpose import placement_of
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    # the library's own probe rule (pools.c): fast up to 200 ns, slow up to 2000 ns
    assert [placement_of(t) for t in (None, 80.0, 199.9, 200.0, 200.5, 450.0, 2000.0, 2000.5, 2e5)] == [
        "not probed", "fast", "fast", "fast", "slow", "slow", "slow", "disturbed", "disturbed"]


def test_mpi_run_takes_the_allreduce_threshold_from_the_profile_unless_told(tmp_path, capsys):
    """`cxlsim mpi run`: --allreduce-large, else CXLSIM_MPI_ALLREDUCE_LARGE, else CXLSIM_PROFILE's threshold
    (said on stderr with its placement), else nothing (the library's 64 KiB); a bad profile names the variable."""
    from cxlsim.cli import build_parser
    from cxlsim.mpi.cli import run_settings

    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({"emulator": {"allreduce_large_bytes": 1048576,
                                                "allreduce_threshold": {"placement": "fast"}}}))

    def settings(argv, **environ):
        return run_settings(build_parser("mpi").parse_args(["mpi", "run", *argv, "--", "true"]), environ)
    got = settings([], CXLSIM_PROFILE=str(profile))
    assert got["CXLSIM_MPI_ALLREDUCE_LARGE"] == "1048576"
    err = capsys.readouterr().err
    assert f"from 1 MiB use reduce-scatter + allgather (measured in the fast host placement, {profile})" in err
    assert settings(["--allreduce-large", "4KiB"], CXLSIM_PROFILE=str(profile))["CXLSIM_MPI_ALLREDUCE_LARGE"] == "4096"
    assert "CXLSIM_MPI_ALLREDUCE_LARGE" not in settings([], CXLSIM_PROFILE=str(profile),
                                                        CXLSIM_MPI_ALLREDUCE_LARGE="8192")
    assert "CXLSIM_MPI_ALLREDUCE_LARGE" not in settings([])
    capsys.readouterr()
    assert settings(["--verbose", "0"], CXLSIM_PROFILE=str(profile))["CXLSIM_MPI_ALLREDUCE_LARGE"] == "1048576"
    assert capsys.readouterr().err == ""
    with pytest.raises(InputError, match="CXLSIM_PROFILE"):
        settings([], CXLSIM_PROFILE=str(tmp_path / "missing.json"))
