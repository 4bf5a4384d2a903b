"""A calibration profile as a preset: `fabric.preset: PATH.json` in a scenario, or
`cxlsim simulate --preset PATH.json` (and so in sweeps, which vary scenario keys).

A `ProfilePreset` is the calibration-profile kind of `cxlsim.fabric.preset.Preset`,
named by its file path. The allgather is projected exactly as `cxlsim calibrate
--profile` projects it (`predict_profile`):

- a `local-host` profile by the DES with its fitted pool model at `fabric.nodes`
  ranks (osu_allgather's loop, per-call overhead included; `fabric.cxl.coherence`
  picks hw or flush, `workload.algorithm` cxl_pool or cxl_pool_zero_copy). The
  model was fitted at the np its profile records; at another rank count every rank
  still copies (or reads) all P blocks at the fitted bandwidth, so the time grows
  with P as the DES's pool protocol says (`LocalModel`), on one host whose memory
  never limits;
- a `network` profile by its fitted LogGP on its base preset, with the MPICH
  selector, plus the collective-call overhead and own-block copy it was fitted with.

Every other fabric figure is the profile's, so a scenario key the profile does not
use is an error naming it (`PROFILE_KEYS`). Units: ns, bytes.
"""
from __future__ import annotations

import dataclasses
import time
from typing import ClassVar

from cxlsim.calibrate.des import predict_local
from cxlsim.calibrate.local_model import LocalModel
from cxlsim.calibrate.network_model import predict_network
from cxlsim.calibrate.profile import load_profile
from cxlsim.calibrate.validation import MODES
from cxlsim.coherence import Coherence
from cxlsim.errors import InputError

__all__ = ["PROFILE_SUFFIX", "PROFILE_KEYS", "LOCAL_ALGORITHMS", "ProfilePreset", "ProfileSetup", "is_profile",
           "predict_profile", "projection_note", "run_profile"]

PROFILE_SUFFIX = ".json"
LOCAL_ALGORITHMS = {"auto": "copy", "cxl_pool": "copy", "cxl_pool_zero_copy": "zero-copy"}
PROFILE_KEYS = {"local-host": ("fabric.cxl.coherence",), "network": ("workload.selector",)}
"""Scenario keys a calibration profile uses beyond `cxlsim.fabric.preset.COMMON_KEYS`, by profile kind."""


def is_profile(preset: str) -> bool:
    """True if `fabric.preset` names a calibration profile file rather than a registered preset."""
    return preset.endswith(PROFILE_SUFFIX)


def projection_note(profile: dict, nranks: int) -> str:
    """What a projection of `profile` to `nranks` ranks assumes, for the output."""
    fitted = profile["model"]["np"]
    if profile["kind"] == "network":
        model = profile["model"]
        copy = "own-block copy inside the latency line" if model.get("own_copy_in_line") else "own-block copy"
        exchange = model.get("exchange") or {}
        terms = (f" + exchange terms (contention: {exchange['contention_source']}; FIN: {exchange['fin_source']})"
                 if exchange.get("contention") or exchange.get("fin_ns") else "")
        return (f"network profile fitted at np {fitted}: LogGP on {model['base_preset']} + "
                f"collective overhead + {copy}{terms}" +
                ("" if nranks == fitted else f"; at np {nranks} the MPICH selector and the DES scale the LogGP "
                                              "messages, the overhead and copy stay as fitted"))
    return (f"local-host profile fitted at np {fitted}" +
            ("" if nranks == fitted else f"; at np {nranks} every rank copies or reads all {nranks} blocks at the "
                                          "fitted copy bandwidth, the flag protocol as the DES runs it, and one "
                                          "host's memory never limits"))


def predict_profile(profile: dict, sizes, nranks: int) -> list[dict]:
    """Project the allgather with a profile: local-host (DES, every mode and side:
    coherence, side, size_bytes, predicted_ns) or network (size_bytes, pure_ns, full_ns)."""
    if profile["kind"] == "network":
        return predict_network(profile["model"], sizes, nranks)
    model = dataclasses.replace(LocalModel.from_dict(profile["model"]), np=nranks)
    return [{"coherence": c, "side": side, "size_bytes": n, "predicted_ns": predict_local(model, c, side, n)}
            for c, side in MODES for n in sizes]


@dataclasses.dataclass(frozen=True)
class ProfileSetup:
    """A profile elaborated for a scenario: what it projects (coherence and side for a local-host one)."""

    preset: "ProfilePreset"
    coherence: Coherence | None
    side: str

    def written_out(self) -> dict:
        return {}  # its figures are the profile file's, kept beside the run

    def describe(self, nodes: int) -> str:
        return (f"calibration profile {self.preset.name}, {nodes} ranks "
                f"({self.preset.profile['kind']}, fitted at np {self.preset.fitted_np})")


@dataclasses.dataclass(frozen=True)
class ProfilePreset:
    """A calibration profile (`cxlsim calibrate`) standing where a preset does, named by its path."""

    kind_of: ClassVar[dict] = {k: f"{k} calibration profile" for k in PROFILE_KEYS}

    name: str
    """The profile's path, as `fabric.preset` gives it."""
    profile: dict

    @classmethod
    def load(cls, path: str) -> "ProfilePreset":
        return cls(path, load_profile(path))

    @property
    def kind(self) -> str:
        return self.kind_of[self.profile["kind"]]

    @property
    def scenario_keys(self) -> tuple[str, ...]:
        return PROFILE_KEYS[self.profile["kind"]]

    @property
    def source(self) -> str:
        prov = self.profile["provenance"]
        return f"cxlsim calibrate, {prov.get('timestamp_utc')} on {prov.get('hostname')}"

    @property
    def fitted_np(self) -> int:
        return self.profile["model"]["np"]

    def elaborate(self, fabric) -> ProfileSetup:
        if self.profile["kind"] == "network":
            return ProfileSetup(self, None, "")
        coherence = Coherence.parse(fabric.cxl.coherence or Coherence.HW, "fabric.cxl.coherence")
        return ProfileSetup(self, coherence, "")


def _side(scenario, kind: str) -> str:
    """The side a local-host profile projects ('' for a network one); InputError for a workload it cannot."""
    wl = scenario.workload
    if wl.collective != "allgather":
        raise InputError(f"workload.collective: a calibration profile projects the allgather only, got {wl.collective!r}")
    if scenario.engine != "des":
        raise InputError(f"engine: a calibration profile projects with the DES, got {scenario.engine!r}")
    if kind == "network":
        if wl.algorithm != "auto" or wl.selector != "mpich":
            raise InputError(f"workload.algorithm: a network profile projects MPICH's choice (algorithm 'auto', "
                             f"selector 'mpich'), got {wl.algorithm!r} with selector {wl.selector!r}")
        return ""
    if wl.algorithm not in LOCAL_ALGORITHMS:
        raise InputError(f"workload.algorithm: a local-host profile runs one of {sorted(LOCAL_ALGORITHMS)}, "
                         f"got {wl.algorithm!r}")
    return LOCAL_ALGORITHMS[wl.algorithm]


def run_profile(scenario, setup: ProfileSetup, bar=None) -> list[dict]:
    """`cxlsim.simulate.run` for a scenario whose `fabric.preset` is a profile: one row per size
    (size_bytes, latency_us, algorithm, note, engine, events (None: not counted), wall_s)."""
    preset = setup.preset
    profile, path = preset.profile, preset.name
    side = _side(scenario, profile["kind"])
    nodes, sizes = scenario.fabric.nodes, scenario.workload.sizes_bytes
    note = projection_note(profile, nodes)
    rows = []
    if profile["kind"] == "network":
        start = time.perf_counter()
        got = predict_network(profile["model"], sizes, nodes)
        wall = (time.perf_counter() - start) / max(len(sizes), 1)
        for row in got:
            rows.append({"size_bytes": row["size_bytes"], "latency_us": row["full_ns"] / 1e3,
                         "algorithm": "auto", "note": f"{path}: {note}", "engine": "des", "events": None,
                         "wall_s": wall})
            if bar:
                bar.update(1)
        return rows
    model = dataclasses.replace(LocalModel.from_dict(profile["model"]), np=nodes)
    algorithm = "cxl_pool_zero_copy" if side == "zero-copy" else "cxl_pool"
    for size in sizes:
        start = time.perf_counter()
        ns = predict_local(model, setup.coherence, side, size)
        rows.append({"size_bytes": size, "latency_us": ns / 1e3, "algorithm": algorithm,
                     "note": f"{path}, {setup.coherence.value} coherence: osu_allgather's per-call time; {note}",
                     "engine": "des", "events": None, "wall_s": time.perf_counter() - start})
        if bar:
            bar.update(1)
    return rows
