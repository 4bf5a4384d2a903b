"""experiments/pod_kinds.py on a tiny grid: its rows are simulate's, its crossovers and fastest fabric hand-checked."""
from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)


@pytest.fixture()
def pod_kinds(monkeypatch):
    spec = importlib.util.spec_from_file_location("pod_kinds", os.path.join(ROOT, "experiments", "pod_kinds.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "NODES", (26,))
    monkeypatch.setattr(module, "NETWORKS", ("eth-100g-roce",))
    monkeypatch.setattr(module, "COLLECTIVES", ("allgather", "allreduce"))
    monkeypatch.setattr(module, "SIZES", (8, 4096, 1 << 20))
    return module


def test_the_grid_is_simulate_s_rows_and_its_summaries_follow_from_them(pod_kinds):
    rows, reasons = pod_kinds.grid()
    assert len(rows) == 2 * 3
    # 26 nodes: pods of 13 only; the others cannot make whole pods, and say why
    assert ("eth-100g-roce", 26, "allgather", "switch8") in reasons and "fabric.nodes" in \
        reasons[("eth-100g-roce", 26, "allgather", "switch8")]
    direct = pod_kinds.project("octopus13", "eth-100g-roce", 26, "allgather", sizes=(4096,))
    row = next(r for r in rows if r["collective"] == "allgather" and r["size_bytes"] == 4096)
    assert row["octopus13_us"] == direct[0]["latency_us"] and row["switch8_us"] is None
    assert row["network/octopus13"] == pytest.approx(row["network_us"] / row["octopus13_us"])
    for r in rows:
        present = {k: r[f"{k}_us"] for k in ("network", *pod_kinds.PODS) if r[f"{k}_us"] is not None}
        assert r["fastest"] == min(present, key=present.get)
    cross = pod_kinds.crossover_rows(rows, reasons)
    mine = next(c for c in cross if c["collective"] == "allgather" and c["fabric"] == "octopus13")
    ratios = [r["network/octopus13"] for r in rows if r["collective"] == "allgather"]
    expect = [f"{a}-{b}" for (a, b), (ra, rb) in zip(zip(["8 B", "4 KiB"], ["4 KiB", "1 MiB"]),
                                                    zip(ratios, ratios[1:])) if (ra - 1) * (rb - 1) < 0]
    assert mine["crossovers"] == ("; ".join(expect) or "none")
    assert next(c for c in cross if c["fabric"] == "switch8")["crossovers"] == "n/a"
