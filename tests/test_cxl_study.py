"""Issue 4, the study side: pool algorithms in the registry, `cxlsim simulate` on a CXL preset,
the CXL-vs-network experiment (analytic mode, tiny grid) and the emulator against the DES."""
import csv
import subprocess
import sys

import pytest

from cxlsim import config
from cxlsim.cli import main as cli_main
from cxlsim.errors import InputError
from cxlsim.fabric import Environment, NetworkTransport, Placement, build, get_preset, star
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.models.collectives import analytic, base, runner, selectors
from cxlsim.simulate import resolve_cxl, resolved, run


# ---------------------------------------------------------------- registration and skipping

def test_pool_algorithms_are_always_registered_and_marked():
    # No import of cxl_pool here: importing the collectives package registers it.
    for name in ("cxl_pool", "cxl_pool_zero_copy"):
        assert base.ALGORITHMS[("allgather", name)].transport == "pool"
    assert base.ALGORITHMS[("allgather", "ring")].transport == "network"
    network = base.network_algorithms()
    assert ("allgather", "ring") in network and ("allreduce", "ring") in network
    assert not any(name.startswith("cxl_pool") for _, name in network)
    assert "cxl_pool" in base.names("allgather") and "cxl_pool" not in base.names("allgather", "network")
    assert base.names("allgather", "pool") == ["cxl_pool", "cxl_pool_zero_copy"]
    with pytest.raises(ValueError, match="transport: expected one of network, pool, got 'carrier-pigeon'"):
        base.register("allgather", "x", transport="carrier-pigeon")


def test_selectors_never_pick_a_pool_algorithm():
    for library in ("mpich", "ompi"):
        for p in (2, 3, 8, 16, 33, 64, 300):
            for m in (1, 1024, 65536, 1 << 20):
                name, _ = selectors.select(library, "allgather", p, m)
                assert base.ALGORITHMS[("allgather", name)].transport == "network"


def test_a_transport_mismatch_is_a_clear_error():
    net = NetworkTransport(build(star(4), get_preset("ib-hdr"), Environment()), Placement(4, 1))
    with pytest.raises(InputError, match="cxl_pool needs a CXL pool transport"):
        runner.run(net, "allgather", "cxl_pool", 64)
    pool = CXLPoolTransport(get_cxl_preset("cxl3-pool"), 4, coherence="hw")
    with pytest.raises(InputError, match="ring exchanges messages and needs a network; a CXL pool fabric runs "
                                         "only cxl_pool, cxl_pool_zero_copy"):
        runner.run(pool, "allgather", "ring", 64)
    cm = analytic.CostModel.from_network(build(star(4), get_preset("ib-hdr"), Environment()), 65536)
    with pytest.raises(InputError, match="cxl_pool runs on a CXL pool; its closed form is cxl_pool.cxl_pool_closed_form"):
        analytic.cost("allgather", "cxl_pool", 4, 64, cm, runner.Context())
    # The pool transport says what it is; the network one is the default kind.
    assert pool.kind == "pool" and net.kind == "network"


# ---------------------------------------------------------------- simulate on a CXL preset

def _scenario(preset="cxl3-pool", nodes=4, engine="des", algorithm="cxl_pool", sizes=(1, 64, 4096, 65536, 1 << 20),
              **cxl):
    return config.from_dict({"engine": engine,
                             "fabric": {"preset": preset, "nodes": nodes, "cxl": cxl},
                             "workload": {"algorithm": algorithm, "sizes": list(sizes)}})


@pytest.mark.parametrize("preset, coherence, nodes, algorithm", [
    ("cxl3-pool", "hw", 8, "cxl_pool"), ("cxl3-pool", "flush", 5, "cxl_pool"),
    ("cxl3-pool", "hw", 4, "cxl_pool_zero_copy"), ("cxl2-pool", "flush", 4, "cxl_pool"),
    ("cxl3-pool", "hw", 10, "auto")])
def test_des_equals_analytic_on_an_uncongested_pool(preset, coherence, nodes, algorithm):
    des = run(_scenario(preset, nodes, "des", algorithm, coherence=coherence))
    ana = run(_scenario(preset, nodes, "analytic", algorithm, coherence=coherence))
    for d, a in zip(des, ana):
        assert d["algorithm"] == a["algorithm"] == ("cxl_pool" if algorithm == "auto" else algorithm)
        assert d["latency_us"] == pytest.approx(a["latency_us"], rel=1e-9), d["size_bytes"]
        assert d["events"] > 0 and a["events"] == 0
    # More bytes, more time; flush costs more than hw at the same point.
    assert [r["latency_us"] for r in des] == sorted(r["latency_us"] for r in des)


def test_cxl_settings_are_resolved_and_checked():
    setup = resolve_cxl(_scenario("cxl2-pool").fabric)
    assert (setup.coherence, setup.switch_levels, setup.devices) == ("flush", 1, 1)
    assert resolve_cxl(_scenario(nodes=16).fabric).switch_levels == 2    # 16 hosts + 1 device > 16 ports
    assert resolve_cxl(_scenario(nodes=15).fabric).switch_levels == 1
    # load_latency scales every latency figure: the one-level load equals it, and b = 48 * 64 B / L.
    fig = CXLPoolTransport(resolve_cxl(_scenario(load_latency="500 ns").fabric).preset, 2, coherence="hw").figures()
    assert fig.load_ns == pytest.approx(500.0) and fig.host_bw_bytes_per_ns == pytest.approx(48 * 64 / 500.0)
    # The resolved config writes the choices out and re-resolves to the same pool.
    out = resolved(_scenario(nodes=16, load_latency="400 ns", outstanding_lines=96))
    assert (out.fabric.cxl.coherence, out.fabric.cxl.switch_levels, out.fabric.cxl.outstanding_lines) == ("hw", 2, 96)
    assert out.fabric.cxl.load_latency_ns == pytest.approx(400.0)
    assert resolve_cxl(out.fabric) == resolve_cxl(_scenario(nodes=16, load_latency="400 ns",
                                                           outstanding_lines=96).fabric)


@pytest.mark.parametrize("data, message", [
    ({"fabric": {"preset": "cxl2-pool", "nodes": 4, "cxl": {"coherence": "hw"}}},
     "fabric.cxl.coherence: cxl2-pool .CXL 2.0. supports only flush, got 'hw'"),
    ({"fabric": {"preset": "cxl2-pool", "nodes": 4, "cxl": {"switch_levels": 2}}},
     "fabric.cxl.switch_levels: cxl2-pool .CXL 2.0. allows at most 1 level"),
    ({"fabric": {"preset": "cxl2-pool", "nodes": 16}},
     "fabric.nodes: 16 on 1 switch level.s.: switch ports: 16 hosts . 1 device ports need 17 x16 ports"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 226}}, "fabric.nodes: 226 on 2 switch level.s.: .*at most 225 hosts"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 4, "ranks_per_node": 2}},
     "fabric.ranks_per_node: the CXL pool model runs one rank per host; expected 1, got 2"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 4, "links": {"bandwidth": "25 GB/s"}}},
     "fabric.links.bandwidth: a network setting, but cxl3-pool is a CXL pool"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 4, "topology": "fat_tree"}},
     "fabric.topology: a CXL pool builds its own switch"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 4}, "workload": {"algorithm": "bruck"}},
     "workload.algorithm: bruck exchanges messages and needs a network"),
    ({"fabric": {"preset": "cxl3-pool", "nodes": 4}, "workload": {"collective": "allreduce"}},
     "workload.collective: a CXL pool runs only allgather"),
    ({"fabric": {"preset": "ib-hdr", "nodes": 4}, "workload": {"algorithm": "cxl_pool"}},
     "workload.algorithm: cxl_pool needs a CXL pool transport"),
    ({"fabric": {"preset": "cxl9-pool", "nodes": 4}},
     "fabric.preset: unknown preset 'cxl9-pool'; expected one of .*ib-ndr, cxl2-pool, cxl3-pool"),
])
def test_bad_cxl_scenarios_name_the_key(data, message):
    with pytest.raises(InputError, match=message):
        run(config.from_dict(data))


@pytest.mark.parametrize("data, message", [
    ({"cxl": {"switch_levels": 3}}, "fabric.cxl.switch_levels: expected 1 or 2, got 3"),
    ({"cxl": {"coherence": "snoopy"}}, "fabric.cxl.coherence: expected 'hw' or 'flush', got 'snoopy'"),
    ({"cxl": {"chunk": "100 B"}}, "fabric.cxl.chunk: expected a multiple of 64 B"),
    ({"cxl": {"devices": 0}}, "fabric.cxl.devices: expected an integer >= 1, got 0"),
    ({"cxl": {"load_latency": "fast"}}, "fabric.cxl.load_latency: expected a time like '250 ns', got 'fast'"),
])
def test_bad_cxl_keys_are_config_errors(data, message):
    with pytest.raises(config.ConfigError, match=message):
        config.from_dict({"fabric": {"preset": "cxl3-pool", "nodes": 4, **data}})


def test_simulate_cli_on_a_cxl_preset_both_engines(tmp_path, capsys):
    tables = {}
    for engine in ("des", "analytic"):
        out = tmp_path / engine
        code = cli_main(["simulate", "--quiet", "--preset", "cxl3-pool", "--nodes", "6", "--coherence", "flush",
                         "--algorithm", "cxl_pool", "--sizes", "1:64KiB", "--engine", engine,
                         "--output", str(out), "--seed", "3"])
        assert code == 0
        text = capsys.readouterr().out
        assert "# fabric: cxl3-pool, flush coherence, 1 device(s), 1 switch level(s), 6 hosts x 1 rank" in text
        with open(out / "latency.csv") as fh:
            tables[engine] = [(int(r["size_bytes"]), float(r["latency_us"])) for r in csv.DictReader(fh)]
        assert (out / "latency.png").exists()
        again = config.load(str(out / "config.yaml"))
        assert again.fabric.cxl.coherence == "flush" and again.fabric.cxl.switch_levels == 1
    assert [s for s, _ in tables["des"]] == [1 << k for k in range(17)]
    for (s, d), (_, a) in zip(tables["des"], tables["analytic"]):
        assert d == pytest.approx(a, rel=1e-9), s
    # A bad combination exits 2 with the key named.
    assert cli_main(["simulate", "--quiet", "--preset", "cxl2-pool", "--coherence", "hw", "--nodes", "2",
                     "--output", str(tmp_path / "bad")]) == 2
    assert "fabric.cxl.coherence: cxl2-pool (CXL 2.0) supports only flush" in capsys.readouterr().err


def test_simulate_cli_runs_as_a_user_would(tmp_path):
    out = subprocess.run([sys.executable, "-m", "cxlsim", "simulate", "--quiet", "--preset", "cxl3-pool",
                          "--nodes", "17", "--sizes", "4KiB", "--output", str(tmp_path / "w")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "hw coherence, 1 device(s), 2 switch level(s), 17 hosts" in out.stdout
