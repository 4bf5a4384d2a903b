"""CXL pool fabric: snoop-filter BISnp counts, evictions, flush vs hw, the pool allgather and its closed form."""
import dataclasses
import importlib

import pytest

from cxlsim.coherence import Coherence, PoolEvent
from cxlsim.errors import InputError, RunError
from hypothesis import given, settings, strategies as st

from cxlsim.fabric.snoop_filter import ReferenceSnoopFilter, SnoopFilter
from cxlsim.fabric.cxl import CXLSwitchParams
from cxlsim.fabric.cxl_presets import CXL_PRESETS, get_cxl_preset
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.fabric.transport import UnsupportedOperation
from cxlsim.models.collectives import runner


def cxl_pool():
    return importlib.import_module("cxlsim.models.collectives.cxl_pool")


def pool(hosts, preset="cxl3-pool", coherence="hw", **kw):
    return CXLPoolTransport(get_cxl_preset(preset), hosts, coherence=coherence, **kw)


def drive(t, rank, gen_fn):
    """Run one generator for `rank` to completion; return its value."""
    return t.run({rank: gen_fn()})[rank]


def allgather(t, m):
    cxl_pool()
    out = runner.run(t, "allgather", "cxl_pool", m)
    runner.verify("allgather", t.size, runner.Context(), out.results)
    return out


# ---------------------------------------------------------------- the snoop filter, exact counts

@pytest.mark.parametrize("kind", [SnoopFilter, ReferenceSnoopFilter])
@pytest.mark.parametrize("hosts", range(2, 9))
def test_bisnp_counts_per_operation(hosts, kind):
    c = kind(hosts=hosts, capacity_lines=1024)
    # Every host reads a 3-line block: no BISnp, every host a sharer.
    for h in range(hosts):
        assert c.read(h, 100, 3) == (3, [])
    assert c.bisnp == 0 and c.holders(101) == list(range(hosts))
    # Host 0 streams a new block over it: one BISnp per other sharer per line; nobody keeps a copy.
    assert c.write(0, 100, 3, keep=False) == 3 * (hosts - 1)
    assert c.holders(100) == [] and len(c) == 0
    # A flag: host 0 stores it (Modified), nobody else cached it.
    assert c.write(0, 7, 1, keep=True) == 0 and c.owner(7) == 0
    # Host 1's read recalls it from host 0 (one BISnp); host 0 keeps a clean copy.
    before = c.bisnp
    assert c.read(1, 7, 1) == (1, [(7, 1)])
    assert c.bisnp - before == 1 and c.recalls == 1 and c.owner(7) is None
    # The other readers find it Shared: no BISnp.
    for h in range(2, hosts):
        assert c.read(h, 7, 1) == (1, [])
    assert c.bisnp - before == 1
    # Host 0 stores the next epoch: a BISnp to each of the other hosts caching it.
    assert c.write(0, 7, 1, keep=True) == hosts - 1 and c.holders(7) == [0]
    # A store to a line it already owns, and a re-read of a line it holds, send nothing.
    assert c.write(0, 7, 1, keep=True) == 0 and c.read(0, 7, 1) == (0, [])
    assert c.bisnp == 3 * (hosts - 1) + 1 + (hosts - 1)
    assert c.evictions == 0


@pytest.mark.parametrize("hosts", range(2, 9))
def test_bisnp_per_allgather_call_in_hw_mode(hosts):
    # Call 1: each flag is recalled once by its first reader (P BISnp); data slots are fresh.
    # Call 2 (other buffer): each flag store also invalidates its P-1 readers: P(P-1) + P.
    # Call 3 (buffer of call 1): each slot store invalidates the P-1 other readers per line.
    m = 200  # 4 lines per slot
    t = pool(hosts)
    expected = [hosts, hosts * (hosts - 1) + hosts, hosts * (hosts - 1) + hosts + hosts * (hosts - 1) * 4]
    for want in expected:
        before = t.snoop_filter.bisnp
        allgather(t, m)
        assert t.snoop_filter.bisnp - before == want
    assert t.snoop_filter.recalls == 3 * hosts and t.snoop_filter.evictions == 0


@pytest.mark.parametrize("kind", [SnoopFilter, ReferenceSnoopFilter])
def test_snoop_filter_evictions_invalidate_the_lru_line_holders(kind):
    lost = []
    c = kind(hosts=3, capacity_lines=4, on_invalidate=lambda h, first, n: lost.extend((h, x) for x in range(first, first + n)))
    c.read(0, 0, 4)             # lines 0..3 by host 0
    c.read(1, 0, 2)             # host 1 shares lines 0, 1 (now most recent): LRU order 2, 3, 0, 1
    c.read(2, 10, 1)            # full: evicts line 2 (host 0)
    c.read(2, 11, 1)            # evicts line 3 (host 0)
    c.read(2, 12, 1)            # evicts line 0 (hosts 0 and 1)
    assert c.evictions == 3 and c.eviction_bisnp == 4 and c.bisnp == 4
    assert lost == [(0, 2), (0, 3), (0, 0), (1, 0)]
    assert not c.holds(0, 0) and c.holds(1, 1) and len(c) == 4
    # A Modified line is evicted too: its owner gets the BISnp.
    c.write(1, 20, 1, keep=True)  # evicts line 1 (hosts 0, 1)
    assert c.eviction_bisnp == 6 and c.owner(20) == 1


_OPS = st.lists(st.tuples(st.sampled_from(["read", "write", "store", "drop"]), st.integers(0, 3),
                          st.integers(0, 40), st.integers(1, 12)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ops=_OPS, capacity=st.integers(1, 30))
def test_region_snoop_filter_equals_the_per_line_twin(ops, capacity):
    # Every count, every line's state and LRU position, and every invalidated (host, line) agree.
    lost_fast, lost_ref = [], []
    fast = SnoopFilter(hosts=4, capacity_lines=capacity,
                     on_invalidate=lambda h, f, n: lost_fast.extend((h, x) for x in range(f, f + n)))
    ref = ReferenceSnoopFilter(hosts=4, capacity_lines=capacity,
                             on_invalidate=lambda h, f, n: lost_ref.extend((h, x) for x in range(f, f + n)))
    for op, host, first, count in ops:
        if op == "read":
            a, b = fast.read(host, first, count), ref.read(host, first, count)
            assert a[0] == b[0]
            assert [x for f, n in a[1] for x in range(f, f + n)] == [x for f, n in b[1] for x in range(f, f + n)]
        elif op == "drop":
            assert fast.drop(host, first, count) == ref.drop(host, first, count)
        else:
            keep = op == "store"
            assert fast.write(host, first, count, keep) == ref.write(host, first, count, keep)
        assert fast.lines() == ref.lines() and len(fast) == len(ref) <= capacity
        assert sorted(lost_fast) == sorted(lost_ref)
        assert (fast.bisnp, fast.recalls, fast.evictions, fast.eviction_bisnp) == \
            (ref.bisnp, ref.recalls, ref.evictions, ref.eviction_bisnp)
    # The LRU order: evicting everything with a long read takes each host's lines in the same order.
    lost_fast.clear()
    lost_ref.clear()
    fast.read(0, 1000, capacity)
    ref.read(0, 1000, capacity)
    for h in range(4):
        assert [x for g, x in lost_fast if g == h] == [x for g, x in lost_ref if g == h]


def test_a_tiny_snoop_filter_still_gives_correct_allgathers():
    # 2 lines of filter for 4 flags and 8 slot lines: pollers lose their flag copies to
    # evictions, are woken by the BISnp and re-read; every rank still gets every block.
    t = pool(4, snoop_filter_lines=2)
    for _ in range(3):
        allgather(t, 100)
    assert t.snoop_filter.evictions > 0 and t.snoop_filter.eviction_bisnp > 0


# ---------------------------------------------------------------- flush vs hw semantics

def test_flush_mode_reads_a_stale_copy_until_the_reader_invalidates_it():
    t = pool(2, coherence="flush")

    def steps():
        yield t.pool_write(0, 4096, 256, "old", streaming=True)
        yield t.fence(0)
        first = yield t.pool_read(1, 4096, 256)       # host 1 caches the block
        yield t.pool_write(0, 4096, 256, "new", streaming=True)
        yield t.fence(0)
        stale = yield t.pool_read(1, 4096, 256)       # hits its own stale copy
        yield t.flush(1, 4096, 256)
        yield t.fence(1)
        fresh = yield t.pool_read(1, 4096, 256)
        return first, stale, fresh
    assert drive(t, 0, steps) == ("old", "old", "new")


def test_flush_mode_store_is_invisible_until_written_back():
    t = pool(2, coherence="flush")

    def steps():
        yield t.pool_write(0, 0, 8, 5)                # an ordinary store: in host 0's cache only
        before = yield t.pool_read(1, 0, 8)
        yield t.flush(1, 0, 8)
        yield t.flush(0, 0, 8)
        yield t.fence(0)
        after = yield t.pool_read(1, 0, 8)
        return before, after
    assert drive(t, 0, steps) == (None, 5)


def test_hw_mode_a_write_invalidates_the_readers_copy():
    t = pool(2, coherence="hw")

    def steps():
        yield t.pool_write(0, 4096, 256, "old", streaming=True)
        yield t.fence(0)
        yield t.pool_read(1, 4096, 256)
        yield t.pool_write(0, 4096, 256, "new", streaming=True)
        yield t.fence(0)
        return (yield t.pool_read(1, 4096, 256))
    assert drive(t, 0, steps) == "new"
    assert t.snoop_filter.bisnp == 4  # 4 lines, one sharer


@pytest.mark.parametrize("hosts", [2, 4, 8])
def test_flush_mode_costs_more_per_sync_than_hw(hosts):
    for m in (8, 4096):
        hw = allgather(pool(hosts, coherence="hw"), m).latency_ns
        fl = allgather(pool(hosts, coherence="flush"), m).latency_ns
        assert fl > hw, (hosts, m, fl, hw)
    # Flush mode serialises one invalidate + mfence + load per flag: the gap grows with P.
    gaps = [allgather(pool(p, coherence="flush"), 8).latency_ns - allgather(pool(p, coherence="hw"), 8).latency_ns
            for p in (2, 4, 8)]
    assert gaps[0] < gaps[1] < gaps[2]


def test_hw_poller_sleeps_until_the_flag_store_and_pays_the_recall():
    t = pool(2, coherence="hw")
    seen = {}

    def writer():
        yield t.compute(0, 5000.0)
        yield t.pool_write(0, 0, 8, 1)
        seen["stored"] = t.now()

    def poller():
        yield t.wait_flags(1, [0], 1)
        seen["saw"] = t.now()
    t.run({0: writer(), 1: poller()})
    # The store: a read for ownership (L + 64/b) plus the BISnp round trip to the sleeping poller.
    # The poller wakes 2*path after the store was issued and re-reads, recalling the line.
    L, path, x = t.load_ns, t.path_ns, 64 / t.host_bw_bytes_per_ns
    assert seen["stored"] == pytest.approx(5000 + L + x + 2 * path)
    assert seen["saw"] == pytest.approx(5000 + 2 * path + L + x + 2 * path)
    assert t.polls == 2 and t.snoop_filter.recalls == 1 and t.snoop_filter.bisnp == 2  # invalidate, recall


# ---------------------------------------------------------------- the pool allgather

def _labels(t, m, calls, name="cxl_pool"):
    """Run `calls` back-to-back allgathers with labels (rank, call); return every rank's results."""
    algo = getattr(cxl_pool(), name)
    got = {r: [] for r in range(t.size)}

    def rank(r):
        ep = t.endpoint(r)
        for i in range(calls):
            got[r].append((yield from algo(ep, m, (r, i))))
    t.run({r: rank(r) for r in range(t.size)})
    return got


@pytest.mark.parametrize("name", ["cxl_pool", "cxl_pool_zero_copy"])
@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_every_rank_ends_with_every_block_in_order_for_p_1_to_17(coherence, name):
    preset = get_cxl_preset("cxl3-pool")
    big = dataclasses.replace(preset, switch=dataclasses.replace(preset.switch, lanes=512))  # 32 ports
    for p in range(1, 18):
        for m in (1, 100, 4099):
            t = CXLPoolTransport(big, p, coherence=coherence)
            got = _labels(t, m, 3, name)
            for r in range(p):
                assert got[r] == [[(w, i) for w in range(p)] for i in range(3)], (p, m, r)


def test_skipping_the_readers_invalidation_reads_stale_blocks():
    # Flush mode without step 5 (drop the other ranks' slots before reading): call 3 reuses
    # call 1's buffer, and each rank reads the copies it cached in call 1.
    layout = cxl_pool().PoolLayout(3, 100)
    t = pool(3, coherence="flush")
    others = {r: {layout.slot(e, w) for e in (0, 1) for w in range(3) if w != r} for r in range(3)}
    real_flush = t.flush
    t.flush = lambda rank, off, size: real_flush(rank, off, 0 if off in others[rank] else size)
    got = _labels(t, 100, 3)
    assert got[0][1] == [(0, 1), (1, 1), (2, 1)]  # call 2 used the other buffer
    assert got[0][2] == [(0, 2), (1, 0), (2, 0)]  # stale: call 1's blocks


@pytest.mark.parametrize("name", ["cxl_pool", "cxl_pool_zero_copy"])
@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_zero_byte_blocks_still_carry_their_labels(coherence, name):
    t = pool(3, coherence=coherence)
    assert _labels(t, 0, 2, name)[2] == [[(w, i) for w in range(3)] for i in range(2)]


def test_zero_copy_skips_the_copies_and_flush_mode_writes_the_block_back():
    m = 65536
    for coherence in ("hw", "flush"):
        copy = allgather(pool(4, coherence=coherence), m).latency_ns
        t = pool(4, coherence=coherence)
        zero = runner.run(t, "allgather", "cxl_pool_zero_copy", m).latency_ns
        assert zero < copy
        # Per rank: the flag's read for ownership and 3 flag loads (+ the flag's write-back in
        # flush mode). hw: the blocks stay Modified in their writers' caches; flush: each block
        # is written back once.
        assert t.device_bytes == (4 * 64 * 4 if coherence == "hw" else 4 * m + 4 * 64 * 5)


# ---------------------------------------------------------------- the closed form

@pytest.mark.parametrize("preset, coherence, ps", [
    ("cxl3-pool", "hw", (1, 2, 3, 5, 8, 10)),      # P*b <= B: 10 hosts at 12.3 GB/s on 126 GB/s
    ("cxl3-pool", "flush", (1, 2, 4, 7, 10)),
    ("cxl2-pool", "flush", (1, 2, 3, 5)),          # 5 hosts on 63 GB/s
])
def test_des_equals_closed_form_when_the_device_is_not_congested(preset, coherence, ps):
    form = cxl_pool().cxl_pool_closed_form
    for p in ps:
        for m in (0, 1, 64, 1000, 65536, 1 << 20):
            for zero_copy in (False, True):
                t = pool(p, preset, coherence)
                assert p * t.host_bw_bytes_per_ns <= t.device_bw_bytes_per_ns
                out = runner.run(t, "allgather", "cxl_pool_zero_copy" if zero_copy else "cxl_pool", m)
                runner.verify("allgather", p, runner.Context(), out.results)
                expect = form(t.figures(), p, m, coherence, zero_copy)
                assert out.latency_ns == pytest.approx(expect, rel=1e-9), (p, m, zero_copy)


@pytest.mark.parametrize("coherence", ["hw", "flush"])
@pytest.mark.parametrize("invalidate, writeback", [(90.0, 0.0), (0.0, 900.0), (120.0, 700.0), (5.0, 20.0)])
def test_des_equals_closed_form_with_flush_acknowledgements(coherence, invalidate, writeback):
    # The local-host model's knobs: a clflushopt acknowledged I ns after its issue, a write never
    # acknowledged before K ns; both held by the fences (700-900 ns outlast the preset's write path).
    form = cxl_pool().cxl_pool_closed_form
    base = get_cxl_preset("cxl3-pool")
    preset = dataclasses.replace(base, host_path=dataclasses.replace(
        base.host_path, invalidate_ns=invalidate, writeback_ns=writeback))
    for p in (1, 2, 3, 5):
        for m in (0, 1, 64, 1000, 65536):
            for zero_copy in (False, True):
                t = CXLPoolTransport(preset, p, coherence=coherence)
                out = runner.run(t, "allgather", "cxl_pool_zero_copy" if zero_copy else "cxl_pool", m)
                runner.verify("allgather", p, runner.Context(), out.results)
                expect = form(t.figures(), p, m, coherence, zero_copy)
                assert out.latency_ns == pytest.approx(expect, rel=1e-9), (p, m, zero_copy)
    if coherence == "flush":  # the knobs cost something where they outlast the path
        plain = CXLPoolTransport(base, 2, coherence="flush")
        slow = CXLPoolTransport(preset, 2, coherence="flush")
        assert runner.run(slow, "allgather", "cxl_pool", 64).latency_ns > \
            runner.run(plain, "allgather", "cxl_pool", 64).latency_ns


@pytest.mark.parametrize("preset, coherence, devices", [
    ("cxl2-pool", "flush", 1), ("cxl3-pool", "hw", 1), ("cxl3-pool", "flush", 1), ("cxl2-pool", "flush", 2)])
def test_closed_form_device_bottleneck_within_one_percent(preset, coherence, devices):
    # 13 hosts pulling 1 MiB blocks: the devices' share, P*P*W/B, is the read phase.
    form = cxl_pool().cxl_pool_closed_form
    p, m = 13, 1 << 20
    t = pool(p, preset, coherence, devices=devices)
    fig = t.figures()
    assert p * p * m / fig.device_bw_bytes_per_ns > 1.2 * p * m / fig.host_bw_bytes_per_ns  # really device-bound
    out = allgather(t, m)
    assert out.latency_ns == pytest.approx(form(fig, p, m, coherence), rel=0.01)


@pytest.mark.parametrize("coherence", ["hw", "flush"])
def test_two_level_tree_adds_a_hop_and_equals_its_closed_form(coherence):
    form = cxl_pool().cxl_pool_closed_form
    for p in (2, 5, 10):  # one leaf; 10 hosts x 12.3 GB/s fit its 128 GB/s uplink and the device
        for m in (1, 65536):
            t = pool(p, coherence=coherence, switch_levels=2)
            assert t.load_ns == pytest.approx(250.0 + 2 * (50.0 + 2.5))  # a second switch and link
            out = allgather(t, m)
            assert out.latency_ns == pytest.approx(form(t.figures(), p, m, coherence), rel=1e-9), (p, m)
    # 17 hosts need two leaves (8 + 9 hosts); every rank still gets every block.
    t = pool(17, coherence=coherence, switch_levels=2, devices=2)
    assert sorted(t.leaf_of.count(k) for k in (0, 1)) == [8, 9]
    allgather(t, 100)


def test_tree_uplink_bottleneck_within_one_percent():
    # 30 hosts, 15 per leaf, 4 devices, 96 lines in flight per host (17.3 GB/s at 355 ns): each
    # leaf's uplink carries 15 x 30 blocks, more than the devices' share (30 x 30 blocks over 4
    # devices) or a host's own (30 blocks).
    form = cxl_pool().cxl_pool_closed_form
    p, m = 30, 1 << 18
    preset = get_cxl_preset("cxl3-pool")
    preset = dataclasses.replace(preset, host_path=dataclasses.replace(preset.host_path, outstanding_lines=96))
    t = CXLPoolTransport(preset, p, coherence="flush", switch_levels=2, devices=4)
    fig = t.figures()
    assert fig.leaf_hosts == 15 and fig.uplink_bw_bytes_per_ns == 128.0
    leaf = 15 * p * m / 128.0
    assert leaf > 1.3 * p * p * m / fig.device_bw_bytes_per_ns and leaf > 1.3 * p * m / fig.host_bw_bytes_per_ns
    assert allgather(t, m).latency_ns == pytest.approx(form(fig, p, m, "flush"), rel=0.01)


def test_one_host_is_capped_by_its_outstanding_requests():
    t = pool(1)
    assert t.load_ns == pytest.approx(250.0)  # end-to-end through one switch [E2E]
    assert t.host_bw_bytes_per_ns == pytest.approx(48 * 64 / 250.0)

    def read():
        yield t.pool_read(0, 0, 1 << 20)
        return t.now()
    assert drive(t, 0, read) == pytest.approx(250.0 + (1 << 20) / t.host_bw_bytes_per_ns)
    wide = get_cxl_preset("cxl3-pool")
    wide = dataclasses.replace(wide, host_path=dataclasses.replace(wide.host_path, outstanding_lines=100000))
    t2 = CXLPoolTransport(wide, 1, coherence="hw")
    # Now the port (128 GB/s) limits the host, and the device (126 GB/s) limits the read.
    assert (t2.host_bw_bytes_per_ns, t2.device_bw_bytes_per_ns) == (128.0, 126.0)

    def read2():
        yield t2.pool_read(0, 0, 1 << 20)
        return t2.now()
    assert drive(t2, 0, read2) == pytest.approx(250.0 + (1 << 20) / 126.0)


# ---------------------------------------------------------------- bad inputs

def test_bad_inputs_give_clear_errors():
    with pytest.raises(InputError, match="unknown CXL pool preset 'cxl4'; expected one of cxl2-pool, cxl3-pool"):
        get_cxl_preset("cxl4")
    with pytest.raises(InputError, match=r"16 hosts \+ 1 device ports need 17 x16 ports, but a 256-lane switch has 16"):
        pool(16)
    small = CXLSwitchParams(hop_latency_ns=50.0, port_bw_bytes_per_ns=64.0, lanes=64, lanes_per_port=16)
    preset = dataclasses.replace(get_cxl_preset("cxl3-pool"), switch=small)
    with pytest.raises(InputError, match="need 5 x16 ports, but a 64-lane switch has 4"):
        CXLPoolTransport(preset, 4)
    with pytest.raises(InputError, match="cxl2-pool .CXL 2.0. supports only flush, got 'hw'"):
        pool(2, "cxl2-pool", "hw")
    with pytest.raises(InputError, match="at most 1 level.* no cascaded switches"):
        pool(2, "cxl2-pool", "flush", switch_levels=2)
    with pytest.raises(InputError, match="at most 2 level"):
        pool(2, switch_levels=3)
    with pytest.raises(InputError, match=r"226 hosts need 16 leaf switches .15 hosts each.; their uplinks \+ 1 "
                                         r"device ports need 17 root ports.*at most 225 hosts on two levels"):
        pool(226, switch_levels=2)
    with pytest.raises(InputError, match="coherence: expected one of hw, flush, got 'snoopy'"):
        pool(2, coherence="snoopy")
    with pytest.raises(InputError, match="pool_bytes: expected an integer in 1.."):
        pool(2, pool_bytes=0)
    # The pool must hold P flag lines and two buffers of P slots.
    t = pool(4, pool_bytes=4 * 64 + 2 * 4 * 1024 - 1)
    with pytest.raises(InputError, match=r"P=4 blocks of 1024 B needs 8448 B .* but the pool has 8447 B"):
        allgather(t, 1024)
    allgather(pool(4, pool_bytes=4 * 64 + 2 * 4 * 1024), 1024)


def test_misuse_at_run_time_is_reported():
    t = pool(2)
    with pytest.raises(UnsupportedOperation, match="send: CXLPoolTransport has no network"):
        t.send(0, 1, 8)
    with pytest.raises(RunError, match=r"pool_read: rank 0: bytes \[0, 100\) run past the pool \(64 B\)"):
        pool(1, pool_bytes=64).pool_read(0, 0, 100)
    with pytest.raises(RunError, match="spans two lines"):
        t.pool_write(0, 60, 8, 1)
    # A flag nobody sets: flush mode gives up after its poll limit, hw mode reports the sleeper.
    f = pool(2, coherence="flush", poll_limit_ns=10_000.0)
    with pytest.raises(RunError, match="rank 1 polled the flag at offset 0 for .* without seeing 1 .last saw None."):
        f.run({1: (e for e in [f.wait_flags(1, [0], 1)])})
    h = pool(2, coherence="hw")
    with pytest.raises(RunError, match=r"ranks \[1\] never finished .* sleeping on flag lines .host, line.: \[\(1, 0\)\]"):
        h.run({1: (e for e in [h.wait_flags(1, [0], 1)])})
    # A hw poller whose copy a 1-line snoop filter keeps evicting re-loads the flag: the limit ends it.
    h = pool(2, coherence="hw", snoop_filter_lines=1, poll_limit_ns=10_000.0)

    def evict_forever():
        while True:
            yield h.pool_read(0, 4096, 64)
            yield h.pool_read(0, 8192, 64)
    with pytest.raises(RunError, match="rank 1 polled the flag at offset 0 for"):
        h.run({0: evict_forever(), 1: (e for e in [h.wait_flags(1, [0], 1)])})


def test_presets_name_their_sources():
    for name, p in CXL_PRESETS.items():
        assert p.name == name and p.source
    assert get_cxl_preset("cxl2-pool").switch.port_bw_bytes_per_ns == 64.0
    assert get_cxl_preset("cxl3-pool").switch.port_bw_bytes_per_ns == 128.0
    assert get_cxl_preset("cxl3-pool").switch.max_ports == 16


# ---------------------------------------------------------------- the event log

@pytest.mark.parametrize("coherence", list(Coherence))
def test_event_log_holds_the_emulators_codes_in_protocol_order(coherence):
    # One copy-mode call, P=2, 100-B blocks: rank 0's ops as the emulator's cxl_allgather logs them.
    t = pool(2, coherence=coherence)
    log = t.enable_log()
    runner.run(t, "allgather", "cxl_pool", 100)
    lay = cxl_pool().PoolLayout(2, 100)
    slot = {w: lay.slot(1, w) for w in range(2)}
    flush = coherence is Coherence.FLUSH
    expect = [(PoolEvent.WRITE, slot[0], 100)] + [(PoolEvent.FLUSH, slot[0], 100)] * flush + \
        [(PoolEvent.SFENCE, 0, 0), (PoolEvent.FLAG_STORE, lay.flag(0), 1)] + [(PoolEvent.FLUSH, lay.flag(0), 8)] * flush + \
        [(PoolEvent.POLL_FLUSHED if flush else PoolEvent.POLL_CACHED, lay.flag(1), 1)] + \
        [(PoolEvent.FLUSH, slot[1], 100), (PoolEvent.MFENCE, 0, 0)] * flush + \
        [(PoolEvent.READ, slot[0], 100), (PoolEvent.READ, slot[1], 100)]
    assert [(op, off, arg) for r, op, off, arg in log if r == 0] == expect
    assert all(isinstance(op, PoolEvent) for _, op, _, _ in log)


def test_extra_charges_hook_adds_cpu_time_where_it_says():
    from cxlsim.fabric.pool_transport import ExtraCharges

    class AfterWait(ExtraCharges):
        def after_wait(self, rank):
            return 100.0

    for coherence in Coherence:
        plain = runner.run(pool(3, coherence=coherence), "allgather", "cxl_pool", 1000).latency_ns
        t = pool(3, coherence=coherence)
        t.charges = AfterWait()
        assert runner.run(t, "allgather", "cxl_pool", 1000).latency_ns == pytest.approx(plain + 100.0, rel=1e-12)
        t = pool(3, coherence=coherence)
        t.charges = ExtraCharges()  # the base adds nothing
        assert runner.run(t, "allgather", "cxl_pool", 1000).latency_ns == pytest.approx(plain, rel=1e-12)
