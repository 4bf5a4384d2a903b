"""A network calibration profile's model: LogGP per protocol regime on a base network preset.

`project_regime` projects the allgather with one regime's LogGP as the NIC and link
figures of the base preset (one link each way on a star, switch latency 0, so a message
costs o + k*G + L + o, the fit's line), by the DES with the MPICH selector
(`cxlsim.projection.run_network`). `predict_network` projects a fitted model at any rank
count: per size the regime's projection, plus the collective-call overhead and the copy
of the rank's own block at the memcpy bandwidth (interpolated between the fitted sizes).
Units: ns, bytes, bytes/ns.
"""
from __future__ import annotations

import numpy as np

from cxlsim import config
from cxlsim.errors import InputError
from cxlsim.fabric.preset import find
from cxlsim.fabric.presets import NetworkPreset
from cxlsim.loggp import LogGPFit
from cxlsim.projection import run_network

__all__ = ["project_regime", "predict_network"]


def project_regime(base_preset: str, nodes: int, regime, sizes) -> dict:
    """The allgather projected with the regime's LogGP as nic/link overrides of `base_preset`: {size: ns}.

    One link each way on a star, switch latency 0: a message costs o + k*G (the
    injection at G = 1/link bandwidth) + 2 x L/2 + o, the fit's line.
    """
    g_per_byte = regime.gap_per_byte_ns
    link_bw = 1.0 / g_per_byte if g_per_byte > 0 else 1e6
    scenario = config.from_dict({
        "name": "calibrate-from-osu",
        "fabric": {"preset": base_preset, "nodes": nodes,
                   "links": {"latency": f"{regime.latency_ns / 2!r} ns", "bandwidth": f"{link_bw!r} GB/s"},
                   "switch": {"latency": "0 ns"},
                   "nic": {"overhead": f"{regime.overhead_ns!r} ns", "gap": f"{regime.gap_ns!r} ns",
                           "gap_per_byte": f"{g_per_byte!r} ns"}},
        "workload": {"collective": "allgather", "algorithm": "auto", "selector": "mpich",
                     "sizes": [int(s) for s in sizes]},
    })
    preset = find(base_preset)
    if preset.kind != NetworkPreset.kind:
        raise InputError(f"--preset: LogGP replaces a network preset's NIC and link figures; {base_preset} is a "
                         f"{preset.kind}")
    rows = run_network(scenario, preset.elaborate(scenario.fabric))
    return {row["size_bytes"]: row["latency_us"] * 1e3 for row in rows}


def predict_network(model: dict, sizes, nodes: int) -> list[dict]:
    """A network profile's projection at `nodes` ranks: size_bytes, pure_ns, full_ns (+ overhead + own copy)."""
    fit = LogGPFit.from_dict(model["loggp"])
    copy_bw = {int(k): v for k, v in model["memcpy_bw_bytes_per_ns"].items()}
    pure = {}
    for regime in fit.regimes:
        mine = [s for s in sizes if fit.regime_for(s) is regime]
        if mine:
            pure.update(project_regime(model["base_preset"], nodes, regime, mine))
    known = sorted(copy_bw)
    rows = []
    for s in sizes:
        bw = float(np.interp(s, known, [copy_bw[k] for k in known]))
        rows.append({"size_bytes": s, "pure_ns": pure[s],
                     "full_ns": pure[s] + model["collective_overhead_ns"] + s / bw})
    return rows
