"""Hybrid pod fabrics: the `cxl-pods` preset and its elaboration into pods on CXL pools plus a network.

A scenario picks it with `fabric.preset: cxl-pods` and describes it in `fabric.pods`:

    fabric:
      preset: cxl-pods
      nodes: 64                 # every host, all pods together
      pods: {pool: cxl3-pool, hosts: 16, network: eth-100g-roce}
      cxl: {switch_levels: 2}   # each pod's pool (optional; as for a CXL pool preset)
      topology: star            # the network between pods (and its links/switch/nic overrides)

`fabric.nodes / fabric.pods.hosts` pods (it must divide) each put `hosts` hosts on their
own pool, elaborated as the CXL preset `pool` would be on `hosts` nodes
(`cxlsim.fabric.cxl_setup`: `fabric.cxl` settings, the coherence mode, the switch levels:
one level if the hosts and device ports fit one switch, pods of 8 and 15 hosts on the
16-port switch, else two, pods of 16 and 32). Every host also has a NIC on the network
preset `network` over all `fabric.nodes` hosts (`cxlsim.fabric.network_setup`), one rank
per host. `fabric.host` applies to both.

Two pod kinds, chosen by the pool preset: around a switch (`cxl2-pool`, `cxl3-pool`), or switchless (`mhd2-pool`, `mhd3-pool`, any preset with
`max_switch_levels` 0): every host of a pod attaches directly to a head of each of the
pod's multi-headed devices, as in Pond's and Octopus's dense pods, so a pod has at most
`device.heads` hosts (the preset's figure) as a dense pod. A pod of more hosts on a
switchless preset is a sparse Octopus pod (`octopus4-pool`: 4-headed devices; pods of 13 or 16):
`cxlsim.fabric.octopus.design` picks which hosts share each device, any two hosts sharing
exactly one; every collective runs on each device's hosts at once (`octopus_pool`).

`PodsSetup.new_transport` builds one `cxlsim.fabric.pods.PodsTransport` (the pools and the
network in one SimPy environment) per simulated call; `pool_figures` gives one pod's pool
figures for the closed forms of `cxlsim.models.collectives.hierarchical_pods`.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from cxlsim import plugins
from cxlsim.errors import InputError
from cxlsim.fabric import cxl_setup, network_setup
from cxlsim.fabric.cxl_presets import CXLPoolPreset, cxl_presets
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network import build
from cxlsim.fabric.octopus import SparsePod, design
from cxlsim.fabric.placement import Placement
from cxlsim.fabric.pods import PodsTransport
from cxlsim.fabric.pool_transport import PoolFigures
from cxlsim.fabric.presets import PRESETS as NETWORK_PRESETS
from cxlsim.fabric.presets import NetworkPreset
from cxlsim.fabric.transport import NetworkTransport

__all__ = ["PODS_KEYS", "PodsPreset", "PodsSetup", "CXL_PODS"]

PODS_KEYS = ("fabric.pods.*", "fabric.cxl.*", "fabric.topology", "fabric.hosts_per_leaf", "fabric.oversubscription",
             "fabric.spines", "fabric.links.*", "fabric.switch.*", "fabric.nic.*", "fabric.host.*",
             "workload.selector", "workload.chunk", "workload.root", "workload.iterations", "workload.warmup")
"""Scenario keys the hybrid pod preset uses beyond `cxlsim.fabric.preset.COMMON_KEYS`."""


@dataclasses.dataclass(frozen=True)
class PodsSetup:
    """A scenario's hybrid fabric: the pods' pool, the network between them, the pod size and count."""

    pool: cxl_setup.CXLSetup
    """Each pod's pool (elaborated for `hosts` hosts)."""
    network: network_setup.NetworkSetup
    """The network over every host."""
    hosts: int
    pods: int
    topology_uncongested: bool
    """True when the network is a star: the pods' concurrent exchanges share no link (the forms are exact)."""
    design: tuple = ()
    """A sparse pod's devices (`cxlsim.fabric.octopus.design`: each a tuple of its hosts); () for a dense pod,
    where `pool` is every host's. In a sparse pod `pool` is one device's, elaborated for its heads."""

    def _pool(self, env, ranks_per_host: int = 1) -> CXLPoolTransport:
        hosts = len(self.design[0]) if self.design else self.hosts
        return self.pool.new_transport(hosts, ranks_per_host, env)

    def _pod(self, env, ranks_per_host: int = 1):
        if not self.design:
            return self._pool(env, ranks_per_host)
        if ranks_per_host != 1:
            raise InputError(f"ranks_per_host: a sparse (Octopus) pod runs one rank per host, got {ranks_per_host}")
        s = self.pool
        return SparsePod(s.preset, self.design, env=env, coherence=s.coherence, chunk_bytes=s.chunk_bytes)

    def placement(self, ranks_per_host: int = 1):
        """The network's placement: the scenario's with one rank per host, else `ranks_per_host` ranks on
        each host, consecutive ranks on one host ("block", as a pod's pool numbers them)."""
        if ranks_per_host == 1:
            return self.network.placement
        return Placement(self.pods * self.hosts, ranks_per_host, "block")

    def new_transport(self, chunk_bytes: int, ranks_per_host: int = 1) -> PodsTransport:
        """A fresh environment holding every pod's pool and the network (messages pipelined in `chunk_bytes`),
        `ranks_per_host` ranks on each host (they share its pool port and its NIC)."""
        env = Environment()
        pools = [self._pod(env, ranks_per_host) for _ in range(self.pods)]
        net = NetworkTransport(build(self.network.graph, self.network.preset, env), self.placement(ranks_per_host),
                               chunk_bytes)
        return PodsTransport(pools, net, self.hosts * ranks_per_host)

    def network_transport(self, chunk_bytes: int) -> NetworkTransport:
        """The network alone over every host, for plain network algorithms."""
        return self.network.new_transport(chunk_bytes)

    def pool_figures(self) -> PoolFigures:
        """One pod's pool figures (`CXLPoolTransport.figures()` on `hosts` hosts; a sparse pod's: one device's
        on its heads), for the closed forms."""
        return self._pool(Environment()).figures()

    def written_out(self) -> dict:
        out = {f"fabric.pods.{k}": v for k, v in (("pool", self.pool.preset.name), ("hosts", self.hosts),
                                                  ("network", self.network.preset.name))}
        pool, net = self.pool.written_out(), self.network.written_out()
        out.update({k: v for k, v in pool.items() if k.startswith("fabric.cxl.")})
        out.update({k: v for k, v in net.items() if not k.startswith("fabric.host.")})
        # fabric.host applies to both parts: write it out only where the two presets agree
        out.update({k: v for k, v in net.items() if k.startswith("fabric.host.") and pool.get(k) == v})
        return out

    def describe(self, nodes: int, ranks_per_host: int = 1) -> str:
        if self.design:
            k = len(self.design[0])
            pod = (f"a sparse pod of {len(self.design)} devices, every two hosts sharing one, each host on "
                   f"{(self.hosts - 1) // (k - 1)}; each device {self.pool.describe(k)}")
        else:
            pod = self.pool.describe(self.hosts, ranks_per_host)
        between = self.network.describe(nodes, self.placement(ranks_per_host))
        return f"{self.pods} pods x {self.hosts} hosts, each on {pod}; between pods {between}"


def _named(kind, name: str, known: dict, key: str):
    found = known.get(name)
    if not isinstance(found, kind):
        raise InputError(f"{key}: expected one of {', '.join(sorted(known))}, got {name!r}")
    return found


@dataclasses.dataclass(frozen=True)
class PodsPreset:
    """The hybrid pod fabric preset (`fabric.preset: cxl-pods`): its figures are the named pool and network's."""

    kind: ClassVar[str] = "hybrid pod fabric"
    scenario_keys: ClassVar[tuple[str, ...]] = PODS_KEYS

    name: str = "cxl-pods"
    source: str = "the CXL pool preset fabric.pods.pool and the network preset fabric.pods.network"

    def elaborate(self, fabric) -> PodsSetup:
        """The `PodsSetup` of a scenario's fabric section (`cxlsim.config.FabricConfig`)."""
        pods = fabric.pods
        if fabric.nodes % pods.hosts:
            raise InputError(f"fabric.nodes: {fabric.nodes} hosts do not make whole pods of fabric.pods.hosts = "
                             f"{pods.hosts}; use a multiple of {pods.hosts}")
        pool_preset = _named(CXLPoolPreset, pods.pool, cxl_presets(), "fabric.pods.pool")
        network_known = dict(NETWORK_PRESETS)
        network_known.update({p.name: p for p in plugins.records("PRESETS") if isinstance(p, NetworkPreset)})
        net_preset = _named(NetworkPreset, pods.network, network_known, "fabric.pods.network")
        devices, on_pool = (), pods.hosts
        if pool_preset.max_switch_levels == 0 and pods.hosts > pool_preset.device.heads:
            try:
                devices = design(pods.hosts, pool_preset.device.heads)
            except InputError as exc:
                raise InputError(f"fabric.pods.hosts: {pods.hosts} hosts on {pool_preset.name}, whose devices have "
                                 f"{pool_preset.device.heads} heads: {exc}") from None
            if fabric.cxl.devices != 1:
                raise InputError("fabric.cxl.devices: a sparse pod's devices are its design's (one per group of "
                                 f"hosts); leave it at 1, got {fabric.cxl.devices}")
            on_pool = pool_preset.device.heads
        try:
            pool = cxl_setup.elaborate(pool_preset, dataclasses.replace(fabric, nodes=on_pool))
        except InputError as exc:
            raise InputError(str(exc).replace("fabric.nodes:", "fabric.pods.hosts:", 1)) from None
        network = network_setup.elaborate(net_preset, fabric)
        return PodsSetup(pool, network, pods.hosts, fabric.nodes // pods.hosts, fabric.topology == "star", devices)


CXL_PODS = PodsPreset()
"""The built-in hybrid pod preset (registered in `cxlsim.fabric.preset`)."""
