"""The allgather on a sparse Octopus pod (`cxlsim.fabric.octopus.SparsePod`): the pool allgather on every device at once.

In a 2-(q, k, 1) pod any two hosts share exactly one k-headed device, so the pool allgather
(`cxl_pool`, the emulator's protocol) among the k hosts of every device, all devices at once,
leaves every host with every other host's block: it meets each other host on exactly one
device. A host takes part on its X = (q - 1) / (k - 1) devices at once, one thread per link
(the `SparsePod` model). It writes its block X times and reads q - 1 blocks.

Closed form (`octopus_allgather_cost`): the devices' allgathers are alike and independent
(each device its own pool, each host's link its own thread), so one call costs the pool
allgather's exact form on one device, k hosts and m-byte blocks, when every host starts
together; the tests hold the DES equal to it. Units: ns, bytes.

The other collectives follow the same rule, every device's k hosts at once:

- allreduce (`octopus_allreduce`): the allgather of the s-byte vectors, then each host folds
  the q vectors ((q - 1) s bytes of reduction): the allgather's form plus (q - 1) s / R;
- reduce_scatter (`octopus_reduce_scatter`, block j of the sum to host j, seg = ceil(s/q)): the
  alltoall of the vectors' seg-byte blocks, then each host folds its q blocks: the alltoall's
  form plus (q - 1) seg / R;
- alltoall (`octopus_alltoall`): the pool alltoall among every device's hosts (a host's row on
  device d holds its blocks for d's hosts); each pair meets once: the pool alltoall's form on
  one device;
- broadcast (`octopus_broadcast`): the pool broadcast from the root on each of its X devices;
  every other host shares exactly one with the root and reads there, so each host ends as its
  rank on that device's pool broadcast (`pool_collective_forms.broadcast_ends`; the pods
  broadcast's form, `hierarchical_pods.pods_broadcast_cost`, takes each host's end).
"""
from __future__ import annotations

from cxlsim.errors import InputError
from cxlsim.fabric.octopus import SparsePod
from cxlsim.models.collectives import pool_collectives as pc
from cxlsim.models.collectives.base import Context, fold_vectors, split
from cxlsim.models.collectives.cxl_pool import cxl_pool, cxl_pool_closed_form
from cxlsim.models.collectives.pool_collective_forms import alltoall_cost

__all__ = ["octopus_allgather", "octopus_allreduce", "octopus_reduce_scatter", "octopus_alltoall", "octopus_broadcast",
           "octopus_allgather_cost", "octopus_allreduce_cost", "octopus_reduce_scatter_cost", "octopus_alltoall_cost"]


def _pod(g) -> SparsePod:
    t = g.transport
    if not isinstance(t, SparsePod):
        raise InputError("octopus collectives: need a sparse pod (cxlsim.fabric.octopus.SparsePod)")
    return t


def _on_devices(t, h, devices, step, region):
    """Run step(d, endpoint of h on region `region` of device d) on each of `devices` at once (one thread per
    link); {d: result}."""
    calls = {d: t.env.process(step(d, t.device_endpoint(d, h, region))) for d in devices}
    got = yield t.env.all_of(list(calls.values()))
    return {d: got[call] for d, call in calls.items()}


def octopus_allgather(g, m, mine, region: int = 0):
    """One host's part: the pool allgather on each of its devices at once (in region `region` of each); returns
    the q blocks in host order."""
    t, h = _pod(g), g.rank
    got = yield from _on_devices(t, h, t.devices_of[h], lambda d, ep: cxl_pool(ep, m, mine), region)
    blocks = [None] * t.size
    blocks[h] = mine
    for d, sets in got.items():
        for host, block in zip(t.devices[d], sets):
            blocks[host] = block
    return blocks


def octopus_allreduce(g, s, vec, region: int = 0):
    """The allgather of the vectors, then the fold of all q in host order; the reduced vector (None if one is missing)."""
    vectors = yield from octopus_allgather(g, s, vec, region)
    yield g.reduce((len(vectors) - 1) * s)
    return fold_vectors(vectors)


def octopus_reduce_scatter(g, s, vec, region: int = 0):
    """The alltoall of the vector's q blocks (ceil(s/q) bytes each), then the fold of the q blocks this host
    got: block `g.rank` of the sum (None if one is missing)."""
    t = _pod(g)
    seg = -(-s // t.size)
    column = yield from octopus_alltoall(g, seg, split(vec, t.size), region)
    yield g.reduce((t.size - 1) * seg)
    return fold_vectors(column)


def octopus_alltoall(g, m, blocks, region: int = 0):
    """The pool alltoall among every device's hosts at once; the q blocks this host receives, in host order."""
    t, h = _pod(g), g.rank
    got = yield from _on_devices(t, h, t.devices_of[h],
                                 lambda d, ep: pc.alltoall(ep, m, [blocks[w] for w in t.devices[d]]), region)
    out = [None] * t.size
    out[h] = blocks[h]
    for d, column in got.items():
        for w, block in zip(t.devices[d], column):
            if w != h:
                out[w] = block
    return out


def octopus_broadcast(g, s, data, root: int, region: int = 0):
    """The pool broadcast from `root` on each of its devices; every other host reads on the one it shares."""
    t, h = _pod(g), g.rank
    mine = t.devices_of[root] if h == root else [d for d in t.devices_of[h] if root in t.devices[d]]
    got = yield from _on_devices(t, h, mine,
                                 lambda d, ep: pc.broadcast(ep, s, data, Context(root=t.index[d][root])), region)
    return data if h == root else got[mine[0]]


def octopus_allgather_cost(fig, heads: int, m: int) -> float:
    """Latency (ns) of one allgather of m-byte blocks on a sparse pod of `heads`-headed devices (`fig`: one
    device's pool figures on `heads` hosts), every host starting together."""
    return cxl_pool_closed_form(fig, heads, m, fig.coherence)


def octopus_allreduce_cost(fig, heads: int, hosts: int, s: int) -> float:
    """ns: the allgather of s-byte vectors on `heads`-headed devices, then the fold of `hosts` vectors."""
    return octopus_allgather_cost(fig, heads, s) + (hosts - 1) * s / fig.reduce_bw_bytes_per_ns


def octopus_reduce_scatter_cost(fig, heads: int, hosts: int, s: int) -> float:
    """ns: the alltoall of ceil(s/hosts)-byte blocks among one device's hosts, then the fold of `hosts` blocks."""
    seg = -(-s // hosts)
    return alltoall_cost(fig, heads, seg) + (hosts - 1) * seg / fig.reduce_bw_bytes_per_ns


def octopus_alltoall_cost(fig, heads: int, m: int) -> float:
    """ns: the pool alltoall of m bytes per destination among one device's `heads` hosts."""
    return alltoall_cost(fig, heads, m)

