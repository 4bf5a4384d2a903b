"""Scenarios: YAML files loaded into frozen, keyword-only dataclasses and validated.

A schema is a tree of dataclasses whose fields are declared with `option(...)`
(a value: its YAML key, parser, expectation and default) or `section(...)`
(a nested mapping). Field names carry internal units (`latency_ns`,
`bw_bytes_per_ns`); YAML keys are what users write (`latency: 250 ns`).
Unknown keys are errors, and every error names the key path, the bad value
and what was expected:

    fabric.links.bandwidth: expected a bandwidth like '25 GB/s', got '-3'

`get(cfg, "fabric.preset")` looks a value up by dotted YAML key, and
`with_overrides(cfg, {"fabric.nodes": 8})` returns a re-validated copy; values
are given as in YAML. Other features define their own schema with the same
helpers (`option`, `section`, and the value parsers `choice(...)` and
`integer(lo)`) and call `load(path, schema=...)`.

>>> cfg = from_dict({"fabric": {"preset": "ib-hdr", "nodes": 4}})
>>> get(cfg, "fabric.nodes"), get(with_overrides(cfg, {"fabric.nodes": 8}), "fabric.nodes")
(4, 8)
"""
from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass, fields

import yaml

from cxlsim.errors import InputError
from cxlsim.units import UnitError, parse_bandwidth, parse_size, parse_sizes, parse_time

__all__ = [
    "ConfigError", "option", "section", "choice", "integer", "text", "read_text", "load_yaml", "load", "from_dict",
    "to_dict", "get", "with_overrides", "set_keys", "changed_keys",
    "Scenario", "FabricConfig", "WorkloadConfig", "OutputConfig",
    "LinkConfig", "SwitchConfig", "NicConfig", "HostConfig", "CXLConfig", "PodsConfig",
]


class ConfigError(InputError):
    """A scenario is invalid; the message names the key path, the value and what was expected."""


# ---------------------------------------------------------------- schema helpers

def option(key: str, parse, expect: str, default=MISSING, unparse=None):
    """A scenario value at YAML `key`, parsed by `parse(value)` (which raises on bad input).

    `expect` completes 'expected ...'. `unparse` turns the internal value back into
    YAML text that parses to the same value (default: the value itself). A default
    of None means 'optional, unset'.
    """
    meta = {"key": key, "parse": parse, "expect": expect, "unparse": unparse or (lambda v: v)}
    return dataclasses.field(default=default, metadata=meta)


def section(key: str, cls):
    """A nested mapping at YAML `key`, validated as dataclass `cls` (absent means all defaults)."""
    return dataclasses.field(default_factory=lambda: from_dict({}, cls, key), metadata={"key": key, "section": cls})


def _fields_by_key(cls) -> dict:
    return {f.metadata["key"]: f for f in fields(cls)}


def _build(cls, data, path: str):
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'scenario'}: expected a mapping of keys, got {data!r}")
    by_key = _fields_by_key(cls)
    for key in data:
        if key not in by_key:
            raise ConfigError(f"{_join(path, str(key))}: unknown key; expected one of {', '.join(by_key)}")
    kwargs = {}
    for key, f in by_key.items():
        where = _join(path, key)
        meta = f.metadata
        if "section" in meta:
            kwargs[f.name] = _build(meta["section"], data.get(key), where)
        elif key in data and data[key] is not None:
            try:
                kwargs[f.name] = meta["parse"](data[key])
            except (UnitError, ValueError, TypeError) as exc:
                detail = f" ({exc})" if not isinstance(exc, UnitError) and str(exc) else ""
                raise ConfigError(f"{where}: expected {meta['expect']}, got {data[key]!r}{detail}") from None
        elif f.default is MISSING:
            raise ConfigError(f"{where}: missing; expected {meta['expect']}")
    return cls(**kwargs)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def from_dict(data: dict, schema=None, path: str = ""):
    """Validate a mapping (as from YAML) into an instance of `schema` (default `Scenario`)."""
    return _build(schema or Scenario, data, path)


def read_text(path: str, where: str = "file") -> str:
    """The UTF-8 text of the file at `path`; InputError naming `where` and the path otherwise.

    A missing file, a directory, a binary file (NUL bytes) or one in another encoding (UTF-16,
    Latin-1, ...) is refused with what was found, never a traceback. A UTF-8 byte-order mark is
    dropped.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"{where} {path!r}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{where} {path!r}: a directory, expected a file") from None
    except OSError as exc:
        raise ConfigError(f"{where} {path!r}: cannot read it ({exc.strerror})") from None
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise ConfigError(f"{where} {path!r}: UTF-16 text (byte-order mark {data[:2].hex()}); "
                         "expected UTF-8, save it as UTF-8")
    if b"\x00" in data:
        raise ConfigError(f"{where} {path!r}: a binary file, or text in UTF-16/32 (NUL byte at offset "
                          f"{data.index(0)}); expected UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where} {path!r}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}); expected UTF-8, save it as UTF-8") from None


def _duplicate_keys(node, path: str = "") -> tuple[str, int, int] | None:
    """(dotted key, its line, the first one's line) of the first key repeated in a mapping, or None."""
    if isinstance(node, yaml.MappingNode):
        seen = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key != "<<":
                dotted = _join(path, key)
                if key in seen:
                    return dotted, key_node.start_mark.line + 1, seen[key]
                seen[key] = key_node.start_mark.line + 1
            found = _duplicate_keys(value_node, _join(path, key or "?"))
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _duplicate_keys(item, f"{path}[{i}]")
            if found:
                return found
    return None


def load_yaml(path: str, where: str = "file"):
    """The YAML document in the file at `path`: {} for an empty file; InputError naming `where` otherwise.

    Besides what `read_text` refuses, invalid YAML and a key given twice in one mapping (YAML
    would keep the last one silently) are errors naming the line and the dotted key.
    """
    text = read_text(path, where)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return {}
        duplicate = _duplicate_keys(node)
        if duplicate:
            key, line, first = duplicate
            raise ConfigError(f"{where} {path!r}:{line}: duplicate key {key} (first given at line {first}); "
                             "give each key once")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} {path!r}: not valid YAML ({exc})") from None
    finally:
        loader.dispose()


def load(path: str, schema=None):
    """Load and validate a YAML scenario file (`load_yaml`, then `from_dict`); an empty file is {}."""
    return from_dict(load_yaml(path, "scenario file"), schema)


def to_dict(cfg) -> dict:
    """The YAML form of a validated config; `from_dict(to_dict(cfg)) == cfg`."""
    out = {}
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if "section" in f.metadata:
            out[f.metadata["key"]] = to_dict(value)
        else:
            out[f.metadata["key"]] = None if value is None else f.metadata["unparse"](value)
    return out


def get(cfg, dotted: str):
    """The value at a dotted YAML key path, e.g. get(cfg, 'fabric.links.bandwidth')."""
    node, done = cfg, []
    for key in dotted.split("."):
        if not dataclasses.is_dataclass(node) or key not in _fields_by_key(type(node)):
            raise ConfigError(f"{_join('.'.join(done), key)}: unknown key")
        node = getattr(node, _fields_by_key(type(node))[key].name)
        done.append(key)
    return node


def with_overrides(cfg, overrides: dict):
    """A copy of `cfg` with dotted YAML keys replaced by YAML-style values, re-validated."""
    data = to_dict(cfg)
    for dotted, value in overrides.items():
        get(cfg, dotted)  # the key path must exist
        node, keys = data, dotted.split(".")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return from_dict(data, type(cfg))


def set_keys(data: dict, schema=None) -> list[str]:
    """The dotted keys of `schema` (default `Scenario`) that a raw mapping (as from YAML) sets: present with a
    value other than None, sections walked; keys the schema does not know are left to `from_dict` to refuse."""
    out = []

    def walk(cls, node, path):
        if not isinstance(node, dict):
            return
        by_key = _fields_by_key(cls)
        for key, value in node.items():
            f = by_key.get(key)
            if f is None or value is None:
                continue
            if "section" in f.metadata:
                walk(f.metadata["section"], value, _join(path, key))
            else:
                out.append(_join(path, key))
    walk(schema or Scenario, data, "")
    return out


def changed_keys(cfg) -> list[str]:
    """The dotted keys of a validated config whose value differs from the schema's default."""
    out = []

    def walk(node, path):
        for f in fields(node):
            value = getattr(node, f.name)
            where = _join(path, f.metadata["key"])
            if "section" in f.metadata:
                walk(value, where)
            elif f.default is MISSING or value != f.default:
                out.append(where)
    walk(cfg, "")
    return out


# ---------------------------------------------------------------- parsers

def integer(lo: int):
    """A parser for `option(...)`: accepts an int >= `lo` (not a bool) and returns it unchanged.

    Bad input raises ValueError; `from_dict` turns it into a ConfigError naming the key,
    e.g. `fabric.nodes: expected an integer >= 1, got 0`.
    """
    def parse(value):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ValueError("")
        return value
    return parse


def _positive(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError("")
    return float(value)


def choice(*options):
    """A parser for `option(...)`: accepts one of `options` (compared with ==) and returns it unchanged.

    Bad input raises ValueError; `from_dict` turns it into a ConfigError naming the key,
    e.g. `engine: expected 'des' or 'analytic', got 'fast'`.
    """
    def parse(value):
        if value not in options:
            raise ValueError("")
        return value
    return parse


def text(value) -> str:
    """A parser for `option(...)`: accepts a non-empty string and returns it unchanged."""
    if not isinstance(value, str) or not value:
        raise ValueError("")
    return value


def _bool(value) -> bool:
    if not isinstance(value, bool):
        raise ValueError("")
    return value


def _sizes(value) -> tuple:
    sizes = tuple(parse_sizes(value)) if isinstance(value, str) else tuple(parse_size(v) for v in value)
    if not sizes:
        raise ValueError("")
    return sizes


def _line_multiple(value) -> int:
    if integer(64)(value) % 64:
        raise ValueError("")
    return value


def _seed(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("")
    return value


def _gbs(value: float) -> str:
    return f"{value!r} GB/s"


def _ns(value: float) -> str:
    return f"{value!r} ns"


_BW = "a bandwidth like '25 GB/s'"
_TIME = "a time like '250 ns'"


# ---------------------------------------------------------------- the simulation scenario

@dataclass(frozen=True, kw_only=True)
class LinkConfig:
    """Link overrides; unset values come from the preset."""

    bw_bytes_per_ns: float | None = option("bandwidth", parse_bandwidth, _BW, None, _gbs)
    latency_ns: float | None = option("latency", parse_time, _TIME, None, _ns)


@dataclass(frozen=True, kw_only=True)
class SwitchConfig:
    """Switch overrides; unset values come from the preset."""

    kind: str | None = option("kind", choice("ethernet", "infiniband"), "'ethernet' or 'infiniband'", None)
    latency_ns: float | None = option("latency", parse_time, _TIME, None, _ns)
    mode: str | None = option("mode", choice("cut-through", "store-and-forward"),
                              "'cut-through' or 'store-and-forward'", None)


@dataclass(frozen=True, kw_only=True)
class NicConfig:
    """LogGP overrides (o, g, G); unset values come from the preset."""

    overhead_ns: float | None = option("overhead", parse_time, _TIME, None, _ns)
    gap_ns: float | None = option("gap", parse_time, _TIME, None, _ns)
    gap_per_byte_ns: float | None = option("gap_per_byte", parse_time, "a time per byte like '0.04 ns'", None, _ns)


@dataclass(frozen=True, kw_only=True)
class HostConfig:
    """Host memory-speed overrides; unset values come from the preset."""

    memcpy_bw_bytes_per_ns: float | None = option("memcpy_bandwidth", parse_bandwidth, _BW, None, _gbs)
    reduce_bw_bytes_per_ns: float | None = option("reduce_bandwidth", parse_bandwidth, _BW, None, _gbs)


@dataclass(frozen=True, kw_only=True)
class CXLConfig:
    """CXL pool settings, used when `fabric.preset` names a CXL pool preset (cxl2-pool, cxl3-pool, plug-ins).

    Unset values come from the preset (cxlsim.fabric.cxl_presets), or are
    chosen when it is elaborated (`cxlsim.fabric.cxl_setup`) and written out in the run's config.
    """

    coherence: str | None = option("coherence", choice("hw", "flush"), "'hw' or 'flush'", None)
    """'hw' (CXL 3.x back-invalidation) or 'flush' (software); unset: 'hw' if the preset has it, else 'flush'."""
    devices: int = option("devices", integer(1), "an integer >= 1", 1)
    """Pool devices, interleaved by chunk."""
    switch_levels: int | None = option("switch_levels", choice(1, 2), "1 or 2", None)
    """1: one switch; 2: leaf switches under a root (CXL 3.x); unset: 1 if the hosts fit on one switch, else 2."""
    load_latency_ns: float | None = option("load_latency", parse_time, _TIME, None, _ns)
    """Unloaded load latency through one switch level; every latency figure (core to port, link, hop,
    media) is scaled by the same factor to reach it; unset: the preset's (250 ns)."""
    outstanding_lines: int | None = option("outstanding_lines", integer(1), "an integer >= 1", None)
    """Line requests one host keeps in flight (its bandwidth is this * 64 B / load latency)."""
    device_bw_bytes_per_ns: float | None = option("device_bandwidth", parse_bandwidth, _BW, None, _gbs)
    """Media bandwidth of one device (its ports still cap it)."""
    chunk_bytes: int = option("chunk", lambda v: _line_multiple(parse_size(v)), "a multiple of 64 B like '4 KiB'", 4096)
    """Pool address moved as one unit, and the interleaving granule, bytes."""


@dataclass(frozen=True, kw_only=True)
class PodsConfig:
    """Hybrid fabrics (`fabric.preset: cxl-pods`): pods of hosts on a CXL pool, joined by a network.

    Every pod has `hosts` hosts on its own pool (`pool`, a CXL pool preset, with the `fabric.cxl`
    settings); the pods' hosts all have a NIC on the `network` preset's fabric (`fabric.topology`
    and the `fabric.links`/`switch`/`nic` overrides). See `cxlsim.fabric.pod_setup`.
    """

    pool: str = option("pool", text, "a CXL pool preset like 'cxl3-pool'", "cxl3-pool")
    hosts: int = option("hosts", integer(1), "an integer >= 1 (hosts per pod)", 16)
    network: str = option("network", text, "a network preset like 'eth-100g-roce'", "eth-100g-roce")


@dataclass(frozen=True, kw_only=True)
class FabricConfig:
    """Which fabric: a preset, a topology, the rank layout and per-component overrides."""

    preset: str = option("preset", text, "a preset name like 'ib-hdr'")
    topology: str = option("topology", text, "'star', 'fat_tree' or a .yaml/.graphml file", "star")
    nodes: int = option("nodes", integer(1), "an integer >= 1")
    ranks_per_node: int = option("ranks_per_node", integer(1), "an integer >= 1", 1)
    placement: str = option("placement", choice("block", "round_robin"), "'block' or 'round_robin'", "block")
    hosts_per_leaf: int | None = option("hosts_per_leaf", integer(1), "an integer >= 1 (fat_tree)", None)
    oversubscription: float = option("oversubscription", _positive, "a number > 0 (fat_tree)", 1.0)
    spines: int | None = option("spines", integer(1), "an integer >= 1 (fat_tree)", None)
    links: LinkConfig = section("links", LinkConfig)
    switch: SwitchConfig = section("switch", SwitchConfig)
    nic: NicConfig = section("nic", NicConfig)
    host: HostConfig = section("host", HostConfig)
    cxl: CXLConfig = section("cxl", CXLConfig)
    pods: PodsConfig = section("pods", PodsConfig)


@dataclass(frozen=True, kw_only=True)
class WorkloadConfig:
    """What to run: a collective, its algorithm (or a library selector) and the sizes."""

    collective: str = option("collective", text, "a collective like 'allgather'", "allgather")
    algorithm: str = option("algorithm", text, "an algorithm name or 'auto'", "auto")
    selector: str = option("selector", choice("mpich", "ompi"), "'mpich' or 'ompi'", "mpich")
    inter_algorithm: str = option("inter_algorithm", text, "an allgather algorithm among node leaders", "ring")
    sizes_bytes: tuple = option("sizes", _sizes, "sizes like '1B:1MiB' or [1, 1024]",
                               (1, 1024, 65536, 1048576), list)
    chunk_bytes: int = option("chunk", lambda v: integer(1)(parse_size(v)), "a size >= 1 B like '64 KiB'", 65536)
    root: int = option("root", integer(0), "a rank >= 0", 0)
    iterations: int = option("iterations", integer(1), "an integer >= 1", 1)
    """Timed back-to-back calls (DES only): the latency is the time per call, as OSU reports it."""
    warmup: int = option("warmup", integer(0), "an integer >= 0", 0)
    """Untimed calls before them (DES only)."""


@dataclass(frozen=True, kw_only=True)
class OutputConfig:
    """Where the run workspace goes and what it holds."""

    dir: str | None = option("dir", text, "a directory path", None)
    plot: bool = option("plot", _bool, "true or false", True)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A simulation scenario (`cxlsim simulate SCENARIO.yaml`)."""

    name: str = option("name", text, "a short name", "scenario")
    seed: int | None = option("seed", _seed, "an integer >= 0", None)
    engine: str = option("engine", choice("des", "analytic"), "'des' or 'analytic'", "des")
    fabric: FabricConfig = section("fabric", FabricConfig)
    workload: WorkloadConfig = section("workload", WorkloadConfig)
    output: OutputConfig = section("output", OutputConfig)
