"""`cxlsim list`: the catalogs a user looks things up in, each entry with its key figures and sources.

    cxlsim list presets|algorithms|gpus|dnns|modes [--format table|csv|json]

Every catalog is read from its registry, plug-ins included (`CXLSIM_PLUGINS`,
`cxlsim.plugins`): fabric presets (`cxlsim.fabric.preset.presets`), collective
algorithms (`cxlsim.models.collectives.registry`), GPU and DNN profiles
(`cxlsim.models.training.profiles`: gpus.yaml, dnns.yaml) and training modes
(`cxlsim.models.training.modes`). An entry's origin is 'built-in' or the
plug-in module that declares it.

A catalog is a `Listing`: columns, rows of plain values, and notes (what the
source tags stand for, the GPUs left out and why). `--format table` prints an
aligned table whose long cells wrap; csv and json print the same rows.
"""
from __future__ import annotations

import csv
import io
import json
import os
import sys
import textwrap
from dataclasses import dataclass, field

from cxlsim import plugins
from cxlsim.fabric.cxl_presets import CXLPoolPreset
from cxlsim.fabric.preset import presets
from cxlsim.fabric.presets import NetworkPreset
from cxlsim.models.collectives import registry
from cxlsim.models.collectives.base import NoClosedForm
from cxlsim.models.training import modes, profiles

__all__ = ["HELP", "CATALOGS", "FORMATS", "Listing", "listing", "render", "register", "main"]

HELP = "list the presets, algorithms, GPUs, DNNs or training modes, with their key figures and sources"
FORMATS = ("table", "csv", "json")
MAX_WIDTH = 38
"""Widest column of the table, characters; longer cells wrap."""
GIB = 1 << 30


@dataclass
class Listing:
    """One catalog: `rows` of plain values (str, int, float, None) under `columns`, and `notes` printed after."""

    title: str
    columns: list
    rows: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def _origin(record, kind: str) -> str:
    """'built-in', or 'plug-in MODULE' for a record a plug-in module declares in its `kind` list."""
    for module in plugins.modules():
        if any(r is record for r in getattr(module, kind, ())):
            return f"plug-in {module.__name__}"
    return "built-in"


def _preset_figures(p) -> str:
    if isinstance(p, NetworkPreset):
        return (f"{p.link.bw_bytes_per_ns:g} GB/s links, NIC overhead {p.nic.overhead_ns:g} ns, "
                f"{p.switch_kind} switch {p.switch.latency_ns:g} ns ({p.switch.mode})")
    if isinstance(p, CXLPoolPreset):
        if p.max_switch_levels == 0:
            return (f"CXL {p.generation}: load {p.load_latency_ns():g} ns with no switch ({p.device.heads}-headed "
                    f"devices, {p.switch.port_bw_bytes_per_ns:g} GB/s per head link), device "
                    f"{p.device.media_latency_ns:g} ns and {p.device.media_bw_bytes_per_ns:g} GB/s, coherence "
                    f"{'/'.join(str(m) for m in p.coherence_modes)}")
        return (f"CXL {p.generation}: load {p.load_latency_ns(1):g} ns through one switch, device "
                f"{p.device.media_latency_ns:g} ns and {p.device.media_bw_bytes_per_ns:g} GB/s, switch port "
                f"{p.switch.port_bw_bytes_per_ns:g} GB/s, coherence {'/'.join(str(m) for m in p.coherence_modes)}, "
                f"up to {p.max_switch_levels} switch level(s)")
    return "-"


def _presets() -> Listing:
    out = Listing("fabric presets (fabric.preset, --preset)", ["name", "kind", "key figures", "sources", "origin"])
    for p in presets().values():
        out.rows.append([p.name, p.kind, _preset_figures(p), p.source, _origin(p, "PRESETS")])
    out.notes.append("source tags: the docstrings of cxlsim.fabric.presets (network) and cxlsim.fabric.cxl_presets "
                     "(CXL); docs/simulator.md and docs/cxl-study.md. A calibration profile PATH.json is a preset "
                     "too (cxlsim calibrate).")
    if any(row[2] == "-" for row in out.rows):
        out.notes.append("key figures '-': a kind of preset this listing does not know; see its source.")
    return out


def _algorithms() -> Listing:
    out = Listing("collective algorithms (workload.collective, workload.algorithm)",
                  ["collective", "name", "transport", "closed form", "fallback", "source", "origin"])
    for (collective, name), a in sorted(registry.algorithms().items()):
        form = f"none: {a.cost.reason}" if isinstance(a.cost, NoClosedForm) else "yes"
        out.rows.append([collective, name, a.transport, form, a.fallback or "", a.source, _origin(a, "ALGORITHMS")])
    return out


def _gpus() -> Listing:
    catalog = profiles.gpu_catalog()
    out = Listing("GPUs (cluster nodes[].gpu; ResNet-50 v1.5 training throughput on one GPU)",
                  ["key", "name", "architecture", "memory GiB", "memory GB/s", "fp32 img/s", "tf32 img/s",
                   "amp img/s", "batch", "sources"])
    for g in catalog.entries.values():
        rates = [g.img_per_s.get(p) for p in profiles.PRECISIONS]
        derived = [f"derived from {g.derived_from}"] if g.derived_from else []
        out.rows.append([g.key, g.name, g.architecture, g.memory_bytes / GIB, g.memory_bw_bytes_per_ns, *rates,
                         g.reference_batch, ", ".join([*g.sources, *derived])])
    out.notes += [f"[{tag}] {text}" for tag, text in catalog.sources.items()]
    out.notes += [f"left out: {key}: {why}" for key, why in catalog.left_out.items()]
    out.notes.append("No fp32 figure on Ampere: the benchmark's FP32 column ran in TF32. tf32 on older GPUs runs "
                     "their fp32 figure.")
    return out


def _dnns() -> Listing:
    catalog = profiles.dnn_catalog()
    fits = profiles.gpus().values()
    out = Listing("DNN models (cxlsim train --model)",
                  ["key", "name", "parameters", "fp32 gradient MiB", "state GiB", "fits GPUs", "GMACs/sample",
                   "sample", "ref. batch", "sources"])
    for m in catalog.entries.values():
        holding = sum(m.state_bytes <= g.memory_bytes for g in fits)
        out.rows.append([m.key, m.name, m.parameters, m.gradient_bytes("fp32") / (1 << 20), m.state_bytes / GIB,
                         f"{holding} of {len(fits)}", m.gmacs_per_sample, m.sample, m.reference_batch,
                         ", ".join(m.sources)])
    out.notes.append(f"state: {profiles.STATE_BYTES_PER_PARAMETER} B per parameter on every data-parallel GPU "
                     "(mixed-precision Adam, [ZERO]); 'fits GPUs' counts the catalog's GPUs whose memory holds it. "
                     "cxlsim train refuses a model on a GPU that cannot hold its state.")
    out.notes += [f"[{tag}] {text}" for tag, text in catalog.sources.items()]
    return out


def _modes() -> Listing:
    out = Listing("training modes (cxlsim train --mode)", ["name", "summary", "options", "convergence rule",
                                                           "module", "origin"])
    for m in modes.all_modes().values():
        rule = getattr(m.convergence, "__name__", "yes") if m.convergence else "none"
        out.rows.append([m.name, m.summary, " ".join(o.flag for o in m.options), rule, m.run.__module__,
                         _origin(m, "MODES")])
    out.notes.append("Sources of each mode's model: its module's docstring and docs/training.md.")
    return out


CATALOGS = {"presets": _presets, "algorithms": _algorithms, "gpus": _gpus, "dnns": _dnns, "modes": _modes}
"""Catalog name -> the function that lists it."""


def listing(name: str) -> Listing:
    """The catalog called `name` (a key of CATALOGS)."""
    return CATALOGS[name]()


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _table(data: Listing) -> str:
    cells = [[_cell(v) for v in row] for row in data.rows]
    widths = [min(MAX_WIDTH, max([len(c)] + [len(row[i]) for row in cells])) for i, c in enumerate(data.columns)]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in data.rows) and data.rows
               for i in range(len(data.columns))]

    def lines(row):
        wrapped = [textwrap.wrap(c, w, break_on_hyphens=False) or [""] for c, w in zip(row, widths)]
        for k in range(max(len(w) for w in wrapped)):
            parts = [(w[k] if k < len(w) else "") for w in wrapped]
            yield "  ".join(p.rjust(widths[i]) if numeric[i] else p.ljust(widths[i])
                            for i, p in enumerate(parts)).rstrip()

    out = [f"# {data.title}", *lines(data.columns), "  ".join("-" * w for w in widths)]
    for row in cells:
        out.extend(lines(row))
    out += [""] + [textwrap.fill(n, 110, subsequent_indent="    ") for n in data.notes]
    return "\n".join(out)


def render(data: Listing, fmt: str = "table") -> str:
    """The listing as text: an aligned table with its notes, CSV (rows only) or JSON (rows and notes)."""
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(data.columns)
        writer.writerows(["" if v is None else v for v in row] for row in data.rows)
        return buf.getvalue().rstrip("\n")
    if fmt == "json":
        return json.dumps({"title": data.title, "rows": [dict(zip(data.columns, row)) for row in data.rows],
                           "notes": data.notes}, indent=1)
    return _table(data)


def main(args) -> int:
    text = render(listing(args.catalog), args.format)
    try:
        print(text, flush=True)
    except BrokenPipeError:  # e.g. `cxlsim list gpus | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("list", help=HELP, description=HELP + ". Plug-ins (CXLSIM_PLUGINS) are included.")
    p.add_argument("catalog", choices=list(CATALOGS), help="which catalog")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="an aligned table with notes (default), CSV or JSON of the rows")
    p.set_defaults(func=main)
