"""`calibrate_local`: the local calibration end to end.

Measure the primitives, measure the allgather (held out), fit from the primitives (and the
round trips and concurrent copies measured around every allgather job), predict every
measurement, optionally under injected CXL timing, time MPI_Allgather, measure the pool
allreduce's threshold (`allreduce_threshold`), and, with `collectives`, the fold and per-call
primitives of the other pool collectives and those collectives themselves (held out,
`collective_measure`), predicted by the same model (`collectives`), after the allgather's copy primitives
are checked against the same copies in the collectives' blocks (`consistency`). Units: ns, bytes.
"""
from __future__ import annotations

import dataclasses
import math
import os

from cxlsim.calibrate.allreduce_threshold import measure_allreduce_threshold
from cxlsim.calibrate.collective_measure import (exchange_by_mode, fold_sizes, measure_call_overheads,
                                                 measure_collectives, measure_fold, measure_remote_fold, pattern_curves)
from cxlsim.calibrate.collectives import validate_collectives
from cxlsim.calibrate.consistency import check_model
from cxlsim.calibrate.des import predict_injected
from cxlsim.calibrate.fit import fit_local
from cxlsim.calibrate.local_model import LocalModel
from cxlsim.calibrate.measure import (concurrent_curves, measure_allgather, measure_mpi, measure_primitives,
                                      steady)
from cxlsim.calibrate.states import kept_roundtrips
from cxlsim.calibrate.validation import validate
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.units import UnitError, parse_bandwidth, parse_time


def parse_settings(texts) -> list[tuple[str, float, float]]:
    """'250ns/32GB/s' -> (label, latency_ns, bw_bytes_per_ns)."""
    out = []
    for text in texts:
        lat, sep, bw = text.partition("/")
        try:
            if not sep:
                raise UnitError(f"expected LATENCY/BANDWIDTH like 250ns/32GB/s, got {text!r}")
            out.append((text, parse_time(lat), parse_bandwidth(bw)))
        except UnitError as exc:
            raise InputError(f"--timing: {exc}") from None
    return out


def calibrate_local(sizes, nranks: int = 2, rounds: int = 3, iterations: int | None = None,
                    settings=(), mpi: bool = True, progress=None, path_rule: str = "auto",
                    profile: dict | None = None, collectives: bool = True) -> dict:
    """Measure, fit from primitives, predict every allgather measurement; returns everything.

    profile: a saved local-host profile whose model predicts instead of a fresh fit (the
    primitives are still measured and reported, for comparison)."""
    if len([n for n in set(sizes) if n > 0]) < 2:
        raise InputError(f"--sizes: the local fit needs at least two sizes above 0 B, got {list(sizes)}")
    if profile is not None and profile["kind"] != "local-host":
        raise InputError(f"profile: expected a local-host profile, got kind {profile['kind']!r}")
    collectives = collectives and nranks == 2  # the other collectives' prediction is validated at np 2
    cores = len(os.sched_getaffinity(0))
    step = progress or (lambda what: None)
    prims = measure_primitives(sizes, 2, step)
    prims["np"] = nranks
    meas = measure_allgather(sizes, nranks, rounds, iterations, best_roundtrip_ns=prims["roundtrip_ns"],
                             progress=step)
    # the flag round trips measured before and after every batch are ping-pong primitives too:
    # fit from all of them, so the model and the kept batches share the host placement
    # and so are the concurrent copies measured before and after every batch (np = 2; only the
    # batches in the fast placement), and the per-call overhead measured (np = 1) before every batch
    for b in meas["batches"]:
        for key in ("roundtrip_before_ns", "roundtrip_after_ns"):
            if math.isfinite(b[key]):
                prims["roundtrip_samples_ns"][b["coherence"]].append(b[key])
        for side, values in (b.get("overhead") or {}).items():
            prims["overhead_samples_ns"][side] += values
        for got in [] if b["slow_placement"] else b.get("concurrent", []):
            for kind, by in got.items():
                for n, v in by.items():
                    prims["concurrent_samples_ns"][b["coherence"]].setdefault(kind, {}).setdefault(str(n), []).append(v)
    prims["roundtrip_ns"] = {m: steady(kept_roundtrips(Coherence.parse(m, "round trip"), v))
                             for m, v in prims["roundtrip_samples_ns"].items()}
    prims["overhead_ns"] = {side: steady(v) for side, v in prims["overhead_samples_ns"].items()}
    prims["concurrent_ns"] = concurrent_curves(prims["concurrent_samples_ns"])
    if collectives:
        step("fold and per-call primitives of the other collectives")
        prims["fold"] = measure_fold(fold_sizes(sizes))
        prims["remote_fold"] = measure_remote_fold(fold_sizes(sizes))
        prims["collective_overhead_samples_ns"] = measure_call_overheads()
    model, fit = fit_local(prims, sizes, path_rule)
    if profile is not None:
        model = dataclasses.replace(LocalModel.from_dict(profile["model"]), np=nranks)
        fit = dict(profile.get("fit") or fit, note="model from the given profile, not fitted now")
    step("fitted")
    rows = validate(model, meas["rows"])
    step("DES predictions")
    injected = []
    for label, lat, bw in settings:
        m = measure_allgather(sizes, nranks, max(1, rounds - 1), iterations, best_roundtrip_ns=meas["best_roundtrip_ns"],
                              timing=(lat, bw), progress=step, modes=(Coherence.HW,))
        hw_rows = [dict(r, setting=label) for r in m["rows"] if r["coherence"] == Coherence.HW]
        injected += validate(model, hw_rows, lambda r, lat=lat, bw=bw: predict_injected(
            model, r["coherence"], r["side"], r["size_bytes"], lat, bw))
    mpi_rows = measure_mpi(sizes, nranks) if mpi else None
    threshold = measure_allreduce_threshold(nranks=nranks, rounds=max(3, rounds))
    step("allreduce threshold")
    coll, consistency = None, None
    if collectives:
        coll = measure_collectives(sizes, rounds=rounds, large_bytes=threshold["allreduce_large_bytes"],
                                   best_roundtrip_ns=meas["best_roundtrip_ns"], progress=step)
        for c, values in coll["overhead_samples_ns"].items():
            prims["collective_overhead_samples_ns"].setdefault(c, []).extend(values)
        if profile is None:  # the per-call primitive from every batch (fit_local: `steady` of them), the
            # collectives' copy patterns from the jobs (each row is predicted with its own jobs' anyway)
            model = dataclasses.replace(model, collective_overhead_ns={
                c: steady(v) for c, v in prims["collective_overhead_samples_ns"].items()},
                pattern_curves=pattern_curves(coll["jobs"]), exchange_ns=exchange_by_mode(coll["jobs"]),
                pattern_maintenance_curves=pattern_curves(coll["jobs"], "maintenance"),
                pattern_load_curves=pattern_curves(coll["jobs"], "loads"))
            # the allgather's copy primitives against the same copies in the collectives' blocks
            model, consistency = check_model(model)
        coll["rows"] = validate_collectives(model, coll["rows"], coll["jobs"])
        rows = validate(model, meas["rows"])  # with the flag exchange the collectives' blocks measured
    return {"collectives": coll, "primitives": prims, "model": model, "fit": fit, "allgather": meas, "validation": rows,
            "injected": injected, "mpi": mpi_rows, "cores": cores, "np": nranks, "allreduce_threshold": threshold,
            "consistency": consistency}
