"""Fixtures shared by the test modules (pytest runs them with --import-mode=importlib, so a shared helper is a
fixture here rather than a module they import)."""
from __future__ import annotations

import argparse
import os

import pytest


def _write_trace(directory, lines, p=None, names=None) -> str:
    """Per-rank files `t_rank-<i + 1>.txt` of a SimGrid time-independent trace in `directory` (made if absent),
    each rank's lines between `init` and `finalize`, every line prefixed with its rank; returns the directory.

    lines: {rank: [line without the rank, ...]}; or, with `p` ranks, one list for every rank or a function of
    the rank giving its list. names: the rank whose lines file i holds (default: the ranks in order), for
    tests of files whose numbers are not their ranks."""
    if isinstance(lines, dict):
        if p is not None:
            raise TypeError("write_trace: p is for a list or a function of the rank, not a dict of ranks")
        ranks = lines
    elif p is None:
        raise TypeError("write_trace: give p, the rank count, with a list or a function of the rank")
    else:
        ranks = {r: list(lines(r) if callable(lines) else lines) for r in range(p)}
    os.makedirs(directory, exist_ok=True)
    for i, rank in enumerate(names or sorted(ranks)):
        with open(os.path.join(directory, f"t_rank-{i + 1}.txt"), "w") as fh:
            fh.write("".join(f"{rank} {line}\n" for line in ["init", *ranks[rank], "finalize"]))
    return str(directory)


@pytest.fixture
def write_trace():
    """The trace writer of the replay tests: `write_trace(directory, lines, p=None, names=None) -> directory`."""
    return _write_trace


def _network_profile(tmp_path, latency_ns=1000.0, overhead_ns=200.0, gap_per_byte_ns=0.1) -> str:
    """A `--from-osu` network profile (`tmp_path/net.json`) of one LogGP regime over every size, o = g."""
    from cxlsim.calibrate.profile import make_profile, save_profile
    from cxlsim.loggp import LogGPFit, Regime

    regime = Regime(min_size_bytes=0, max_size_bytes=1 << 22, latency_ns=latency_ns, overhead_ns=overhead_ns,
                    gap_ns=overhead_ns, gap_per_byte_ns=gap_per_byte_ns, rms_rel_error=0.01)
    model = {"base_preset": "ib-hdr", "np": 2, "loggp": LogGPFit(regimes=(regime,), identified="test").to_dict(),
             "collective_overhead_ns": 0.0, "memcpy_bw_bytes_per_ns": {"1": 10.0}}
    return save_profile(str(tmp_path / "net.json"), make_profile("network", model, []))


@pytest.fixture
def network_profile():
    """`network_profile(tmp_path, latency_ns=1000, overhead_ns=200, gap_per_byte_ns=0.1) -> path` of a one-regime
    network calibration profile, for joined replays."""
    return _network_profile


def _library_stats_text(rows: dict, ranks=2, coherence="hw", large=64 << 10) -> str:
    """The interposition library's stats table (cxlsim/mpi/stats.c's layout); rows: {MPI name: (calls, pool,
    fallback)}; large: the run's allreduce threshold in the header (None: a header without it)."""
    threshold = "" if large is None else f", allreduce large {large} B"
    lines = [f"cxlsim-mpi stats: {ranks} ranks, sums over ranks; pool shm, coherence {coherence}, slot 1048576 B"
             + threshold,
             f"{'collective':<26} {'calls':>10} {'c_calls':>10} {'bytes':>14} {'pool':>10} {'hier':>10} "
             f"{'fallback':>10}  reasons"]
    for name in ("MPI_Allgather", "MPI_Allreduce", "MPI_Reduce_scatter_block", "MPI_Bcast", "MPI_Alltoall",
                 "MPI_Barrier"):
        calls, pool, fallback = rows.get(name, (0, 0, 0))
        lines.append(f"{name:<26} {calls:>10} {0:>10} {0:>14} {pool:>10} {0:>10} {fallback:>10} "
                     + (f" datatype={fallback}" if fallback else ""))
    return "\n".join(lines) + "\n"


@pytest.fixture
def library_stats_text():
    """`library_stats_text(rows, ranks=2, coherence="hw", large=65536) -> str`: the library's stats table."""
    return _library_stats_text


def _replay_args(*argv):
    from cxlsim.replay import cli
    parser = argparse.ArgumentParser(prog="cxlsim")
    cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["replay", *argv])


@pytest.fixture
def replay_args():
    """`replay_args(*argv)`: the parsed arguments of `cxlsim replay ARGV` (the options' own parsing, no run)."""
    return _replay_args
