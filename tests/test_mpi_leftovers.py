"""`cxlsim mpi run` removes the shared-memory segments MPICH leaves when a job fails (cxlsim/mpi/leftovers.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cxlsim.mpi import leftovers

HERE = Path(__file__).resolve().parent


def _beside_python(name: str) -> str | None:
    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.access(path, os.X_OK) else shutil.which(name)


MPIEXEC, MPICC = _beside_python("mpiexec"), _beside_python("mpicc")


def test_only_new_unmapped_segments_are_removed(tmp_path):
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    for name in ("mpich_shm_old", "mpich_shm_new", "mpich_shm_used", "other_file"):
        (shm / name).write_bytes(b"x")
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "maps").write_text(
        f"7f00-7f10 rw-s 00000000 00:1a 12 {shm / 'mpich_shm_used'}\n"
        "7f10-7f20 r-xp 00000000 08:01 99 /usr/lib/libc.so.6\n"
        "7f20-7f30 rw-p 00000000 00:00 0 \n")
    assert leftovers.segments(str(shm)) == {"mpich_shm_old", "mpich_shm_new", "mpich_shm_used"}
    assert "mpich_shm_used" in leftovers.mapped_names(str(proc))
    removed = leftovers.remove_left_by_job({"mpich_shm_old"}, directory=str(shm), proc=str(proc))
    assert removed == ["mpich_shm_new"]
    assert sorted(os.listdir(shm)) == ["mpich_shm_old", "mpich_shm_used", "other_file"]


@pytest.mark.mpi
@pytest.mark.skipif(MPIEXEC is None or MPICC is None or not os.path.isdir(leftovers.SHM_DIR),
                    reason="no mpiexec/mpicc (install cxlsim[mpi]) or no /dev/shm")
def test_a_job_that_times_out_leaves_no_mpich_segment_behind(tmp_path):
    app = tmp_path / "apps"
    subprocess.run([MPICC, "-O2", str(HERE / "mpi_interpose_apps.c"), "-o", str(app)], check=True, timeout=120)
    before = leftovers.segments()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CXLSIM_MPI_")}
    done = subprocess.run([sys.executable, "-m", "cxlsim", "mpi", "run", "--timeout", "1", "--",
                           MPIEXEC, "-n", "2", str(app), "late", "6"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert "timed out" in done.stderr, done.stderr
    left = leftovers.segments() - before
    assert not (left - leftovers.mapped_names()), f"segments left by the failed job: {sorted(left)}"
