"""Where an async or hybrid step goes: the loops' phase records (cxlsim/emulator/training/phases.py, elastic.py)
and the exchange's costs after a step's compute (cxlsim/train_costs.py). The DES priced with them and the phase
table (cxlsim/train_phases.py) are tested on synthetic records in test_train_projection.py."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from cxlsim import train_costs
from cxlsim.emulator.training import data, elastic
from cxlsim.emulator.training.config import TrainConfig
from cxlsim.emulator.training.launcher import train
from cxlsim.emulator.training.phases import PhaseClock, ThreadSchedule

SLOW_BATCH_S = 0.01


def test_phase_clock_and_thread_schedule():
    clock = PhaseClock(("a", "b", "never"))
    for _ in range(3):
        clock.begin()
        time.sleep(0.002)
        clock.mark("a")
        clock.mark("b")
    got = clock.summary()
    assert got["a"]["steps"] == got["b"]["steps"] == 3 and got["never"] == {"median_s": None, "mean_s": None,
                                                                             "steps": 0}
    assert got["a"]["median_s"] >= 0.002 and got["b"]["median_s"] >= 0
    schedule = ThreadSchedule()
    schedule.start()
    begun = time.thread_time()
    end = begun + 0.02  # 20 ms of this thread's CPU, however long the machine takes to give it
    while time.thread_time() < end:
        pass
    cpu_s = time.thread_time() - begun
    schedule.stop()
    sched = schedule.summary()
    if os.path.exists("/proc/thread-self/schedstat"):  # the scheduler's count of the same CPU time
        # run_s is CPU time, not wall time: at most the thread's own clock (plus the reads between them);
        # slices counts the times it was put on a CPU, 0 when it ran the whole interval unpreempted
        assert 0.015 < sched["run_s"] <= cpu_s + 0.005
        assert sched["runnable_s"] >= 0 and isinstance(sched["slices"], int) and sched["slices"] >= 0


@pytest.mark.parametrize("mode", ["async", "hybrid"])
def test_the_batch_is_local_work_and_every_phase_is_recorded(monkeypatch, mode):
    """A batch that takes 10 ms: the record's comm_s must not hold it (it is the local work the DES is given);
    without the batch taken before the step's start, every step's comm_s would exceed 10 ms."""
    real = data.Dataset.batch

    def slow(self, *args):
        time.sleep(SLOW_BATCH_S)
        return real(self, *args)

    monkeypatch.setattr(data.Dataset, "batch", slow)
    steps = 12
    record = train(TrainConfig(mode=mode, nranks=2, steps=steps, batch_size=16, factors=(1.0, 1.0),
                               gpus=(None, None)), progress=False, probe_host=False)
    names = {"async": elastic.ASYNC_PHASES, "hybrid": elastic.HYBRID_PHASES}[mode]
    for rank, stats in zip(record["ranks"], record["mode_stats"]):
        phases = stats["phases_s"]
        assert set(phases) == set(names) and phases["batch"]["median_s"] >= SLOW_BATCH_S
        assert np.median(rank["comm_s"]) < phases["batch"]["median_s"]  # with the batch inside: above it
        assert phases["compute"]["steps"] >= rank["steps_done"]
        assert stats["schedule"]["main"]["run_s"] >= 0
        if mode == "hybrid":
            assert set(stats["exchange_phases_s"]) == set(elastic.EXCHANGE_PHASES)
            assert stats["exchange_phases_s"]["push"]["steps"] == rank["steps_done"]
            assert "exchange" in stats["schedule"]


def test_measure_exchange_times_every_operation():
    got = train_costs.measure_exchange("mlp", 32, 2, repeats=4)
    for name in ("push", "read", "ticket", "handoff"):
        low, high = got.spread_ns[name]
        assert 0 < low <= getattr(got, f"{name}_ns") <= high
    slot = 2 * 64 + -(-got.vector_bytes // 64) * 64
    assert train_costs.exchange_bandwidth(got) == pytest.approx(3 * slot / (got.push_ns + got.read_ns))
