"""Pool and pod fabrics with K ranks per host (`--ranks-per-node K`), for the replay.

A pool or pod fabric of H hosts runs H x K fabric ranks, fabric rank f on host
f // K (`CXLPoolTransport(..., ranks_per_host=K)`): the ranks of one host share
its pool port and its route to the devices, and on pods also its NIC (the
network between pods places K ranks per host, block), while each rank keeps its
own CPU timeline, acknowledgements, fences and cache. `--placement` names each
trace rank's host (a `RankMap`, at most K ranks per host); `fabric_ranks` turns
it into the fabric rank each trace rank runs as (`Fabric.at`): the ranks of a
host, in trace-rank order, take its K fabric ranks in order. The trace must
fill the hosts (P = H x K), since every fabric rank takes part in the
collectives.

Messages between two ranks of one host go through the pool's mailboxes, or on
pods the per-size route, as between hosts (an MPI library would use the host's
own shared memory), and the closed forms that choose among algorithms
(`pool_plan`, `pods_plan`) and routes see every rank as a host of its own; the
replayed times are the DES's. Times ns, sizes bytes.
"""
from __future__ import annotations


from cxlsim.errors import InputError

__all__ = ["fabric_ranks", "SHARED_NOTE"]

SHARED_NOTE = ("ranks of one host share its pool port (and on pods its NIC); their messages to each other go "
               "through the pool as between hosts")


def fabric_ranks(host_of, hosts: int, per_host: int, where: str) -> tuple:
    """The fabric rank of each trace rank placed on `host_of` (see the module docstring); InputError, naming
    `where`, if a host gets more than `per_host` ranks or the trace does not fill the `hosts` hosts."""
    if len(host_of) != hosts * per_host:
        raise InputError(f"--ranks-per-node {per_host}: a pool or pod fabric of {hosts} hosts runs {hosts} x "
                         f"{per_host} = {hosts * per_host} ranks, the trace has {len(host_of)}; every rank takes "
                         "part in its collectives, so the trace must fill the hosts")
    on = [[] for _ in range(hosts)]
    at = []
    for rank, host in enumerate(host_of):
        if not 0 <= host < hosts:
            raise InputError(f"{where}: rank {rank} on host {host}: the fabric has hosts 0..{hosts - 1}")
        if len(on[host]) == per_host:
            raise InputError(f"{where}: rank {rank} on host {host}, which already runs ranks "
                             f"{', '.join(map(str, on[host]))}; this fabric runs {per_host} ranks per host "
                             "(--ranks-per-node)")
        at.append(host * per_host + len(on[host]))
        on[host].append(rank)
    return tuple(at)
