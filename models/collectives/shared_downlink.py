"""Messages that meet at one receiver: their chunks queue at its downlink, first come first served.

A binomial tree's parent takes one message from each child. At non-power-of-two P some children
send at the same moment (P = 3: ranks 1 and 2 both send to the root at once), and on a network
their chunks share the switch port into the parent, so the later message lands up to a whole
message's wire time later than alone. `arrivals(cm, sends)` walks those chunks as the DES moves
them (`cxlsim.fabric.network`): each message posts `o` after its sender's call, streams its chunks
back to back onto its host link (`chunk_bytes` each, the last one the rest), every chunk leaves the
switch when the port rule allows (cut-through: its head; store-and-forward: its tail) and queues at
the receiver's port in order of readiness, ties in the order the messages started (then the
caller's order); a message lands when its last chunk is through, plus the route's latency.

Exact on one switch when every port runs at the host's injection rate beta (every preset: G = the
link's 1/bandwidth) and nothing else sends to the receiver meanwhile, as in a binomial reduce or
gather with one rank per host. A message alone lands at o + wire(k), the uncontended form's
`CostModel.arrive`. Times are ns.
"""
from __future__ import annotations

__all__ = ["arrivals"]


def _chunks(cm, post_ns: float, size_bytes: int) -> list[tuple[float, int]]:
    """(ready at the switch's egress, bytes) of each chunk of a message injected at `post_ns`, latencies
    left out (every message to one receiver has the same route, so they shift every time alike)."""
    beta, chunk = cm.beta_ns_per_byte, cm.chunk_bytes
    count = max(1, -(-size_bytes // chunk))
    out, start = [], post_ns
    for i in range(count):
        size = chunk if i < count - 1 else size_bytes - chunk * (count - 1)
        end = start + size * beta
        out.append((end if cm.store_and_forward else max(start, end - size * beta), size))
        start = end
    return out


def arrivals(cm, sends) -> list[float]:
    """When each message of `sends` lands at their common receiver (ns).

    sends: (sender call time ns, bytes, tie order) per message; the tie order breaks ties between
    messages that start at the same moment (the DES: the sender that called first, e.g. the lower rank).
    """
    queue = []
    for m, (call_ns, size_bytes, order) in enumerate(sends):
        post = call_ns + cm.overhead_ns
        queue += [(ready, post, order, i, size, m) for i, (ready, size) in enumerate(_chunks(cm, post, size_bytes))]
    queue.sort()
    landed = [0.0] * len(sends)
    free = float("-inf")
    for ready, _, _, _, size, m in queue:  # one FIFO port; a message's chunks are ready in their order
        free = (ready if ready > free else free) + size * cm.beta_ns_per_byte
        landed[m] = free
    return [t + cm.path_latency_ns + _more_stores(cm, size_bytes) for t, (_, size_bytes, _) in zip(landed, sends)]


def _more_stores(cm, size_bytes: int) -> float:
    """Store-and-forward switches before the last one each hold a message's first chunk (as `CostModel.wire`)."""
    if not cm.store_and_forward or cm.links <= 2:
        return 0.0
    return (cm.links - 2) * min(size_bytes, cm.chunk_bytes) * cm.beta_ns_per_byte
