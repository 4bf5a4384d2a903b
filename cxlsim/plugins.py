"""Plug-ins: modules from outside the package that add collective algorithms, presets or training modes.

A plug-in is a module that declares its records in module-level lists, by kind:

    ALGORITHMS = [Algorithm(...), ...]     # cxlsim.models.collectives
    PRESETS = [...]                        # cxlsim.fabric presets (network, CXL)
    MODES = [Mode(...), ...]               # cxlsim.models.training

Nothing registers on import. Each registry module lists its built-in records
and asks `records(kind)` for the plug-ins' ones, so the set of plug-ins in use
is exactly what the environment names:

- `CXLSIM_PLUGINS=module,other.module` (importable names, comma-separated);
- the `cxlsim.plugins` entry-point group of installed distributions.

A module that cannot be imported, or a kind list that is not a list, is an
`InputError` naming `CXLSIM_PLUGINS` (or the entry point) and the module.
"""
from __future__ import annotations

import functools
import importlib
import os
from importlib import metadata

from cxlsim.errors import InputError

__all__ = ["ENV_VAR", "ENTRY_POINT_GROUP", "KINDS", "modules", "records"]

ENV_VAR = "CXLSIM_PLUGINS"
ENTRY_POINT_GROUP = "cxlsim.plugins"
KINDS = ("ALGORITHMS", "PRESETS", "MODES")
"""The module-level lists a plug-in may define."""

_loaded: dict[tuple, list] = {}


@functools.lru_cache(maxsize=1)
def _entry_point_sources() -> tuple[tuple[str, str], ...]:
    """The installed distributions' plug-ins, scanned once per process (a scan costs tens of ms)."""
    return tuple((f"entry point {ep.name} ({ENTRY_POINT_GROUP})", ep.value.split(":")[0].strip())
                 for ep in metadata.entry_points(group=ENTRY_POINT_GROUP))


def _sources() -> list[tuple[str, str]]:
    """(where it was named, module name) for every plug-in the environment names, in order."""
    named = [(ENV_VAR, name.strip()) for name in os.environ.get(ENV_VAR, "").split(",") if name.strip()]
    named += _entry_point_sources()
    seen, unique = set(), []
    for where, name in named:
        if name not in seen:
            seen.add(name)
            unique.append((where, name))
    return unique


def modules() -> list:
    """The plug-in modules the environment names, imported once per distinct list of names."""
    sources = tuple(_sources())
    if sources not in _loaded:
        mods = []
        for where, name in sources:
            try:
                mods.append(importlib.import_module(name))
            except ImportError as exc:
                raise InputError(f"{where}: cannot import plug-in module {name!r}: {exc}") from None
        _loaded[sources] = mods
    return _loaded[sources]


def records(kind: str) -> list:
    """Every record of `kind` ('ALGORITHMS', 'PRESETS' or 'MODES') the plug-in modules declare, in order."""
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    found = []
    for mod in modules():
        declared = getattr(mod, kind, [])
        if not isinstance(declared, (list, tuple)):
            raise InputError(f"{ENV_VAR}: {mod.__name__}.{kind} must be a list of records, "
                             f"got {type(declared).__name__}")
        found.extend(declared)
    return found
