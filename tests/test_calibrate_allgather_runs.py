"""The held-out allgather's bench runs are judged one by one, by the collectives blocks' rule (`states.state_of`)."""
from __future__ import annotations

import dataclasses
import math

import pytest

from cxlsim.calibrate import LocalModel, des
from cxlsim.calibrate.measure import measure_allgather, run_state
from cxlsim.calibrate.states import state_of

BEST = {"hw": 35.0, "flush": 500.0, "copy": 1000.0}


def _run(rt, busy=1.0, copy=1000.0, side="copy", n=64, us=1.0):
    return dict(side=side, size_bytes=n, avg_us=us, busy=busy, probe_copy_ns=copy, probe_roundtrip_ns=rt)


@pytest.mark.parametrize("mode,run,expected", [
    ("hw", _run(127.0), "fast"),            # the fast placement, however low the best round trip seen (35 ns)
    ("hw", _run(199.0), "fast"),
    ("hw", _run(450.0), "slow placement"),
    ("hw", _run(1500.0), "disturbed"),
    ("hw", _run(80.0, busy=0.5), "disturbed"),
    ("hw", _run(80.0, copy=1600.0), "disturbed"),  # the copy probe above STABLE x the best seen
    ("flush", _run(740.0), "fast"),         # flush: against the best flush round trip (1.5 x 500)
    ("flush", _run(760.0), "slow placement"),
    ("flush", _run(2100.0), "disturbed"),
    ("hw", _run(math.nan), "fast"),         # np != 2: no round trip, judged by CPU share and copy probe
])
def test_a_run_is_judged_by_its_own_probes(mode, run, expected):
    assert run_state(run, BEST, mode) == expected


def test_the_rule_is_the_collectives_blocks_rule():
    assert state_of("hw", [127.0], [1.0], BEST) == "fast" and state_of("hw", [250.0], [1.0], BEST) == "slow placement"


def test_every_jobs_fast_runs_are_pooled_and_only_a_job_that_is_not_fast_is_repeated(monkeypatch):
    """Three hw jobs: round trips 65/90 ns (fast), 127/95 (fast, though above 1.5 x the best run's 35 ns),
    480/470 (slow: repeated once, 70/75). Per size, the median over the fast runs of every job."""
    from cxlsim.emulator import launch

    jobs = iter([
        ((65.0, 90.0), [_run(35.0, us=1.0), _run(90.0, us=2.0), _run(450.0, us=9.0)]),
        ((127.0, 95.0), [_run(127.0, us=3.0), _run(80.0, busy=0.2, us=50.0)]),
        ((480.0, 470.0), [_run(470.0, us=7.0)]),
        ((70.0, 75.0), [_run(75.0, us=4.0)]),
    ])

    def fake_run_local(n, fn, args, **kw):
        if n == 1:
            return [{"copy": [200.0], "zero-copy": [300.0]}]
        (rt0, rt1), rows = next(jobs)
        rows = rows + [dict(r, side="zero-copy") for r in rows]
        return [(rows, rt0, rt1, []), (rows, rt0, rt1, [])]
    monkeypatch.setattr(launch, "run_local", fake_run_local)
    got = measure_allgather([64], rounds=3, modes=("hw",), max_retries=1)
    assert [b["state"] for b in got["batches"]] == ["fast", "fast", "slow placement", "fast"]
    assert [b["slow_placement"] for b in got["batches"]] == [False, False, True, False]
    copy = next(r for r in got["rows"] if r["side"] == "copy")
    assert copy["measured_ns"] == pytest.approx(2500.0)  # median of 1, 2, 3, 4 us (the fast runs)
    assert copy["batches"] == 4 and not copy["disturbed_only"] and not copy["flagged_all"]
    assert got["best_roundtrip_ns"]["hw"] == 35.0


def test_the_flush_allgather_is_charged_the_symmetric_exchange_and_the_hw_one_is_not():
    sizes = [0, 1, 64, 4096]
    m = LocalModel(np=2, path_ns={"hw": 12.0, "flush": 40.0}, roundtrip_ns={"hw": 80.0, "flush": 500.0},
                   flush_ns_per_line=1.5, fence_ns={"hw": 5.0, "flush": 80.0}, overhead_ns={"copy": 150.0, "zero-copy": 900.0},
                   copy_bw_curve={str(s): s / 30.0 for s in sizes}, write_pass_curve={str(s): s / 20.0 for s in sizes},
                   read_pass_curve={str(s): s / 12.5 for s in sizes})  # no exchange primitive
    for mode, charged in (("flush", True), ("hw", False)):
        base = des.predict_local(m, mode, "copy", 64)
        more = dataclasses.replace(m, exchange_ns={mode: des.des_exchange_ns(m, mode) + 200.0})
        # one charged wait per call and one in the untimed barrier between calls, which the timed span
        # does not see: the timed call grows by the one charge of its own wait
        got = des.predict_local(more, mode, "copy", 64) - base
        assert got == pytest.approx(200.0 if charged else 0.0, abs=1e-6), mode
    assert des.charged_exchange("allgather", "flush") and not des.charged_exchange("allgather", "hw")
