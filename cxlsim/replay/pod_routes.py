"""Which way a message between two hosts of one pod goes: through the pod's pool or over the network.

Every host of a pod fabric is on its pod's pool and on the network, so a message inside a pod
may take either. `MessageRoute` picks, per message size, the one with the lower time of one
message on an idle fabric (the rule the pods collectives are chosen by: the cheaper closed form):

- pool (`pool_ns`): the pool send/recv protocol's received time, `pool_messages.message_ns`
  (a closed form) for a message of at most one mailbox slot. A longer message of n pieces is
  estimated as received(slot) + (n - 1) x max(sent(slot), received(slot) - sent(slot)): its
  pieces pipelined through the slots at the slower of the writer's and the reader's time per
  piece (an estimate: the DES runs the protocol piece by piece, and the estimate only decides
  the route);
- network (`network_ns`): `CostModel.T(s)`, the sender's overhead, the wire and the receiver's
  overhead of one message on an uncongested route (the DES's own time on a star).

Ties go to the pool. The choice depends on the size alone, so both ends of a message agree.
`used` records every size chosen, with both times, for the replay's note. Time is ns, sizes bytes.
"""
from __future__ import annotations

from cxlsim.replay.pool_messages import DEFAULT_SLOT_BYTES, message_ns

__all__ = ["MessageRoute", "POOL", "NETWORK"]

POOL = "pool"
NETWORK = "network"


class MessageRoute:
    """The per-size choice between a pod's pool (figures `pool`, a `PoolFigures`) and the network (`network`,
    a `CostModel`) for messages inside a pod (see the module docstring)."""

    def __init__(self, pool, network, slot_bytes: int = DEFAULT_SLOT_BYTES):
        self.pool, self.network, self.slot_bytes = pool, network, slot_bytes
        self.used: dict = {}
        """{size_bytes: (route, pool ns, network ns)} of every size `choose` was asked for."""

    def pool_ns(self, size_bytes: int) -> float:
        """One message's time through the pod's pool, sender call to receiver completion (ns)."""
        if size_bytes <= self.slot_bytes:
            return message_ns(self.pool, size_bytes)[1]
        pieces = -(-size_bytes // self.slot_bytes)
        sent, received = message_ns(self.pool, self.slot_bytes)
        return received + (pieces - 1) * max(sent, received - sent)

    def network_ns(self, size_bytes: int) -> float:
        """One message's time over the network, sender call to receiver completion (ns)."""
        return self.network.T(size_bytes)

    def choose(self, size_bytes: int) -> str:
        """POOL or NETWORK for a message of `size_bytes` inside a pod."""
        found = self.used.get(size_bytes)
        if found is None:
            pool, net = self.pool_ns(size_bytes), self.network_ns(size_bytes)
            found = self.used[size_bytes] = (POOL if pool <= net else NETWORK, pool, net)
        return found[0]

    def note(self, limit: int = 6) -> str:
        """What the sizes used chose, with both times (empty if no message went inside a pod)."""
        if not self.used:
            return ""
        sizes = sorted(self.used)
        shown = [f"{s} B {self.used[s][0]} ({self.used[s][1] / 1e3:.3f} us pool, {self.used[s][2] / 1e3:.3f} us "
                 "network)" for s in sizes[:limit]]
        more = f", and {len(sizes) - limit} more sizes" if len(sizes) > limit else ""
        return ("pods: a message inside a pod takes the pod's pool or the network, whichever one message's time "
                f"on an idle fabric is lower for its size (beyond one {self.slot_bytes} B slot the pool's is a "
                f"pipelined estimate): {', '.join(shown)}{more}")
