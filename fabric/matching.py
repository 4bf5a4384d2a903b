"""MPI's receive matching: messages and receives paired by (dst, src, tag) in posting order.

A message that lands before its receive is kept until a receive with its key is posted; a
receive posted before its message waits for the next one to land. The network transport, the
replay's pool mailboxes and its pods transport all match this way; each decides what a match
costs (`fabric.transport` books the receiver's overhead, the pool mailboxes deliver at once).
"""
from __future__ import annotations

from collections import defaultdict, deque

__all__ = ["Matching"]


class Matching:
    """Landed messages and posted receives per (dst, src, tag), each in the order they came."""

    def __init__(self):
        self._arrived = defaultdict(deque)   # key -> messages landed, not yet received
        self._posted = defaultdict(deque)    # key -> receive events waiting

    def post(self, key, event):
        """A receive for `key`: `(message,)` if one has landed (taken), else None with `event` queued."""
        arrived = self._arrived.get(key)
        if arrived:
            return (arrived.popleft(),)
        self._posted[key].append(event)
        return None

    def arrive(self, key, message):
        """A message for `key`: the receive event waiting for it (taken), else None with `message` kept."""
        posted = self._posted.get(key)
        if posted:
            return posted.popleft()
        self._arrived[key].append(message)
        return None

    def waiting(self) -> list:
        """The keys that receives wait on, sorted (for a deadlock message)."""
        return sorted(k for k, v in self._posted.items() if v)
