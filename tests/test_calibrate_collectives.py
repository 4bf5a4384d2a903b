"""The local-host model's DES predictions of the pool collectives beyond allgather, and their validation."""
import math

import pytest

from cxlsim.calibrate import LocalModel, load_profile
from cxlsim.calibrate.collectives import (COLLECTIVES, format_collectives, measure_collectives, predict_collective,
                                          summarize_collectives, validate_collectives)
from cxlsim.errors import InputError

PROFILE = "tests/data/local_host_profile_np2.json"


def model():
    return LocalModel.from_dict(load_profile(PROFILE)["model"])


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_predictions_are_finite_and_grow_from_small_to_large_sizes(coherence):
    m = model()
    for collective in COLLECTIVES:
        sizes = (0,) if collective == "barrier" else (64, 4096, 262144)
        got = [predict_collective(m, coherence, collective, n, 65536) for n in sizes]
        assert all(math.isfinite(v) and v > 0 for v in got), collective
        assert got[-1] > got[0] or collective == "barrier", (collective, got)  # (the fitted curves are per size)


def test_allreduce_takes_the_algorithm_the_threshold_names():
    m = model()
    small = predict_collective(m, "hw", "allreduce", 262144, 1 << 30)
    large = predict_collective(m, "hw", "allreduce", 262144, 0)
    assert small != large


def test_measured_rows_validate_against_the_model_in_both_modes():
    rows = validate_collectives(model(), measure_collectives((64, 4096), ("broadcast", "barrier"), rounds=1,
                                                             iterations=5))
    assert {(r["coherence"], r["collective"]) for r in rows} == {(m, c) for m in ("hw", "flush")
                                                                 for c in ("broadcast", "barrier")}
    assert all(r["measured_ns"] > 0 and math.isfinite(r["error"]) for r in rows)
    summary = summarize_collectives(rows)
    assert set(summary) == {"barrier flush", "barrier hw", "broadcast flush", "broadcast hw"}
    assert "median |error|" in format_collectives(rows)
    with pytest.raises(InputError, match="multiples of 4 bytes"):
        measure_collectives((3,))
