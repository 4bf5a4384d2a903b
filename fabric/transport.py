"""The transport interface: the only way workloads touch the hardware.

A workload (a collective, a training step) runs one SimPy process per rank and
calls the methods below; each returns a SimPy event that fires when the
operation completes (its value, for receives and reads, is the payload). Time
is ns, sizes are bytes. A payload is any Python object; it is delivered by
reference, so senders pass immutable values (tuples, ints).

Point-to-point and local work (every transport):
  now() -> float
  send(src, dst, size_bytes, payload=None, tag=0) -> Event  (fires on local completion)
  recv(dst, src, tag=0) -> Event                           (fires with the payload)
  compute(rank, duration_ns) / copy(rank, size_bytes) / reduce(rank, size_bytes) -> Event

A transport whose ranks share a CXL memory pool implements the pool
operations of `cxlsim.fabric.pool_transport.PoolTransport` as well.

`Endpoint` binds a transport to one rank, so an algorithm reads
`data = yield from ep.sendrecv(right, size, block, left)`. `run({rank:
generator})` runs rank processes to the end and reports a deadlock as a
RunError naming the blocked ranks; `fire_at` schedules an event to succeed
later, for transports that know a completion time in advance.

`NetworkTransport` implements the interface on a built `Network` in LogGP
terms: a send costs the sender `o` of CPU, waits for the NIC gap `g`, then
streams chunks through the network; a receive costs the receiver `o` (plus a
copy of the message at memcpy bandwidth if it came through shared memory
from a rank on the same host). Each rank's CPU is one FIFO timeline, so its
overheads, copies and reductions never overlap.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import simpy
from simpy.core import NORMAL

from cxlsim.errors import InputError, RunError
from cxlsim.fabric.matching import Matching

__all__ = ["Transport", "Endpoint", "NetworkTransport", "UnsupportedOperation", "DEFAULT_CHUNK_BYTES", "fire_at"]

DEFAULT_CHUNK_BYTES = 64 * 1024
"""Default pipelining unit, bytes."""


class UnsupportedOperation(RunError):
    """The transport has no such operation (e.g. send on a CXL pool without a network)."""


def fire_at(env, event, delay_ns: float, value=None):
    """Schedule `event` to succeed with `value` after `delay_ns` (one event, like a Timeout)."""
    event._ok = True
    event._value = value
    env.schedule(event, NORMAL, delay_ns)
    return event


class Transport(ABC):
    """Base class: the interface every fabric backend implements (see the module docstring).

    Subclasses set `env` and `size` and implement the abstract methods; a pool
    transport implements `PoolTransport`.
    """

    env: simpy.Environment
    size: int
    kind: str = "network"
    """What the ranks talk through: 'network' (messages) or 'pool' (a shared CXL pool only)."""

    def now(self) -> float:
        """Simulated time, ns."""
        return self.env.now

    def endpoint(self, rank: int) -> "Endpoint":
        return Endpoint(self, rank)

    # Point-to-point and local work: every transport implements these.
    @abstractmethod
    def send(self, src: int, dst: int, size_bytes: int, payload=None, tag: int = 0):
        """Send `size_bytes` from rank `src` to `dst`; the event fires when `src` may reuse its buffer."""

    @abstractmethod
    def recv(self, dst: int, src: int, tag: int = 0):
        """Receive the next message from `src` with `tag` (in send order); fires with its payload."""

    @abstractmethod
    def compute(self, rank: int, duration_ns: float):
        """Occupy `rank`'s CPU for `duration_ns`."""

    @abstractmethod
    def copy(self, rank: int, size_bytes: int):
        """Copy `size_bytes` locally on `rank`'s CPU."""

    @abstractmethod
    def reduce(self, rank: int, size_bytes: int):
        """Reduce `size_bytes` into a local buffer on `rank`'s CPU."""

    def run(self, processes: dict, until_ns: float | None = None) -> dict:
        """Run `{rank: generator}` to completion; return `{rank: return value}`.

        Raises RunError naming the ranks still blocked if the simulation runs
        out of events first (a deadlock) or reaches `until_ns`.
        """
        procs = {rank: self.env.process(gen) for rank, gen in processes.items()}
        self.env.run(until=until_ns)
        stuck = sorted(r for r, p in procs.items() if p.is_alive)
        if stuck:
            raise RunError(f"ranks {stuck[:8]}{'...' if len(stuck) > 8 else ''} never finished at "
                           f"t={self.env.now:.1f} ns; {self._waiting()}")
        return {rank: p.value for rank, p in procs.items()}

    def _waiting(self) -> str:
        """What blocked ranks wait for (a transport overrides this for better deadlock messages)."""
        return "nothing is scheduled"


class Endpoint:
    """One rank's view of a transport: the same operations without the rank argument."""

    __slots__ = ("transport", "rank", "size")

    def __init__(self, transport: Transport, rank: int):
        self.transport, self.rank, self.size = transport, rank, transport.size

    def now(self) -> float:
        return self.transport.env.now

    def send(self, dst, size_bytes, payload=None, tag=0):
        return self.transport.send(self.rank, dst, size_bytes, payload, tag)

    def recv(self, src, tag=0):
        return self.transport.recv(self.rank, src, tag)

    def sendrecv(self, dst, size_bytes, payload, src, tag=0):
        """Generator: send to `dst` and receive from `src` at once; returns the received payload."""
        sent = self.transport.send(self.rank, dst, size_bytes, payload, tag)
        got = self.transport.recv(self.rank, src, tag)
        data = yield got  # usually the later of the two, so the process resumes once
        yield sent
        return data

    def compute(self, duration_ns):
        return self.transport.compute(self.rank, duration_ns)

    def copy(self, size_bytes):
        return self.transport.copy(self.rank, size_bytes)

    def reduce(self, size_bytes):
        return self.transport.reduce(self.rank, size_bytes)


class NetworkTransport(Transport):
    """Ranks placed on the hosts of a `Network`, talking MPI-style point-to-point."""

    def __init__(self, network, placement, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        if not isinstance(chunk_bytes, int) or chunk_bytes < 1:
            raise InputError(f"chunk: expected a size of at least 1 B, got {chunk_bytes!r}")
        if placement.nodes != len(network.hosts):
            raise InputError(f"nodes: the placement has {placement.nodes} nodes but the topology "
                             f"has {len(network.hosts)} hosts")
        self.env = network.env
        self.network = network
        self.placement = placement
        self.size = placement.size
        self.chunk_bytes = chunk_bytes
        self.host_of = placement.host_of
        self._cpu_free = [0.0] * self.size
        self._matching = Matching()          # (dst, src, tag) -> (size, payload, intra) or recv events
        self.messages = 0
        self.bytes = 0

    def _cpu(self, rank: int, duration_ns: float) -> float:
        """Book `duration_ns` on the rank's CPU from now on; return when it is done (ns)."""
        start = self._cpu_free[rank]
        now = self.env.now
        if start < now:
            start = now
        self._cpu_free[rank] = start + duration_ns
        return start + duration_ns

    def _local(self, rank: int, duration_ns: float):
        return fire_at(self.env, simpy.Event(self.env), self._cpu(rank, duration_ns) - self.env.now)

    def compute(self, rank, duration_ns):
        return self._local(rank, duration_ns)

    def copy(self, rank, size_bytes):
        return self._local(rank, self.network.hosts[self.host_of[rank]].copy_ns(size_bytes))

    def reduce(self, rank, size_bytes):
        return self._local(rank, self.network.hosts[self.host_of[rank]].reduce_ns(size_bytes))

    def send(self, src, dst, size_bytes, payload=None, tag=0):
        env = self.env
        if not 0 <= dst < self.size or dst == src:
            raise RunError(f"send: rank {src} cannot send to rank {dst} (P={self.size})")
        self.messages += 1
        self.bytes += size_bytes
        host_src, host_dst = self.host_of[src], self.host_of[dst]
        nic = self.network.hosts[host_src].nic
        done = simpy.Event(env)
        posted = self._cpu(src, nic.params.overhead_ns)
        message = ((dst, src, tag), size_bytes, payload, host_src, host_dst, done)
        env.at(posted - env.now, self._hand_over if host_src == host_dst else self._inject, message)
        return done

    def _hand_over(self, event):
        """Shared memory: the message is the receiver's to copy as soon as the sender posted it."""
        key, size_bytes, payload, _, _, done = event._value
        self._arrive(key, size_bytes, payload, True)
        done.succeed()

    def _inject(self, event):
        """The sender's overhead is paid: wait for the NIC gap, then stream the chunks."""
        env = self.env
        message = event._value
        start = self.network.hosts[message[3]].nic.inject(env.now)
        if start > env.now:
            env.at(start - env.now, self._stream, message)
        else:
            self._stream(event)

    def _stream(self, event):
        key, size_bytes, payload, host_src, host_dst, done = event._value
        sent = self.network.transfer(host_src, host_dst, size_bytes, self.chunk_bytes, self._landed, event._value)
        fire_at(self.env, done, sent - self.env.now)

    def _landed(self, event):
        key, size_bytes, payload = event._value[:3]
        self._arrive(key, size_bytes, payload, False)

    def recv(self, dst, src, tag=0):
        if not 0 <= src < self.size or src == dst:
            raise RunError(f"recv: rank {dst} cannot receive from rank {src} (P={self.size})")
        event = simpy.Event(self.env)
        landed = self._matching.post((dst, src, tag), event)
        if landed:
            self._complete(event, dst, *landed[0])
        return event

    def _arrive(self, key, size_bytes, payload, intra):
        waiting = self._matching.arrive(key, (size_bytes, payload, intra))
        if waiting is not None:
            self._complete(waiting, key[0], size_bytes, payload, intra)

    def _complete(self, event, rank, size_bytes, payload, intra):
        host = self.network.hosts[self.host_of[rank]]
        cost = host.nic.params.overhead_ns + (host.copy_ns(size_bytes) if intra else 0.0)
        fire_at(self.env, event, self._cpu(rank, cost) - self.env.now, payload)

    def _waiting(self) -> str:
        """What blocked ranks wait for, for the deadlock message."""
        return f"unmatched receives (dst, src, tag): {self._matching.waiting()[:8]}"
