"""The DES's fast paths give exactly what their obvious versions give.

- `Environment.at` (a queue entry, no SimPy event) is processed in the order, and counted as, the
  SimPy timeout it replaces; `reserve_ids` + `call_at` as the same calls made up front.
- `Port.reserve_run` is `Port.reserve` on each chunk.
- `ChunkPipeline` (one queued arrival per transfer and stage) equals `ReferencePipeline` (every
  arrival its own event): finish times and order, issue ends, port counters, device bytes, events,
  on one switch, a tree, and with per-device link stages.
"""
from __future__ import annotations

import random

import pytest
import simpy

from cxlsim.fabric.chunk_pipeline import ChunkPipeline, ReferencePipeline
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.link import Port


def _schedule_mix(env, log, use_at):
    """Processes with timeouts and delayed callbacks that collide in time; `log` gets the order."""
    def callback(event):
        log.append(("cb", event.value, env.now))

    def proc(name, delays):
        for k, d in enumerate(delays):
            if use_at:
                env.at(d, callback, (name, k))
            else:
                env.timeout(d, (name, k)).callbacks.append(callback)
            yield env.timeout(d / 2 if k % 2 else d)
            log.append(("proc", name, k, env.now))

    rng = random.Random(7)
    for name in range(5):
        env.process(proc(name, [rng.choice([0.0, 1.0, 2.0, 2.5]) for _ in range(6)]))


def test_at_is_processed_and_counted_as_a_timeout():
    ours, plain = [], []
    env = Environment()
    _schedule_mix(env, ours, use_at=True)
    env.run()
    ref = Environment()
    _schedule_mix(ref, plain, use_at=False)
    simpy.Environment.run(ref)  # SimPy's own loop
    assert ours == plain and len(ours) > 40
    assert env.events == ref.events and env.now == ref.now


def test_run_until_a_time_and_an_event():
    env = Environment()
    seen = []
    env.at(5.0, lambda e: seen.append(env.now))
    env.at(15.0, lambda e: seen.append(env.now))
    env.run(until=10.0)
    assert seen == [5.0] and env.now == 10.0
    done = env.timeout(3.0, "x")
    assert env.run(until=done) == "x" and env.now == 13.0
    env.run()
    assert seen == [5.0, 15.0]
    with pytest.raises(ValueError):
        env.run(until=1.0)


def test_reserved_ids_keep_the_order_of_calls_made_up_front():
    def build(lazy):
        env = Environment()
        log = []
        times = [3.0, 3.0, 4.0, 9.0]

        def cb(event):
            log.append((event.value, env.now))
            if lazy and event.value[0] == "series" and event.value[1] + 1 < len(times):
                k = event.value[1] + 1
                env.call_at(times[k], first + k, cb, ("series", k))

        env.at(3.0, cb, ("before", 0))
        if lazy:
            first = env.reserve_ids(len(times))
            env.call_at(times[0], first, cb, ("series", 0))
        else:
            for k, t in enumerate(times):
                env.at(t, cb, ("series", k))
        env.at(3.0, cb, ("after", 0))
        env.at(4.0, cb, ("after", 1))
        env.run()
        return log, env.events

    assert build(lazy=True) == build(lazy=False)


@pytest.mark.parametrize("seed", range(20))
def test_reserve_run_is_reserve_on_each_chunk(seed):
    rng = random.Random(seed)
    a, b = Port("a", 0.7, 0.0), Port("b", 0.7, 0.0)
    for _ in range(6):
        ready = rng.uniform(0, 3000)
        sizes = [rng.choice([64, 448, 4096]) for _ in range(rng.randint(1, 9))]
        start = a.reserve_run(ready, sizes)
        want = [b.reserve(ready, s) for s in sizes]
        for (s0, e0), size in zip(want, sizes):  # back to back, by the stated recurrence
            assert s0 == start and e0 == start + size * a.ns_per_byte
            start = e0
        assert (a.free_at_ns, a.busy_ns, a.chunks, a.bytes, a.peak_wait_ns) == \
               (b.free_at_ns, b.busy_ns, b.chunks, b.bytes, b.peak_wait_ns)


def _pipeline_run(kind, seed):
    """Random transfers from 6 hosts through 1 or 2 stages and 1-3 devices, with contention."""
    rng = random.Random(seed)
    hosts = 6
    two_level = seed % 2 == 1
    env = Environment()
    host_ports = [Port(f"host{h}", rng.choice([0.5, 0.9]), 0.0) for h in range(hosts)]
    devices = [Port(f"dev{d}", rng.choice([0.8, 1.7]), 0.0) for d in range(1 + seed % 3)]
    if two_level:
        up = [Port(f"up{k}", 1.1, 0.0) for k in range(2)]
        down = [Port(f"down{k}", 1.1, 0.0) for k in range(2)]
        routes = [(((up[h % 2], 40.0), (None, 35.5)), ((down[h % 2], 40.0), (None, 35.5))) for h in range(hosts)]
        servers = up + down
    else:
        routes = [(((None, 75.5),), ((None, 75.5),))] * hosts
        servers = []
    if seed % 4 >= 2:  # each device's own link per direction before its media: a list of one port per device
        links = [[Port(f"dev{d} {way}", 0.6, 0.0) for d in range(len(devices))] for way in ("up", "down")]
        routes = [tuple(stages[:-1] + ((way, stages[-1][1]), (None, 0.0)) for stages, way in zip(pair, links))
                  for pair in routes]
        servers += links[0] + links[1]
    pipe = kind(env, host_ports, routes, devices, rng.choice([1, 2, 8, 64]))
    log = []

    def rank(h):
        for k in range(rng.randint(3, 8)):
            start = max(env.now, env.now + rng.choice([0.0, 0.0, 10.0, 250.0]))
            first, count = rng.randint(0, 300), rng.choice([1, 3, 64, 130, 700])
            label = (h, k)
            done = env.event()

            def finish(end, label=label, done=done):
                log.append(("finish", label, env.now, end))
                done.succeed()
            issued = pipe.transfer(h, first, count, start, finish, up=rng.random() < 0.5)
            log.append(("issued", label, env.now, issued))
            if rng.random() < 0.6:
                yield done
            else:
                yield env.timeout(rng.choice([0.0, 5.0, 50.0]))

    for h in range(hosts):
        env.process(rank(h))
    env.run()
    ports = [(p.free_at_ns, p.busy_ns, p.chunks, p.bytes, p.peak_wait_ns) for p in host_ports + devices + servers]
    return log, ports, pipe.device_bytes, env.events, env.now


@pytest.mark.parametrize("seed", range(24))
def test_chunk_pipeline_is_the_reference(seed):
    ours = _pipeline_run(ChunkPipeline, seed)
    ref = _pipeline_run(ReferencePipeline, seed)
    assert sum(1 for e in ref[0] if e[0] == "finish") > 10
    assert ours == ref


def test_chunks_cut_at_multiples_of_the_chunk():
    pipe = ReferencePipeline(Environment(), [], [], [], 4)
    for first in range(13):
        for count in range(20):
            want, line = [], first
            while line < first + count:
                stop = min(first + count, (line // 4 + 1) * 4)
                want.append((stop - line) * 64)
                line = stop
            assert pipe._chunks(first, count) == want


class _ScanMemory:
    """PoolMemory as a scan of every region (the obvious version)."""

    def __init__(self):
        self.regions = {}

    def value(self, offset, size):
        hit = self.regions.get(offset)
        if hit is not None and hit[0] == size:
            return hit[1]
        end = offset + size
        over = tuple(label for off, (sz, label) in sorted(self.regions.items())
                     if off < end and off + sz > offset or (sz == 0 and off == offset))
        return over or None

    def store(self, offset, size, label):
        end = offset + size
        for off in [o for o, (sz, _) in self.regions.items() if o < end and o + sz > offset or o == offset]:
            del self.regions[off]
        self.regions[offset] = (size, label)


@pytest.mark.parametrize("seed", range(10))
def test_pool_memory_is_a_scan_of_every_region(seed):
    from cxlsim.fabric.pool_memory import PoolMemory
    rng = random.Random(seed)
    ours, ref = PoolMemory(), _ScanMemory()
    for k in range(600):
        offset, size = rng.randrange(0, 2000, rng.choice([1, 8, 64])), rng.choice([0, 0, 1, 8, 64, 100, 640])
        if rng.random() < 0.5:
            ours.store(offset, size, k)
            ref.store(offset, size, k)
        else:
            assert ours.value(offset, size) == ref.value(offset, size)
    for offset in range(0, 2100, 7):
        for size in (0, 1, 64, 300):
            assert ours.value(offset, size) == ref.value(offset, size)
