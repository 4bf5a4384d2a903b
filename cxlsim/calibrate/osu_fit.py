"""The `--from-osu` path: LogGP from a user's osu_latency/osu_bw, osu_allgather re-predicted.

osu_latency (and osu_bw, for the large-message gap) give LogGP per protocol regime
(`cxlsim.loggp.fit_loggp`); that is the fit, and those two files are all it needs. The
allgather is then projected on the base preset with the regime's LogGP as its NIC and link
figures (`cxlsim.projection.run_network`, the MPICH selector). An osu_allgather file, when
given, only validates: it is re-predicted and compared per size. Point-to-point tables
cannot see a per-collective software overhead nor MPICH's copy of the rank's own block into
recvbuf: the report shows the pure prediction and a variant that adds both (the overhead
anchored on the smallest osu_allgather row, the copy at the host memcpy bandwidth); without
an osu_allgather file the overhead is unknown, taken as 0 and said so.

Nor can a one-way line see an exchange (both directions at once) or the rendezvous
acknowledgement: the full variant adds the exchange terms of `cxlsim.calibrate.network_model`.
Their inputs: an osu_bibw table (with osu_bw, or a 1-pair osu_mbw_mr, at the same sizes) for
the contention, else c = 1 (independent directions) and the report says so;
`protocol_switch_bytes`, the library's eager switch (MPICH 4-5 on one node: the CMA threshold,
MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD, 8192 B by default), which also places the fit's regime
split (without it the split is found from the rows); and `rendezvous_fin`, whether the switch
is a rendezvous whose receiver acknowledges (MPICH's CMA: yes; CMA off: no).

A window-1 osu_bibw (`osu_bibw -W 1`: one message each way at once, the working set of one
exchange step; the title says "window 1") measures an exchange step itself. Given one, the
exchange term of a step of k bytes is its measured excess over a one-way message, T_bibw1(k) -
T_latency(k), against the latency table of the same cache state (osu_latency for an unchanged
buffer, the rewritten-buffer table for a "rewritten" bibw). That excess holds the rendezvous
acknowledgement and any contention of the two directions, so no FIN is added, and it replaces
the window-64 contention (whose 64 distinct buffers stream from DRAM, unlike an exchange of
cached blocks). It is handed to `network_model` as the stretch c(k) = 1 + excess(k) / (k G) of
the step's byte part, which gives the measured excess at every measured size (and interpolates
c in log2(size) between them). Given the private cache per core of the machine the files come
from (`cache_bytes`, its L2), the stretch of an unchanged-buffer exchange is used only while the
step's two buffers (send k, receive k) fit in it: a larger step takes the stretch of the largest
measured size that fits. Beyond that size the unchanged benchmark re-reads a source its reader no
longer holds, at the same time as the peer does; an allgather step sends a block just written in
the sender's cache at every size, and does not pay that (experiments/osu_hypotheses/README.md,
"The 1 MiB row").

Nor does osu_latency see the cache state of an allgather's data: it re-sends an unchanged
buffer, which a single-copy reader keeps in its own cache, while MPICH's allgather first
copies the own block into recvbuf and sends it from there, so the reader pulls lines just
written in the other core's cache. A latency table measured with the send buffer rewritten
before each send (title: "... rewritten ...", `experiments/osu_hypotheses/osu_loops.c`
fresh) replaces osu_latency for the fit; its line then holds the own-block copy, which is not
added again.
Units: ns, bytes, bytes/ns.
"""
from __future__ import annotations

import re
import statistics

from cxlsim import config
from cxlsim.calibrate.network_model import contention_curve, exchange_extra_ns, project_fit
from cxlsim.errors import InputError

KINDS = ("latency", "fresh", "bw", "bibw", "mbw_mr", "allgather", "bw_window1", "bibw_window1", "fresh_bibw_window1")
WINDOW_1 = re.compile(r"window(\s*size)?\s*:?\s*1\b", re.IGNORECASE)


def table_kind(table) -> str:
    """One of KINDS or 'unknown', from the title: OSU's bibw and mbw_mr titles also say 'Bandwidth';
    'fresh' is a latency table whose send buffer is rewritten before each send; a bandwidth title
    saying 'window 1' (or 'window size: 1') is a window-1 run, one message per iteration."""
    title = table.title.lower().replace("-", "").replace(" ", "")
    window_1 = bool(WINDOW_1.search(table.title))
    if "bidirectional" in title:
        if window_1:
            return "fresh_bibw_window1" if "rewritten" in title else "bibw_window1"
        return "bibw"
    if window_1 and table.kind == "bw":
        return "bw_window1"
    if "multiplebandwidth" in title or "messagerate" in title:
        return "mbw_mr"
    if table.kind == "latency" and "rewritten" in title:
        return "fresh"
    return table.kind


def _classify(paths):
    from cxlsim.emulator.osu import parse_osu

    found = {kind: [] for kind in KINDS}
    for path in paths:
        text = config.read_text(path, "--from-osu file")
        for table in parse_osu(text, source=path):
            kind = table_kind(table)
            if kind not in found:
                raise InputError(f"{path}: table {table.title!r} is none of osu_latency, osu_bw, osu_bibw, "
                                 "osu_mbw_mr, osu_allgather (its title names none of latency, bandwidth, "
                                 "bi-directional, message rate, allgather)")
            if kind == "mbw_mr":
                pairs = re.search(r"pairs:\s*(\d+)", text)
                if pairs and int(pairs.group(1)) != 1:
                    raise InputError(f"{path}: osu_mbw_mr with {pairs.group(1)} pairs; the np-2 fit uses it as "
                                     "the one-way bandwidth of one pair: give a 1-pair run")
            found[kind].append((path, table))
    if not found["latency"] and not found["fresh"]:
        raise InputError("--from-osu: no osu_latency table among the files; LogGP needs one")
    for kind, tables in found.items():
        if len(tables) > 1:
            raise InputError(f"--from-osu: {len(tables)} {kind} tables ({', '.join(p for p, _ in tables)}); "
                             "give one of each kind")
    if found["bw_window1"]:
        raise InputError(f"--from-osu: {found['bw_window1'][0][0]} is a window-1 osu_bw: its smallest message "
                         "gives a latency, not the message rate o = g is taken from, and the exchange is "
                         "measured by a window-1 osu_bibw against osu_latency; give osu_bw at its default window")
    exchanges = found["bibw"] + found["bibw_window1"] + found["fresh_bibw_window1"]
    if len(exchanges) > 1:
        raise InputError(f"--from-osu: {', '.join(p for p, _ in exchanges)} each give the exchange term "
                         "(a window-1 osu_bibw measures one exchange step; a windowed one, the contention); give one")
    if found["latency"] and found["fresh"] and not found["bibw_window1"]:
        raise InputError(f"--from-osu: osu_latency ({found['latency'][0][0]}) and a rewritten-buffer latency "
                         f"({found['fresh'][0][0]}) both give the fit's line; give one (both only with a "
                         "window-1 osu_bibw, which osu_latency is then the one-way reference of)")
    for kind, reference in (("bibw_window1", "latency"), ("fresh_bibw_window1", "fresh")):
        if found[kind] and not found[reference]:
            what = "osu_latency" if reference == "latency" else "a rewritten-buffer latency table"
            raise InputError(f"--from-osu: the window-1 osu_bibw {found[kind][0][0]} is compared with {what} of "
                             "the same cache state at the same sizes: add it")
    if found["bw"] and found["mbw_mr"]:
        raise InputError(f"--from-osu: osu_bw ({found['bw'][0][0]}) and osu_mbw_mr ({found['mbw_mr'][0][0]}) "
                         "both give the one-way bandwidth; give one")
    if found["bibw"] and not (found["bw"] or found["mbw_mr"]):
        raise InputError(f"--from-osu: osu_bibw ({found['bibw'][0][0]}) is compared with the one-way "
                         "bandwidth at the same sizes: add osu_bw or osu_mbw_mr")
    return found


def window1_excess(bibw_table, latency_table) -> dict:
    """{size: ns}: a window-1 osu_bibw iteration (one message each way) minus the one-way osu_latency
    at every size both tables hold (> 0 B); InputError if none."""
    times = dict(zip(bibw_table.sizes, bibw_table.column(bibw_table.columns[1])))
    latency = dict(zip(latency_table.sizes, latency_table.column(latency_table.columns[1])))
    common = sorted(s for s in times if s in latency and s > 0)
    if not common:
        raise InputError(f"window-1 osu_bibw {bibw_table.title!r} and {latency_table.title!r} share no message size")
    if any(not times[s] > 0 for s in common):
        raise InputError(f"window-1 osu_bibw {bibw_table.title!r}: bandwidth must be > 0 at every size")
    return {s: 2 * s / (times[s] * 1e6) * 1e9 - latency[s] * 1e3 for s in common}


def _window1_contention(excess: dict, fit, protocol_switch_bytes, cache_bytes=None) -> dict:
    """{size: c} with (c - 1) k G equal to the measured excess, at the sizes where the terms apply; with
    `cache_bytes`, the sizes whose two buffers exceed it take c of the largest size whose buffers fit."""
    curve = {}
    for k, extra in excess.items():
        byte_part = k * fit.regime_for(k).gap_per_byte_ns
        if (protocol_switch_bytes is None or k >= protocol_switch_bytes) and byte_part > 0:
            curve[k] = 1.0 + extra / byte_part
    if not curve:
        raise InputError("window-1 osu_bibw: no size at or above the protocol switch with a byte part k G > 0 "
                         "to carry the exchange excess")
    if cache_bytes is not None:
        fitting = [k for k in curve if 2 * k <= cache_bytes]
        if not fitting:
            raise InputError(f"--cache-bytes {cache_bytes}: no window-1 osu_bibw size at or above the protocol "
                             "switch whose two buffers fit in it, to take the exchange stretch from")
        held = curve[max(fitting)]
        curve = {k: (c if 2 * k <= cache_bytes else held) for k, c in curve.items()}
    return curve


def _exchange(found, fit, protocol_switch_bytes, rendezvous_fin, cache_bytes=None) -> dict:
    """The exchange terms' inputs and where each comes from (see network_model)."""
    one_way = (found["bw"] or found["mbw_mr"] or [(None, None)])[0]
    window1 = found["bibw_window1"] or found["fresh_bibw_window1"]
    if window1:
        path, bibw = window1[0]
        reference_path, reference = (found["fresh"] if found["fresh_bibw_window1"] else found["latency"])[0]
        excess = window1_excess(bibw, reference)
        curve = _window1_contention(excess, fit, protocol_switch_bytes, cache_bytes)
        contention_source = (f"measured exchange step: window-1 osu_bibw {path} minus one-way {reference_path} "
                             f"({min(excess.values()):.0f}..{max(excess.values()):.0f} ns), as c = 1 + excess / kG; "
                             "it holds the acknowledgement")
        if cache_bytes is not None:
            contention_source += (f"; steps whose two buffers exceed the {cache_bytes}-byte cache per core take c of "
                                  f"{max(k for k in curve if 2 * k <= cache_bytes)} B")
    elif found["bibw"]:
        path, bibw = found["bibw"][0]
        curve = contention_curve(one_way[1], bibw)
        contention_source = f"c = 2 bw / bibw from {one_way[0]} and {path}"
    else:
        curve = None
        contention_source = "no osu_bibw: c = 1, the two directions taken as independent (assumption)"
    if protocol_switch_bytes is not None:
        contention_source += f", on steps of {protocol_switch_bytes} B or more"
    if window1:
        fin_ns, fin_source = 0.0, "inside the window-1 exchange (not added)"
    elif not rendezvous_fin:
        fin_ns, fin_source = 0.0, "none (no rendezvous acknowledgement given)"
    else:
        small = fit.regimes[0]
        fin_ns = small.latency_ns + 2 * small.overhead_ns
        fin_source = (f"L + 2o of the {small.min_size_bytes}..{small.max_size_bytes} B regime "
                      f"({fin_ns:.0f} ns) per step of {protocol_switch_bytes} B or more")
    return {"contention": {str(k): v for k, v in curve.items()} if curve else None,
            "contention_source": contention_source, "protocol_switch_bytes": protocol_switch_bytes,
            "fin_ns": fin_ns, "fin_source": fin_source}


def from_osu(paths, nodes: int = 2, base_preset: str = "ib-hdr",
             memcpy_bw_bytes_per_ns: float | None = None, sizes=None,
             protocol_switch_bytes: int | None = None, rendezvous_fin: bool = False,
             cache_bytes: int | None = None) -> dict:
    """Fit LogGP from the files' osu_latency (and osu_bw) and project the allgather; returns model and rows.

    rows: size_bytes, pure_ns (point-to-point LogGP through the DES), full_ns (+ exchange terms
    + collective overhead + the own-block copy at the memcpy bandwidth), exchange_ns,
    own_copy_ns, and, when the files hold
    an osu_allgather table (which then only validates the fit): measured_ns, pure_error and
    full_error (relative), anchor (True on the smallest row, on which the collective overhead is
    anchored). Without one the rows are at `sizes` (default: the osu_latency sizes), measured_ns
    and the errors are None and the overhead is 0, not measured (the model says so).
    memcpy_bw_bytes_per_ns: the host's copy bandwidth, one value or {size: value} (None: measure
    this machine's at each size).
    protocol_switch_bytes: the library's eager switch (bytes); None: the split is found from the rows.
    rendezvous_fin: the switch is a rendezvous whose receiver acknowledges (needs the switch).
    cache_bytes: the private cache (L2) per core of the files' machine, bytes; only with a window-1
    osu_bibw of unchanged buffers (see the module docstring).
    """
    from cxlsim.loggp import fit_loggp

    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 2:
        raise InputError(f"--np: expected a whole number of ranks >= 2, got {nodes!r}")
    if protocol_switch_bytes is not None and (isinstance(protocol_switch_bytes, bool) or
                                              not isinstance(protocol_switch_bytes, int) or protocol_switch_bytes < 1):
        raise InputError(f"--protocol-switch: expected a message size >= 1 byte, got {protocol_switch_bytes!r}")
    if rendezvous_fin and protocol_switch_bytes is None:
        raise InputError("--rendezvous-fin: the acknowledgement starts at the protocol switch: give --protocol-switch")
    found = _classify(paths)
    if rendezvous_fin and (found["bibw_window1"] or found["fresh_bibw_window1"]):
        raise InputError("--rendezvous-fin: a window-1 osu_bibw measures the exchange step with its "
                         "acknowledgement; leave --rendezvous-fin out")
    if cache_bytes is not None:
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 1:
            raise InputError(f"--cache-bytes: expected a size >= 1 byte, got {cache_bytes!r}")
        if not found["bibw_window1"]:
            raise InputError("--cache-bytes: it bounds the sizes at which a window-1 osu_bibw of unchanged buffers "
                             "gives the exchange step; give one (a rewritten-buffer one needs no bound)")
    fresh = bool(found["fresh"])
    latency_path, latency = (found["fresh"] or found["latency"])[0]
    one_way = found["bw"] or found["mbw_mr"]
    bw = one_way[0][1] if one_way else None
    fit = fit_loggp(latency, bw, split_at=protocol_switch_bytes)
    exchange = _exchange(found, fit, protocol_switch_bytes, rendezvous_fin, cache_bytes)
    if found["allgather"]:
        if sizes is not None:
            raise InputError("--sizes: the osu_allgather file fixes the sizes it validates; give --sizes only "
                             "without one")
        path, allgather = found["allgather"][0]
        sizes = list(allgather.sizes)
        measured = [v * 1e3 for v in allgather.column(allgather.columns[1])]
    else:
        path, measured = None, None
        sizes = sorted(set(latency.sizes)) if sizes is None else list(sizes)
    projected = project_fit(base_preset, nodes, fit, sizes)
    pure = {s: ns for s, (ns, _) in projected.items()}
    extra = {s: exchange_extra_ns(exchange, fit, algorithm, nodes, s) for s, (_, algorithm) in projected.items()}
    if fresh:
        if memcpy_bw_bytes_per_ns is not None:
            raise InputError(f"--memcpy-bandwidth: the rewritten-buffer latency table ({latency_path}) holds the "
                             "own-block copy, so no memcpy bandwidth is used; leave it out")
        copy_bw = {}
        copy_source = "not used: the own-block copy is inside the rewritten-buffer latency line"
    elif memcpy_bw_bytes_per_ns is None:
        from cxlsim.emulator.copybw import copy_bandwidth_curve

        copy_bw = copy_bandwidth_curve([max(s, 1) for s in sizes], min_time_s=0.002)
        copy_bw = {s: copy_bw[max(s, 1)] for s in sizes}
        copy_source = "measured on this machine (copybw.copy_bandwidth_curve, per size)"
    elif isinstance(memcpy_bw_bytes_per_ns, dict):
        missing = [s for s in sizes if s not in memcpy_bw_bytes_per_ns]
        if missing or not all(v > 0 for v in memcpy_bw_bytes_per_ns.values()):
            raise InputError(f"--memcpy-bandwidth: a per-size curve needs a value > 0 at every size "
                             f"(missing {missing[:3]})")
        copy_bw = {s: float(memcpy_bw_bytes_per_ns[s]) for s in sizes}
        copy_source = "given per size"
    else:
        if not memcpy_bw_bytes_per_ns > 0:
            raise InputError(f"--memcpy-bandwidth: expected > 0, got {memcpy_bw_bytes_per_ns!r}")
        copy_bw = {s: memcpy_bw_bytes_per_ns for s in sizes}
        copy_source = f"given: {memcpy_bw_bytes_per_ns!r} bytes/ns"
    anchor = min(range(len(sizes)), key=lambda i: sizes[i])
    own_copy = {s: 0.0 if fresh else s / copy_bw[s] for s in sizes}
    if measured is not None:
        overhead = measured[anchor] - pure[sizes[anchor]] - extra[sizes[anchor]] - own_copy[sizes[anchor]]
        overhead_source = f"anchored on the smallest osu_allgather row ({sizes[anchor]} B)"
    else:
        overhead = 0.0
        overhead_source = "not measured (no osu_allgather file): taken as 0"
    rows = []
    for i, s in enumerate(sizes):
        full = pure[s] + extra[s] + overhead + own_copy[s]
        row = dict(size_bytes=s, measured_ns=None, pure_ns=pure[s], full_ns=full, exchange_ns=extra[s],
                   own_copy_ns=own_copy[s],
                   pure_error=None, full_error=None, anchor=False)
        if measured is not None:
            row.update(measured_ns=measured[i], pure_error=(pure[s] - measured[i]) / measured[i],
                       full_error=(full - measured[i]) / measured[i], anchor=i == anchor)
        rows.append(row)
    model = {"base_preset": base_preset, "np": nodes, "loggp": fit.to_dict(),
             "collective_overhead_ns": overhead, "collective_overhead_source": overhead_source,
             "memcpy_bw_bytes_per_ns": {str(s): v for s, v in copy_bw.items()},
             "memcpy_source": copy_source, "own_copy_in_line": fresh, "exchange": exchange,
             "files": {"latency": latency_path, "latency_rewritten": fresh, "bw": one_way[0][0] if one_way else None,
                       "bibw": found["bibw"][0][0] if found["bibw"] else None,
                       "bibw_window1": next((p for p, _ in found["bibw_window1"] + found["fresh_bibw_window1"]), None),
                       "allgather": path}}
    return {"model": model, "rows": rows, "fit": fit}


def _summary(errors) -> tuple[float, float]:
    values = [abs(e) for e in errors]
    return (statistics.median(values), max(values)) if values else (float("nan"), float("nan"))


def report_from_osu(result: dict) -> str:
    """The fit, then the projected allgather per size; with an osu_allgather file, measured and errors."""
    fit, rows, model = result["fit"], result["rows"], result["model"]
    lines = [f"# LogGP fit ({fit.identified}) from {model['files']['latency']}"
             + (f" and {model['files']['bw']}" if model["files"]["bw"] else "")]
    for r in fit.regimes:
        lines.append(f"#   {r.min_size_bytes}..{r.max_size_bytes} B: L {r.latency_ns:.1f} ns, o = g "
                     f"{r.overhead_ns:.1f} ns, G {r.gap_per_byte_ns:.5f} ns/B, line rms {r.rms_rel_error * 100:.1f}%")
    validated = model["files"]["allgather"] is not None
    what = f"re-predicted {model['files']['allgather']}" if validated else "projected the allgather"
    lines.append(f"# {what} at np {model['np']} with the DES (base preset {model['base_preset']}, MPICH selector)")
    lines.append(f"# pure: point-to-point LogGP only; full: + collective-call overhead "
                 f"{model['collective_overhead_ns']:.0f} ns ({model.get('collective_overhead_source', 'anchored on the smallest row')}"
                 f"{', excluded below' if validated else ''}) "
                 f"+ own-block copy at the memcpy bandwidth ({model['memcpy_source']})")
    exchange = model.get("exchange") or {}
    if exchange:
        lines.append(f"#   + exchange terms: contention {exchange['contention_source']}; rendezvous FIN "
                     f"{exchange['fin_source']}")
    if not validated:
        lines.append("# not validated: no osu_allgather file was given (add one to compare per size)")
        lines.append(f"# {'Size':<10}{'pure(us)':>12}{'full(us)':>12}")
        for row in rows:
            lines.append(f"{row['size_bytes']:<12d}{row['pure_ns'] / 1e3:>12.2f}{row['full_ns'] / 1e3:>12.2f}")
        return "\n".join(lines) + "\n"
    lines.append(f"# {'Size':<10}{'measured(us)':>14}{'pure(us)':>12}{'err%':>8}{'full(us)':>12}{'err%':>8}"
                 f"{'exch(us)':>10}")
    for row in rows:
        lines.append(f"{row['size_bytes']:<12d}{row['measured_ns'] / 1e3:>14.2f}{row['pure_ns'] / 1e3:>12.2f}"
                     f"{row['pure_error'] * 100:>8.1f}{row['full_ns'] / 1e3:>12.2f}{row['full_error'] * 100:>8.1f}"
                     f"{row['exchange_ns'] / 1e3:>10.2f}{'  (anchor)' if row['anchor'] else ''}")
    kept = [r for r in rows if not r["anchor"]]
    pm, px = _summary(r["pure_error"] for r in rows)
    fm, fx = _summary(r["full_error"] for r in kept)
    lines.append(f"# pure: median |error| {pm * 100:.1f}%, worst {px * 100:.1f}% (all rows)")
    lines.append(f"# full: median |error| {fm * 100:.1f}%, worst {fx * 100:.1f}% (without the anchor row)")
    return "\n".join(lines) + "\n"
