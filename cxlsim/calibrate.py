"""Calibration: fit the simulator to this machine, or to a user's OSU results, and state its error.

Two sources of figures, one profile format.

**Local measurements** (`cxlsim calibrate`). Primitive microbenchmarks of this host,
never the allgather itself:

- the flag round trip: two processes bounce the pool's flag lines
  (`PoolKernel.flag_pingpong`, the allgather's own publish/poll code, hw and flush);
- cache maintenance: clflushopt over dirty lines then sfence (the writer), over clean
  lines then mfence (the reader), over dirty lines then mfence (the write-backs'
  acknowledgement), and a bare mfence, by size (`_kernels.line_op_ns`);
- the per-call software overhead: an np = 1, zero-byte call of the same Python-to-C
  path, timed by the same loop (`bench.time_loop`): `comm.allgather(empty, empty)` for
  copy mode, the bench's whole zero-copy step (send_view, store, allgather_zero_copy,
  read_pass) for zero-copy mode;
- the copy bandwidth by size (`copybw.copy_bandwidth_curve`) and the application's
  write pass (numpy store of a block) and read pass (`_kernels.read_pass` over np blocks);
- the concurrent copy (`PoolKernel.concurrent_copy`, np = 2): both ranks at once write their
  block into their slot, then copy out (or read in place) every block of the round, one of
  them freshly written by the other core, timed per phase (in, write-back, invalidate, out;
  'in' and 'write-back' end with an mfence, so the stores' drain and the write-backs'
  acknowledgement, which the flag store waits behind, are in them and not in the untimed
  wait) and never through the allgather; one process at a time, copies miss that cross-core
  traffic in both directions, which made the DES about 2x too fast at 16-64 KiB. It is
  measured in its own jobs (A B A B) and, like the flag round trip, before and after every
  allgather job, so the fit and the kept runs share the host placement.

From these alone `fit_local` builds a `local-host` pool model: no switch, no media
latency, a host-to-pool path solved so that the DES's own flag ping-pong on
`CXLPoolTransport` reproduces the measured round trip (the DES is linear in the path, so two
runs give it, unless an acknowledgement below outlasts the path: then it bisects; in flush
mode the DES's polls are quantised, so its round trip jumps with the path and the solve
lands on the jump, reported as its residual; `path_rule='sync'` instead makes the DES's bare sync, where both ranks' flags
cross at once, cost one hop, half the round trip: the DES's sync costs about a whole round
trip at the ping-pong path, since its store takes the line, the poller is woken, then
recalls it; on this machine 'sync' fits hw copy at small sizes better, 'pingpong' flush mode),
host bandwidth per size from the concurrent copy (copy-in + copy-out less the latency the
DES already charges around them, 4 x path; without the primitive, e.g. an older profile or
np != 2, the earlier blend of one-process and remote copies), clflushopt per line from the
maintenance lines or, if larger, from the concurrent write-back and invalidation at that
size, fences from the maintenance lines: in flush mode a bare mfence, plus a clean line's
and a dirty line's acknowledgement beyond it (`CXLHostParams.invalidate_ns` and
`writeback_ns`, which the DES's fences wait for: a flush-mode call of 1 B costs about 400 ns
more than one of 0 B here, almost all of it these waits and the misses after them), the
per-call overhead as CPU time. `predict_local` then
runs the DES (`cxl_pool`, `cxl_pool_zero_copy`) for every allgather measurement, which
are all held out (`measure_allgather`: the emulator's bench harness, interleaved A B A B,
medians, a batch whose flag round trip before or after it exceeds STABLE x the best seen
is flagged and repeated, not used).

**Emulated CXL timing.** `predict_injected` adds the charges cxl_ops.h documents
(flags +L per wait, +L per block read one block after the other, copies at min(host,
B)) as a DES workload on the same transport and predicts the emulator under them.

**Users' OSU files** (`cxlsim calibrate --from-osu FILE...`). osu_latency and osu_bw
give LogGP per protocol regime (`cxlsim.loggp.fit_loggp`); osu_allgather is
re-predicted with `cxlsim.simulate.run` (nic o, g, G and link latency per regime) and
compared per size. Point-to-point tables cannot see two things an MPI_Allgather adds:
a per-collective software overhead and, in MPICH, a copy of the rank's own block into
recvbuf. The report shows the pure prediction and a labelled variant that adds both:
the overhead anchored on the smallest osu_allgather row only (which is then left out of
the error statistics) and the own-block copy at the host memcpy bandwidth.

**Profiles** are JSON (`SCHEMA`, `VERSION`), written atomically with provenance;
`load_profile` rejects another version or missing keys, naming them.
Units inside: ns, bytes, bytes/ns.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import time

import numpy as np

from cxlsim.errors import InputError, RunError
from cxlsim.results import atomic_write, make_rng, provenance
from cxlsim.units import UnitError, parse_bandwidth, parse_sizes, parse_time

__all__ = ["SCHEMA", "VERSION", "save_profile", "load_profile", "from_osu", "fit_flush_line",
           "LocalModel", "fit_local", "local_preset", "des_pingpong_ns", "solve_path_ns",
           "predict_local", "predict_injected", "measure_primitives", "measure_allgather", "register"]

SCHEMA = "cxlsim-calibration-profile"
VERSION = 1
PROFILE_KEYS = ("schema", "version", "kind", "provenance", "model", "validation")
KINDS = ("local-host", "network")
MODEL_KEYS = {
    "local-host": ("np", "path_ns", "flush_ns_per_line", "fence_ns", "overhead_ns", "copy_bw_curve",
                   "write_pass_curve", "read_pass_curve"),
    "network": ("base_preset", "np", "loggp", "collective_overhead_ns", "memcpy_bw_bytes_per_ns"),
}
MIN_PATH_NS = 0.01  # the transport divides by the load latency, so the path is never exactly 0
STABLE = 1.5  # a batch whose flag round trip exceeds this x the best seen ran in a slow placement
GiB = 1 << 30


# ================================================================== profiles

def _check_keys(where: str, data, keys) -> None:
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(data).__name__}")
    missing = [k for k in keys if k not in data]
    if missing:
        raise InputError(f"{where}: missing key(s) {missing}; expected {list(keys)}")


def make_profile(kind: str, model: dict, validation: list, seed: int | None = None, **extra) -> dict:
    """A profile dict of `kind` with provenance (the seed is recorded, the calibration draws nothing)."""
    if kind not in KINDS:
        raise InputError(f"profile kind: expected one of {KINDS}, got {kind!r}")
    _, seed = make_rng(seed)
    profile = {"schema": SCHEMA, "version": VERSION, "kind": kind, "provenance": provenance(seed),
               "model": model, "validation": validation, **extra}
    check_profile(profile, "<profile>")
    return profile


def check_profile(data, source: str) -> dict:
    """Validate a profile's schema, version, kind and model keys; returns it (InputError otherwise)."""
    _check_keys(source, data, PROFILE_KEYS)
    if data["schema"] != SCHEMA:
        raise InputError(f"{source}: schema: expected {SCHEMA!r}, got {data['schema']!r}")
    if data["version"] != VERSION:
        raise InputError(f"{source}: version: expected {VERSION} (this cxlsim's profile format), "
                         f"got {data['version']!r}; re-run 'cxlsim calibrate'")
    if data["kind"] not in KINDS:
        raise InputError(f"{source}: kind: expected one of {KINDS}, got {data['kind']!r}")
    _check_keys(f"{source}: model", data["model"], MODEL_KEYS[data["kind"]])
    if not isinstance(data["validation"], list):
        raise InputError(f"{source}: validation: expected a list of rows, got {type(data['validation']).__name__}")
    return data


def save_profile(path: str, profile: dict) -> str:
    """Write `profile` as JSON at `path`, atomically; returns the path."""
    check_profile(profile, path)
    atomic_write(path, json.dumps(profile, indent=2) + "\n")
    return path


def load_profile(path: str) -> dict:
    """Read and validate a profile written by `save_profile`."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the profile: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    return check_profile(data, path)


# ================================================================== users' OSU files

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


def predict_profile(profile: dict, sizes, nranks: int) -> list[dict]:
    """Project the allgather with a profile: local-host (DES, every mode) or network (simulate.run)."""
    if profile["kind"] == "network":
        return predict_network(profile["model"], sizes, nranks)
    model = dataclasses.replace(LocalModel.from_dict(profile["model"]), np=nranks)
    return [{"coherence": c, "side": side, "size_bytes": n, "predicted_ns": predict_local(model, c, side, n)}
            for c, side in MODES for n in sizes]


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



# ================================================================== fitting helpers

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


def _curve(points: dict):
    """Piecewise-linear interpolation of {size: ns} in size (clamped outside), as a function."""
    xs = np.array(sorted(int(k) for k in points), float)
    ys = np.array([points[k] if k in points else points[str(int(k))] for k in sorted(points, key=int)], float)

    def at(size):
        return float(np.interp(float(size), xs, ys))
    return at


def _pos_curve(points: dict) -> dict:
    return {str(int(k)): float(v) for k, v in points.items()}


# ================================================================== the local-host model

@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalModel:
    """A `local-host` CXL pool: this machine's primitives, ready to map onto a CXLPoolPreset.

    Curves are {size_bytes (str): ns} and are interpolated linearly between sizes.
    """

    np: int
    """Ranks the allgather runs on."""
    path_ns: dict
    """Host-to-pool path per coherence mode ({'hw': ns, 'flush': ns}), solved from the flag round trip
    (`solve_path_ns`)."""
    roundtrip_ns: dict
    """Measured flag round trip per coherence mode (median of undisturbed batches), ns."""
    flush_ns_per_line: float
    """clflushopt per line (mean of the writer's dirty and the reader's clean lines), ns."""
    fence_ns: dict
    """A fence per mode, ns: 'hw' the sfence after write-backs (the publish's), the intercept of its
    flush line; 'flush' a bare mfence (profiles without `flush_ack_ns`: the intercept of the
    invalidation's mfence line, acknowledgement included)."""
    overhead_ns: dict
    """Per-call software overhead: np = 1 zero-byte call of the same path, {'copy': ns, 'zero-copy': ns}."""
    copy_bw_curve: dict
    """ns to memcpy n bytes (n / copy_bandwidth(n)), by size."""
    write_pass_curve: dict
    """ns of the application's store of an n-byte block beyond a 0-byte one (numpy assignment), by size."""
    read_pass_curve: dict
    """ns of read_pass over np blocks of n bytes beyond np empty blocks, by size."""
    remote_curves: dict = dataclasses.field(default_factory=dict)
    """Per mode, {kind: {size: ns}} of the two-process primitives (`_remote_rank`), kinds: 'copy'
    (memcpy out of n bytes another process just wrote; flush mode: written back, so from memory),
    'read' (read_pass of such bytes), 'copyin' (memcpy into n bytes another process has just read,
    so every store invalidates its copy), 'store' (the numpy store of such bytes beyond a 0-byte
    one); {} = use the local curves."""
    flush_ack_ns: dict = dataclasses.field(default_factory=dict)
    """Flush mode's clflushopt acknowledgements, ns from the last one's issue until a fence may pass:
    'invalidate' (clean lines: the intercept of clflushopt + mfence over clean lines, less a bare
    mfence) and 'writeback' (dirty lines: the same over just-stored lines); the DES's fences wait
    for them (CXLHostParams.invalidate_ns / writeback_ns). {} = none (older profiles)."""
    concurrent_curves: dict = dataclasses.field(default_factory=dict)
    """Per mode, {kind: {size: ns}} of the concurrent-copy primitive (`PoolKernel.concurrent_copy`:
    both ranks at once write their block, then copy out / read in place every block of the round),
    mean over ranks of the medians: 'copyin', 'copyout' (memcpy out of all np blocks),
    'writeback' (own slot + sfence) and 'invalidate' (the others' slots + mfence) of the copy
    variant, 'storein' and 'readout' (read_pass over all np blocks) of the read variant;
    {} = use the one-process curves and `remote_curves`."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "LocalModel":
        fields = dataclasses.fields(cls)
        _check_keys("local-host model", data, [f.name for f in fields if f.default_factory is dataclasses.MISSING])
        return cls(**{f.name: data[f.name] for f in fields if f.name in data})

    def copy_ns(self, size_bytes: int) -> float:
        return max(_curve(self.copy_bw_curve)(size_bytes), 1e-3)

    def remote_ns(self, kind: str, size_bytes: int, coherence: str, local: float) -> float:
        """The two-process primitive `kind` at this size and mode, or `local` if it was not measured."""
        curve = self.remote_curves.get(coherence, {}).get(kind)
        return max(_curve(curve)(size_bytes), local, 1e-3) if curve else local

    def concurrent_ns(self, kind: str, size_bytes: int, coherence: str):
        """The concurrent-copy primitive `kind` at this size and mode (ns), or None if not measured."""
        curve = self.concurrent_curves.get(coherence, {}).get(kind)
        return max(_curve(curve)(size_bytes), 0.0) if curve else None

    def flush_line_ns(self, size_bytes: int, coherence: str = "flush") -> float:
        """clflushopt per line for an n-byte call: the one-process line fit, or, if larger, the
        concurrent primitive's write-back of the own slot plus invalidation of the other's, less
        what the DES charges around them anyway (a fence each, and the acknowledgements of
        `flush_ack_ns` the fences wait for), over the 2 x lines the DES flushes (np = 2: W own,
        W other). Dirty lines written back while the other core does the same, and lines
        invalidated right after, cost more than a lone core's flush loop over its cache."""
        wb = self.concurrent_ns("writeback", size_bytes, coherence)
        inv = self.concurrent_ns("invalidate", size_bytes, coherence)
        if coherence != "flush" or wb is None or inv is None or size_bytes <= 0:
            return self.flush_ns_per_line
        lines = -(-int(size_bytes) // 64)
        fixed = 2 * self.fence_ns[coherence] + self.flush_ack_ns.get("writeback", 0.0) \
            + self.flush_ack_ns.get("invalidate", 0.0)
        return max(self.flush_ns_per_line, (wb + inv - fixed) / (self.np * lines))

    def host_bw(self, size_bytes: int, coherence: str = "hw", path_ns: float = 0.0) -> float:
        """Host bandwidth for an n-byte call, bytes/ns, so that the DES's copies of a call (the block
        in, np blocks out, each W = 64 ceil(n/64) bytes at this bandwidth) take what the measured
        copies take.

        With the concurrent-copy primitive (`concurrent_curves`): its copy-in plus copy-out time,
        measured with every rank copying at once as in the allgather (own block in, every block
        out, one of them freshly written by the other core, which meanwhile does the same),
        less what the DES already charges as latency around those copies at this `path_ns`:
        the write's 2 x path until acked and the reads' load (2 x path), so the line transfers
        between the cores (which the flag round trip, hence the path, already holds) are not
        counted twice.
        Without it (older profiles) the blend of one-process figures: own block in and out at
        the local memcpy time of n bytes, the np - 1 others' blocks at the remote-copy time."""
        lines = max(-(-int(size_bytes) // 64), 1)
        cin = self.concurrent_ns("copyin", size_bytes, coherence)
        cout = self.concurrent_ns("copyout", size_bytes, coherence)
        if cin is not None and cout is not None:
            return (1 + self.np) * lines * 64 / max(cin + cout - 4 * path_ns, 1e-3)
        local = self.copy_ns(size_bytes)
        total = (self.remote_ns("copyin", size_bytes, coherence, local) + local
                 + (self.np - 1) * self.remote_ns("copy", size_bytes, coherence, local))
        return (1 + self.np) * lines * 64 / total

    def app_ns(self, size_bytes: int, coherence: str = "hw") -> float:
        """The zero-copy bench's own work beyond a 0-byte call: write pass of n, read pass of the np
        blocks (own block at the local read-pass time, the others' at the remote one)."""
        if size_bytes <= 0:
            return 0.0
        store = self.concurrent_ns("storein", size_bytes, coherence)
        read = self.concurrent_ns("readout", size_bytes, coherence)
        if store is not None and read is not None:  # both ranks at once, as in the bench
            return store + read
        local_read = max(_curve(self.read_pass_curve)(size_bytes), 0.0) / self.np
        remote_read = self.remote_ns("read", size_bytes, coherence, local_read)
        store = self.remote_ns("store", size_bytes, coherence, max(_curve(self.write_pass_curve)(size_bytes), 0.0))
        return store + local_read + (self.np - 1) * remote_read


def local_preset(model: LocalModel, size_bytes: int, path_ns: float, coherence: str, *,
                 bw_cap_bytes_per_ns: float = 0.0, extra_latency_ns: float = 0.0):
    """The `local-host` CXLPoolPreset for calls of `size_bytes`: no switch latency, no media latency,
    a core-to-pool path of `path_ns`, host bandwidth from the copy curve at that size (capped at
    `bw_cap_bytes_per_ns` if > 0), flush and fence from the microbenchmark, a device that never
    limits (one host's copies are the bottleneck on one machine)."""
    from cxlsim.fabric.cxl import CXLDeviceParams, CXLLinkParams, CXLSwitchParams
    from cxlsim.fabric.cxl_presets import CXLPoolPreset
    from cxlsim.fabric.host import HostParams

    bw = model.host_bw(size_bytes, coherence, max(path_ns, MIN_PATH_NS))
    flush = coherence == "flush"  # only flush mode's writes and clflushopts wait for memory
    if bw_cap_bytes_per_ns > 0:
        bw = min(bw, bw_cap_bytes_per_ns)
    return CXLPoolPreset(
        name="local-host", generation="local",
        switch=CXLSwitchParams(hop_latency_ns=0.0, port_bw_bytes_per_ns=bw, lanes=256, lanes_per_port=16),
        device=CXLDeviceParams(media_latency_ns=extra_latency_ns, media_bw_bytes_per_ns=1e6,
                               heads=max(1, 16 - model.np), capacity_bytes=GiB),  # heads: ports left
        link=CXLLinkParams(latency_ns=0.0, retimers=0, retimer_latency_ns=0.0),
        host_path=dataclasses.replace(_host_path(), port_latency_ns=max(path_ns, MIN_PATH_NS),
                                      flush_ns_per_line=model.flush_line_ns(size_bytes, coherence),
                                      fence_ns=model.fence_ns[coherence],
                                      invalidate_ns=model.flush_ack_ns.get("invalidate", 0.0) if flush else 0.0,
                                      writeback_ns=model.flush_ack_ns.get("writeback", 0.0) if flush else 0.0),
        host=HostParams(memcpy_bw_bytes_per_ns=bw, reduce_bw_bytes_per_ns=bw / 2),
        coherence_modes=("hw", "flush"), max_switch_levels=1, snoop_filter_lines=1 << 24,
        source="cxlsim calibrate: this machine's primitives (flag round trip, flush, copy bandwidth)")


def _host_path():
    from cxlsim.fabric.cxl import CXLHostParams

    return CXLHostParams(port_latency_ns=0.0, outstanding_lines=1 << 20, hit_latency_ns=0.0,
                         flush_ns_per_line=0.0, fence_ns=0.0)


def _transport(preset, nranks: int, coherence: str):
    from cxlsim.fabric.cxl_transport import CXLPoolTransport

    return CXLPoolTransport(preset, nranks, coherence=coherence, pool_bytes=GiB)


def _publish(t, rank: int, value) -> object:
    """The emulator's cxl_publish for a 0-byte call: sfence, flag store, flush mode: write back the flag."""
    yield t.fence(rank)
    yield t.pool_write(rank, rank * 64, 8, value, streaming=False)
    if t.coherence_mode == "flush":
        yield t.flush(rank, rank * 64, 8)


def des_pingpong_ns(preset, coherence: str, iterations: tuple[int, int] = (4, 12)) -> float:
    """The DES's flag round trip on a 2-host pool of `preset`: rank 0 publishes and waits for rank 1,
    rank 1 waits and publishes (flag_pingpong's protocol); steady state, ns per round trip."""
    ends = []
    for n in iterations:
        t = _transport(preset, 2, coherence)
        done = {}

        def rank0(n=n, t=t, done=done):
            for i in range(1, n + 1):
                yield from _publish(t, 0, i)
                yield t.wait_flags(0, [64], i)
            done[0] = t.env.now

        def rank1(n=n, t=t):
            for i in range(1, n + 1):
                yield t.wait_flags(1, [0], i)
                yield from _publish(t, 1, i)
        t.run({0: rank0(), 1: rank1()})
        ends.append(done[0])
    return (ends[1] - ends[0]) / (iterations[1] - iterations[0])


PATH_RULES = ("sync", "pingpong")


def des_sync_ns(preset, coherence: str) -> float:
    """The DES's bare sync at np = 2 (a 0-byte zero-copy call, the emulator's barrier: both ranks
    publish and wait at once), steady state, ns per call."""
    from cxlsim.models.collectives.cxl_pool import cxl_pool_zero_copy

    return _des_loop(_transport(preset, 2, coherence), cxl_pool_zero_copy, 0, 0.0)


def solve_path_ns(model: LocalModel, size_bytes: int, coherence: str, roundtrip_ns: float,
                  rule: str = "pingpong") -> tuple[float, float]:
    """The path for which the DES reproduces the measured flag round trip `roundtrip_ns`.

    rule 'pingpong' (the default): the DES's own ping-pong (`des_pingpong_ns`) equals the round trip;
    rule 'sync': the DES's bare sync (`des_sync_ns`, where both ranks' flags cross
    at once, one flag hop each) equals half of it, one hop. Both are linear in the path, so two
    runs give it exactly, unless an acknowledgement of `flush_ack_ns` outlasts the path's own (a
    max() in the DES: then it is piecewise linear and the solve bisects). Returns (path_ns, the
    DES's figure at that path, in the rule's terms: a round trip for 'pingpong', twice the sync
    for 'sync'). A negative solution is clamped to MIN_PATH_NS and the second value then shows
    the over-prediction.
    """
    if rule not in PATH_RULES:
        raise InputError(f"path rule: expected one of {PATH_RULES}, got {rule!r}")

    def figure(path):
        preset = local_preset(model, size_bytes, path, coherence)
        return des_pingpong_ns(preset, coherence) if rule == "pingpong" else 2 * des_sync_ns(preset, coherence)
    p0, p1 = 10.0, 110.0
    r0, r1 = figure(p0), figure(p1)
    slope = (r1 - r0) / (p1 - p0)
    if slope <= 0:
        raise RunError(f"the DES flag round trip does not grow with the path ({r0} -> {r1} ns)")
    path = max(p0 + (roundtrip_ns - r0) / slope, MIN_PATH_NS)
    got = figure(path)
    if abs(got - roundtrip_ns) <= 1e-6 * roundtrip_ns or path == MIN_PATH_NS and got >= roundtrip_ns:
        return path, got
    lo, hi = MIN_PATH_NS, max(p1, path)  # not linear: bisect the non-decreasing figure(path)
    if figure(lo) >= roundtrip_ns:
        return lo, figure(lo)
    while figure(hi) < roundtrip_ns:
        if hi > 1e6:
            raise RunError(f"the DES flag round trip stays below {roundtrip_ns:.0f} ns at any path")
        hi *= 2
    for _ in range(48):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if figure(mid) < roundtrip_ns else (lo, mid)
    return hi, figure(hi)


def _des_loop(t, algorithm, m: int, overhead_ns: float, calls: int = 3) -> float:
    """osu_allgather's loop in the DES: per rank, `calls` x (timed: overhead + call; untimed: barrier,
    itself overhead + a 0-byte zero-copy call); returns the mean over ranks of the last timed call, ns."""
    from cxlsim.models.collectives.cxl_pool import cxl_pool_zero_copy

    spans = {}
    marks = getattr(t, "call_bytes", None)  # the injected-timing transport wants to know what is read

    def rank_proc(r):
        ep = t.endpoint(r)
        for _ in range(calls):
            t0 = t.env.now
            yield ep.compute(overhead_ns)
            if marks is not None:
                marks[r] = m
            yield from algorithm(ep, m, r)
            spans[r] = t.env.now - t0
            yield ep.compute(overhead_ns)
            if marks is not None:
                marks[r] = 0
            yield from cxl_pool_zero_copy(ep, 0, ("barrier", r))
    t.run({r: rank_proc(r) for r in range(t.size)})
    return float(np.mean(list(spans.values())))


def _algorithm(side: str):
    from cxlsim.models.collectives.cxl_pool import cxl_pool, cxl_pool_zero_copy

    if side == "copy":
        return cxl_pool
    if side == "zero-copy":
        return cxl_pool_zero_copy
    raise InputError(f"side: expected 'copy' or 'zero-copy', got {side!r}")


def predict_local(model: LocalModel, coherence: str, side: str, size_bytes: int, nranks: int | None = None) -> float:
    """DES prediction (ns) of the bench's per-call time for `side` ('copy' or 'zero-copy') and size.

    copy: overhead + cxl_pool; zero-copy: overhead + cxl_pool_zero_copy + the application's write
    pass (n) and read pass (np x n), as the bench's zero-copy step does them.
    """
    algorithm = _algorithm(side)
    t = _transport(local_preset(model, size_bytes, model.path_ns[coherence], coherence), nranks or model.np,
                   coherence)
    ns = _des_loop(t, algorithm, size_bytes, model.overhead_ns[side])
    return ns + (model.app_ns(size_bytes, coherence) if side == "zero-copy" else 0.0)


def _injected_transport(preset, nranks: int, coherence: str, latency_ns: float, zero_copy: bool):
    """A CXLPoolTransport that adds the emulator's injected charges (cxl_ops.h) to the pool protocol:
    +L once the flags are seen, and per block read (one block after the other, the CPU blocked
    as by the emulator's memcpy) L before it; zero-copy calls with bytes: np x L after the flags.
    Copies are paced by the preset's host bandwidth (min(host, B)). Flag polls get nothing extra."""
    from cxlsim.fabric.cxl_transport import CXLPoolTransport

    class Injected(CXLPoolTransport):
        call_bytes = [0] * nranks

        def wait_flags(self, rank, flags, value):
            seen = super().wait_flags(rank, flags, value)
            extra = latency_ns * (1 + (nranks if zero_copy and self.call_bytes[rank] else 0))

            def then():
                yield seen
                yield self.compute(rank, extra)
            return self.env.process(then())

        def pool_read(self, rank, offset_bytes, size_bytes):
            if offset_bytes < nranks * 64:  # a flag line (PoolLayout: flags first)
                return super().pool_read(rank, offset_bytes, size_bytes)
            self._cpu(rank, latency_ns)
            done = super().pool_read(rank, offset_bytes, size_bytes)
            lines = -(-size_bytes // 64)
            self._cpu(rank, self.load_ns + lines * 64 / self.host_bw_bytes_per_ns)
            return done
    t = Injected(preset, nranks, coherence=coherence, pool_bytes=GiB)
    t.call_bytes = [0] * nranks
    return t


def predict_injected(model: LocalModel, coherence: str, side: str, size_bytes: int, latency_ns: float,
                     bw_bytes_per_ns: float) -> float:
    """DES prediction (ns) of the bench's per-call time under injected CXL timing (L, B)."""
    cap = bw_bytes_per_ns if side == "copy" else 0.0  # zero-copy loads and stores are never paced
    preset = local_preset(model, size_bytes, model.path_ns[coherence], coherence, bw_cap_bytes_per_ns=cap)
    t = _injected_transport(preset, model.np, coherence, latency_ns, side == "zero-copy")
    ns = _des_loop(t, _algorithm(side), size_bytes, model.overhead_ns[side])
    return ns + (model.app_ns(size_bytes, coherence) if side == "zero-copy" else 0.0)


def _excess(curve: dict) -> dict:
    """A single-shot two-process curve less its value at the smallest size (the timing's fixed cost:
    a copy of a byte or two costs next to nothing); the model takes the larger of it and the local
    curve, so only what grows with the size counts."""
    smallest = min(curve, key=int)
    return {str(int(k)): max(float(v) - float(curve[smallest]), 0.0) for k, v in curve.items()}


def fit_local(primitives: dict, sizes, path_rule: str = "pingpong") -> tuple[LocalModel, dict]:
    """The `local-host` model from the primitive measurements only; returns (model, fit report).

    The report holds each least-squares line (flush: fence + lines x per-line cost; write and
    read pass: a + n / bw) with its rms relative residual, and the path solve per mode.
    """
    clock = primitives["clock_read_ns"]
    wb = fit_flush_line(primitives["flush"]["lines"], primitives["flush"]["writeback_sfence_ns"], clock)
    inv = fit_flush_line(primitives["flush"]["lines"], primitives["flush"]["invalidate_mfence_ns"], clock)
    report = {"flush_writeback": wb, "flush_invalidate": inv}
    fence = {"hw": wb["fence_ns"], "flush": inv["fence_ns"]}
    per_line = (wb["per_line_ns"] + inv["per_line_ns"]) / 2
    ack = {}
    if "writeback_mfence_ns" in primitives["flush"]:  # acknowledgements apart from the fence
        wbm = fit_flush_line(primitives["flush"]["lines"], primitives["flush"]["writeback_mfence_ns"], clock)
        bare = max(primitives["flush"]["mfence_ns"] - clock, 0.0)
        report["flush_writeback_mfence"] = wbm
        fence["flush"] = bare
        ack = {"invalidate": max(inv["fence_ns"] - bare, 0.0), "writeback": max(wbm["fence_ns"] - bare, 0.0)}
        per_line = (wbm["per_line_ns"] + inv["per_line_ns"]) / 2
        report["flush_ack"] = dict(ack, mfence_ns=bare)
    for name in ("write_pass", "read_pass"):
        curve = primitives[name]
        xs = [int(k) for k in curve if int(k) > 0]
        a, b, rms = fit_line(xs, [max(curve[str(x)], 1e-3) for x in xs])
        report[name] = {"fixed_ns": a, "bw_bytes_per_ns": 1.0 / b if b > 0 else float("inf"), "rms": rms}
    base = LocalModel(np=primitives["np"], path_ns={"hw": 0.0, "flush": 0.0}, roundtrip_ns=dict(primitives["roundtrip_ns"]),
                      flush_ns_per_line=per_line, fence_ns=fence, flush_ack_ns=ack,
                      overhead_ns=dict(primitives["overhead_ns"]),
                      copy_bw_curve=_pos_curve(primitives["copy_ns"]),
                      write_pass_curve=_pos_curve({k: v - primitives["write_pass"]["0"] for k, v in primitives["write_pass"].items()}),
                      read_pass_curve=_pos_curve({k: v - primitives["read_pass"]["0"] for k, v in primitives["read_pass"].items()}),
                      remote_curves={m: {k: _excess(c) for k, c in kinds.items()}
                                     for m, kinds in primitives.get("remote_ns", {}).items()},
                      concurrent_curves={m: {k: _pos_curve(c) for k, c in kinds.items()}
                                         for m, kinds in primitives.get("concurrent_ns", {}).items()}
                      if primitives["np"] == 2 else {})  # measured at np = 2 only
    paths = {}
    ref = max(int(s) for s in sizes) if sizes else 64
    for mode in ("hw", "flush"):
        path, des_rt = solve_path_ns(base, 64, mode, base.roundtrip_ns[mode], path_rule)
        paths[mode] = path
        pingpong = des_pingpong_ns(local_preset(base, 64, path, mode), mode)
        report[f"path_{mode}"] = {"rule": path_rule, "path_ns": path, "measured_roundtrip_ns": base.roundtrip_ns[mode],
                                  "des_roundtrip_ns": des_rt,
                                  "residual": (des_rt - base.roundtrip_ns[mode]) / base.roundtrip_ns[mode],
                                  "des_pingpong_ns": pingpong}
    report["reference_size_bytes"] = ref
    return dataclasses.replace(base, path_ns=paths), report



# ================================================================== measurements (this machine)

REPEATS = 3  # bench runs per size in each job
REMOTE_WARMUP = 100  # rounds before the two-process primitives are timed: the lines' sharing state
# settles only after many exchanges (the first rounds are several times faster than the steady state)
PROBE_BYTES = 256 * 1024  # the copy probe of the host placement around every bench run
BUSY = 0.9  # a batch during which a rank had less of its CPU than this was disturbed by other jobs


def _pingpong_rank(comm, batches: int, calls: int):
    """Per batch: (round trip ns, fraction of the wall time this rank was on its CPU)."""
    comm.flag_pingpong(max(calls // 4, 10))
    out = []
    for _ in range(batches):
        comm.barrier()
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        rt = comm.flag_pingpong(calls)
        out.append((rt, (time.process_time_ns() - c0) / max(time.perf_counter_ns() - w0, 1)))
    return out


def steady(values) -> float:
    """Median of the samples within STABLE x the smallest: samples taken while other jobs or a slow
    host placement slowed this machine down are flagged by that rule and not used."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        raise RunError("no finite sample to fit (every batch was disturbed)")
    best = min(values)
    return statistics.median([v for v in values if v <= STABLE * best])


def _undisturbed(per_rank) -> list[float]:
    """Round trips of the batches in which every rank kept its CPU (all of them if none did)."""
    pairs = list(zip(*per_rank))
    good = [b[0][0] for b in pairs if min(x[1] for x in b) >= BUSY]
    return good or [b[0][0] for b in pairs]


def measure_roundtrip(coherence: str, batches: int = 7, calls: int = 500) -> list[float]:
    """Flag round trips (ns) of `batches` undisturbed batches of `calls` ping-pongs between 2 processes."""
    from cxlsim.emulator.launch import run_local

    return _undisturbed(run_local(2, _pingpong_rank, (batches, calls), coherence=coherence, slot_bytes=64,
                                  timeout_s=30.0))


def _overhead_rank(comm, batches: int, iterations: int):
    """np = 1: the bench's copy and zero-copy step at 0 bytes, through bench.time_loop (ns per call)."""
    from cxlsim.emulator import _kernels
    from cxlsim.emulator.bench import time_loop

    send, recv = np.zeros(0, np.uint8), np.zeros(0, np.uint8)

    def zero_copy():
        block = comm.send_view(0)
        block[:] = send
        result = comm.allgather_zero_copy(block)
        _kernels.read_pass(result.array)
    out = {"copy": [], "zero-copy": []}
    for _ in range(batches):
        out["copy"].append(time_loop(lambda: comm.allgather(send, recv), comm.barrier, 200, iterations) * 1e9)
        out["zero-copy"].append(time_loop(zero_copy, comm.barrier, 200, iterations) * 1e9)
    return out


def _mean_call_ns(fn, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls


def _pass_curves(sizes, nranks: int, repeats: int = 5) -> tuple[dict, dict]:
    """Median ns per call of the zero-copy bench's write pass (`block[:] = send`, n bytes) and read pass
    (`read_pass` over an (np, n) view with 64-B-padded rows), for 0 and every size."""
    from cxlsim.emulator import _kernels

    write, read = {}, {}
    for n in [0] + list(sizes):
        stride = max(64, -(-n // 64) * 64)
        pool = np.zeros(2 * nranks * stride, np.uint8)
        block = pool[:n]
        send = np.ones(n, np.uint8)
        rows = np.lib.stride_tricks.as_strided(pool, shape=(nranks, n), strides=(stride, 1))
        calls = max(20, min(20000, int(2e6 / (n + 200))))

        def store():
            block[:] = send
        write[str(n)] = steady([_mean_call_ns(store, calls) for _ in range(repeats)])
        read[str(n)] = steady([_mean_call_ns(lambda: _kernels.read_pass(rows), calls) for _ in range(repeats)])
    return write, read


def _flush_curve(max_bytes: int, repeats: int = 5) -> dict:
    from cxlsim.emulator import _kernels
    from cxlsim.emulator.comm import choose_line_ops

    writer, reader = choose_line_ops("auto")
    lines, wb, wbm, inv = [], [], [], []
    n = 64
    while n <= max_bytes:
        buf = np.zeros(n, np.uint8)
        iters = max(10, min(2000, int(2e5 // (n // 64 + 4))))
        wb.append(steady([_kernels.line_op_ns(buf, writer, True, "sfence", iters) for _ in range(repeats)]))
        wbm.append(steady([_kernels.line_op_ns(buf, writer, True, "mfence", iters) for _ in range(repeats)]))
        inv.append(steady([_kernels.line_op_ns(buf, reader, False, "mfence", iters) for _ in range(repeats)]))
        lines.append(n // 64)
        n *= 4
    bare = steady([_kernels.line_op_ns(np.zeros(0, np.uint8), writer, False, "mfence", 2000) for _ in range(repeats)])
    return {"lines": lines, "writeback_sfence_ns": wb, "writeback_mfence_ns": wbm, "invalidate_mfence_ns": inv,
            "mfence_ns": bare,
            "writeback_op": _kernels.OP_NAMES[writer], "invalidate_op": _kernels.OP_NAMES[reader]}


def _remote_rank(comm, sizes, repeats: int):
    """Two-process primitives on the pool's slots, both ranks at once (as in a collective), each
    timing its side, on the same slot every round (as the bench does: its barrier takes every other
    epoch, so each call finds the buffer the previous call used); after REMOTE_WARMUP rounds,
    returns rank 0's lists of `repeats` ns per size:

    - 'copy' / 'read': every rank writes n bytes into its slot (flush mode: memset, clflushopt,
      sfence, as the writer's publish), a barrier, then memcpys / read_passes the other's;
    - 'copyin' / 'store': every rank read_passes the other's slot (so it holds those lines, as the
      readers of the previous call on that buffer do), a barrier, then memcpys / numpy-stores n
      bytes into its own. Timed stores and read passes have their 0-byte cost taken off.
    """
    from cxlsim.emulator import _kernels
    from cxlsim.emulator.comm import choose_line_ops

    pool = np.frombuffer(comm.pool.mapping, np.uint8)
    writer = choose_line_ops("auto")[0] if comm.coherence == "flush" else None
    empty = np.zeros(0, np.uint8)

    def timed(fn):
        t0 = _kernels.now_ns()
        fn()
        return _kernels.now_ns() - t0
    zero = {"read": statistics.median(timed(lambda: _kernels.read_pass(empty)) for _ in range(51)),
            "store": statistics.median(timed(lambda: empty.__setitem__(slice(None), empty)) for _ in range(51))}
    out = {kind: {} for kind in ("copy", "read", "copyin", "store")}
    other = 1 - comm.rank
    for n in sizes:
        theirs = pool[comm.slot_offset(1, other):][:n]
        mine = pool[comm.slot_offset(1, comm.rank):][:n]
        local = np.full(n, 7, np.uint8)
        for kind in out:
            samples = []
            for i in range(REMOTE_WARMUP + repeats):
                if n:
                    if kind in ("copy", "read"):
                        if writer is not None:
                            _kernels.line_op_ns(mine, writer, True, "sfence", 1)
                        else:
                            mine.fill(i & 255)
                    else:
                        _kernels.read_pass(theirs)
                comm.barrier()
                if n:
                    if kind == "copy":
                        ns = _kernels.memcpy_ns(local, theirs, 1)
                    elif kind == "read":
                        ns = timed(lambda: _kernels.read_pass(theirs)) - zero["read"]
                    elif kind == "copyin":
                        ns = _kernels.memcpy_ns(mine, local, 1)
                    else:
                        ns = timed(lambda: mine.__setitem__(slice(None), local)) - zero["store"]
                    if i >= REMOTE_WARMUP:
                        samples.append(max(ns, 0.0))
                comm.barrier()
            out[kind][n] = samples or [0.0]
    return out


CONCURRENT_WARMUP, CONCURRENT_ITERATIONS = 100, 200  # rounds of concurrent_copy per size: dropped, kept


def _concurrent_rank(comm, sizes, warmup: int = CONCURRENT_WARMUP, iterations: int = CONCURRENT_ITERATIONS):
    """This rank's medians (ns) of `PoolKernel.concurrent_copy` per size, copy and read variants:
    {'copyin', 'copyout', 'writeback', 'invalidate' (copy variant; the last two 0 in hw mode),
    'storein', 'readout' (read variant): {size: ns}}; the first `warmup` rounds are dropped
    (the lines' sharing state settles only after many exchanges)."""
    out = {k: {} for k in ("copyin", "copyout", "writeback", "invalidate", "storein", "readout")}
    for n in sizes:
        for read, kinds in ((False, ("copyin", "copyout", "writeback", "invalidate")), (True, ("storein", "readout"))):
            t = comm.concurrent_copy(n, warmup + iterations, read)[warmup:]
            for j, kind in enumerate(kinds):
                out[kind][n] = float(np.median(t[:, j]))
    return out


def measure_concurrent(sizes, modes=("hw", "flush"), rounds: int = 4) -> dict:
    """{mode: {kind: {size (str): [ns per job]}}} of the concurrent-copy primitive at np = 2: jobs
    alternate the modes (A B A B, `rounds` of each), per job the mean over the ranks
    (`concurrent_curves` then takes `steady` over the jobs, so a job in a slow host placement is
    left out)."""
    from cxlsim.emulator.launch import run_local

    sizes = sorted({int(s) for s in sizes})
    samples = {m: {} for m in modes}
    for _ in range(rounds):
        for mode in modes:
            per_rank = run_local(2, _concurrent_rank, (sizes,), coherence=mode,
                                 slot_bytes=max(max(sizes), 64), timeout_s=60.0)
            for kind in per_rank[0]:
                for n in sizes:
                    samples[mode].setdefault(kind, {}).setdefault(n, []).append(
                        float(np.mean([r[kind][n] for r in per_rank])))
    return {m: {kind: {str(n): v for n, v in by.items()} for kind, by in kinds.items()} for m, kinds in samples.items()}


def concurrent_curves(samples: dict) -> dict:
    """{mode: {kind: {size: ns}}} from {mode: {kind: {size: [ns per job]}}}: `steady` per size."""
    return {m: {kind: {str(n): steady(v) if max(v) > 0 else 0.0 for n, v in by.items()}
                for kind, by in kinds.items()} for m, kinds in samples.items()}


def measure_primitives(sizes, nranks: int = 2, progress=None, batches: int = 7) -> dict:
    """Every primitive the local-host model is fitted from (never the allgather itself)."""
    from cxlsim.emulator import _kernels
    from cxlsim.emulator.copybw import copy_bandwidth_curve
    from cxlsim.emulator.launch import run_local

    step = progress or (lambda what: None)
    sizes = sorted({int(s) for s in sizes})
    out = {"np": nranks, "clock_read_ns": _kernels.clock_read_ns(10000)}
    step("flag round trip (hw, flush)")
    rts = {"hw": [], "flush": []}
    for _ in range(2):  # A B A B
        for mode in ("hw", "flush"):
            rts[mode] += measure_roundtrip(mode, batches)
    out["roundtrip_samples_ns"] = rts
    out["roundtrip_ns"] = {m: steady(v) for m, v in rts.items()}
    step("flush and fences")
    out["flush"] = _flush_curve(max(max(sizes), 64))
    step("per-call overhead (np=1, 0 B)")
    ov = run_local(1, _overhead_rank, (batches, 2000), slot_bytes=64)[0]
    out["overhead_samples_ns"] = ov
    out["overhead_ns"] = {k: steady(v) for k, v in ov.items()}
    step("copy bandwidth curve")
    bw = copy_bandwidth_curve([max(s, 1) for s in sizes], min_time_s=0.003)
    out["copy_ns"] = {str(s): (max(s, 1) / bw[max(s, 1)] if s else 0.0) for s in sizes}
    out["copy_bw_bytes_per_ns"] = {str(k): v for k, v in bw.items()}
    step("write and read passes")
    out["write_pass"], out["read_pass"] = _pass_curves(sizes, nranks)
    step("remote copy and read pass (hw, flush)")
    out["remote_ns"] = {}
    for mode in ("hw", "flush"):
        res = run_local(2, _remote_rank, (sizes, 21), coherence=mode, slot_bytes=max(max(sizes), 64), timeout_s=60.0)[0]
        out["remote_ns"][mode] = {kind: {str(n): steady(v) for n, v in by_size.items()} for kind, by_size in res.items()}
    step("concurrent copy (hw, flush)")
    out["concurrent_samples_ns"] = measure_concurrent(sizes)
    out["concurrent_ns"] = concurrent_curves(out["concurrent_samples_ns"])
    return out


def _allgather_rank(comm, sizes, iterations, pingpong_calls):
    from cxlsim.emulator.bench import BenchPlan, run_plan

    if comm.size == 2:
        comm.flag_pingpong(max(pingpong_calls // 4, 10))  # warm up: both ranks running
    rt = comm.flag_pingpong(pingpong_calls) if comm.size == 2 else float("nan")
    # the concurrent-copy primitive before and after the job, like the flag round trip: a primitive
    # in the same host placement as the runs (never the allgather's own figures)
    before = _concurrent_rank(comm, sizes) if comm.size == 2 and not comm.pool_latency_ns \
        and not comm.pool_bw_bytes_per_ns else None
    from cxlsim.emulator import _kernels

    src, dst = np.ones(PROBE_BYTES, np.uint8), np.zeros(PROBE_BYTES, np.uint8)

    def probes():  # this rank's copy time of PROBE_BYTES and (np = 2) flag round trip, now
        copy = min(_kernels.memcpy_ns(dst, src, 1) for _ in range(3))
        return copy, comm.flag_pingpong(100) if comm.size == 2 else float("nan")
    rows = []
    for n in sizes:  # per size, REPEATS runs of the bench, each with its own probes of the placement
        for _ in range(REPEATS):
            copy0, rt0 = probes()
            c0, w0 = time.process_time_ns(), time.perf_counter_ns()
            got = run_plan(comm, BenchPlan(sizes=(n,), sides=("copy", "zero-copy"), iterations=iterations))
            busy = (time.process_time_ns() - c0) / max(time.perf_counter_ns() - w0, 1)
            copy1, rt1 = probes()
            mine = np.array([-busy, max(copy0, copy1), max(rt0, rt1)])
            everyone = np.zeros(3 * comm.size)
            comm.allgather(mine, everyone)
            worst = everyone.reshape(comm.size, 3).max(axis=0)  # every rank's worst
            rows += [dict(r, busy=float(-worst[0]), probe_copy_ns=float(worst[1]), probe_roundtrip_ns=float(worst[2]))
                     for r in got]
    rt_after = comm.flag_pingpong(pingpong_calls) if comm.size == 2 else float("nan")
    if comm.size == 2 and not comm.pool_latency_ns and not comm.pool_bw_bytes_per_ns:
        concurrent = [before, _concurrent_rank(comm, sizes)]
    else:
        concurrent = []
    return rows, rt, rt_after, concurrent


def measure_allgather(sizes, nranks: int = 2, rounds: int = 3, iterations: int | None = None,
                      best_roundtrip_ns: dict | None = None, timing=None, progress=None,
                      max_retries: int | None = None, modes=("hw", "flush")) -> dict:
    """The emulator's pool allgather (copy and zero-copy) in hw and flush mode, held out from the fit.

    Jobs alternate hw, flush, hw, flush ... (`rounds` of each); inside a job the bench
    (run_plan) interleaves copy and zero-copy per size, REPEATS times per size, and every rank's
    share of its CPU during each run is recorded: runs in which some rank had less than BUSY of it
    (the OS ran another job there) are left out when undisturbed ones exist. The flag round trip is measured before
    and after each job: a job with either above STABLE x the best seen (so far, or
    `best_roundtrip_ns`) is flagged, kept out of the medians and repeated (at most `max_retries`
    extra jobs). timing: (latency_ns, bw_bytes_per_ns) of emulated CXL timing, or None.
    Returns {'rows': [{coherence, side, size_bytes, measured_ns, batches}], 'batches': [...]}.
    """
    from cxlsim.emulator.launch import run_local

    best = dict(best_roundtrip_ns or {})
    latency_ns, bw = timing or (0.0, 0.0)
    batches, kept = [], {"hw": [], "flush": []}
    retries = rounds * len(modes) if max_retries is None else max_retries
    step = progress or (lambda what: None)
    queue = list(modes) * rounds
    while queue:
        mode = queue.pop(0)
        per_rank = run_local(nranks, _allgather_rank, (sizes, iterations, 500), coherence=mode,
                             slot_bytes=max(max(sizes), 64), timeout_s=60.0, pool_latency_ns=latency_ns,
                             pool_bw_bytes_per_ns=bw)
        rows, rt0, rt1, _ = per_rank[0]
        concurrent = [{kind: {n: float(np.mean([pr[3][j][kind][n] for pr in per_rank])) for n in by}
                       for kind, by in c.items()} for j, c in enumerate(per_rank[0][3])]
        rows = [dict(r, coherence=mode) for r in rows]
        worst = max(rt0, rt1)
        if math.isfinite(worst):
            best[mode] = min(best.get(mode, worst), rt0, rt1)
        slow = math.isfinite(worst) and worst > STABLE * best[mode]
        batches.append({"coherence": mode, "roundtrip_before_ns": rt0, "roundtrip_after_ns": rt1,
                        "slow_placement": slow, "rows": rows, "concurrent": concurrent})
        if slow and retries > 0:
            retries -= 1
            queue.append(mode)
            step(f"{mode}: slow placement (round trip {worst:.0f} ns > {STABLE} x {best[mode]:.0f}); repeated")
        elif not slow:
            kept[mode].append(rows)
            step(f"{mode} batch")
        else:
            step(f"{mode}: slow placement, no retries left; batch not used")
    for mode in kept:  # judge every batch again against the best round trip seen in the end
        kept[mode] = [b["rows"] for b in batches if b["coherence"] == mode and _fast(b, best.get(mode))]
    every = [r for b in batches for r in b["rows"]]
    probe_best = {"copy": min(r["probe_copy_ns"] for r in every),
                  **{m: min([r["probe_roundtrip_ns"] for r in every if r["coherence"] == m
                             and math.isfinite(r["probe_roundtrip_ns"])] or [float("nan")]) for m in modes}}
    out = []
    for mode in modes:
        runs = kept[mode] or [b["rows"] for b in batches if b["coherence"] == mode]
        for side in ("copy", "zero-copy"):
            for n in sizes:
                mine = [r for rows in runs for r in rows if r["side"] == side and r["size_bytes"] == n]
                calm = [r for r in mine if _calm(r, probe_best, mode)]
                vals = [r["avg_us"] * 1e3 for r in (calm or mine)]
                out.append({"coherence": mode, "side": side, "size_bytes": n,
                            "measured_ns": statistics.median(vals), "batches": len(vals),
                            "disturbed_only": not calm,
                            "flagged_all": not kept[mode]})
    return {"rows": out, "batches": [{k: v for k, v in b.items() if k != "rows"} for b in batches],
            "best_roundtrip_ns": best}


def _calm(row, best, mode) -> bool:
    """A bench run is kept if every rank kept its CPU (>= BUSY) and the copy probe and flag round
    trip around it stayed within STABLE x the best seen (not a slow host placement)."""
    rt_ok = not math.isfinite(row["probe_roundtrip_ns"]) or not math.isfinite(best[mode]) or \
        row["probe_roundtrip_ns"] <= STABLE * best[mode]
    return row["busy"] >= BUSY and row["probe_copy_ns"] <= STABLE * best["copy"] and rt_ok


def _fast(batch, best) -> bool:
    worst = max(batch["roundtrip_before_ns"], batch["roundtrip_after_ns"])
    if not math.isfinite(worst) or best is None:
        return True
    batch["slow_placement"] = worst > STABLE * best
    return not batch["slow_placement"]


def measure_mpi(sizes, nranks: int = 2) -> list[dict] | None:
    """MPI_Allgather through the bench under the installed mpiexec (None when MPI is missing)."""
    import subprocess
    import tempfile

    try:
        import mpi4py  # noqa: F401
        from cxlsim.emulator.cli import find_mpiexec
        find_mpiexec()
    except (ImportError, InputError):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "mpi.csv")
        cmd = [sys.executable, "-m", "cxlsim", "bench", "allgather", "--baseline", "mpi", "--np", str(nranks),
               "--sizes", ",".join(str(s) for s in sizes), "--output", out]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if res.returncode != 0 or not os.path.exists(out):
            return [{"error": (res.stderr or res.stdout)[-500:]}]
        import csv
        with open(out) as fh:
            return [{"size_bytes": int(r["size_bytes"]), "measured_ns": float(r["avg_us"]) * 1e3}
                    for r in csv.DictReader(fh) if r["side"] == "mpi"]



# ================================================================== validation

TARGET_MEDIAN, TARGET_WORST, TARGET_INJECTED = 0.10, 0.25, 0.15
MODES = (("hw", "copy"), ("hw", "zero-copy"), ("flush", "copy"), ("flush", "zero-copy"))


def validate(model: LocalModel, measured: list[dict], predict=None) -> list[dict]:
    """Measured vs predicted rows: coherence, side, size_bytes, measured_ns, predicted_ns, error."""
    predict = predict or (lambda row: predict_local(model, row["coherence"], row["side"], row["size_bytes"]))
    rows = []
    for row in measured:
        pred = predict(row)
        rows.append({**row, "predicted_ns": pred, "error": (pred - row["measured_ns"]) / row["measured_ns"]})
    return rows


def summarize(rows: list[dict]) -> dict:
    """{'hw copy': {median, worst, worst_size, n}, ...} of |error|."""
    out = {}
    for row in rows:
        key = f"{row['coherence']} {row['side']}" + (f" {row['setting']}" if row.get("setting") else "")
        out.setdefault(key, []).append(row)
    result = {}
    for key, every in out.items():
        rs = [r for r in every if comparable(r)]
        if not rs:
            result[key] = {"median": float("nan"), "worst": float("nan"), "worst_size": None, "n": 0,
                           "excluded": len(every)}
            continue
        errs = [abs(r["error"]) for r in rs]
        worst = max(rs, key=lambda r: abs(r["error"]))
        result[key] = {"median": statistics.median(errs), "worst": abs(worst["error"]),
                       "worst_size": worst["size_bytes"], "n": len(rs), "excluded": len(every) - len(rs)}
    return result


def comparable(row: dict) -> bool:
    """A measurement made in the conditions the primitives were: some batch of its mode passed the
    flag round-trip check and some run of it the CPU and copy/round-trip probes (see measure_allgather).
    Others are printed but left out of the error statistics."""
    return not row.get("flagged_all") and not row.get("disturbed_only")


def format_validation(rows: list[dict]) -> str:
    lines = [f"# {'mode':<20}{'Size':>10}{'measured(us)':>14}{'predicted(us)':>15}{'error%':>9}"]
    for r in rows:
        mode = f"{r['coherence']} {r['side']}" + (f" {r['setting']}" if r.get("setting") else "")
        lines.append(f"  {mode:<20}{r['size_bytes']:>10d}{r['measured_ns'] / 1e3:>14.3f}"
                     f"{r['predicted_ns'] / 1e3:>15.3f}{r['error'] * 100:>9.1f}{'' if comparable(r) else ' *'}")
    for key, s in summarize(rows).items():
        if not s["n"]:
            lines.append(f"# {key}: not evaluated: all {s['excluded']} sizes were measured only in a slow host "
                         "placement or with a rank off its CPU")
            continue
        lines.append(f"# {key}: median |error| {s['median'] * 100:.1f}%, worst {s['worst'] * 100:.1f}% "
                     f"at {s['worst_size']} B ({s['n']} sizes; {s['excluded']} left out: measured only in a "
                     "slow placement or disturbed, marked * above)")
    return "\n".join(lines) + "\n"


def plot_validation(rows: list[dict], path_png: str) -> None:
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {}
    for r in rows:
        key = f"{r['coherence']} {r['side']}" + (f" {r['setting']}" if r.get("setting") else "")
        groups.setdefault(key, []).append(r)
    fig, ax = plt.subplots(figsize=(7, 5))
    for i, (key, rs) in enumerate(groups.items()):
        color = f"C{i % 10}"
        xs = [max(r["size_bytes"], 1) for r in rs]
        ax.plot(xs, [r["measured_ns"] / 1e3 for r in rs], "o-", color=color, label=f"{key} measured")
        ax.plot(xs, [r["predicted_ns"] / 1e3 for r in rs], "x--", color=color, label=f"{key} DES")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size per rank (bytes)")
    ax.set_ylabel("allgather latency (us)")
    ax.set_title("pool allgather on this machine: measured vs DES from primitives")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    atomic_write(path_png, buf.getvalue())


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
                    settings=(), mpi: bool = True, progress=None, path_rule: str = "pingpong",
                    profile: dict | None = None) -> dict:
    """Measure, fit from primitives, predict every allgather measurement; returns everything.

    profile: a saved local-host profile whose model predicts instead of a fresh fit (the
    primitives are still measured and reported, for comparison)."""
    if len([n for n in set(sizes) if n > 0]) < 2:
        raise InputError(f"--sizes: the local fit needs at least two sizes above 0 B, got {list(sizes)}")
    if profile is not None and profile["kind"] != "local-host":
        raise InputError(f"profile: expected a local-host profile, got kind {profile['kind']!r}")
    cores = len(os.sched_getaffinity(0))
    step = progress or (lambda what: None)
    prims = measure_primitives(sizes, 2, step)
    prims["np"] = nranks
    meas = measure_allgather(sizes, nranks, rounds, iterations, best_roundtrip_ns=prims["roundtrip_ns"],
                             progress=step)
    # the flag round trips measured before and after every batch are ping-pong primitives too:
    # fit from all of them, so the model and the kept batches share the host placement
    # and so are the concurrent copies measured before and after every batch (np = 2)
    for b in meas["batches"]:
        for key in ("roundtrip_before_ns", "roundtrip_after_ns"):
            if math.isfinite(b[key]):
                prims["roundtrip_samples_ns"][b["coherence"]].append(b[key])
        for got in b.get("concurrent", []):
            for kind, by in got.items():
                for n, v in by.items():
                    prims["concurrent_samples_ns"][b["coherence"]].setdefault(kind, {}).setdefault(str(n), []).append(v)
    prims["roundtrip_ns"] = {m: steady(v) for m, v in prims["roundtrip_samples_ns"].items()}
    prims["concurrent_ns"] = concurrent_curves(prims["concurrent_samples_ns"])
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
                              timing=(lat, bw), progress=step, modes=("hw",))
        hw_rows = [dict(r, setting=label) for r in m["rows"] if r["coherence"] == "hw"]
        injected += validate(model, hw_rows, lambda r, lat=lat, bw=bw: predict_injected(
            model, r["coherence"], r["side"], r["size_bytes"], lat, bw))
    mpi_rows = measure_mpi(sizes, nranks) if mpi else None
    return {"primitives": prims, "model": model, "fit": fit, "allgather": meas, "validation": rows,
            "injected": injected, "mpi": mpi_rows, "cores": cores, "np": nranks}


def _sizes_and_np(args) -> list[int]:
    """--sizes parsed, after checking --np (>= 2)."""
    if isinstance(args.np, bool) or args.np < 2:
        raise InputError(f"--np: expected a whole number of ranks >= 2, got {args.np!r}")
    try:
        return parse_sizes(args.sizes)
    except UnitError as exc:
        raise InputError(f"--sizes: {exc}") from None


def run_local_calibration(args) -> int:
    from tqdm import tqdm

    sizes = _sizes_and_np(args)
    if args.rounds < 1:
        raise InputError(f"--rounds: expected >= 1, got {args.rounds}")
    settings = parse_settings(["250ns/32GB/s", "600ns/16GB/s"] if args.timing is None else args.timing)
    total = 7 + 2 * args.rounds + max(1, args.rounds - 1) * len(settings) + 2
    bar = tqdm(total=total, desc="calibrate", unit="step", file=sys.stderr, disable=args.quiet or None,
               leave=False)

    def step(what):
        bar.set_postfix_str(what[:60])
        bar.update(1)
    try:
        result = calibrate_local(sizes, args.np, args.rounds, args.iterations, settings, not args.no_mpi, step)
    finally:
        bar.close()
    return _report_local(args, result)


def _report_local(args, result) -> int:
    model, fit, prims = result["model"], result["fit"], result["primitives"]
    print(f"# local-host model from primitives (np {result['np']}, {result['cores']} cores)")
    for mode in ("hw", "flush"):
        f = fit[f"path_{mode}"]
        print(f"#   {mode}: flag round trip {f['measured_roundtrip_ns']:.0f} ns -> path {f['path_ns']:.1f} ns "
              f"(rule {f['rule']}: DES {f['des_roundtrip_ns']:.0f} ns, {f['residual'] * 100:+.1f}%; "
              f"the DES's own ping-pong at this path {f['des_pingpong_ns']:.0f} ns)")
    print(f"#   flush: {prims['flush']['writeback_op']} {fit['flush_writeback']['per_line_ns']:.2f} ns/line + sfence "
          f"{fit['flush_writeback']['fence_ns']:.1f} ns (rms {fit['flush_writeback']['rms'] * 100:.1f}%); "
          f"{prims['flush']['invalidate_op']} {fit['flush_invalidate']['per_line_ns']:.2f} ns/line + mfence "
          f"{fit['flush_invalidate']['fence_ns']:.1f} ns (rms {fit['flush_invalidate']['rms'] * 100:.1f}%)")
    if "flush_ack" in fit:
        ack = fit["flush_ack"]
        print(f"#   flush acknowledgements beyond a bare mfence ({ack['mfence_ns']:.1f} ns): clean line "
              f"{ack['invalidate']:.1f} ns, dirty line {ack['writeback']:.1f} ns "
              f"(rms of the dirty + mfence line {fit['flush_writeback_mfence']['rms'] * 100:.1f}%)")
    print(f"#   per-call overhead (np=1, 0 B): copy {model.overhead_ns['copy']:.0f} ns, "
          f"zero-copy {model.overhead_ns['zero-copy']:.0f} ns")
    print(f"#   write pass: {fit['write_pass']['bw_bytes_per_ns']:.1f} B/ns (rms {fit['write_pass']['rms'] * 100:.1f}%); "
          f"read pass: {fit['read_pass']['bw_bytes_per_ns']:.1f} B/ns (rms {fit['read_pass']['rms'] * 100:.1f}%)")
    slow = [b for b in result["allgather"]["batches"] if b["slow_placement"]]
    print(f"# allgather batches: {len(result['allgather']['batches'])}, flagged slow placement: {len(slow)}")
    rows = result["validation"]
    print(format_validation(rows), end="")
    over = result["np"] > result["cores"]
    if over:
        print(f"# np {result['np']} > {result['cores']} cores: oversubscribed; the DES does not model OS "
              "scheduling, so these errors are reported, not held to the targets")
    if result["injected"]:
        print("# under injected CXL timing (hw):")
        print(format_validation(result["injected"]), end="")
        kept = [abs(r["error"]) for r in result["injected"] if comparable(r)]
        med = statistics.median(kept) if kept else float("nan")
        print(f"# injected timing: median |error| {med * 100:.1f}% over {len(kept)} comparable points "
              f"(target {TARGET_INJECTED * 100:.0f}%)")
    if result["mpi"]:
        print("# MPI_Allgather (mpi4py, same machine), measured:")
        for r in result["mpi"]:
            print(f"#   {r}" if "error" in r else f"#   {r['size_bytes']:>8d} B  {r['measured_ns'] / 1e3:10.3f} us")
    workspace = _workspace(args, "calibrate")
    model_dict = model.to_dict()
    profile = make_profile("local-host", model_dict, rows, fit=fit, primitives=prims,
                           injected=result["injected"], mpi=result["mpi"], cores=result["cores"],
                           allgather_batches=result["allgather"]["batches"],
                           summary=summarize(rows), injected_summary=summarize(result["injected"]))
    save_profile(workspace.file("profile.json"), profile)
    cols = ["coherence", "side", "size_bytes", "measured_ns", "predicted_ns", "error", "batches"]
    workspace.write_csv("validation", rows, cols)
    if result["injected"]:
        workspace.write_csv("validation_injected", result["injected"], ["setting"] + cols)
    plot_validation(rows, workspace.file("validation.png"))
    print(f"# profile: {workspace.file('profile.json')}")
    return 0


# ================================================================== the command

def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="measure this machine (or read OSU files), fit the simulator, report its error",
        description="Without --from-osu: measure this machine's primitives (flag round trip, flush cost, "
                    "per-call overhead, copy/read/write bandwidth by size), fit a 'local-host' CXL pool model "
                    "from them alone, measure the emulator's np=2 pool allgather (copy, zero-copy; hw, flush) "
                    "as held-out data, and print measured vs DES-predicted per size (times in us, sizes in "
                    "bytes per rank). With --from-osu: fit LogGP from osu_latency/osu_bw files and re-predict "
                    "the osu_allgather file. Either way a calibration profile (JSON) is written.")
    p.add_argument("--from-osu", nargs="+", metavar="FILE", default=None,
                   help="OSU output files (osu_latency, osu_bw, osu_allgather; any order)")
    p.add_argument("--np", type=int, default=2, help="ranks (default 2): the emulator's np, or the "
                                                     "simulated nodes for --from-osu")
    p.add_argument("--preset", default="ib-hdr", help="--from-osu: network preset whose other figures are kept "
                                                      "(default ib-hdr; LogGP and link latency are replaced)")
    p.add_argument("--memcpy-bandwidth", default=None, metavar="BW",
                   help="--from-osu: the host's copy bandwidth for MPICH's own-block copy, e.g. 12GB/s "
                        "(default: measure this machine's by size)")
    p.add_argument("--sizes", default="1B:1MiB", help="local: bytes per rank, LO:HI doubling or a list "
                                                      "(default 1B:1MiB)")
    p.add_argument("--rounds", type=int, default=3, help="local: interleaved rounds of allgather batches "
                                                         "(default 3; more on a noisy machine)")
    p.add_argument("--iterations", type=int, default=None,
                   help="local: timed iterations per size (default OMB's: 1000 up to 8 KiB, 100 above)")
    p.add_argument("--no-mpi", action="store_true", help="local: do not time MPI_Allgather even if MPI is installed")
    p.add_argument("--timing", nargs="*", default=None, metavar="L/B",
                   help="local: also predict the emulator under injected CXL timing, e.g. 250ns/32GB/s "
                        "600ns/16GB/s (default: those two; give none to skip)")
    p.add_argument("--output", default=None, metavar="DIR",
                   help="workspace directory (default runs/calibrate-TIMESTAMP): profile.json, validation "
                        "CSV/JSON and PNG")
    p.add_argument("--validate-only", default=None, metavar="PROFILE",
                   help="check a profile file and print its validation table, measuring nothing")
    p.add_argument("--profile", default=None, metavar="PROFILE",
                   help="project with a saved profile instead of measuring: the allgather at --np and --sizes "
                        "(local-host: the DES in every mode; network: cxlsim.simulate with its LogGP)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def _workspace(args, name: str):
    from cxlsim.results import Workspace

    return Workspace(args.output) if args.output else Workspace.new("runs", name)


def _print_validation(profile: dict) -> None:
    rows = profile["validation"]
    if profile["kind"] == "network":
        return
    print(format_validation(rows), end="")


def main(args) -> int:
    if args.validate_only:
        profile = load_profile(args.validate_only)
        print(f"# {args.validate_only}: a valid {profile['kind']} profile (schema {SCHEMA} v{VERSION}), "
              f"made {profile['provenance'].get('timestamp_utc')} on {profile['provenance'].get('hostname')}")
        if profile["kind"] == "network":
            for row in profile["validation"]:
                print(f"{row['size_bytes']:<12d}{row['measured_ns'] / 1e3:>12.2f}{row['full_ns'] / 1e3:>12.2f}"
                      f"{row['full_error'] * 100:>8.1f}%{'  (anchor)' if row['anchor'] else ''}")
        else:
            _print_validation(profile)
        return 0
    if args.profile:
        profile = load_profile(args.profile)
        sizes = _sizes_and_np(args)
        rows = predict_profile(profile, sizes, args.np)
        print(f"# allgather projected with {profile['kind']} profile {args.profile}, np {args.np} (us)")
        for r in rows:
            if profile["kind"] == "network":
                print(f"{r['size_bytes']:<12d}{r['full_ns'] / 1e3:>12.3f}   (pure LogGP {r['pure_ns'] / 1e3:.3f})")
            else:
                print(f"{r['coherence'] + ' ' + r['side']:<16}{r['size_bytes']:<12d}{r['predicted_ns'] / 1e3:>12.3f}")
        return 0
    if args.from_osu:
        memcpy = None
        if args.memcpy_bandwidth is not None:
            try:
                memcpy = parse_bandwidth(args.memcpy_bandwidth)
            except UnitError as exc:
                raise InputError(f"--memcpy-bandwidth: {exc}") from None
        result = from_osu(args.from_osu, nodes=args.np, base_preset=args.preset, memcpy_bw_bytes_per_ns=memcpy)
        sys.stdout.write(report_from_osu(result))
        workspace = _workspace(args, "calibrate-osu")
        profile = make_profile("network", result["model"], result["rows"])
        save_profile(workspace.file("profile.json"), profile)
        workspace.write_csv("validation", result["rows"])
        print(f"# profile: {workspace.file('profile.json')}")
        return 0
    return run_local_calibration(args)
