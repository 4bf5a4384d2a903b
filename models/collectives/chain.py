"""Pipelined-chain broadcast (NCCL's broadcast on one ring channel), with its closed form.

`pipelined_chain(g, s, data, ctx)`: the ranks form a chain in root-relative
order (root, root+1, ...). The s-byte message is cut into segments of
SEGMENT_BYTES (the last one shorter); the root sends them down the chain one
after another, and every other rank receives a segment from its predecessor
and, unless it is the last, sends it on before it receives the next one. The
pipeline makes the broadcast bandwidth-optimal: about s / link bandwidth plus
the chain's fill, against 2 s (P-1)/P for scatter + allgather.

SEGMENT_BYTES = 512 KiB is NCCL's step of its Simple protocol: NCCL_BUFFSIZE
(4 MiB, `DEFAULT_BUFFSIZE` in src/init.cc) over NCCL_STEPS (8), times
BROADCAST_CHUNKSTEPS (1). NCCL spreads a call over several channels (rings)
and GPU kernels; cxlsim models one chain of host sends.

Closed form: a per-rank, per-segment recurrence on an uncongested fabric, with
one rank per host or every rank on one host (each host link carries only its
rank's sends, each host's downlink only its predecessor's, so nothing queues
but a rank's own sends): for rank i and segment j of k_j bytes,
    received(i, j) = max(arrived(i, j), sent(i, j-1)) + receive(k_j)
    sent(i, j)     = local completion of the send started at received(i, j)
                     (the root: at sent(0, j-1)), booking o on the CPU, the
                     NIC gap g after the last injection, and the host link
                     after the last segment (k_j beta)
    arrived(i+1, j) = the send's start on the link + wire(k_j)
The latency is the last rank's last receive (or a middle rank's last local send
completion, if later).
"""
from __future__ import annotations

from cxlsim.models.collectives.base import Algorithm

__all__ = ["SEGMENT_BYTES", "segments", "pipelined_chain", "pipelined_chain_ends", "pipelined_chain_cost", "PIPELINED_CHAIN"]

SEGMENT_BYTES = 512 * 1024
"""NCCL's Simple-protocol step: NCCL_BUFFSIZE 4 MiB / NCCL_STEPS 8 x BROADCAST_CHUNKSTEPS 1."""


def segments(s: int, segment_bytes: int = SEGMENT_BYTES) -> list[int]:
    """Sizes of the pieces an s-byte broadcast is cut into (one 0-byte piece for s = 0)."""
    if s <= segment_bytes:
        return [s]
    full, rest = divmod(s, segment_bytes)
    return [segment_bytes] * full + ([rest] if rest else [])


def pipelined_chain(g, s, data, ctx):
    """The pipelined-chain broadcast (see the module docstring); every rank returns the data."""
    p, root = g.size, ctx.root
    rel = (g.rank - root) % p
    parent, child = (root + rel - 1) % p, (root + rel + 1) % p
    for k in segments(s):
        if rel:
            data = yield g.recv(parent)
        if rel < p - 1:
            yield g.send(child, k, data)
    return data


def pipelined_chain_ends(cm, p, s) -> list[float]:
    """Each rank's end (ns) of `pipelined_chain` on a network `CostModel`: when it has received its
    last segment, or its last forward has left (see the module docstring)."""
    o, beta, intra = cm.overhead_ns, cm.beta_ns_per_byte, cm.intra_only
    pieces = segments(s)
    arrived = [0.0] * len(pieces)  # when each segment has arrived at the current rank
    ends = []
    for rank in range(p):
        cpu = nic = link = float("-inf")
        ready = 0.0  # when the rank may start its next operation
        forwarded = []
        for j, k in enumerate(pieces):
            if rank:
                ready = max(arrived[j], ready) + cm.receive(k, intra)
            if rank == p - 1:
                continue
            cpu = max(cpu, ready) + o
            if intra:  # shared memory: the receiver copies it once it is posted
                forwarded.append(cpu)
                ready = cpu
                continue
            start = max(cpu, nic)
            nic = start + cm.gap_ns
            start = max(start, link)
            link = start + k * beta
            forwarded.append(start + cm.wire(k))
            ready = link
        ends.append(ready)
        arrived = forwarded
    return ends


def pipelined_chain_cost(cm, p, s, ctx=None):
    """Closed form of `pipelined_chain` on a network `CostModel`: its last rank's end, ns."""
    return max(0.0, *pipelined_chain_ends(cm, p, s))


PIPELINED_CHAIN = Algorithm("broadcast", "pipelined_chain", pipelined_chain, pipelined_chain_cost,
                            source="NCCL broadcast (one ring channel, Simple protocol: 512 KiB steps); "
                                   "Open MPI bcast pipeline (id 3) with segments")
