"""A profile's price of one pool collective at the traced run's round trip (`price_spread`), and its jobs' spread.

The rule's tests give `job_prices` by hand (each job's price and round trip) and compare with hand-computed
prices; the plumbing tests run the DES on the fixture profile's model with hand-made job records."""
from __future__ import annotations

import dataclasses

import pytest

from cxlsim.calibrate import LocalModel, load_profile
from cxlsim.calibrate import price_spread as ps
from cxlsim.calibrate.collectives import job_model, predict_collective, row_model

PROFILE = "tests/data/local_host_profile_np2.json"
NEVER = 1 << 40


def _profile(jobs=()):
    prof = load_profile(PROFILE)
    return dict(prof, collectives={"jobs": list(jobs)})


def _job(i, placement, rt, sizes, pattern_ns=None, coherence="hw", collective="broadcast"):
    """A job record that measured `collective` at `sizes` in blocks whose round trip was `rt` ns."""
    m = LocalModel.from_dict(load_profile(PROFILE)["model"])
    pattern = pattern_ns or {}
    return dict(id=f"{i} {placement}", job=i, placement=placement, coherence=coherence, roundtrip_ns=rt,
                concurrent_ns=m.concurrent_curves.get(coherence, {}),
                measured={collective: {str(n): {"measured_ns": 1000.0, "mean_ns": 1000.0, "calls": 50, "blocks": 1}
                                       for n in sizes}},
                call_roundtrip_ns={collective: {str(n): rt for n in sizes}}, overhead_ns={}, exchange_ns={},
                fold_ns={}, pattern_ns={collective: {"data": {str(n): v for n, v in pattern.items()},
                                                     "maintenance": {str(n): 0.0 for n in pattern}}} if pattern else {})


def _by_hand(monkeypatch, prices):
    """job_prices answers {size: [(placement, round trip, price)]} for any call."""
    def fake(profile, coherence, collective, size_bytes, large_bytes):
        return [{"id": f"{k} {pl}", "placement": pl, "roundtrip_ns": rt, "blocks": 1, "measured_ns": p,
                 "pattern_ns": None, "price_ns": p} for k, (pl, rt, p) in enumerate(prices.get(size_bytes, []))]
    monkeypatch.setattr(ps, "job_prices", fake)


def test_a_price_is_the_median_of_its_placements_jobs_unscaled(monkeypatch):
    """Within a placement the jobs' prices as priced (their round trips not followed); the slow job is another
    placement's and leaves the fast price alone, and prices a slow run alone, as priced."""
    _by_hand(monkeypatch, {64: [("fast", 100.0, 1000.0), ("fast", 60.0, 900.0), ("fast", 110.0, 1210.0),
                                ("slow", 450.0, 9000.0)]})
    sizes = [64]
    prof = _profile([_job(0, "fast", 100.0, sizes)])
    got = ps.price_at(prof, "hw", "broadcast", 64, NEVER, 90.0)
    assert got["price_ns"] == pytest.approx(1000.0)
    assert (got["low_ns"], got["high_ns"], got["jobs"]) == (pytest.approx(900.0), pytest.approx(1210.0), 3)
    assert got["rule"] == "the median of 3 fast-placement jobs' prices"
    assert ps.price_at(prof, "hw", "broadcast", 64, NEVER, 60.0)["price_ns"] == pytest.approx(1000.0)
    slow = ps.price_at(prof, "hw", "broadcast", 64, NEVER, 400.0)
    assert slow["price_ns"] == pytest.approx(9000.0) and slow["jobs"] == 1


def test_a_placement_no_job_measured_is_priced_by_its_own_model_else_from_the_others(monkeypatch):
    """No job of the run's placement: the model, where its primitives are of that placement (the fixture's are
    fast); else the other placement's jobs, moved by the broadcast's half round trip a call (`shifted_price`)."""
    _by_hand(monkeypatch, {64: [("slow", 450.0, 9000.0), ("slow", 400.0, 7600.0)]})
    prof = _profile([_job(0, "slow", 450.0, [64])])
    got = ps.price_at(prof, "hw", "broadcast", 64, NEVER, 90.0)
    assert got["price_ns"] == pytest.approx(ps.profile_price(prof, "hw", "broadcast", 64, NEVER))
    assert got["jobs"] == 0 and "of this placement's primitives (no fast-placement job" in got["rule"]
    _by_hand(monkeypatch, {64: [("fast", 90.0, 900.0), ("fast", 100.0, 1100.0)]})
    got = ps.price_at(_profile([_job(0, "fast", 90.0, [64])]), "hw", "broadcast", 64, NEVER, 450.0)
    assert got["price_ns"] == pytest.approx(((900.0 + 0.5 * (450 - 90)) + (1100.0 + 0.5 * (450 - 100))) / 2)
    assert "fast-placement jobs' prices moved to 450 ns (no slow-placement job measured 64 B)" in got["rule"]


def test_a_size_between_measured_ones_is_interpolated_and_one_beyond_them_scaled_by_its_bytes(monkeypatch):
    _by_hand(monkeypatch, {1024: [("fast", 100.0, 1000.0)], 4096: [("fast", 100.0, 3000.0)]})
    prof = _profile([_job(0, "fast", 100.0, [1024, 4096])])
    got = ps.price_at(prof, "hw", "broadcast", 2048, NEVER, 100.0)
    assert got["price_ns"] == pytest.approx(1000.0 + (2048 - 1024) / (4096 - 1024) * 2000.0)
    assert "interpolated between 1024 and 4096 B" in got["rule"]
    beyond = ps.price_at(prof, "hw", "broadcast", 8192, NEVER, 50.0)
    assert beyond["price_ns"] == pytest.approx(3000.0 * 2)  # the bytes followed, a fast round trip not
    assert "in proportion to the bytes" in beyond["rule"]


def test_a_size_far_beyond_every_measured_one_falls_back_to_the_model_scaled_only_from_another_placement(monkeypatch):
    _by_hand(monkeypatch, {1024: [("fast", 100.0, 1000.0)]})
    prof = _profile([_job(0, "fast", 100.0, [1024])])
    got = ps.price_at(prof, "hw", "broadcast", 4096, NEVER, 90.0)
    own = prof["model"]["roundtrip_ns"]["hw"]
    assert own < 200.0  # the fixture's model: the fast placement, as the run's 90 ns
    assert got["jobs"] == 0 and got["rule"].startswith("the profile model's price, of this placement's primitives")
    model = ps.profile_price(prof, "hw", "broadcast", 4096, NEVER)
    assert got["price_ns"] == pytest.approx(model)
    slow = ps.price_at(prof, "hw", "broadcast", 4096, NEVER, 450.0)
    assert slow["price_ns"] == pytest.approx(min(model + 0.5 * (450.0 - own), model * 450.0 / own))
    assert "moved from its round trip" in slow["rule"]


def test_a_price_moves_by_the_calls_round_trips_between_unscaled_and_in_proportion():
    """An allreduce waits one round trip a step (two steps from the large threshold), a broadcast half of one; the
    moved price stays between the price as measured and the price in proportion to the round trips."""
    assert ps.shifted_price(680.0, 570.0, 190.0, "allreduce", 8, 65536) == pytest.approx(680.0 - 380.0)
    assert ps.shifted_price(9700.0, 570.0, 190.0, "allreduce", 65536, 65536) == pytest.approx(9700.0 - 760.0)
    assert ps.shifted_price(880.0, 570.0, 190.0, "broadcast", 4096, NEVER) == pytest.approx(880.0 - 190.0)
    assert ps.shifted_price(300.0, 570.0, 190.0, "allreduce", 8, 65536) == pytest.approx(300.0 * 190 / 570)
    assert ps.shifted_price(280.0, 190.0, 570.0, "allreduce", 8, 65536) == pytest.approx(280.0 + 380.0)
    assert ps.shifted_price(100.0, 190.0, 570.0, "barrier", 0, 65536) == pytest.approx(100.0 + 190.0)
    assert ps.shifted_price(100.0, 190.0, 570.0, "allreduce", 8, 65536) == pytest.approx(100.0 * 570 / 190)
    assert ps.shifted_price(500.0, 300.0, 300.0, "alltoall", 64, NEVER) == pytest.approx(500.0)


def test_an_allreduces_neighbours_are_priced_with_the_calls_algorithm(monkeypatch):
    seen = []

    def fake(profile, coherence, collective, size_bytes, large_bytes):
        seen.append((size_bytes, large_bytes))
        return [{"id": "0 fast", "placement": "fast", "roundtrip_ns": 100.0, "blocks": 1, "measured_ns": 1.0,
                 "pattern_ns": None, "price_ns": float(size_bytes)}] if size_bytes != 65536 else []
    monkeypatch.setattr(ps, "job_prices", fake)
    prof = _profile([_job(0, "fast", 100.0, [32768, 131072], collective="allreduce")])
    got = ps.price_at(prof, "hw", "allreduce", 65536, 65536, 100.0)
    assert got["price_ns"] == pytest.approx(65536.0)
    assert seen[1:] == [(32768, 0), (131072, 0)]  # the large algorithm at both neighbours, as the call runs it


def test_a_jobs_price_is_the_kernel_alone_with_that_jobs_figures():
    prof = _profile([_job(0, "fast", 80.0, [4096], {4096: 2000.0}), _job(1, "fast", 160.0, [4096], {4096: 4000.0}),
                     _job(2, "fast", 80.0, [4096], {4096: 2000.0}, coherence="flush")])
    got = ps.job_prices(prof, "hw", "broadcast", 4096, NEVER)
    assert [j["id"] for j in got] == ["0 fast", "1 fast"]  # the flush job is another mode's
    base = LocalModel.from_dict(prof["model"])
    for j, rec in zip(got, prof["collectives"]["jobs"]):
        m = ps.kernel_model(row_model(job_model(base, rec), rec, "broadcast", 4096))
        assert m.collective_overhead_ns["broadcast"] == 0.0 and m.overhead_ns["copy"] == 0.0
        assert j["price_ns"] == pytest.approx(predict_collective(m, "hw", "broadcast", 4096, NEVER))
        assert j["pattern_ns"] == rec["pattern_ns"]["broadcast"]["data"]["4096"]
    assert got[1]["price_ns"] > got[0]["price_ns"] + 1500.0  # its copies took 2000 ns longer
    spread = ps.spread(got, "fast")
    assert (spread["jobs"], spread["low_ns"], spread["high_ns"]) == (2, got[0]["price_ns"], got[1]["price_ns"])
    assert ps.spread(got, "slow") is None


def test_the_price_fields_name_what_the_model_prices_with():
    m = LocalModel.from_dict(load_profile(PROFILE)["model"])
    got = ps.price_fields(m, "hw", "allreduce", 65536, 65536)
    assert got["pattern"] == "allreduce_large" and got["fold_bytes"] == 32768
    assert got["roundtrip_ns"] == m.roundtrip_ns["hw"] and got["path_ns"] == m.path_ns["hw"]
    assert ps.price_fields(m, "hw", "barrier", 0, 65536)["pattern"] is None
    assert ps.kernel_model(m, 4).np == 4 and dataclasses.replace(m, np=2).np == 2


def test_jobs_that_list_a_size_but_price_none_of_it_end_in_the_models_price(monkeypatch):
    """A job without round trips per call (a session-24 profile) lists its sizes but prices none: no recursion."""
    _by_hand(monkeypatch, {})
    prof = _profile([_job(0, "fast", 100.0, [4, 8, 16], collective="allreduce")])
    got = ps.price_at(prof, "hw", "allreduce", 8, 65536, 87.0)
    assert got["jobs"] == 0 and "profile model's price" in got["rule"]
