"""The statistics of one DES run on a hybrid pod fabric: the network's ports, every pod's pool ports and traffic.

`collect_pods(transport)` reads a finished `cxlsim.fabric.pods.PodsTransport` into one
`cxlsim.fabric.stats.RunStats`, so `stats.summary` and the workspace's stats files take it as
they take a network's or a pool's:

- ports: the network's ('NIC', 'switch port'), then each pod's pool ports ('host port',
  'leaf uplink', 'device'), their names prefixed with the pod ('pod2.dev0'; in a sparse pod
  also the device's pool, 'pod2.mhd5.host1');
- pool: every pod's traffic added up (device bytes, flag polls and, in hw mode, the snoop
  filters' BISnp, recalls, evictions and eviction BISnp; None in flush mode).

Utilisation is over the whole run (one clock for the pods and the network). Units: bytes, ns.
"""
from __future__ import annotations

from dataclasses import replace

from cxlsim.fabric.octopus import SparsePod
from cxlsim.fabric.pods import PodsTransport
from cxlsim.fabric.stats import PoolStats, RunStats, collect

__all__ = ["collect_pods"]


def _total(values):
    return None if any(v is None for v in values) else sum(values)


def collect_pods(transport: PodsTransport) -> RunStats:
    """The statistics of a finished run on `transport`: the network's ports, every pod's, the pods' pool traffic."""
    network = collect(transport.network)
    ports, pods = list(network.ports), []
    for k, pod in enumerate(transport.pools):
        # a sparse pod is a pool per device: its ports are named by device as well
        parts = [(f"pod{k}.", pod)] if not isinstance(pod, SparsePod) else \
            [(f"pod{k}.mhd{d}.", pool) for d, pool in enumerate(pod.pools)]
        for prefix, pool in parts:
            s = collect(pool)
            pods.append(s)
            ports += [replace(p, port=prefix + p.port) for p in s.ports]
    each = [s.pool for s in pods]
    pool = PoolStats(coherence=each[0].coherence, device_bytes=sum(p.device_bytes for p in each),
                     polls=sum(p.polls for p in each),
                     **{k: _total([getattr(p, k) for p in each]) for k in ("bisnp", "recalls", "evictions",
                                                                         "eviction_bisnp")})
    return RunStats(elapsed_ns=network.elapsed_ns, ports=tuple(ports), pool=pool)
