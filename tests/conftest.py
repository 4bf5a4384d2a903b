"""Fixtures shared by the test modules (pytest runs them with --import-mode=importlib, so a shared helper is a
fixture here rather than a module they import)."""
from __future__ import annotations

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
