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

`fan_in(cm, p, root, children, message_bytes, work_ns)` is a binomial fan-in (reduce, gather) to
`root` through those walks: each rank takes its children's messages in order, each once it has
landed (then `work_ns` of CPU work), and then sends its own to its parent. Between sends at the same
moment the DES goes in the order of their causes: a rank's send follows the event that set its time,
back to a leaf's start, and the leaves start in rank order, so each send carries the rank of the
leaf it goes back to as its tie order.

Exact on one switch when every port runs at the host's injection rate beta (every preset: G = the
link's 1/bandwidth) and nothing else sends to the receiver meanwhile, as in a binomial reduce or
gather with one rank per host. A message alone lands at o + wire(k), the uncontended form's
`CostModel.arrive`. Times are ns.
"""
from __future__ import annotations

__all__ = ["arrivals", "fan_in"]


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


def fan_in(cm, p: int, root: int, children, message_bytes, work_ns) -> float:
    """When the last rank of a binomial fan-in to `root` is done (ns): root-relative rank r takes the
    message of each of `children(r)` in that order, `message_bytes(child)` bytes each, then spends
    `work_ns(bytes)` on it, and sends its `message_bytes(r)` to its parent (the root keeps its own).
    Every rank on one host (`cm.intra_only`): shared-memory messages, which share no link."""
    intra = cm.intra_only
    sent, first, end = {}, {}, 0.0
    for rel in reversed(range(p)):  # children have higher relative ranks than their parent
        kids = list(children(rel))
        sizes = [message_bytes(c) for c in kids]
        if intra:
            landed = [sent[c] + cm.arrive(k, True) for c, k in zip(kids, sizes)]
        else:
            landed = arrivals(cm, [(sent[c], k, first[c]) for c, k in zip(kids, sizes)])
        t, cause = 0.0, (rel + root) % p
        for child, k, when in zip(kids, sizes, landed):
            if when >= t:  # its landing, not the rank's own previous step, sets what follows
                cause = first[child]
            t = max(t, when) + cm.receive(k, intra) + work_ns(k)
        sent[rel], first[rel] = t, cause
        end = max(end, t if rel == 0 else t + cm.busy(message_bytes(rel), intra))
    return end
