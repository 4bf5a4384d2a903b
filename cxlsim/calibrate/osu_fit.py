"""The `--from-osu` path: LogGP from a user's osu_latency/osu_bw, osu_allgather re-predicted.

osu_latency and osu_bw give LogGP per protocol regime (`cxlsim.loggp.fit_loggp`);
osu_allgather is re-predicted with `cxlsim.simulate.run` (nic o, g, G and link latency per
regime) and compared per size. Point-to-point tables cannot see a per-collective software
overhead nor MPICH's copy of the rank's own block into recvbuf: the report shows the pure
prediction and a variant that adds both (the overhead anchored on the smallest row, the copy
at the host memcpy bandwidth). Units: ns, bytes, bytes/ns.
"""
from __future__ import annotations

import statistics

import numpy as np

from cxlsim.errors import InputError


def _classify(paths):
    from cxlsim.emulator.osu import read_osu

    found = {"latency": [], "bw": [], "allgather": []}
    for path in paths:
        for table in read_osu(path):
            if table.kind not in found:
                raise InputError(f"{path}: table {table.title!r} is neither osu_latency, osu_bw nor "
                                 "osu_allgather (its title names none of latency, bandwidth, allgather)")
            found[table.kind].append((path, table))
    if not found["latency"]:
        raise InputError("--from-osu: no osu_latency table among the files; LogGP needs one")
    if not found["allgather"]:
        raise InputError("--from-osu: no osu_allgather table among the files: nothing to re-predict")
    for kind, tables in found.items():
        if len(tables) > 1:
            raise InputError(f"--from-osu: {len(tables)} {kind} tables ({', '.join(p for p, _ in tables)}); "
                             "give one of each kind")
    return found


def _simulate_sizes(base_preset: str, nodes: int, regime, sizes) -> dict:
    """cxlsim.simulate.run with the regime's LogGP as nic/link overrides: {size: ns}.

    One link each way on a star, switch latency 0: a message costs o + k*G (the
    injection at G = 1/link bandwidth) + 2 x L/2 + o, the fit's line.
    """
    from cxlsim import config, simulate

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
    return {row["size_bytes"]: row["latency_us"] * 1e3 for row in simulate.run(scenario)}


def from_osu(paths, nodes: int = 2, base_preset: str = "ib-hdr",
             memcpy_bw_bytes_per_ns: float | None = None) -> dict:
    """Fit LogGP from the files and re-predict their osu_allgather; returns model and rows.

    rows: size_bytes, measured_ns, pure_ns (point-to-point LogGP through the DES), full_ns
    (+ collective overhead anchored on the smallest row + the own-block copy at the memcpy
    bandwidth), pure_error, full_error (relative), anchor (True on the anchor row).
    memcpy_bw_bytes_per_ns: the host's copy bandwidth (None: measure this machine's at each size).
    """
    from cxlsim.loggp import fit_loggp

    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 2:
        raise InputError(f"--np: expected a whole number of ranks >= 2, got {nodes!r}")
    found = _classify(paths)
    latency = found["latency"][0][1]
    bw = found["bw"][0][1] if found["bw"] else None
    fit = fit_loggp(latency, bw)
    path, allgather = found["allgather"][0]
    sizes = allgather.sizes
    measured = [v * 1e3 for v in allgather.column(allgather.columns[1])]
    pure = {}
    for regime in fit.regimes:
        mine = [s for s in sizes if fit.regime_for(s) is regime]
        if mine:
            pure.update(_simulate_sizes(base_preset, nodes, regime, mine))
    if memcpy_bw_bytes_per_ns is None:
        from cxlsim.emulator.copybw import copy_bandwidth_curve

        copy_bw = copy_bandwidth_curve([max(s, 1) for s in sizes], min_time_s=0.002)
        copy_bw = {s: copy_bw[max(s, 1)] for s in sizes}
        copy_source = "measured on this machine (copybw.copy_bandwidth_curve, per size)"
    else:
        if not memcpy_bw_bytes_per_ns > 0:
            raise InputError(f"--memcpy-bandwidth: expected > 0, got {memcpy_bw_bytes_per_ns!r}")
        copy_bw = {s: memcpy_bw_bytes_per_ns for s in sizes}
        copy_source = f"given: {memcpy_bw_bytes_per_ns!r} bytes/ns"
    anchor = min(range(len(sizes)), key=lambda i: sizes[i])
    own_copy = {s: s / copy_bw[s] for s in sizes}
    overhead = measured[anchor] - pure[sizes[anchor]] - own_copy[sizes[anchor]]
    rows = []
    for i, s in enumerate(sizes):
        full = pure[s] + overhead + own_copy[s]
        rows.append(dict(size_bytes=s, measured_ns=measured[i], pure_ns=pure[s], full_ns=full,
                         own_copy_ns=own_copy[s], pure_error=(pure[s] - measured[i]) / measured[i],
                         full_error=(full - measured[i]) / measured[i], anchor=i == anchor))
    model = {"base_preset": base_preset, "np": nodes, "loggp": fit.to_dict(),
             "collective_overhead_ns": overhead, "memcpy_bw_bytes_per_ns": {str(s): copy_bw[s] for s in sizes},
             "memcpy_source": copy_source,
             "files": {"latency": found["latency"][0][0], "bw": found["bw"][0][0] if bw else None,
                       "allgather": path}}
    return {"model": model, "rows": rows, "fit": fit}


def _summary(errors) -> tuple[float, float]:
    values = [abs(e) for e in errors]
    return (statistics.median(values), max(values)) if values else (float("nan"), float("nan"))


def predict_network(model: dict, sizes, nodes: int) -> list[dict]:
    """A network profile's projection at `nodes` ranks: size_bytes, pure_ns, full_ns (+ overhead + own copy)."""
    from cxlsim.loggp import LogGPFit

    fit = LogGPFit.from_dict(model["loggp"])
    copy_bw = {int(k): v for k, v in model["memcpy_bw_bytes_per_ns"].items()}
    pure = {}
    for regime in fit.regimes:
        mine = [s for s in sizes if fit.regime_for(s) is regime]
        if mine:
            pure.update(_simulate_sizes(model["base_preset"], nodes, regime, mine))
    known = sorted(copy_bw)
    rows = []
    for s in sizes:
        bw = float(np.interp(s, known, [copy_bw[k] for k in known]))
        rows.append({"size_bytes": s, "pure_ns": pure[s],
                     "full_ns": pure[s] + model["collective_overhead_ns"] + s / bw})
    return rows


def report_from_osu(result: dict) -> str:
    fit, rows, model = result["fit"], result["rows"], result["model"]
    lines = [f"# LogGP fit ({fit.identified})"]
    for r in fit.regimes:
        lines.append(f"#   {r.min_size_bytes}..{r.max_size_bytes} B: L {r.latency_ns:.1f} ns, o = g "
                     f"{r.overhead_ns:.1f} ns, G {r.gap_per_byte_ns:.5f} ns/B, line rms {r.rms_rel_error * 100:.1f}%")
    lines.append(f"# re-predicted {model['files']['allgather']} at np {model['np']} with cxlsim.simulate "
                 f"(base preset {model['base_preset']}, MPICH selector)")
    lines.append(f"# pure: point-to-point LogGP only; full: + collective-call overhead "
                 f"{model['collective_overhead_ns']:.0f} ns (anchored on the smallest row, excluded below) "
                 f"+ own-block copy at the memcpy bandwidth ({model['memcpy_source']})")
    lines.append(f"# {'Size':<10}{'measured(us)':>14}{'pure(us)':>12}{'err%':>8}{'full(us)':>12}{'err%':>8}")
    for row in rows:
        lines.append(f"{row['size_bytes']:<12d}{row['measured_ns'] / 1e3:>14.2f}{row['pure_ns'] / 1e3:>12.2f}"
                     f"{row['pure_error'] * 100:>8.1f}{row['full_ns'] / 1e3:>12.2f}{row['full_error'] * 100:>8.1f}"
                     f"{'  (anchor)' if row['anchor'] else ''}")
    kept = [r for r in rows if not r["anchor"]]
    pm, px = _summary(r["pure_error"] for r in rows)
    fm, fx = _summary(r["full_error"] for r in kept)
    lines.append(f"# pure: median |error| {pm * 100:.1f}%, worst {px * 100:.1f}% (all rows)")
    lines.append(f"# full: median |error| {fm * 100:.1f}%, worst {fx * 100:.1f}% (without the anchor row)")
    return "\n".join(lines) + "\n"
