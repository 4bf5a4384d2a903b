"""A calibration stretch's state: the placement rule's class (`host.placement_of`), with the calibration's own
line for stretches left out (`states.KEPT_HW_ROUNDTRIP_NS`), named apart from the placement rule."""
from __future__ import annotations

import pytest

from cxlsim.calibrate import states
from cxlsim.coherence import Coherence
from cxlsim.emulator.host import DISTURBED_ROUNDTRIP_NS, SLOW_ROUNDTRIP_NS, placement_of


@pytest.mark.parametrize("roundtrip,expected", [(35.0, "fast"), (200.0, "fast"), (200.5, "slow placement"),
                                                (470.0, "slow placement"), (1000.0, "slow placement"),
                                                (1000.5, "disturbed"), (1999.0, "disturbed"), (2000.5, "disturbed"),
                                                (float("inf"), "disturbed"), (float("nan"), "disturbed")])
def test_a_hw_stretch_is_classed_by_its_worse_probe(roundtrip, expected):
    assert states.state_of(Coherence.HW, (80.0, roundtrip), [1.0, 1.0], {}) == expected


@pytest.mark.parametrize("roundtrip", [35.0, 120.0, 199.9, 200.0, 200.5, 300.0, 480.0, 999.0, 1000.0])
def test_a_kept_hw_stretch_has_the_placement_rules_class(roundtrip):
    """Below the calibration's line a stretch's class is the placement rule's: the profile's placement, the
    library's and the replay's are the same classes."""
    got = states.state_of(Coherence.HW, (roundtrip,), [1.0], {})
    assert got == {"fast": "fast", "slow": "slow placement"}[placement_of(roundtrip)]


def test_the_calibrations_line_is_not_the_placement_rules_and_lies_inside_its_slow_class():
    """The line only leaves stretches out: the probes it drops are ones the placement rule calls slow."""
    assert SLOW_ROUNDTRIP_NS < states.KEPT_HW_ROUNDTRIP_NS < DISTURBED_ROUNDTRIP_NS
    between = (states.KEPT_HW_ROUNDTRIP_NS + DISTURBED_ROUNDTRIP_NS) / 2
    assert placement_of(between) == "slow"
    assert states.state_of(Coherence.HW, (between,), [1.0], {}) == "disturbed"


def test_a_stretch_a_rank_was_mostly_off_its_cpu_is_disturbed_in_either_placement():
    for roundtrip in (90.0, 470.0):
        assert states.state_of(Coherence.HW, (roundtrip,), [0.5, 0.95, 0.6], {}) == "disturbed"
        assert states.state_of(Coherence.HW, (roundtrip,), [0.5, 0.95, 0.96], {}) != "disturbed"


@pytest.mark.parametrize("roundtrip,expected", [(500.0, "fast"), (750.0, "fast"), (760.0, "slow placement"),
                                                (2000.0, "slow placement"), (2010.0, "disturbed")])
def test_a_flush_stretch_is_judged_against_the_best_flush_round_trip(roundtrip, expected):
    best = {Coherence.FLUSH: 500.0}
    assert states.state_of(Coherence.FLUSH, (roundtrip,), [], best) == expected


def test_a_fit_keeps_the_round_trips_that_are_not_disturbed_one_by_one():
    """A loaded profile's hw samples (session 26): two calm ones among 0.2-1 ms turn-taking ones."""
    loaded = [96.0, 417.0, 223555.0, 558314.0, 834134.0, 1003079.0, float("nan")]
    assert states.kept_roundtrips(Coherence.HW, loaded) == [96.0, 417.0]
    assert states.kept_roundtrips(Coherence.HW, [5000.0, 9000.0]) == [5000.0, 9000.0]  # every one disturbed: all kept
    assert states.kept_roundtrips(Coherence.FLUSH, [500.0, 600.0, 2100.0]) == [500.0, 600.0]  # above 4x the best
