"""A network calibration profile's model: LogGP per protocol regime on a base network preset.

`project_regime` projects the allgather with one regime's LogGP as the NIC and link
figures of the base preset (one link each way on a star, switch latency 0, so a message
costs o + k*G + L + o, the fit's line), by the DES with the MPICH selector
(`cxlsim.projection.run_network`). `predict_network` projects a fitted model at any rank
count: per size the regime's projection, plus the collective-call overhead and the copy
of the rank's own block at the memcpy bandwidth (interpolated between the fitted sizes),
plus the exchange terms.

Exchange terms (`exchange_extra_ns`): the fit's line is a one-way transfer (osu_latency is a
ping-pong: one direction at a time). In an allgather step every rank sends and receives at
once (MPICH's MPIC_Sendrecv), which a point-to-point line cannot see:
- contention: the byte part k*G of each step is stretched by c(k) = 2 bw(k) / bibw(k), how much
  longer a message takes when the other direction runs at the same time (osu_bibw against
  osu_bw at the same size and window, so the tables' common cache and window effects cancel);
  without osu_bibw, c = 1: the two directions are taken as independent (a full-duplex link);
- rendezvous acknowledgement (when the protocol switch is a rendezvous: MPICH's CMA single
  copy): the receiver copies from the sender and then sends the sender a FIN; a ping-pong hides
  it under the next message, a step's send completes only when it arrives: + one
  small-message one-way latency per step (L + 2o of the smallest regime at 0 B).
With a protocol switch both apply to steps at or above it only (below it an eager message is
a copy-in by the sender and a copy-out by the receiver: an exchange runs both ranks' pairs on
the two CPUs at once, in a one-way time); without one, the contention applies at every size.
Each rank's steps are the MPICH algorithm's (`exchange_steps`); at np 2 every algorithm is one
step of m bytes (plus the own-block copy, MPIR_Localcopy).
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

__all__ = ["project_regime", "project_fit", "predict_network", "contention_curve", "exchange_steps", "exchange_extra_ns"]


def project_regime(base_preset: str, nodes: int, regime, sizes) -> dict:
    """The allgather projected with the regime's LogGP as nic/link overrides of `base_preset`:
    {size: (ns, algorithm)}.

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
    return {row["size_bytes"]: (row["latency_us"] * 1e3, row["algorithm"]) for row in rows}


def project_fit(base_preset: str, nodes: int, fit: LogGPFit, sizes) -> dict:
    """Every size projected with its own regime: {size: (ns, algorithm)}."""
    out = {}
    for regime in fit.regimes:
        mine = [s for s in sizes if fit.regime_for(s) is regime]
        if mine:
            out.update(project_regime(base_preset, nodes, regime, mine))
    return out


def contention_curve(bw_table, bibw_table) -> dict:
    """{size: c} with c = 2 bw / bibw at every size both tables hold (MB/s columns); InputError if none."""
    bw = dict(zip(bw_table.sizes, bw_table.column(bw_table.columns[1])))
    bibw = dict(zip(bibw_table.sizes, bibw_table.column(bibw_table.columns[1])))
    common = sorted(s for s in bw if s in bibw and s > 0)
    if not common:
        raise InputError(f"osu_bibw {bibw_table.title!r} and osu_bw {bw_table.title!r} share no message size; "
                         "the exchange contention compares them size by size")
    bad = [s for s in common if not (bw[s] > 0 and bibw[s] > 0)]
    if bad:
        raise InputError(f"osu_bw/osu_bibw: bandwidth must be > 0, got 0 or less at {bad[0]} B")
    return {s: 2.0 * bw[s] / bibw[s] for s in common}


def _contention(curve: dict, size: int) -> float:
    """c at `size`: interpolated in log2(size) between the measured sizes, the end values beyond them."""
    known = sorted(curve)
    return float(np.interp(np.log2(max(size, 1)), np.log2(known), [curve[k] for k in known]))


def exchange_steps(algorithm: str, nodes: int, size_bytes: int) -> list[int]:
    """The bytes each rank sends (and receives at the same time) per step of MPICH's allgather."""
    if nodes == 2:
        return [size_bytes]
    if algorithm == "recursive_doubling":
        return [size_bytes << i for i in range(nodes.bit_length() - 1)]
    if algorithm == "ring":
        return [size_bytes] * (nodes - 1)
    if algorithm == "bruck":
        steps, dist = [], 1
        while dist < nodes:
            steps.append(size_bytes * min(dist, nodes - dist))
            dist *= 2
        return steps
    raise InputError(f"exchange terms: no step schedule for allgather algorithm {algorithm!r} at np {nodes} "
                     "(known: recursive_doubling, ring, bruck)")


def exchange_extra_ns(exchange: dict, fit: LogGPFit, algorithm: str, nodes: int, size_bytes: int) -> float:
    """Contention (c - 1) k G plus the rendezvous FIN per step (see the module docstring); 0 without terms.

    With a protocol switch, both apply only to steps of at least that many bytes: below it a
    message is one eager copy-in by the sender and copy-out by the receiver, which an exchange
    runs on the two CPUs at once in the time of a one-way message."""
    if not exchange:
        return 0.0
    curve = {int(k): v for k, v in exchange["contention"].items()} if exchange.get("contention") else None
    switch = exchange.get("protocol_switch_bytes")
    extra = 0.0
    for k in exchange_steps(algorithm, nodes, size_bytes):
        if switch is not None and k < switch:
            continue
        if curve:
            extra += (_contention(curve, k) - 1.0) * k * fit.regime_for(k).gap_per_byte_ns
        extra += exchange.get("fin_ns", 0.0)
    return extra


def predict_network(model: dict, sizes, nodes: int) -> list[dict]:
    """A network profile's projection at `nodes` ranks: size_bytes, pure_ns, exchange_ns, full_ns
    (pure + exchange terms + overhead + own copy; the copy is not added when the model's line
    came from a rewritten-buffer latency table, which holds it)."""
    fit = LogGPFit.from_dict(model["loggp"])
    copy_bw = {int(k): v for k, v in model["memcpy_bw_bytes_per_ns"].items()}
    pure = project_fit(model["base_preset"], nodes, fit, sizes)
    known = sorted(copy_bw)
    rows = []
    for s in sizes:
        ns, algorithm = pure[s]
        extra = exchange_extra_ns(model.get("exchange") or {}, fit, algorithm, nodes, s)
        own_copy = 0.0 if model.get("own_copy_in_line") else s / float(np.interp(s, known, [copy_bw[k] for k in known]))
        rows.append({"size_bytes": s, "pure_ns": ns, "exchange_ns": extra,
                     "full_ns": ns + extra + model["collective_overhead_ns"] + own_copy})
    return rows
