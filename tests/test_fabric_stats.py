"""Per-port and pool statistics of a DES run (cxlsim.fabric.stats, `cxlsim simulate --stats`), each against
a hand-computed figure: bytes through every port, utilisation, peak queues, the snoop filter's counts."""
import csv
import json

import pytest

from cxlsim import cli
from cxlsim.fabric import stats, topology
from cxlsim.fabric.cxl_presets import CXL_PRESETS
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network import build
from cxlsim.fabric.presets import PRESETS
from cxlsim.fabric.transport import NetworkTransport
from cxlsim.fabric.placement import Placement
from cxlsim.models.collectives import runner

KIB = 1024


def _network(nodes):
    return build(topology.star(nodes), PRESETS["ib-hdr"], Environment())


def test_ring_allgather_moves_p_minus_1_blocks_through_every_port():
    p, n = 4, 64 * KIB
    net = _network(p)
    transport = NetworkTransport(net, Placement(p, 1), 16 * KIB)
    outcome = runner.run(transport, "allgather", "ring", n)
    run = stats.collect(transport)
    assert run.elapsed_ns == pytest.approx(outcome.latency_ns)  # one call from time 0
    assert {s.component for s in run.ports} == {"NIC", "switch port"} and len(run.ports) == 2 * p
    for s in run.ports:
        port = next(pt for link in net.links.values() for pt in link.ports.values() if pt.name == s.port)
        assert s.bytes == (p - 1) * n and s.chunks == (p - 1) * n // (16 * KIB)
        assert s.busy_ns == pytest.approx(s.bytes * port.ns_per_byte)
        assert s.utilisation == pytest.approx(s.busy_ns / run.elapsed_ns) and 0 < s.utilisation <= 1


def test_peak_queues_of_one_stream_and_of_an_incast():
    """A host that sends k chunks queues k - 1 behind the first on its NIC; two hosts sending k chunks each to
    a third at once (equal link speeds, cut-through) leave the switch's egress k chunks behind at worst."""
    chunk, k = 4 * KIB, 8
    net = _network(3)
    done = []
    net.transfer(0, 2, k * chunk, chunk, done.append)
    net.transfer(1, 2, k * chunk, chunk, done.append)
    net.env.run()
    assert len(done) == 2
    run = {s.port: s for s in stats.collect(NetworkTransport(net, Placement(3, 1))).ports}
    assert run["h0->sw0"].peak_queue_bytes == pytest.approx((k - 1) * chunk)
    assert run["h1->sw0"].peak_queue_bytes == pytest.approx((k - 1) * chunk)
    assert run["sw0->h2"].bytes == 2 * k * chunk
    assert run["sw0->h2"].peak_queue_bytes == pytest.approx(k * chunk)
    assert run["sw0->h0"].bytes == 0 and run["sw0->h0"].peak_queue_bytes == 0


@pytest.mark.parametrize("lines", [262144, 16])
def test_pool_counts_match_the_snoop_filter_and_the_data_path(lines):
    p, n = 4, 4 * KIB
    transport = CXLPoolTransport(CXL_PRESETS["cxl3-pool"], hosts=p, coherence="hw", snoop_filter_lines=lines)
    runner.run(transport, "allgather", "cxl_pool", n)
    run = stats.collect(transport)
    sf = transport.snoop_filter
    assert (run.pool.bisnp, run.pool.recalls, run.pool.evictions, run.pool.eviction_bisnp) == \
        (sf.bisnp, sf.recalls, sf.evictions, sf.eviction_bisnp)
    assert run.pool.bisnp >= p  # every host's flag line is recalled at least once
    assert (run.pool.evictions > 0) == (lines < p * n // 64)  # a filter smaller than the data evicts
    devices = [s for s in run.ports if s.component == "device"]
    hosts = [s for s in run.ports if s.component == "host port"]
    # Every chunk passes its host's port and one device: the two totals are the devices' own count.
    assert sum(s.bytes for s in devices) == sum(s.bytes for s in hosts) == run.pool.device_bytes
    # Each host writes its block and reads every block (its own included, copy mode): (1 + p) * n, plus flags.
    assert all((1 + p) * n <= s.bytes < (1 + p) * n + 64 * 2 * p for s in hosts)
    assert run.pool.polls == transport.polls


def test_flush_mode_has_no_snoop_filter_counts():
    transport = CXLPoolTransport(CXL_PRESETS["cxl2-pool"], hosts=3, coherence="flush")
    runner.run(transport, "allgather", "cxl_pool", 256)
    pool = stats.collect(transport).pool
    assert pool.coherence == "flush" and pool.bisnp is None and pool.evictions is None and pool.device_bytes > 0


def test_simulate_stats_prints_the_summary_and_writes_every_port(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(["simulate", "--preset", "ib-hdr", "--nodes", "4", "--sizes", "64KiB", "--algorithm", "ring",
                     "--stats", "--output", str(out), "--quiet"])
    text = capsys.readouterr().out
    assert code == 0
    assert "# statistics per size (DES)" in text
    line = [x for x in text.splitlines() if x.startswith("65536 ")][-1]  # the stats line
    assert "(NIC)" in line and f"{3 * 64 * KIB:,}" in line  # the ring's 3 blocks per port
    rows = list(csv.DictReader(open(out / "stats.csv")))
    assert len(rows) == 8 and {int(r["bytes"]) for r in rows} == {3 * 64 * KIB}
    doc = json.loads((out / "stats.json").read_text())
    assert doc[0]["size_bytes"] == 65536 and doc[0]["pool"] is None and len(doc[0]["ports"]) == 8

    code = cli.main(["simulate", "--preset", "cxl3-pool", "--nodes", "4", "--sizes", "4KiB", "--stats",
                     "--output", str(tmp_path / "pool"), "--quiet"])
    text = capsys.readouterr().out
    assert code == 0 and "BISnp" in text and "SF evict." in text
    assert json.loads((tmp_path / "pool" / "stats.json").read_text())[0]["pool"]["coherence"] == "hw"


def test_stats_need_the_des(capsys):
    code = cli.main(["simulate", "--nodes", "4", "--sizes", "1KiB", "--engine", "analytic", "--stats"])
    err = capsys.readouterr().err
    assert code == 2 and "--stats: " in err and "engine des" in err and "Traceback" not in err


def test_simulate_stats_on_pods_lists_the_network_and_every_pod(tmp_path, capsys):
    scenario = tmp_path / "pods.yaml"
    scenario.write_text("engine: des\nfabric:\n  preset: cxl-pods\n  nodes: 8\n  pods:\n    pool: cxl3-pool\n"
                        "    hosts: 4\nworkload:\n  collective: allgather\n  algorithm: pods\n  sizes: [4096]\n")
    code = cli.main(["simulate", str(scenario), "--stats", "--output", str(tmp_path / "out"), "--quiet"])
    text = capsys.readouterr().out
    assert code == 0 and "# statistics per size (DES)" in text and "BISnp" in text
    doc = json.loads((tmp_path / "out" / "stats.json").read_text())
    names = {port["port"] for port in doc[0]["ports"]}
    assert any(n.startswith("pod0.") for n in names) and any(n.startswith("pod1.") for n in names)
    assert any(not n.startswith("pod") for n in names)  # the network between the pods
    assert doc[0]["pool"]["coherence"] == "hw"
