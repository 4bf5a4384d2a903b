"""Calibration profiles: JSON (`SCHEMA`, `VERSION`) of kind `local-host` or `network`.

A profile holds a fitted model, its validation rows and provenance, and is written atomically;
`load_profile` rejects another version or missing keys, naming them.

A local-host profile also records the host placement its primitives were measured in
(`PLACEMENT_KEY`, `placement_record`): this machine's two vCPUs sit in a fast placement (hw flag
round trip 55-110 ns) or a slow one (440-500 ns), and a model fitted in one mispredicts the other,
so a reader (`cxlsim replay`) can flag a profile from another placement than its run's. The class
follows the project's one probe rule (`cxlsim.emulator.comm.choose_copy_in`, the MPI library's
pools.c): fast up to `SLOW_ROUNDTRIP_NS`, slow up to `DISTURBED_ROUNDTRIP_NS`, disturbed above (a
rank lost its CPU during the probe: no placement). Profiles written before it have no such key;
`profile_placement` derives the class from their model's hw round trip and says it did.
"""
from __future__ import annotations

import json

from cxlsim.coherence import Coherence
from cxlsim.config import read_text
from cxlsim.emulator.host import DISTURBED_ROUNDTRIP_NS, SLOW_ROUNDTRIP_NS, placement_of
from cxlsim.errors import InputError
from cxlsim.results import atomic_write, make_rng, provenance

SCHEMA = "cxlsim-calibration-profile"
VERSION = 1
PROFILE_KEYS = ("schema", "version", "kind", "provenance", "model", "validation")
KINDS = ("local-host", "network")
MODEL_KEYS = {
    "local-host": ("np", "path_ns", "flush_ns_per_line", "fence_ns", "overhead_ns", "copy_bw_curve",
                   "write_pass_curve", "read_pass_curve"),
    "network": ("base_preset", "np", "loggp", "collective_overhead_ns", "memcpy_bw_bytes_per_ns"),
}

PLACEMENT_KEY = "placement"
"""A local-host profile's {'class': 'fast' | 'slow' | 'disturbed', 'roundtrip_ns': the hw flag round trip
(`model.roundtrip_ns['hw']`, ns), 'fast_up_to_ns', 'disturbed_above_ns'}: the rule's thresholds."""
PLACEMENTS = ("fast", "slow", "disturbed")


def placement_record(hw_roundtrip_ns: float) -> dict:
    """The `PLACEMENT_KEY` record of a profile whose model measured this hw flag round trip (ns)."""
    return {"class": placement_of(hw_roundtrip_ns), "roundtrip_ns": float(hw_roundtrip_ns),
            "fast_up_to_ns": SLOW_ROUNDTRIP_NS, "disturbed_above_ns": DISTURBED_ROUNDTRIP_NS}


def profile_placement(profile: dict) -> dict | None:
    """The host placement a profile's model was measured in: its `PLACEMENT_KEY` record with 'recorded' True,
    or, for a local-host profile written before the key, `placement_record` of its model's hw round trip with
    'recorded' False; None for a network profile (another machine's OSU files: no placement of this one)."""
    got = profile.get(PLACEMENT_KEY)
    if got is not None:
        if not isinstance(got, dict) or got.get("class") not in PLACEMENTS:
            raise InputError(f"{PLACEMENT_KEY}: expected {{'class': one of {PLACEMENTS}, 'roundtrip_ns': ns}}, "
                             f"got {got!r}")
        return dict(got, recorded=True)
    rt = (profile["model"].get("roundtrip_ns") or {}).get(Coherence.HW.value) if profile["kind"] == "local-host" else None
    if not isinstance(rt, (int, float)) or isinstance(rt, bool):
        return None
    return dict(placement_record(rt), recorded=False)


def check_keys(where: str, data, keys) -> None:
    """InputError naming `where` unless `data` is a JSON object holding every one of `keys`."""
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
    check_keys(source, data, PROFILE_KEYS)
    if data["schema"] != SCHEMA:
        raise InputError(f"{source}: schema: expected {SCHEMA!r}, got {data['schema']!r}")
    if data["version"] != VERSION:
        raise InputError(f"{source}: version: expected {VERSION} (this cxlsim's profile format), "
                         f"got {data['version']!r}; re-run 'cxlsim calibrate'")
    if data["kind"] not in KINDS:
        raise InputError(f"{source}: kind: expected one of {KINDS}, got {data['kind']!r}")
    check_keys(f"{source}: model", data["model"], MODEL_KEYS[data["kind"]])
    if not isinstance(data["validation"], list):
        raise InputError(f"{source}: validation: expected a list of rows, got {type(data['validation']).__name__}")
    try:
        profile_placement(data)
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
    return data


def save_profile(path: str, profile: dict) -> str:
    """Write `profile` as JSON at `path`, atomically; returns the path."""
    check_profile(profile, path)
    atomic_write(path, json.dumps(profile, indent=2) + "\n")
    return path


def load_profile(path: str) -> dict:
    """Read and validate a profile written by `save_profile`."""
    try:
        data = json.loads(read_text(path, "calibration profile"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    return check_profile(data, path)
