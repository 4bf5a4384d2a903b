"""The sweep ratio metric (`cxlsim.sweep_ratio`): one axis value's metric over another's, matched on the rest."""
from __future__ import annotations

import pandas as pd
import pytest

from cxlsim.errors import InputError
from cxlsim.sweep_ratio import ratio_frame, ratio_name

AXES = ["fabric.preset", "fabric.nodes", "workload.sizes"]


def sweep():
    rows = [("ib-hdr", 4, 8, 2.0), ("ib-hdr", 4, 64, 3.0), ("ib-hdr", 8, 8, 4.0), ("ib-hdr", 8, 64, 6.0),
            ("cxl3-pool", 4, 8, 1.0), ("cxl3-pool", 4, 64, 4.0), ("cxl3-pool", 8, 8, 0.5), ("cxl3-pool", 8, 64, None)]
    return pd.DataFrame(rows, columns=AXES + ["latency_us"])


def test_ratios_by_hand():
    frame, name = ratio_frame(sweep(), AXES, "fabric.preset", "ib-hdr", "cxl3-pool", "latency_us")
    assert name == ratio_name("latency_us", "fabric.preset", "ib-hdr", "cxl3-pool") == \
        "latency_us fabric.preset=ib-hdr/cxl3-pool"
    got = {(r["fabric.nodes"], r["workload.sizes"]): r[name] for _, r in frame.iterrows()}
    assert got == {(4, 8): 2.0, (4, 64): 0.75, (8, 8): 8.0}  # (8, 64) has no cxl3-pool latency: no row


def test_a_numeric_axis_and_its_values():
    frame, name = ratio_frame(sweep()[lambda f: f["fabric.preset"] == "ib-hdr"], AXES, "fabric.nodes", 8, 4,
                              "latency_us")
    assert list(frame["workload.sizes"]) == [8, 64] and list(frame[name]) == [2.0, 2.0]


@pytest.mark.parametrize("key, a, b, metric, match", [
    ("fabric.links", "x", "y", "latency_us", "not an axis"),
    ("fabric.preset", "ib-hdr", "eth", "latency_us", "no finished point has fabric.preset = eth"),
    ("fabric.preset", "ib-hdr", "cxl3-pool", "events", "metric 'events' is not a column")])
def test_refusals_name_what_is_missing(key, a, b, metric, match):
    with pytest.raises(InputError, match=match):
        ratio_frame(sweep(), AXES, key, a, b, metric)


def test_points_that_share_every_other_axis_are_refused():
    frame = sweep()
    with pytest.raises(InputError, match="share every other axis value"):
        ratio_frame(frame, ["fabric.preset", "fabric.nodes"], "fabric.preset", "ib-hdr", "cxl3-pool", "latency_us")
