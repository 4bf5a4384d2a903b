"""Cluster specs: which GPUs sit on which nodes, the network between them, and the precision.

A cluster spec is a YAML mapping:

    name: hetero-4              # optional, default 'cluster'
    interconnect: ib-hdr        # a fabric preset (cxlsim.fabric.presets), required
    precision: amp              # fp32 | tf32 | amp, required: every run states its precision
    memory_servers: 1           # SoftMemoryBox memory-server hosts (EDDIS modes), default 1
    server_cores: 1             # aggregation cores per memory server, default 1
    nodes:                      # required, at least one entry
      - gpu: v100               # a GPU name from gpus.yaml (case-insensitive)
        gpus: 2                 # GPUs in this node, default 1
        repeat: 4               # how many such nodes, default 1
      - {gpu: rtx3090}

Every GPU is one data-parallel worker. Workers are numbered node by node in the
order of the spec (a node with `repeat: 4` contributes 4 nodes in a row). All
hosts, worker nodes first and then the memory servers, hang off one switch of
the interconnect preset (a star). GPUs in one node talk through host shared
memory (the transport's intra-host rule: a copy at the preset's memcpy
bandwidth), not NVLink.

Unknown keys and bad values are InputErrors (`ConfigError`) that name the key
path, the value and what was expected, e.g.
`nodes[1].gpus: expected an integer >= 1, got 0`; so are a file that is not
UTF-8 text (binary, UTF-16) and a key given twice (`load`).

>>> spec = from_dict({"interconnect": "ib-hdr", "precision": "amp",
...                   "nodes": [{"gpu": "V100", "repeat": 2}, {"gpu": "t4"}]})
>>> [w.gpu for w in spec.workers()], spec.worker_hosts
(['v100', 'v100', 't4'], 3)
"""
from __future__ import annotations

from dataclasses import dataclass

from cxlsim.config import ConfigError, choice, integer, load_yaml, option, text
from cxlsim.config import from_dict as _config_from_dict
from cxlsim.fabric.presets import PRESETS
from cxlsim.models.training import profiles
from cxlsim.models.training.profiles import PRECISIONS

__all__ = ["ClusterSpec", "NodeSpec", "Worker", "from_dict", "load"]


# The scenario schema's own value parsers (cxlsim.config owns scenario parsing).
_int1 = integer(1)


def _gpu_name(value) -> str:
    if not isinstance(value, str) or value.strip().lower() not in profiles.gpus():
        raise ValueError("")
    return value.strip().lower()


def _node_list(value) -> list:
    if not isinstance(value, list) or not value:
        raise ValueError("")
    return value


def _known_gpus() -> str:
    return ", ".join(sorted(profiles.gpus()))


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """One entry of `nodes`: a node type and how many of them."""

    gpu: str = option("gpu", _gpu_name, f"a GPU name, one of {_known_gpus()}")
    """GPU registry name (gpus.yaml)."""
    gpus: int = option("gpus", _int1, "an integer >= 1", 1)
    """GPUs (workers) in each node."""
    repeat: int = option("repeat", _int1, "an integer >= 1", 1)
    """Identical nodes of this type."""


@dataclass(frozen=True, kw_only=True)
class _ClusterFile:
    name: str = option("name", text, "a short name", "cluster")
    interconnect: str = option("interconnect", choice(*PRESETS),
                               f"a fabric preset, one of {', '.join(sorted(PRESETS))}")
    precision: str = option("precision", choice(*PRECISIONS), f"one of {', '.join(PRECISIONS)}")
    memory_servers: int = option("memory_servers", _int1, "an integer >= 1", 1)
    server_cores: int = option("server_cores", _int1, "an integer >= 1", 1)
    nodes: list = option("nodes", _node_list, "a non-empty list of {gpu, gpus, repeat} mappings")


@dataclass(frozen=True)
class Worker:
    """One GPU: its worker index, the host index it runs on, and its GPU type."""

    index: int
    host: int
    gpu: str


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """A validated cluster spec (see the module docstring for the YAML form)."""

    name: str
    """Short name, used for run workspaces."""
    interconnect: str
    """Fabric preset name."""
    precision: str
    """'fp32', 'tf32' or 'amp'."""
    memory_servers: int
    """SoftMemoryBox memory-server hosts."""
    server_cores: int
    """Aggregation cores per memory server (one transport rank each)."""
    nodes: tuple
    """NodeSpec entries, in spec order."""

    def workers(self) -> list[Worker]:
        """Every GPU as a Worker, node by node."""
        out, host = [], 0
        for node in self.nodes:
            for _ in range(node.repeat):
                for _ in range(node.gpus):
                    out.append(Worker(len(out), host, node.gpu))
                host += 1
        return out

    @property
    def worker_hosts(self) -> int:
        """Hosts that carry GPUs."""
        return sum(node.repeat for node in self.nodes)

    @property
    def size(self) -> int:
        """Workers (GPUs)."""
        return sum(node.repeat * node.gpus for node in self.nodes)


def _finish(raw: _ClusterFile) -> ClusterSpec:
    nodes = []
    for i, entry in enumerate(raw.nodes):
        if not isinstance(entry, dict):
            raise ConfigError(f"nodes[{i}]: expected a mapping with keys gpu, gpus, repeat, got {entry!r}")
        nodes.append(_config_from_dict(entry, NodeSpec, f"nodes[{i}]"))
    return ClusterSpec(name=raw.name, interconnect=raw.interconnect, precision=raw.precision,
                       memory_servers=raw.memory_servers, server_cores=raw.server_cores, nodes=tuple(nodes))


def from_dict(data: dict) -> ClusterSpec:
    """Validate a mapping (as from YAML) into a ClusterSpec."""
    return _finish(_config_from_dict(data, _ClusterFile))


def load(path: str) -> ClusterSpec:
    """Load and validate a cluster spec YAML file: a missing, binary or non-UTF-8 file, a key given
    twice or a document that is not a mapping is a ConfigError naming the file (config.load_yaml)."""
    data = load_yaml(path, "cluster file")
    if not isinstance(data, dict):
        raise ConfigError(f"cluster file {path!r}: expected a mapping of keys (interconnect, precision, nodes, "
                          f"...), got {type(data).__name__}")
    return from_dict(data)
