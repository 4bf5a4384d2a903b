"""The shared training region (cxlsim.emulator.training.shared_state): seqlock slots, merge, the counter."""
from __future__ import annotations

import multiprocessing
import os
import signal
import struct
import time

import numpy as np
import pytest

from cxlsim.coherence import Coherence
from cxlsim.emulator.pool import parse_pool_spec
from cxlsim.emulator.training.shared_state import (RegionLayout, SharedState, SharedTimeout, SlotRead, pid_alive,
                                                    region_spec, shared_region)
from cxlsim.errors import InputError

COHERENCES = [Coherence.HW, Coherence.FLUSH]
FORK = multiprocessing.get_context("fork")


def test_layout_puts_every_word_on_its_own_line():
    lay = RegionLayout.plan(3, 100, base=4096)
    assert lay.counter_offset == 4096
    assert [lay.choosing_offset, lay.number_offset, lay.pid_offset, lay.slots_offset] == \
        [4096 + 64, 4096 + 64 + 3 * 64, 4096 + 64 + 6 * 64, 4096 + 64 + 9 * 64]
    assert lay.copy_stride == 64 + 64 + 128 and lay.slot_stride == 2 * lay.copy_stride
    assert lay.end == lay.slots_offset + 3 * lay.slot_stride
    with pytest.raises(InputError, match="base 100"):
        RegionLayout.plan(1, 8, base=100)


@pytest.mark.parametrize("coherence", COHERENCES)
def test_push_read_and_merge(coherence):
    with shared_region(2, 5, coherence=coherence) as handle:
        a, b = SharedState.attach(handle, 0), SharedState.attach(handle, 1)
        out = np.full(5, 9.0)
        assert b.read(0, out) == SlotRead(0, (0,) * 8) and not out.any()  # never pushed: version 0, zeros
        assert a.push(np.arange(5.0), meta=(7, 3)) == 1
        assert a.push(np.arange(5.0) * 2, meta=(8,)) == 2
        got = b.read(0, out)
        assert got.version == 2 and got.meta[:2] == (8, 0) and out.tolist() == [0, 2, 4, 6, 8]
        b.push(np.ones(5))
        merged = np.empty(5)
        reads = a.merge(merged)
        assert [r.version for r in reads] == [2, 1] and merged.tolist() == [1, 3, 5, 7, 9]
        with pytest.raises(InputError, match="vector of 5 float64"):
            a.push(np.ones(4))
        with pytest.raises(InputError, match="at most 8 meta words"):
            a.push(np.ones(5), meta=tuple(range(9)))
        a.close()
        b.close()


@pytest.mark.parametrize("coherence", COHERENCES)
def test_both_sequence_words_odd_is_a_race_not_an_empty_slot(coherence):
    """A reader that loads copy 0 odd (push v under way), then copy 1 odd (push v + 1 begun after v
    completed) must retry, not report "never pushed": the clean-clone CI once saw version 0 after 832."""
    with shared_region(1, 4, coherence=coherence) as handle:
        state = SharedState.attach(handle, 0)
        lay = handle.layout
        seq = [lay.slots_offset + copy * lay.copy_stride for copy in (0, 1)]
        meta, out = np.zeros(8, dtype=np.uint64), np.zeros(4)
        state.kernel.store_word(seq[1], 1)  # the first push under way: nothing complete yet
        assert state.kernel.read(0, meta, out, 5) == 0
        state.kernel.store_word(seq[0], 1663)  # push 832 under way on copy 0 ...
        state.kernel.store_word(seq[1], 1665)  # ... as the loads saw it, and push 833 begun on copy 1
        assert state.kernel.read(0, meta, out, 5) == -1
        state.kernel.store_word(seq[0], 1664)  # push 832 complete
        assert state.kernel.read(0, meta, out, 5) == 832
        state.close()


def _pusher(handle, worker, ready, stop):
    """Push back to back until told to stop: push v is a vector whose every item is v % 3 + 1, taken
    from three vectors filled beforehand (so the loop is all pushes), with meta word 0 = v. The copy
    a push overwrites (push v - 2's) held other items, so a mix of two pushes shows."""
    state = SharedState.attach(handle, worker)
    vectors = [np.full(handle.nitems, k + 1.0) for k in range(3)]
    ready.set()
    while not stop.is_set():
        state.push(vectors[(state.version + 1) % 3], meta=(state.version + 1,))
    state.close()


def whole(out, got) -> bool:
    """`out` holds push `got.version` entire (or nothing was pushed yet)."""
    return got.version == got.meta[0] and (got.version == 0 or out.min() == out.max() == got.version % 3 + 1)


@pytest.mark.parametrize("coherence", COHERENCES)
def test_a_reader_never_sees_a_mix_while_the_writer_pushes(coherence):
    n = 1 << 17  # 1 MiB of float64: each copy takes long enough to race the reader
    with shared_region(2, n, coherence=coherence) as handle:
        ready, stop = FORK.Event(), FORK.Event()
        writer = FORK.Process(target=_pusher, args=(handle, 0, ready, stop), daemon=True)
        writer.start()
        reader = SharedState.attach(handle, 1)
        try:
            assert ready.wait(10)
            out = np.empty(n)
            seen, last = set(), 0
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline or len(seen) < 3:
                got = reader.read(0, out)
                assert whole(out, got)
                assert got.version >= last
                last = got.version
                seen.add(got.version)
                assert time.monotonic() < deadline + 10
        finally:
            stop.set()
            writer.join(10)
            reader.close()
        assert writer.exitcode == 0 and len(seen) >= 3


def _raw_sequences(state, worker):
    """The two sequence words of slot `worker`, read straight from `state`'s mapping (a test-side view)."""
    lay = state.handle.layout
    first = lay.slots_offset + worker * lay.slot_stride
    return [struct.unpack_from("<Q", state.pool.mapping, first + copy * lay.copy_stride)[0] for copy in (0, 1)]


@pytest.mark.parametrize("coherence", COHERENCES)
def test_a_worker_killed_mid_push_leaves_its_last_push_whole(coherence):
    """SIGKILL a worker that pushes 4 MiB vectors back to back: kills land inside a push (a copy's
    sequence word is left odd), and the reader still gets the last complete push, every item of it."""
    n = 1 << 19
    torn = trials = 0
    while trials < 3 or not torn and trials < 30:  # each kill lands inside a push with a chance near 1
        trials += 1
        with shared_region(2, n, coherence=coherence) as handle:
            ready, stop = FORK.Event(), FORK.Event()
            writer = FORK.Process(target=_pusher, args=(handle, 0, ready, stop), daemon=True)
            writer.start()
            reader = SharedState.attach(handle, 1)
            try:
                assert ready.wait(10)
                out = np.empty(n)
                deadline = time.monotonic() + 10
                while reader.read(0, out).version < 1 + trials:
                    assert time.monotonic() < deadline
                os.kill(writer.pid, signal.SIGKILL)
                writer.join(10)
                sequences = _raw_sequences(reader, 0)
                torn += any(s & 1 for s in sequences)
                got = reader.read(0, out)
                assert got.version == max(s for s in sequences if s % 2 == 0) // 2 >= 1 + trials
                assert whole(out, got)
            finally:
                reader.close()
                if writer.is_alive():
                    writer.kill()
    assert torn >= 1, f"no kill of {trials} landed inside a push"


def _take_tickets(handle, worker, count, queue):
    state = SharedState.attach(handle, worker)
    queue.put([state.fetch_add() for _ in range(count)])
    state.close()


@pytest.mark.parametrize("coherence,counter", [(Coherence.HW, "cxl-device"), (Coherence.HW, "cxl-flush-lock"),
                                               (Coherence.FLUSH, "cxl-flush-lock")])
def test_counter_tickets_are_unique_under_contention(coherence, counter):
    count, workers = 300, 3
    with shared_region(workers, 1, coherence=coherence, counter=counter) as handle:
        queue = FORK.Queue()
        procs = [FORK.Process(target=_take_tickets, args=(handle, w, count, queue), daemon=True)
                 for w in range(workers)]
        for p in procs:
            p.start()
        tickets = [queue.get(timeout=30) for _ in procs]
        for p in procs:
            p.join(10)
    assert sorted(t for ts in tickets for t in ts) == list(range(workers * count))
    assert all(ts == sorted(ts) for ts in tickets)


def _doorway_then_wait(handle, die, ready):
    """Take a bakery number (worker 1) and then hold it: die with it (die=True) or stay alive."""
    state = SharedState.attach(handle, 1)
    state.kernel.bakery_doorway(1)
    ready.set()
    if die:
        os._exit(0)
    time.sleep(30)


def test_a_dead_workers_bakery_number_is_skipped():
    with shared_region(2, 1, coherence=Coherence.FLUSH, timeout_s=5.0) as handle:
        state = SharedState.attach(handle, 0)
        ready = FORK.Event()
        proc = FORK.Process(target=_doorway_then_wait, args=(handle, True, ready), daemon=True)
        proc.start()
        assert ready.wait(10)
        while proc.is_alive():  # dead, but a zombie until joined: liveness must still say dead
            time.sleep(0.01)
        assert not state.alive(1)
        assert state.fetch_add() == 0 and state.fetch_add() == 1
        assert state.dead.tolist() == [0, 1]
        proc.join()
        state.close()


def test_a_live_holder_times_out_naming_it():
    with shared_region(2, 1, coherence=Coherence.FLUSH, timeout_s=0.3) as handle:
        state = SharedState.attach(handle, 0)
        ready = FORK.Event()
        proc = FORK.Process(target=_doorway_then_wait, args=(handle, False, ready), daemon=True)
        proc.start()
        try:
            assert ready.wait(10)
            with pytest.raises(SharedTimeout, match="for worker 1's bakery lock") as info:
                state.fetch_add()
            assert info.value.worker == 1
            assert state.kernel.load_word(handle.layout.number_offset) == 0  # withdrew its number
        finally:
            proc.kill()
            proc.join()
            state.close()


def test_bad_settings_are_refused():
    with pytest.raises(InputError, match="--counter cxl-device: needs --coherence hw"):
        with shared_region(2, 4, coherence=Coherence.FLUSH, counter="cxl-device"):
            pass
    with pytest.raises(InputError, match="--counter: expected one of cxl-device, cxl-flush-lock"):
        with shared_region(2, 4, counter="rdma"):
            pass
    with pytest.raises(InputError, match="1 or more items"):
        with shared_region(2, 0):
            pass
    with shared_region(2, 4) as handle:
        with pytest.raises(InputError, match="worker 2 is outside 0..1"):
            SharedState.attach(handle, 2)


def test_the_segment_is_gone_after_the_region_also_on_failure():
    with shared_region(2, 4) as handle:
        path = handle.pool.path
        assert os.path.exists(path)
    assert not os.path.exists(path)
    with pytest.raises(RuntimeError):
        with shared_region(2, 4) as handle:
            path = handle.pool.path
            raise RuntimeError("boom")
    assert not os.path.exists(path)
    with shared_region(2, 4) as handle:  # every worker attached: the last one removed the file at once
        states = [SharedState.attach(handle, w) for w in range(2)]
        assert not os.path.exists(handle.pool.path)
        for s in states:
            s.close()


def test_pid_alive():
    assert pid_alive(os.getpid())
    proc = FORK.Process(target=os._exit, args=(0,))
    proc.start()
    while proc.is_alive():
        time.sleep(0.01)
    assert not pid_alive(proc.pid)  # a zombie
    proc.join()
    assert not pid_alive(proc.pid)


def test_the_region_goes_beside_the_collective_pool(tmp_path):
    base = tmp_path / "pool"
    spec = region_spec(parse_pool_spec(f"file:{base}"))
    assert spec.kind == "file" and spec.path.startswith(f"{base}.{os.getpid()}-")
    assert region_spec(parse_pool_spec("shm")) == parse_pool_spec("shm")
    with pytest.raises(InputError, match="--pool dax:/dev/dax0.0: async and hybrid need a second pool segment"):
        region_spec(parse_pool_spec("dax:/dev/dax0.0"))
    with shared_region(2, 4, pool=f"file:{base}") as handle:
        assert handle.pool.path != str(base) and os.path.exists(handle.pool.path) and not base.exists()
        states = [SharedState.attach(handle, w) for w in range(2)]
        states[0].push(np.ones(4))
        assert states[1].read(0, np.empty(4)).version == 1
        for s in states:
            s.close()
    assert list(tmp_path.iterdir()) == []
