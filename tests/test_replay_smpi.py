"""The replay agrees with SimGrid's own `smpirun -replay` on an equivalent platform, to SimGrid's printed
resolution (1 us), on the committed halo trace and on allreduce (16 B and 64 KiB), allgather and barrier each
called 100 times back to back: their times were measured by
tests/data/traces/validate_smpi.py --write (SimGrid 3.32), so the suite checks this without SimGrid."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

HERE = os.path.join(os.path.dirname(__file__), "data", "traces")


def load_validation():
    spec = importlib.util.spec_from_file_location("validate_smpi", os.path.join(HERE, "validate_smpi.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replay_matches_smpirun_replay_to_its_resolution(tmp_path):
    validation = load_validation()
    with open(validation.RESULTS) as fh:
        measured = json.load(fh)
    assert measured["simgrid"].endswith("3.32")
    cases = validation.cases(str(tmp_path), measured["repeat"])
    assert [case[0] for case in cases] == list(measured["seconds"])
    for label, index, _, fabric in cases:
        ours, theirs = validation.cxlsim_seconds(index, fabric), measured["seconds"][label]
        assert ours == pytest.approx(theirs, abs=measured["resolution_s"]), label
