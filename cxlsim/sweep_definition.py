"""What a sweep is: a base scenario and its axes, expanded into points.

A sweep is a base scenario (the same YAML as `cxlsim simulate`) plus *axes*:
dotted scenario keys, each with a list of YAML values. Every combination of one
value per axis is a *point*; a point is the base scenario with those values set
and one message size. The message size is always an axis (`workload.sizes`):
the base scenario's sizes, or the ones given to `--vary workload.sizes=...`,
each become points, so that every point is one simulated call and one CSV row.

In a scenario file the axes live in a top-level `sweep:` section beside the
scenario (`SweepScenario`, the scenario schema plus that section):

    sweep:
      vary:
        fabric.nodes: [4, 8, 16]
        workload.sizes: [8 KiB, 1 MiB]
      executor: local        # local (default) or mpi
      workers: 2             # local pool size (default: the CPUs this process may use)

Axes keep their order (the first is the outermost loop); the implicit size axis
is the innermost. An unknown key is an error that lists the valid ones; a value
the key does not accept is an error naming the key, the value and the
expectation, before anything runs. `seed` and `output.*` cannot be varied.

>>> base = config.from_dict({"engine": "analytic", "fabric": {"preset": "ib-hdr", "nodes": 4},
...                          "workload": {"algorithm": "ring", "sizes": ["1 KiB", "1 MiB"]}})
>>> [dict(p.values) for p in expand(base, [parse_vary("fabric.nodes=2,8")])][:3]
[{'fabric.nodes': 2, 'workload.sizes': 1024}, {'fabric.nodes': 2, 'workload.sizes': 1048576}, \
{'fabric.nodes': 8, 'workload.sizes': 1024}]
>>> points = expand(base, [("fabric.preset", ("ib-hdr", "cxl3-pool")), ("fabric.cxl.switch_levels", (1, 2))])
>>> len(points), points[0].unused, dict(points[0].values)   # 2 sizes x (ib-hdr once + cxl3-pool twice)
(6, ('fabric.cxl.switch_levels',), {'fabric.preset': 'ib-hdr', 'fabric.cxl.switch_levels': None, \
'workload.sizes': 1024})

**Axes that do not apply.** An axis that a point's preset does not use (for
example `fabric.cxl.switch_levels` on a network preset, as
`cxlsim.simulate.unused_keys` tells) is left unset on that point, whose value
for it is None (an empty CSV cell); the combinations that differ only in such
axes are one point, run once. `unused_notes` says which axes, on how many
points and presets, and `cxlsim sweep` prints it. An axis that no point uses is
an error naming it, as `cxlsim simulate` refuses an option its preset does not use.

**Seeds.** A point's seed is a stable hash (SHA-256) of its canonical key: the
varied keys that apply to it with their validated internal values (ns, bytes, bytes/ns), plus
the base seed if the scenario sets one. Neither the order of the points, nor
resuming, nor the executor changes a point's seed or its result.

**Definitions.** `definition(cfg)` is what a sweep computes, in canonical
values: its base scenario and its axes (not where or how it runs). Two sweeps
with the same definition have the same points; `redefinition(old, new)` names
the first key where two definitions differ, which `--resume` refuses and
`--extend` allows only when every old point stays.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import json
from dataclasses import dataclass

import yaml

from cxlsim import config
from cxlsim.errors import InputError
from cxlsim.simulate import applies_to, unused_keys

__all__ = ["SIZE_KEY", "SweepConfig", "SweepScenario", "Point", "load", "base_scenario", "leaf_keys", "parse_vary",
           "check_axes", "axis_value", "unused_axes", "expand", "unused_notes", "point_seed", "point_id", "flatten", "definition", "redefinition"]

SIZE_KEY = "workload.sizes"
FORBIDDEN_PREFIXES = ("seed", "output.")
"""Keys a sweep may not vary: seeds are derived per point, the output is the sweep's."""


# ---------------------------------------------------------------- schema

def _vary(value) -> tuple:
    if not isinstance(value, dict):
        raise ValueError("")
    axes = []
    for key, values in value.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"key {key!r} is not a dotted key")
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        if not values:
            raise ValueError(f"{key} has no values")
        axes.append((key, tuple(values)))
    return tuple(axes)


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """The `sweep:` section of a scenario file."""

    vary: tuple = config.option("vary", _vary, "a mapping of dotted keys to lists of values, "
                                "like {fabric.nodes: [4, 8]}", (), lambda axes: {k: list(v) for k, v in axes})
    """Axes: (dotted key, values as written in YAML) pairs, outermost first."""
    executor: str = config.option("executor", config.choice("local", "mpi"), "'local' or 'mpi'", "local")
    """Where DES points run: a local process pool or mpi4py's MPIPoolExecutor."""
    workers: int | None = config.option("workers", config.integer(1), "an integer >= 1", None)
    """Local pool size; None means the CPUs this process may use."""


@dataclass(frozen=True, kw_only=True)
class SweepScenario(config.Scenario):
    """A simulation scenario with a `sweep:` section (what `cxlsim sweep` loads)."""

    sweep: SweepConfig = config.section("sweep", SweepConfig)


def load(path: str) -> SweepScenario:
    """Load a scenario file that may hold a `sweep:` section."""
    return config.load(path, SweepScenario)


def base_scenario(cfg: SweepScenario) -> config.Scenario:
    """The scenario without its `sweep:` section."""
    data = config.to_dict(cfg)
    del data["sweep"]
    return config.from_dict(data)


def leaf_keys(schema=config.Scenario, prefix: str = "") -> list[str]:
    """Every dotted key of a schema's values, in schema order."""
    keys = []
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.metadata['key']}"
        if "section" in f.metadata:
            keys += leaf_keys(f.metadata["section"], key + ".")
        else:
            keys.append(key)
    return keys


def _check_key(key: str, where: str) -> None:
    valid = [k for k in leaf_keys() if not k.startswith(FORBIDDEN_PREFIXES)]
    if key in valid:
        return
    if key.startswith(FORBIDDEN_PREFIXES) and key in leaf_keys():
        why = ("each point's seed is derived from its key; set the base scenario's seed instead"
               if key == "seed" else "the output belongs to the sweep; use --output")
        raise InputError(f"{where} {key}: cannot be varied ({why})")
    near = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    raise InputError(f"{where} {key}: unknown key{hint}; expected one of {', '.join(valid)}")


def parse_vary(text: str) -> tuple[str, tuple]:
    """'KEY=V1,V2,...' -> (KEY, values), each value read as YAML ('8' is 8, '25 GB/s' a string)."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise InputError(f"--vary {text!r}: expected KEY=V1,V2,... like fabric.nodes=4,8,16")
    parsed = []
    for item in values.split(","):
        if not item.strip():
            raise InputError(f"--vary {text!r}: an empty value; expected KEY=V1,V2,...")
        try:
            parsed.append(yaml.safe_load(item.strip()))
        except yaml.YAMLError:
            parsed.append(item.strip())
    return key, tuple(parsed)


# ---------------------------------------------------------------- points

@dataclass(frozen=True, kw_only=True)
class Point:
    """One combination of axis values."""

    index: int
    """Position in the factorial order (first axis outermost)."""
    point_id: str
    """16 hex digits of SHA-256 over the canonical values; the point's file name."""
    seed: int
    """The point's seed (63 bits), a stable hash of its canonical key."""
    values: tuple
    """(dotted key, canonical internal value) per axis, in axis order; None for an axis in `unused`."""
    scenario: config.Scenario
    """The base scenario with the values and the seed set (one message size)."""
    unused: tuple = ()
    """The axes this point's preset does not use: left unset, so the point is run once for all their values."""


def _canonical(value):
    if isinstance(value, tuple):
        return value[0] if len(value) == 1 else list(value)
    return value


def _key_text(values) -> str:
    return json.dumps(dict(values), sort_keys=True, separators=(",", ":"))


def point_seed(values, base_seed: int | None) -> int:
    """A point's seed from its canonical values (and the base seed, if any); SHA-256, not hash()."""
    text = _key_text(values) if base_seed is None else f"{base_seed}|{_key_text(values)}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") >> 1


def point_id(values) -> str:
    """A point's 16-hex-digit id (its file name) from its canonical values."""
    return hashlib.sha256(_key_text(values).encode("utf-8")).hexdigest()[:16]


def _validated(base: config.Scenario, overrides: dict, where: str) -> config.Scenario:
    try:
        return config.with_overrides(base, overrides)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def _pairs(base: config.Scenario, key: str, value, where: str) -> list[tuple]:
    """[(YAML value, canonical value)] of one axis value; a value of the size axis may name several sizes."""
    if key == SIZE_KEY and not isinstance(value, (str, list, tuple)):
        value = [value]  # one size, as a list: what workload.sizes accepts
    canonical = config.get(_validated(base, {key: value}, where), key)
    if key == SIZE_KEY:
        return [(size, size) for size in canonical]
    return [(value, _canonical(canonical))]


def axis_value(base: config.Scenario, key: str, text: str):
    """The canonical value (as in a point and its CSV column) of one value of axis `key`, written as
    on the command line ('1 MiB', '250 ns', 8); InputError naming `--where KEY=TEXT` otherwise."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    pairs = _pairs(base, key, value, f"--where {key}={text!r}")
    if len(pairs) != 1:
        raise InputError(f"--where {key}={text!r}: names {len(pairs)} values; give one")
    return pairs[0][1]


def check_axes(base: config.Scenario, axes) -> list[tuple[str, list[tuple]]]:
    """The axes validated against `base`: (key, [(YAML value, canonical value), ...]) per axis.

    The size axis (`workload.sizes`) is added innermost if not given, and every
    value of it that names several sizes is flattened, so a point has one size.
    """
    axes = list(axes)
    seen = set()
    for key, values in axes:
        _check_key(key, "sweep")
        if key in seen:
            raise InputError(f"sweep {key}: varied twice")
        seen.add(key)
        if not values:
            raise InputError(f"sweep {key}: no values")
    if SIZE_KEY not in seen:
        axes.append((SIZE_KEY, base.workload.sizes_bytes))
    checked = []
    for key, values in axes:
        pairs = [pair for value in values for pair in _pairs(base, key, value, f"sweep {key}={value!r}")]
        canon = [c for _, c in pairs]
        dup = next((c for i, c in enumerate(canon) if c in canon[:i]), None)
        if dup is not None:
            raise InputError(f"sweep {key}: the value {dup!r} is given twice (values {list(values)!r})")
        checked.append((key, pairs))
    return checked


def _nested(dotted: dict) -> dict:
    out: dict = {}
    for key, value in dotted.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def unused_axes(preset: str, overrides: dict, cache: dict | None = None) -> list[str]:
    """The axis keys of `overrides` ({dotted key: YAML value}) that `preset` does not use
    (`cxlsim.simulate.unused_keys`); `cache` remembers the answer per preset and set keys."""
    keys = tuple(k for k, v in overrides.items() if v is not None and k not in ("fabric.preset", SIZE_KEY))
    memo = (preset, keys)
    if cache is None or memo not in cache:
        raw = _nested({"fabric.preset": preset, **{k: overrides[k] for k in keys}})
        found = set(unused_keys(raw))
        answer = [k for k in keys if k in found]
        if cache is None:
            return answer
        cache[memo] = answer
    return cache[memo]


def expand(base: config.Scenario, axes) -> list[Point]:
    """The factorial product of `axes` ((key, YAML values) pairs) over `base`, validated (see `check_axes`).

    An axis that a point's preset does not use (`fabric.cxl.switch_levels` on a network
    preset) is left unset on that point and listed in its `unused`; the combinations that
    differ only there are one point, run once, in the place of the first of them. An axis
    that no point uses is an InputError naming it.
    """
    checked = check_axes(base, axes)
    keys = [key for key, _ in checked]
    points: list[Point] = []
    seen: set[str] = set()
    cache: dict = {}
    for combo in itertools.product(*(pairs for _, pairs in checked)):
        overrides = {key: y for key, (y, _) in zip(keys, combo)}
        unused = unused_axes(overrides.get("fabric.preset", base.fabric.preset), overrides, cache)
        values = tuple((key, None if key in unused else c) for key, (_, c) in zip(keys, combo))
        identity = tuple((k, c) for k, c in values if k not in unused)
        pid = point_id(identity)
        if pid in seen:
            continue
        seen.add(pid)
        seed = point_seed(identity, base.seed)
        for key in unused:
            del overrides[key]
        overrides[SIZE_KEY] = [overrides[SIZE_KEY]]
        overrides["seed"] = seed
        scenario = _validated(base, overrides, "sweep point " + ", ".join(f"{k}={c!r}" for k, c in identity))
        points.append(Point(index=len(points), point_id=pid, seed=seed, values=values, scenario=scenario,
                            unused=tuple(unused)))
    for key in keys:
        if points and all(key in p.unused for p in points):
            presets = ", ".join(dict.fromkeys(p.scenario.fabric.preset for p in points))
            raise InputError(f"sweep {key}: no point uses it (fabric.preset {presets} does not; it applies to "
                             f"{' and '.join(applies_to(key)) or 'no preset'}); remove the axis")
    return points


def unused_notes(points: list[Point]) -> list[str]:
    """One line per axis that some points do not use: how many, on which presets, and what the sweep did."""
    notes = []
    axes = [k for k, _ in points[0].values] if points else []
    for key in axes:
        skipped = [p for p in points if key in p.unused]
        if skipped:
            presets = ", ".join(dict.fromkeys(p.scenario.fabric.preset for p in skipped))
            notes.append(f"{key} does not apply to {len(skipped)} of {len(points)} points (fabric.preset {presets}): "
                         f"each of them runs once, with an empty {key} column")
    return notes


# ---------------------------------------------------------------- definitions

def flatten(data: dict, prefix: str = "") -> dict:
    """A nested mapping as {dotted key: leaf value}."""
    out = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def definition(cfg: SweepScenario) -> tuple[dict, list[tuple[str, list[tuple]]]]:
    """What a sweep computes: ({dotted base key: YAML value} without the sizes, checked axes).

    The sizes are the implicit innermost axis, so they appear among the axes;
    where and how the points run (`sweep.executor`, `sweep.workers`) is not part of it.
    """
    base = base_scenario(cfg)
    flat = {k: v for k, v in flatten(config.to_dict(base)).items() if k != SIZE_KEY}
    return flat, check_axes(base, cfg.sweep.vary)


def _shown(pairs) -> str:
    return "[" + ", ".join(str(y) for y, _ in pairs) + "]"


def redefinition(old: SweepScenario, new: SweepScenario, *, extend: bool = False) -> tuple[str, str] | None:
    """Where `new` redefines the sweep `old`: (kind, 'KEY: ... there, ... here'), or None.

    kind is 'base' (another base scenario: no point is shared), 'axes' (another set or
    order of axes), 'values' (an axis has other values) or 'drops' (with `extend`:
    an axis lost values of `old`, so some of its points would be dropped). With
    `extend`, an axis that only gains values is no redefinition.
    """
    old_base, old_axes = definition(old)
    new_base, new_axes = definition(new)
    for k in [*old_base, *(k for k in new_base if k not in old_base)]:
        if old_base.get(k) != new_base.get(k):
            return "base", f"{k}: {old_base.get(k)!r} there, {new_base.get(k)!r} here"
    old_keys, new_keys = [k for k, _ in old_axes], [k for k, _ in new_axes]
    if old_keys != new_keys:
        missing = [k for k in old_keys if k not in new_keys]
        added = [k for k in new_keys if k not in old_keys]
        if missing:
            return "axes", f"{missing[0]}: an axis there, not here"
        if added:
            return "axes", f"{added[0]}: not an axis there, an axis here"
        return "axes", f"sweep.vary: axes in the order {', '.join(old_keys)} there, {', '.join(new_keys)} here"
    for (key, old_pairs), (_, new_pairs) in zip(old_axes, new_axes):
        old_c, new_c = [c for _, c in old_pairs], [c for _, c in new_pairs]
        if old_c == new_c:
            continue
        dropped = [y for y, c in old_pairs if c not in new_c]
        if not extend:
            return "values", f"{key}: {_shown(old_pairs)} there, {_shown(new_pairs)} here"
        if dropped:
            return "drops", (f"{key}: {_shown(old_pairs)} there, {_shown(new_pairs)} here, without "
                             f"{', '.join(str(y) for y in dropped)}")
    return None
