"""The symmetric flag exchange probe (`primitives.flag_exchange`): every rank publishes and waits at once."""
import math

import pytest

from cxlsim.coherence import Coherence
from cxlsim.emulator import primitives
from cxlsim.emulator.launch import run_local
from cxlsim.errors import InputError


def _job(comm, gap_ns):
    ns = primitives.flag_exchange(comm, 20, gap_ns)
    comm.barrier()  # the epoch moved on alike on every rank: the pool's own barrier still meets
    try:
        primitives.flag_exchange(comm, 0)
    except InputError as exc:
        return ns, str(exc)
    return ns, None


@pytest.mark.parametrize("coherence", list(Coherence))
def test_an_exchange_costs_at_least_its_gap_and_leaves_the_ranks_in_step(coherence):
    for gap, (ns, refused) in zip([0.0, 5000.0], [run_local(2, _job, (g,), coherence=coherence, slot_bytes=64)[0]
                                                  for g in (0.0, 5000.0)]):
        assert math.isfinite(ns) and ns >= gap  # the gap is spun on the clock after every exchange (no upper
        # bound: on a loaded machine the ranks may take turns on one CPU, milliseconds per exchange)
        assert "iterations: expected >= 1" in refused
