"""A calibration profile used where a preset is: `fabric.preset: PATH.json` in a scenario, or
`cxlsim simulate --preset PATH.json` (and so in sweeps, which vary scenario keys).

The allgather is then projected exactly as `cxlsim calibrate --profile` projects it
(`predict_profile`): a `local-host` profile by the DES with its fitted pool model at
`fabric.nodes` ranks (osu_allgather's loop, per-call overhead included; `fabric.cxl.coherence`
picks hw or flush, `workload.algorithm` cxl_pool or cxl_pool_zero_copy); a `network` profile by
its fitted LogGP on its base preset, with the MPICH selector, plus the collective-call overhead
and own-block copy it was fitted with. Every other fabric figure is the profile's, so setting
one in the scenario is an error that names the key. Units: ns, bytes.
"""
from __future__ import annotations

import dataclasses
import time

from cxlsim.errors import InputError

PROFILE_SUFFIX = ".json"
LOCAL_ALGORITHMS = {"auto": "copy", "cxl_pool": "copy", "cxl_pool_zero_copy": "zero-copy"}


def is_profile(preset: str) -> bool:
    """True if `fabric.preset` names a calibration profile file rather than a built-in preset."""
    return preset.endswith(PROFILE_SUFFIX)


def predict_profile(profile: dict, sizes, nranks: int) -> list[dict]:
    """Project the allgather with a profile: local-host (DES, every mode and side:
    coherence, side, size_bytes, predicted_ns) or network (size_bytes, pure_ns, full_ns)."""
    from cxlsim.calibrate.des import predict_local
    from cxlsim.calibrate.local_model import LocalModel
    from cxlsim.calibrate.osu_fit import predict_network
    from cxlsim.calibrate.validation import MODES

    if profile["kind"] == "network":
        return predict_network(profile["model"], sizes, nranks)
    model = dataclasses.replace(LocalModel.from_dict(profile["model"]), np=nranks)
    return [{"coherence": c, "side": side, "size_bytes": n, "predicted_ns": predict_local(model, c, side, n)}
            for c, side in MODES for n in sizes]


def _changed(section, prefix: str) -> list[str]:
    """Dotted keys of `section` set away from their defaults."""
    return [f"{prefix}.{f.metadata.get('key', f.name)}" for f in dataclasses.fields(section)
            if getattr(section, f.name) != f.default]


def _check(scenario, kind: str, path: str) -> tuple[str, str]:
    """The (coherence, side) a local-host profile projects, or ('', '') for a network one; InputError
    for any scenario setting the profile cannot honour."""
    f, wl = scenario.fabric, scenario.workload
    fixed = [k for name in ("links", "switch", "nic", "host") for k in _changed(getattr(f, name), f"fabric.{name}")]
    fixed += [k for k in _changed(f.cxl, "fabric.cxl") if k != "fabric.cxl.coherence"]
    if f.topology != "star":
        fixed.append("fabric.topology")
    if f.ranks_per_node != 1:
        fixed.append("fabric.ranks_per_node")
    if fixed:
        raise InputError(f"{fixed[0]}: fabric.preset is the calibration profile {path}, which fixes this "
                         f"figure; remove {', '.join(fixed)} from the scenario")
    if wl.collective != "allgather":
        raise InputError(f"workload.collective: a calibration profile projects the allgather only, got {wl.collective!r}")
    if scenario.engine != "des":
        raise InputError(f"engine: a calibration profile projects with the DES, got {scenario.engine!r}")
    if (wl.iterations, wl.warmup) != (1, 0):
        raise InputError(f"workload.iterations: a calibration profile projects osu_allgather's steady per-call "
                         f"time itself; leave iterations (got {wl.iterations}) and warmup (got {wl.warmup}) unset")
    if kind == "network":
        if f.cxl.coherence is not None:
            raise InputError(f"fabric.cxl.coherence: {path} is a network profile, not a CXL pool")
        if wl.algorithm != "auto" or wl.selector != "mpich":
            raise InputError(f"workload.algorithm: a network profile projects MPICH's choice (algorithm 'auto', "
                             f"selector 'mpich'), got {wl.algorithm!r} with selector {wl.selector!r}")
        return "", ""
    if wl.algorithm not in LOCAL_ALGORITHMS:
        raise InputError(f"workload.algorithm: a local-host profile runs one of {sorted(LOCAL_ALGORITHMS)}, "
                         f"got {wl.algorithm!r}")
    return f.cxl.coherence or "hw", LOCAL_ALGORITHMS[wl.algorithm]


def run_profile(scenario, bar=None) -> list[dict]:
    """`cxlsim.simulate.run` for a scenario whose `fabric.preset` is a profile: one row per size
    (size_bytes, latency_us, algorithm, note, engine, events (None: not counted), wall_s)."""
    from cxlsim.calibrate.des import predict_local
    from cxlsim.calibrate.local_model import LocalModel
    from cxlsim.calibrate.osu_fit import predict_network
    from cxlsim.calibrate.profile import load_profile

    path = scenario.fabric.preset
    profile = load_profile(path)
    coherence, side = _check(scenario, profile["kind"], path)
    nodes, sizes = scenario.fabric.nodes, scenario.workload.sizes_bytes
    rows = []
    if profile["kind"] == "network":
        start = time.perf_counter()
        got = predict_network(profile["model"], sizes, nodes)
        wall = (time.perf_counter() - start) / max(len(sizes), 1)
        for row in got:
            rows.append({"size_bytes": row["size_bytes"], "latency_us": row["full_ns"] / 1e3,
                         "algorithm": "auto", "note": f"network profile {path}: LogGP on "
                         f"{profile['model']['base_preset']} + collective overhead + own-block copy",
                         "engine": "des", "events": None, "wall_s": wall})
            if bar:
                bar.update(1)
        return rows
    model = dataclasses.replace(LocalModel.from_dict(profile["model"]), np=nodes)
    algorithm = "cxl_pool_zero_copy" if side == "zero-copy" else "cxl_pool"
    for size in sizes:
        start = time.perf_counter()
        ns = predict_local(model, coherence, side, size)
        rows.append({"size_bytes": size, "latency_us": ns / 1e3, "algorithm": algorithm,
                     "note": f"local-host profile {path}, {coherence} coherence: osu_allgather's per-call time",
                     "engine": "des", "events": None, "wall_s": time.perf_counter() - start})
        if bar:
            bar.update(1)
    return rows
