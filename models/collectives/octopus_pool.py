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
"""
from __future__ import annotations

from cxlsim.errors import InputError
from cxlsim.fabric.octopus import SparsePod
from cxlsim.models.collectives.cxl_pool import cxl_pool, cxl_pool_closed_form

__all__ = ["octopus_allgather", "octopus_allgather_cost"]


def octopus_allgather(g, m, mine):
    """One host's part: the pool allgather on each of its devices at once; returns the q blocks in host order."""
    t = g.transport
    if not isinstance(t, SparsePod):
        raise InputError("octopus allgather: needs a sparse pod (cxlsim.fabric.octopus.SparsePod)")
    h = g.rank
    mine_devices = t.devices_of[h]
    calls = [t.env.process(cxl_pool(t.device_endpoint(d, h), m, mine)) for d in mine_devices]
    got = yield t.env.all_of(calls)
    blocks = [None] * t.size
    blocks[h] = mine
    for d, call in zip(mine_devices, calls):
        for host, block in zip(t.devices[d], got[call]):
            blocks[host] = block
    return blocks


def octopus_allgather_cost(fig, heads: int, m: int) -> float:
    """Latency (ns) of one allgather of m-byte blocks on a sparse pod of `heads`-headed devices (`fig`: one
    device's pool figures on `heads` hosts), every host starting together."""
    return cxl_pool_closed_form(fig, heads, m, fig.coherence)
