"""Stragglers in a replay: per-rank, per-step compute multipliers from the training model's distributions,
a step ending at each collective; seeded, reproducible, applied to every compute gap of its step."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from cxlsim.cli import main
from cxlsim.errors import InputError
from cxlsim.models.training.stragglers import Slowdown, multipliers
from cxlsim.replay import engine, fabrics, simgrid, stragglers


STEPS = ["compute 4000", "barrier", "compute 2000", "compute 1000", "allreduce 8 0", "compute 3000"]


def computes(timeline, r):
    return [end - start for start, end, kind, _, _ in timeline.segments[r] if kind == "compute"]


def test_every_compute_gap_of_a_step_gets_its_rank_and_step_multiplier(tmp_path, write_trace):
    trace = simgrid.read(write_trace(tmp_path, lambda r: STEPS, 3), 1e9)
    assert stragglers.steps_of(trace) == 3
    m = stragglers.draw(np.random.default_rng(7), trace, 0.3, None)
    assert m.shape == (3, 3)
    assert np.array_equal(m, multipliers(np.random.default_rng(7), 3, 3, 0.3))  # the training model's draw
    timeline = engine.replay(trace, fabrics.resolve("ib-hdr", 3).make(), step_factors=m.tolist())
    for r in range(3):
        expect = [4000 * m[0, r], 2000 * m[1, r], 1000 * m[1, r], 3000 * m[2, r]]
        assert computes(timeline, r) == pytest.approx(expect, rel=1e-12)


def test_a_slowdown_on_every_step_equals_the_compute_scale(tmp_path, write_trace):
    trace = simgrid.read(write_trace(tmp_path, lambda r: STEPS, 2), 1e9)
    always = Slowdown(probability=1.0, factor=2.0, duration_steps=100)
    m = stragglers.draw(np.random.default_rng(1), trace, 0.0, always)
    assert (m == 2.0).all()
    slowed = engine.replay(trace, fabrics.resolve("ib-hdr", 2).make(), step_factors=m.tolist())
    scaled = engine.replay(trace, fabrics.resolve("ib-hdr", 2).make(), compute_scale=2.0)
    assert slowed.finish_ns == scaled.finish_ns


def test_the_command_draws_with_the_seed_and_records_it(tmp_path, write_trace, capsys):
    path = write_trace(tmp_path / "t", lambda r: STEPS, 4)

    def run(seed, out):
        assert main(["replay", path, "--trace-host-speed", "1Gf", "--fabric", "ib-hdr", "--cv", "0.2",
                     "--slowdown", "0.3,1.5,1", "--seed", str(seed), "--no-plots", "--output", str(out)]) == 0
        text = capsys.readouterr().out
        assert f"seed {seed}: one draw of 3 steps x 4 ranks" in text
        with open(os.path.join(out, "totals.json")) as fh:
            return [row["total_s"] for row in json.load(fh)]

    first, again, other = run(5, tmp_path / "a"), run(5, tmp_path / "b"), run(6, tmp_path / "c")
    assert first == again
    assert first != other
    with open(tmp_path / "a" / "config.yaml") as fh:
        assert "slowdown: 0.3,1.5,1" in fh.read()


@pytest.mark.parametrize("flags, message", [
    (["--slowdown", "0.1,2"], r"--slowdown: expected PROBABILITY,FACTOR,STEPS like 0.05,1.5,10, got '0.1,2'"),
    (["--slowdown", "2,1.5,3"], r"--slowdown 2,1.5,3: slowdown.probability: expected a probability in \[0, 1\]"),
    (["--slowdown", "0.1,0.5,3"], r"slowdown.factor: expected a finite multiplier >= 1"),
    (["--cv", "-1"], r"--cv: expected a coefficient of variation >= 0"),
])
def test_bad_straggler_options_are_refused_naming_them(tmp_path, write_trace, capsys, flags, message):
    path = write_trace(tmp_path / "t", lambda r: STEPS, 2)
    assert main(["replay", path, "--trace-host-speed", "1Gf", "--fabric", "ib-hdr", *flags, "--no-plots",
                 "--output", str(tmp_path / "ws")]) == 2
    assert __import__("re").search(message, capsys.readouterr().err)


def test_step_factors_of_the_wrong_shape_are_refused(tmp_path, write_trace):
    trace = simgrid.read(write_trace(tmp_path, lambda r: STEPS, 2), 1e9)
    with pytest.raises(InputError, match=r"expected 3 steps x 2 ranks"):
        engine.replay(trace, fabrics.resolve("ib-hdr", 2).make(), step_factors=[[1.0, 1.0]])
