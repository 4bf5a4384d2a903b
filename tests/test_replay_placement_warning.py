"""`cxlsim replay --fabric NET.json+LOCAL.json`: the fabric line names the local-host profile's host placement
(cxlsim.calibrate.profile.profile_placement) beside the traced run's (the library's stats header, `, placement P
(flag round trip R ns)`), and warns where both are known and differ (cxlsim.replay.pool_profile)."""
from __future__ import annotations

import argparse
import json
import os

import pytest

from cxlsim.calibrate.profile import PLACEMENT_KEY, placement_record
from cxlsim.replay import cli, simgrid
from cxlsim.replay.pool_profile import read_library_stats

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL = os.path.join(HERE, "data", "local_host_profile_np2.json")  # no placement key: hw round trip 63 ns, fast
LIBRARY = os.path.join(HERE, "data", "traces", "library")


def run(argv):
    parser = argparse.ArgumentParser(prog="cxlsim")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["replay", *argv])
    return args.func(args)


def stats_with(library_stats_text, tmp_path, placement: str | None) -> str:
    """The library trace's stats (every allreduce and barrier on the pool), its header ending in `placement`."""
    trace = simgrid.read(LIBRARY)
    counts = {k: sum(c.kind == k for calls in trace.ranks for c in calls) for k in ("allreduce", "barrier")}
    text = library_stats_text({"MPI_Allreduce": (counts["allreduce"],) * 2 + (0,),
                               "MPI_Barrier": (counts["barrier"],) * 2 + (0,)})
    header, rest = text.split("\n", 1)
    path = tmp_path / "stats.txt"
    path.write_text(header + (f", {placement}" if placement else "") + "\n" + rest)
    return str(path)


def profile_with(tmp_path, placement_class: str, roundtrip_ns: float) -> str:
    """The tests' local-host profile with a recorded placement (as `cxlsim calibrate` writes it)."""
    with open(LOCAL) as fh:
        profile = json.load(fh)
    profile[PLACEMENT_KEY] = dict(placement_record(roundtrip_ns), **{"class": placement_class})
    path = tmp_path / "local_slow.json"
    path.write_text(json.dumps(profile))
    return str(path)


def fabric_line(tmp_path, capsys, net, local, stats) -> str:
    out = tmp_path / "out"
    assert run([LIBRARY, "--fabric", f"{net}+{local}", "--library-stats", stats, "--output", str(out),
                "--no-plots"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "by local-host profile" in line]
    assert len(lines) == 1
    return lines[0]


def test_the_stats_header_s_placement_is_read(tmp_path, library_stats_text):
    stats = stats_with(library_stats_text, tmp_path, "placement slow (flag round trip 391 ns)")
    assert read_library_stats(stats)["placement"] == {"class": "slow", "roundtrip_ns": 391.0}
    assert read_library_stats(stats_with(library_stats_text, tmp_path, None))["placement"] is None
    assert read_library_stats(stats_with(library_stats_text, tmp_path, "placement not probed"))["placement"] == \
        {"class": "not probed", "roundtrip_ns": None}


@pytest.mark.parametrize("run_placement, warned", [
    ("placement slow (flag round trip 391 ns)", True),
    ("placement fast (flag round trip 87 ns)", False),
    ("placement disturbed (flag round trip 5210 ns)", False),
])
def test_a_profile_from_another_placement_than_the_run_s_is_warned_of_in_the_fabric_line(
        tmp_path, capsys, network_profile, library_stats_text, run_placement, warned):
    """The tests' profile holds no placement key: its class comes from its model's hw round trip (63 ns: fast),
    and the line says so. A slow run warns; a fast one does not; a disturbed probe has no placement to compare."""
    line = fabric_line(tmp_path, capsys, network_profile(tmp_path), LOCAL,
                       stats_with(library_stats_text, tmp_path, run_placement))
    assert "placement: the profile's fast (flag round trip 63 ns, from its model's hw round trip), the run's " \
           f"{run_placement.split(' ', 1)[1]}" in line
    assert ("WARNING: the profile was measured in the fast placement and the traced run ran in the slow one, so "
            "its collective prices are another placement's" in line) == warned
    assert ("WARNING" in line) == warned


def test_a_recorded_profile_placement_is_compared_and_a_run_without_one_is_said_unknown(
        tmp_path, capsys, network_profile, library_stats_text):
    net = network_profile(tmp_path)
    slow = profile_with(tmp_path, "slow", 388.0)
    line = fabric_line(tmp_path, capsys, net, slow,
                       stats_with(library_stats_text, tmp_path, "placement fast (flag round trip 90 ns)"))
    assert "placement: the profile's slow (flag round trip 388 ns), the run's fast (flag round trip 90 ns); " \
           "WARNING: the profile was measured in the slow placement and the traced run ran in the fast one" in line
    line = fabric_line(tmp_path, capsys, net, slow, stats_with(library_stats_text, tmp_path, None))
    assert "the run's not known (no placement in the stats header)" in line and "WARNING" not in line
    line = fabric_line(tmp_path, capsys, net, slow, stats_with(library_stats_text, tmp_path, "placement not probed"))
    assert "the run's not probed by the library (no placement)" in line and "WARNING" not in line
