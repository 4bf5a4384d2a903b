"""Presets: named fabrics that a scenario picks with `fabric.preset`, and the registry of them by name.

A preset is anything that satisfies the `Preset` protocol. It has a name, a kind
(what the error messages call it: 'network preset', 'CXL pool preset',
'calibration profile'), a source for its figures, and the scenario keys it uses
(`scenario_keys`, dotted YAML keys; 'fabric.links.*' covers a section). It
elaborates the scenario's fabric section into the fabric a run uses
(`elaborate(fabric) -> Setup`): the preset with the scenario's overrides applied,
checked, with every choice the run makes (coherence, switch levels, ...) made.

A scenario key or CLI option that the chosen preset does not use is an error,
naming it and the kinds of preset it applies to: a preset never ignores a
setting silently. The keys every preset uses (the name, seed, engine, output,
preset, node count, collective, algorithm and sizes) are `COMMON_KEYS`.

The kinds:
- network presets (`cxlsim.fabric.presets.NetworkPreset`): NICs, links and
  switches on a topology, elaborated by `cxlsim.fabric.network_setup`;
- CXL pool presets (`cxlsim.fabric.cxl_presets.CXLPoolPreset`): hosts sharing
  pool devices on a CXL switch or switch tree (`cxlsim.fabric.cxl_setup`);
- the hybrid pod fabric (`cxlsim.fabric.pod_setup.PodsPreset`, `cxl-pods`):
  pods of hosts on CXL pools joined by a network, described in `fabric.pods`;
- calibration profiles (`cxlsim.calibrate.project.ProfilePreset`), named by
  their file path (PATH.json) rather than registered.

The registry (`presets()`, `find(name)`) lists the built-in network, CXL and
hybrid pod presets explicitly and appends the `PRESETS` records of plug-in modules
(`cxlsim.plugins`), so a plug-in preset is usable by name wherever a built-in is.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

from cxlsim import plugins
from cxlsim.errors import InputError
from cxlsim.fabric.cxl_presets import BUILTIN_CXL_PRESETS
from cxlsim.fabric.pod_setup import CXL_PODS
from cxlsim.fabric.presets import BUILTIN_NETWORK_PRESETS

__all__ = ["COMMON_KEYS", "Preset", "Setup", "presets", "find", "covers", "uses", "unused"]

COMMON_KEYS = ("name", "seed", "engine", "output.*", "fabric.preset", "fabric.nodes",
               "workload.collective", "workload.algorithm", "workload.sizes")
"""Scenario keys every preset uses."""


@runtime_checkable
class Setup(Protocol):
    """A preset elaborated for one scenario: what a run builds its fabric from."""

    def written_out(self) -> dict:
        """{dotted key: YAML value} of every figure and choice the run used, so a saved scenario
        re-runs without the preset table."""

    def describe(self, nodes: int) -> str:
        """One line for a table header: the fabric and how the ranks sit on it."""


@runtime_checkable
class Preset(Protocol):
    """A named fabric: its kind, the source of its figures, the scenario keys it uses, its elaboration."""

    name: str
    source: str

    @property
    def kind(self) -> str:
        """What it is, for messages: 'network preset', 'CXL pool preset', 'calibration profile'."""

    @property
    def scenario_keys(self) -> tuple[str, ...]:
        """Dotted scenario keys it uses beyond COMMON_KEYS ('section.*' covers a section)."""

    def elaborate(self, fabric) -> Setup:
        """The fabric a run of `fabric` (a `cxlsim.config.FabricConfig`) uses; InputError naming the key
        of any setting it cannot honour."""


def covers(patterns, key: str) -> bool:
    """True if one of `patterns` (dotted keys; 'section.*' for a whole section) is the dotted `key`."""
    return any(key.startswith(p[:-1]) if p.endswith(".*") else key == p for p in patterns)


def uses(preset: Preset, key: str) -> bool:
    """True if `preset` uses the dotted scenario `key`."""
    return covers(COMMON_KEYS + tuple(preset.scenario_keys), key)


def unused(preset: Preset, keys) -> list[str]:
    """The dotted keys among `keys` that `preset` does not use, in order."""
    return [k for k in keys if not uses(preset, k)]


def presets() -> dict:
    """Every preset by name: the built-in network and CXL pool presets, then the plug-ins' `PRESETS`.

    A plug-in record that is not a Preset, or a name given twice, is an InputError naming it.
    """
    found = {}
    for record in [*BUILTIN_NETWORK_PRESETS, *BUILTIN_CXL_PRESETS, CXL_PODS, *plugins.records("PRESETS")]:
        if not isinstance(record, Preset):
            raise InputError(f"{plugins.ENV_VAR}: a PRESETS record must be a preset (name, kind, source, "
                             f"scenario_keys, elaborate), got {type(record).__name__}")
        if record.name in found:
            raise InputError(f"{plugins.ENV_VAR}: preset {record.name!r} is declared twice")
        found[record.name] = record
    return found


def find(name: str) -> Preset:
    """The registered preset called `name`; an InputError naming `fabric.preset` and the known names."""
    known = presets()
    try:
        return known[name]
    except KeyError:
        raise InputError(f"fabric.preset: unknown preset {name!r}; expected one of {', '.join(sorted(known))}, "
                         "or a calibration profile PATH.json") from None
