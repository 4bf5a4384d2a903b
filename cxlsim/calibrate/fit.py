"""`fit_local`: the local-host model from the primitive measurements alone, and its least-squares lines.

Flush: fence + lines x per-line cost; write and read pass: a + n / bw; the path per
coherence mode solved so that the DES reproduces the measured flag round trip
(`des.solve_path_ns`). Units: ns, bytes, bytes/ns.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from cxlsim.calibrate.des import AUTO_PATH_RULE, PATH_RULES, des_pingpong_ns, solve_path_ns
from cxlsim.calibrate.local_model import LocalModel, local_preset
from cxlsim.calibrate.measure import steady
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError


def fit_line(x, y) -> tuple[float, float, float]:
    """Least squares y = a + b x on relative error (numpy.linalg.lstsq); returns (a, b, rms relative residual)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.any(y <= 0):
        raise InputError(f"fit: need 2+ points with positive values, got {len(x)} points")
    design = np.stack([np.ones_like(x), x], axis=1) / y[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    rel = (a + b * x - y) / y
    return float(a), float(b), float(np.sqrt(np.mean(rel ** 2)))


def fit_flush_line(lines, times_ns, clock_ns: float = 0.0) -> dict:
    """clflushopt over `lines` lines then a fence took `times_ns`: fit t = clock + fence + lines x per_line.

    Returns fence_ns, per_line_ns (both >= 0) and rms (relative residual of the line).
    """
    a, b, rms = fit_line(lines, times_ns)
    return {"fence_ns": max(a - clock_ns, 0.0), "per_line_ns": max(b, 0.0), "rms": rms}


def _pos_curve(points: dict) -> dict:
    return {str(int(k)): float(v) for k, v in points.items()}


def _excess(curve: dict) -> dict:
    """A single-shot two-process curve less its value at the smallest size (the timing's fixed cost:
    a copy of a byte or two costs next to nothing); the model takes the larger of it and the local
    curve, so only what grows with the size counts."""
    smallest = min(curve, key=int)
    return {str(int(k)): max(float(v) - float(curve[smallest]), 0.0) for k, v in curve.items()}


def fit_local(primitives: dict, sizes, path_rule: str = "auto") -> tuple[LocalModel, dict]:
    """The `local-host` model from the primitive measurements only; returns (model, fit report).

    path_rule: 'auto' (per mode, `AUTO_PATH_RULE`), or one of `PATH_RULES` for both modes.

    The report holds each least-squares line (flush: fence + lines x per-line cost; write and
    read pass: a + n / bw) with its rms relative residual, and the path solve per mode.
    """
    if path_rule != "auto" and path_rule not in PATH_RULES:
        raise InputError(f"path rule: expected 'auto' or one of {PATH_RULES}, got {path_rule!r}")
    clock = primitives["clock_read_ns"]
    wb = fit_flush_line(primitives[Coherence.FLUSH]["lines"], primitives[Coherence.FLUSH]["writeback_sfence_ns"], clock)
    inv = fit_flush_line(primitives[Coherence.FLUSH]["lines"], primitives[Coherence.FLUSH]["invalidate_mfence_ns"], clock)
    report = {"flush_writeback": wb, "flush_invalidate": inv}
    fence = {Coherence.HW: wb["fence_ns"], Coherence.FLUSH: inv["fence_ns"]}
    per_line = (wb["per_line_ns"] + inv["per_line_ns"]) / 2
    ack = {}
    if "writeback_mfence_ns" in primitives[Coherence.FLUSH]:  # acknowledgements apart from the fence
        wbm = fit_flush_line(primitives[Coherence.FLUSH]["lines"], primitives[Coherence.FLUSH]["writeback_mfence_ns"], clock)
        bare = max(primitives[Coherence.FLUSH]["mfence_ns"] - clock, 0.0)
        report["flush_writeback_mfence"] = wbm
        fence[Coherence.FLUSH] = bare
        ack = {"invalidate": max(inv["fence_ns"] - bare, 0.0), "writeback": max(wbm["fence_ns"] - bare, 0.0)}
        per_line = (wbm["per_line_ns"] + inv["per_line_ns"]) / 2
        report["flush_ack"] = dict(ack, mfence_ns=bare)
    for name in ("write_pass", "read_pass"):
        curve = primitives[name]
        xs = [int(k) for k in curve if int(k) > 0]
        a, b, rms = fit_line(xs, [max(curve[str(x)], 1e-3) for x in xs])
        report[name] = {"fixed_ns": a, "bw_bytes_per_ns": 1.0 / b if b > 0 else float("inf"), "rms": rms}
    base = LocalModel(np=primitives["np"], path_ns={mode: 0.0 for mode in Coherence}, roundtrip_ns=dict(primitives["roundtrip_ns"]),
                      flush_ns_per_line=per_line, fence_ns=fence, flush_ack_ns=ack,
                      overhead_ns=dict(primitives["overhead_ns"]),
                      copy_bw_curve=_pos_curve(primitives["copy_ns"]),
                      write_pass_curve=_pos_curve({k: v - primitives["write_pass"]["0"] for k, v in primitives["write_pass"].items()}),
                      read_pass_curve=_pos_curve({k: v - primitives["read_pass"]["0"] for k, v in primitives["read_pass"].items()}),
                      remote_curves={m: {k: _excess(c) for k, c in kinds.items()}
                                     for m, kinds in primitives.get("remote_ns", {}).items()},
                      concurrent_curves={m: {k: _pos_curve(c) for k, c in kinds.items()}
                                         for m, kinds in primitives.get("concurrent_ns", {}).items()}
                      if primitives["np"] == 2 else {},  # measured at np = 2 only
                      fold_curves={cls: dict(got["ns"]) for cls, got in primitives.get("fold", {}).items()},
                      collective_overhead_ns={c: steady(v) for c, v in
                                              primitives.get("collective_overhead_samples_ns", {}).items()})
    paths = {}
    ref = max(int(s) for s in sizes) if sizes else 64
    for mode in Coherence:
        rule = AUTO_PATH_RULE[mode] if path_rule == "auto" else path_rule
        path, des_rt = solve_path_ns(base, 64, mode, base.roundtrip_ns[mode], rule)
        paths[mode] = path
        pingpong = des_pingpong_ns(local_preset(base, 64, path, mode), mode)
        report[f"path_{mode}"] = {"rule": rule, "path_ns": path, "measured_roundtrip_ns": base.roundtrip_ns[mode],
                                  "des_roundtrip_ns": des_rt,
                                  "residual": (des_rt - base.roundtrip_ns[mode]) / base.roundtrip_ns[mode],
                                  "des_pingpong_ns": pingpong}
    report["reference_size_bytes"] = ref
    return dataclasses.replace(base, path_ns=paths), report
