"""experiments/eddis_local.py's report: the order by time to accuracy (strict and spread-aware) and the phase table."""
from __future__ import annotations

import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def eddis():
    path = os.path.join(HERE, os.pardir, "experiments", "eddis_local.py")
    spec = importlib.util.spec_from_file_location("eddis_local_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rounds(eddis, measured, projected):
    return [{"time_to_accuracy": [{"accuracy": eddis.ACCURACY, "measured_s": m, "projected_s": p}]}
            for m, p in zip(measured, projected)]


def test_a_tied_pair_has_no_measured_order(eddis):
    """a and c overlap across the rounds (tied), b is apart from both: the strict order of the medians differs
    (the projection puts c before a), the spread-aware one holds (both resolved pairs ordered alike)."""
    by_label = {"a": rounds(eddis, [0.10, 0.11, 0.12], [0.11, 0.11, 0.11]),
                "b": rounds(eddis, [0.20, 0.21, 0.22], [0.21, 0.21, 0.21]),
                "c": rounds(eddis, [0.115, 0.125, 0.13], [0.105, 0.105, 0.105])}
    lines = eddis.order_by_tta(by_label, ["a", "b", "c"])
    assert "same order (strict, the medians): False" in lines
    assert any(line.startswith("pairs the rounds resolve") and "2 of 3" in line and "orders 2 of them alike" in line
               for line in lines)
    assert any(line.startswith("same order (spread-aware") and line.endswith(": True") for line in lines)
    assert any("a ~ c" in line for line in lines)
    by_label["b"] = rounds(eddis, [0.20, 0.21, 0.22], [0.10, 0.10, 0.10])  # now a resolved pair is misordered
    lines = eddis.order_by_tta(by_label, ["a", "b", "c"])
    assert any(line.startswith("same order (spread-aware") and line.endswith(": False") for line in lines)
    assert any("NOT a < b" in line for line in lines)


def test_phase_report_is_the_median_over_the_rounds(eddis):
    def row(measured, des):
        return {"thread": "main", "phase": "read", "measured_s": measured, "des_s": des, "des_terms": "read"}
    by_label = {"np2 async": [{"phases": [row(30e-6, 15e-6)]}, {"phases": [row(50e-6, 15e-6)]},
                              {"phases": [row(40e-6, 16e-6)]}],
                "np2 sync": [{"phases": []}]}
    lines = eddis.phase_report(by_label, ["np2 async", "np2 sync"])
    assert lines[0] == "### np2 async" and len(lines) == 3  # the heading, the table's header and its row
    assert lines[2].split()[2:4] == ["40.0", "15.0"]
