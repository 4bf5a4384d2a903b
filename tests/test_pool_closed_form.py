"""The pool allgather's closed form (models/collectives/pool_forms.py) against the DES (issue 12, case 7).

Before it, the analytic engine drifted from the DES on switch trees: 64 hosts at 1 B, 4.21 us
against 5.70; 128 hosts, 10.96 against 18.03 (the polls' and flag stores' traffic at the device,
which the algebraic form left out). The form follows the transport's FIFO chain and snoop-filter
rules, so it equals the DES to rounding; the grid tests ask for 1%, as the issue does, and one test
pins the exactness.
"""
import dataclasses
import random

import pytest

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.models.collectives import runner
from cxlsim.models.collectives.pool_forms import PoolGeometry, geometry_of, pool_closed_form

ALGORITHMS = ("cxl_pool", "cxl_pool_zero_copy")
KiB, MiB = 1 << 10, 1 << 20


def levels(hosts, preset):
    """Switch levels as the CLI picks them: one switch while hosts and the device fit its ports."""
    return 1 if hosts + 1 <= preset.switch.max_ports else 2


def des_and_form(hosts, m, coherence, algorithm, preset="cxl3-pool", **kw):
    preset = get_cxl_preset(preset) if isinstance(preset, str) else preset
    kw.setdefault("switch_levels", levels(hosts, preset))
    t = CXLPoolTransport(preset, hosts, coherence=coherence, **kw)
    out = runner.run(t, "allgather", algorithm, m)
    runner.verify("allgather", hosts, runner.Context(), out.results)
    return out.latency_ns, pool_closed_form(geometry_of(t), m, coherence, zero_copy=algorithm == ALGORITHMS[1])


@pytest.mark.parametrize("coherence", list(Coherence))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("hosts", [16, 32])
def test_within_one_percent_of_the_des_on_a_tree_from_1_byte_to_1_mib(hosts, algorithm, coherence):
    for m in (1, 64, 1000, 4 * KiB, 64 * KiB, MiB):
        des, form = des_and_form(hosts, m, coherence, algorithm)
        assert form == pytest.approx(des, rel=0.01), (hosts, m)


@pytest.mark.parametrize("coherence", list(Coherence))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_within_one_percent_of_the_des_at_64_hosts(algorithm, coherence):
    for m in (1, 4 * KiB, 64 * KiB):
        des, form = des_and_form(64, m, coherence, algorithm)
        assert form == pytest.approx(des, rel=0.01), m


@pytest.mark.slow
@pytest.mark.parametrize("coherence", list(Coherence))
def test_within_one_percent_of_the_des_at_128_hosts(coherence):
    # The issue's other drift case (18.03 us in the DES, 10.96 by the algebraic form), at 1 B: eight leaves'
    # polls and flag stores queue at the device. Larger sizes at 128 hosts took 12 s a run; the 64-host test
    # covers them on the same two-level tree code path.
    des, form = des_and_form(128, 1, coherence, "cxl_pool")
    assert form == pytest.approx(des, rel=0.01)


def test_the_issues_cases_are_exact():
    # 64 hosts at 1 B: the DES's 5.70 us (the algebraic form said 4.21); 32 hosts: 2.64 us (2.40).
    for hosts, expect_us in ((64, 5.70), (32, 2.64)):
        des, form = des_and_form(hosts, 1, Coherence.HW, "cxl_pool")
        assert des / 1e3 == pytest.approx(expect_us, abs=0.005)
        assert form == pytest.approx(des, rel=1e-9)
    for coherence in Coherence:  # on a tree, the flush programs and the hw recalls, to rounding
        for m in (1, 4 * KiB):
            for algorithm in ALGORITHMS:
                des, form = des_and_form(20, m, coherence, algorithm)
                assert form == pytest.approx(des, rel=1e-9), (coherence, m, algorithm)


@pytest.mark.parametrize("coherence", list(Coherence))
def test_equals_the_des_on_one_switch_and_with_the_local_host_knobs(coherence):
    # Where the algebraic form was exact (P*b <= B, tests/test_sim_cxl.py) and where the devices
    # queue (13 hosts); a clflushopt acknowledged 120 ns after its issue and writes never acknowledged
    # before 700 ns; two devices and a small chunk interleave the blocks.
    base = get_cxl_preset("cxl3-pool")
    knobs = dataclasses.replace(base, host_path=dataclasses.replace(base.host_path, invalidate_ns=120.0,
                                                                    writeback_ns=700.0))
    for preset, hosts, kw in ((base, (1, 2, 5, 10, 13), {}), (knobs, (1, 3, 5), {}),
                              (base, (7,), {"devices": 2, "chunk_bytes": 256})):
        for p in hosts:
            for m in (0, 1, 1000, 65536):
                for algorithm in ALGORITHMS:
                    des, form = des_and_form(p, m, coherence, algorithm, preset, **kw)
                    assert form == pytest.approx(des, rel=1e-9), (preset.host_path, p, m, algorithm, kw)


def test_a_tree_with_several_devices_and_a_busy_uplink():
    # 30 hosts, 15 per leaf, 4 devices, 96 lines in flight per host: each leaf's uplink is the bottleneck.
    base = get_cxl_preset("cxl3-pool")
    wide = dataclasses.replace(base, host_path=dataclasses.replace(base.host_path, outstanding_lines=96))
    for coherence in Coherence:
        des, form = des_and_form(30, 1 << 18, coherence, "cxl_pool", wide, devices=4, switch_levels=2)
        assert form == pytest.approx(des, rel=1e-9), coherence
    des, form = des_and_form(17, 100, Coherence.HW, "cxl_pool", devices=2, switch_levels=2)
    assert form == pytest.approx(des, rel=1e-9)


def test_random_pools_equal_the_des():
    # Presets, modes, one switch or a tree, 1-4 devices, chunks of 64 B-6.4 KiB, the host-path knobs
    # and outstanding lines drawn at random (seeded): ties between ranks, re-polls, busy uplinks.
    rng = random.Random(12)
    for _ in range(100):
        preset = get_cxl_preset(rng.choice(["cxl2-pool", "cxl3-pool"]))
        levels = rng.choice([1, 2]) if preset.max_switch_levels > 1 else 1
        devices = rng.choice([1, 1, 2, 3, 4])
        hosts = rng.randint(1, 15 - devices if levels == 1 else 24)
        preset = dataclasses.replace(preset, host_path=dataclasses.replace(
            preset.host_path, invalidate_ns=rng.choice([0.0, 0.0, 50.0, 300.0]),
            writeback_ns=rng.choice([0.0, 0.0, 100.0, 900.0]), outstanding_lines=rng.choice([8, 48, 96, 400])))
        kw = {"switch_levels": levels, "devices": devices, "chunk_bytes": 64 * rng.choice([1, 4, 16, 64, 100])}
        m = rng.choice([0, 1, 63, 65, 500, 4096, 5000, 20000])
        coherence, algorithm = rng.choice(preset.coherence_modes), rng.choice(ALGORITHMS)
        des, form = des_and_form(hosts, m, coherence, algorithm, preset, **kw)
        assert form == pytest.approx(des, rel=1e-9), (preset.name, coherence, algorithm, hosts, m, kw)


def test_the_geometry_is_the_transports():
    preset = get_cxl_preset("cxl3-pool")
    for hosts, kw in ((5, {}), (40, {"switch_levels": 2, "devices": 3, "chunk_bytes": 1024})):
        t = CXLPoolTransport(preset, hosts, coherence="flush", **kw)
        geo, fig = geometry_of(t), t.figures()
        assert geo == PoolGeometry.build(preset, hosts, **kw)
        assert (geo.path_ns, 2 * geo.path_ns + geo.media_ns, geo.host_bw, geo.device_bw * geo.devices) == \
            (fig.path_ns, fig.load_ns, fig.host_bw_bytes_per_ns, fig.device_bw_bytes_per_ns)
        assert list(geo.leaf_of or [0] * hosts) == list(t.leaf_of)
        if geo.leaf_of:
            assert max(geo.leaf_of.count(k) for k in set(geo.leaf_of)) == fig.leaf_hosts


def test_bad_inputs_name_the_argument():
    geo = PoolGeometry.build(get_cxl_preset("cxl3-pool"), 4)
    with pytest.raises(InputError, match="coherence: expected one of hw, flush, got 'mesi'"):
        pool_closed_form(geo, 64, "mesi")
    with pytest.raises(InputError, match="size: expected an integer >= 0 bytes, got -1"):
        pool_closed_form(geo, -1, Coherence.HW)
