"""run_local(keep_going=True): a rank that dies or raises does not end the others."""
import glob
import os
import signal

import pytest

from cxlsim.emulator.launch import Failed, RankFailure, run_local


def own_segments() -> list[str]:
    return glob.glob(f"/dev/shm/cxlsim-{os.getpid()}-*")


def die_or_work(comm, victim, how):
    """The victim fails (killed by a signal, or by raising); every other rank returns rank * 10."""
    if comm.rank == victim:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError("planned failure")
    return comm.rank * 10


@pytest.mark.parametrize("how, text", [("kill", "SIGKILL"), ("raise", "planned failure")])
def test_the_others_finish_and_the_failed_rank_is_named(how, text):
    results = run_local(3, die_or_work, (1, how), timeout_s=5.0, keep_going=True)
    assert results[0] == 0 and results[2] == 20
    assert isinstance(results[1], Failed) and text in results[1].message
    assert own_segments() == []


def test_without_keep_going_a_death_ends_the_run():
    with pytest.raises(RankFailure) as info:
        run_local(2, die_or_work, (1, "kill"), timeout_s=5.0)
    assert "SIGKILL" in info.value.failures[1]
    assert own_segments() == []


def everyone_fails(comm):
    raise ValueError(f"rank {comm.rank} gives up")


def test_keep_going_still_raises_when_every_rank_failed():
    with pytest.raises(RankFailure) as info:
        run_local(2, everyone_fails, timeout_s=5.0, keep_going=True)
    assert sorted(info.value.failures) == [0, 1]
    assert own_segments() == []
