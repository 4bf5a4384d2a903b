"""A transport seen through a placement: trace rank r runs as the fabric's rank `at[r]`.

On pool and pod fabrics `--placement` maps trace ranks one-to-one onto the fabric's ranks: with
one rank per host these are its hosts; with K per host (`cxlsim.replay.shared_hosts`) a host's
K fabric ranks. `Placed(inner, at)` renames the
ranks of the message and local-work calls (`send`, `recv`, `compute`, `copy`, `reduce`) from
trace ranks to fabric ranks, so the replay's MPI matching keeps trace ranks while every cost is
paid by the host the rank runs on. A collective runs wholly among fabric ranks: the replay
hands it the endpoint of fabric rank `at[r]` (`endpoint`), whose peers are fabric ranks too.
A network transport places ranks itself (`NetworkTransport`'s `Placement`) and is not wrapped.
"""
from __future__ import annotations

from cxlsim.errors import InputError
from cxlsim.fabric.transport import Transport

__all__ = ["Placed", "check_one_to_one"]


def check_one_to_one(at, hosts: int, where: str) -> None:
    """InputError unless `at` puts every rank on its own host among 0..hosts-1 (`where` names the option)."""
    seen = {}
    for rank, host in enumerate(at):
        if not 0 <= host < hosts:
            raise InputError(f"{where}: rank {rank} on host {host}: the fabric has hosts 0..{hosts - 1}")
        if host in seen:
            raise InputError(f"{where}: ranks {seen[host]} and {rank} are both on host {host}; this fabric runs "
                             "one rank per host (--ranks-per-node K runs K)")
        seen[host] = rank


class Placed(Transport):
    """`inner` with trace rank r as its rank `at[r]` (see the module docstring)."""

    def __init__(self, inner, at):
        self.inner, self.at = inner, tuple(at)
        self.env, self.size, self.kind = inner.env, inner.size, inner.kind

    def endpoint(self, rank):
        return self.inner.endpoint(self.at[rank])

    def send(self, src, dst, size_bytes, payload=None, tag=0):
        return self.inner.send(self.at[src], self.at[dst], size_bytes, payload, tag)

    def recv(self, dst, src, tag=0):
        return self.inner.recv(self.at[dst], self.at[src], tag)

    def compute(self, rank, duration_ns):
        return self.inner.compute(self.at[rank], duration_ns)

    def copy(self, rank, size_bytes):
        return self.inner.copy(self.at[rank], size_bytes)

    def reduce(self, rank, size_bytes):
        return self.inner.reduce(self.at[rank], size_bytes)
