"""A profile's self-consistency check: the allgather's copy primitives against the same copies in the collectives' blocks."""
import dataclasses
import json
import os

import pytest

from cxlsim.calibrate import consistency as cons
from cxlsim.calibrate.des import predict_local
from cxlsim.calibrate.local_model import LocalModel
from cxlsim.calibrate.patterns import kernel_steps
from cxlsim.coherence import Coherence

HERE = os.path.dirname(__file__)


def _model() -> LocalModel:
    with open(os.path.join(HERE, "data", "local_host_profile_np2.json")) as f:
        return LocalModel.from_dict(json.load(f)["model"])


def _same_patterns(model: LocalModel, scale: dict | None = None) -> LocalModel:
    """The fixture's model with alltoall patterns equal to its concurrent copies (the same copies), each (mode,
    primitive, size) in `scale` divided by its factor."""
    scale = scale or {}
    data, upkeep = {}, {}
    for mode, kinds in model.concurrent_curves.items():
        a2a, a2a_m = {}, {}
        for n in kinds["copyin"]:
            s = int(n)
            a2a[n] = (kinds["copyin"][n] + kinds["copyout"][n]) / scale.get((mode, "copy", s), 1.0)
            a2a_m[n] = (kinds["writeback"][n] + kinds["invalidate"][n]) / scale.get((mode, "maintenance", s), 1.0)
        data[mode] = {"alltoall": a2a}
        upkeep[mode] = {"alltoall": a2a_m}
    return dataclasses.replace(model, pattern_curves=data, pattern_maintenance_curves=upkeep)


def test_the_checked_patterns_make_the_concurrent_primitives_copies():
    """The claim the check rests on (np 2, rank r, other o): the concurrent copy's step writes s into the slot, copies
    its own s from send and the other's s out (`_probes.concurrent_copy`), as the alltoall pattern's at s does (its block
    for the other at another offset), and writes and reads the ranges the allgather pattern writes back and invalidates
    (the allgather pattern's copy takes its own block in the copy-in's pass, as the kernel does: other copies); the
    view's step (s in, own from send and the other's loaded in place, `patterns.view_rounds`) is the
    allgather_zero_copy pattern's."""
    s = 65536
    for r in (0, 1):
        o = 1 - r
        concurrent = [(-1 if k == r else k, 0, s) for k in (0, 1)]
        assert kernel_steps("allgather", s, r) == [([(0, s, True)], [(o, 0, s)], False)]
        assert kernel_steps("allgather_zero_copy", s, r) == [([(0, s)], concurrent, True)]
        [(writes, reads, in_place)] = kernel_steps("alltoall", s, r)
        assert [n for _, n in writes] == [s] and not in_place
        assert sorted((rank, n) for rank, _, n in reads) == sorted([(-1, s), (o, s)])
    assert {name: patterns for name, _, patterns, *_ in cons.SAME_COPIES} == {
        "copy": ("alltoall",), "maintenance": ("allgather", "alltoall"), "view": ("allgather_zero_copy",)}


def test_the_allgathers_own_patterns_are_preferred_where_they_make_the_same_copies():
    """The copy is checked against the alltoall's pattern even where the allgather's is in the profile (here 3x slower:
    it would keep every copy as faster), the write-back and invalidation against the allgather's (the alltoall's 3x
    slower alike); a view primitive 2.5x its pattern is refused and scaled, its two kinds together."""
    base = _model()
    model = _same_patterns(base)
    data = {mode: dict(by, allgather={n: 3 * v for n, v in by["alltoall"].items()},
                       allgather_zero_copy={n: (base.concurrent_curves[mode]["storein"][n]
                                                + base.concurrent_curves[mode]["readout"][n]) / (2.5 if n == "65536" else 1)
                                            for n in base.concurrent_curves[mode]["storein"]})
            for mode, by in model.pattern_curves.items()}
    upkeep = {mode: dict(by, allgather=dict(by["alltoall"]), alltoall={n: 3 * v for n, v in by["alltoall"].items()})
              for mode, by in model.pattern_maintenance_curves.items()}
    checked, checks = cons.check_model(dataclasses.replace(model, pattern_curves=data,
                                                           pattern_maintenance_curves=upkeep))
    for kind, pattern in (("copy", "alltoall "), ("maintenance", "allgather ")):
        got = [c for c in checks if c["primitive"] == kind]
        assert got and all(c["verdict"] == "agrees" and c["same_copies"].startswith(pattern) for c in got)
    views = {(c["coherence"], c["size_bytes"]): c for c in checks if c["primitive"] == "view"}
    assert {k for k, c in views.items() if c["verdict"] == "refused: slower"} == {("hw", 65536), ("flush", 65536)}
    for mode in ("hw", "flush"):
        kinds, old = checked.concurrent_curves[mode], base.concurrent_curves[mode]
        assert kinds["storein"]["65536"] + kinds["readout"]["65536"] == pytest.approx(
            (old["storein"]["65536"] + old["readout"]["65536"]) / 2.5)
        assert kinds["copyin"] == old["copyin"]


def test_agreeing_primitives_are_kept_as_they_are():
    model = _same_patterns(_model())
    checked, checks = cons.check_model(model)
    assert checks and all(c["verdict"] == "agrees" for c in checks)
    assert checked.concurrent_curves == model.concurrent_curves
    assert all(c["size_bytes"] >= cons.CHECK_MIN_BYTES for c in checks)
    assert {c["primitive"] for c in checks} == {"copy", "maintenance"}


def test_a_primitive_from_a_slow_stretch_is_refused_and_the_prediction_follows():
    """c2's case: the flush concurrent copy at 64 KiB 2.6x the same copies in the collectives' blocks."""
    base = _model()
    model = _same_patterns(base, {("flush", "copy", 65536): 2.6, ("flush", "maintenance", 65536): 2.6,
                                  ("hw", "copy", 1048576): 1 / 2.0})
    checked, checks = cons.check_model(model)
    by = {(c["coherence"], c["primitive"], c["size_bytes"]): c for c in checks}
    refused = [k for k, c in by.items() if c["verdict"] == "refused: slower"]
    assert sorted(refused) == [("flush", "copy", 65536), ("flush", "maintenance", 65536)]
    assert by[("flush", "copy", 65536)]["ratio"] == pytest.approx(2.6)
    assert by[("hw", "copy", 1048576)]["verdict"] == "kept: faster"
    kinds, old = checked.concurrent_curves["flush"], base.concurrent_curves["flush"]
    assert kinds["copyin"]["65536"] + kinds["copyout"]["65536"] == pytest.approx(
        (old["copyin"]["65536"] + old["copyout"]["65536"]) / 2.6)
    assert kinds["copyin"]["65536"] / kinds["copyout"]["65536"] == pytest.approx(
        old["copyin"]["65536"] / old["copyout"]["65536"])  # scaled together: the model uses their sum
    assert kinds["copyin"]["1048576"] == old["copyin"]["1048576"]
    assert checked.concurrent_curves["hw"] == base.concurrent_curves["hw"]
    before = predict_local(model, Coherence.FLUSH, "copy", 65536)
    after = predict_local(checked, Coherence.FLUSH, "copy", 65536)
    assert after < 0.7 * before
    text = cons.format_checks(checks)
    assert "2 refused" in text and "1 kept (faster)" in text and "alltoall 65536" in text
