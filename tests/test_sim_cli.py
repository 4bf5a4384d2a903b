"""`cxlsim simulate` end to end, run as a user would (`python -m cxlsim`)."""
import os
from pathlib import Path
import subprocess
import sys

import pytest

from cxlsim import config
from cxlsim.simulate import DEFAULT_SCENARIO, run
from cxlsim.errors import InputError


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "cxlsim", "simulate", "--quiet", *args],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def test_no_scenario_file_just_works(tmp_path):
    out = cli("--nodes", "8", "--preset", "ib-hdr", "--sizes", "1:4KiB", "--output", str(tmp_path / "w"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    header = next(line for line in lines if "Avg Latency(us)" in line)
    assert header.split()[:2] == ["#", "Size"]
    table = [line.split() for line in lines if line and not line.startswith("#")]
    assert [int(r[0]) for r in table] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert all(float(r[1]) > 1.0 for r in table)
    for name in ("config.yaml", "provenance.json", "latency.csv", "latency.json", "latency.png"):
        assert (tmp_path / "w" / name).exists()
    resolved = config.load(str(tmp_path / "w" / "config.yaml"))
    assert resolved.fabric.nodes == 8 and resolved.seed is not None
    # Every preset figure is written out, and re-running the resolved file gives the same table.
    assert resolved.fabric.links.bw_bytes_per_ns == 25.0 and resolved.fabric.nic.overhead_ns == 350.0
    again = cli(str(tmp_path / "w" / "config.yaml"), "--output", str(tmp_path / "w2"))
    assert again.returncode == 0 and (tmp_path / "w2" / "latency.csv").read_bytes() == \
        (tmp_path / "w" / "latency.csv").read_bytes()


def test_the_seed_given_is_recorded(tmp_path):
    """--seed lands in the resolved scenario and the provenance (the DES is deterministic: a re-run of the
    resolved scenario giving the same bytes is test_no_scenario_file_just_works's check)."""
    import json

    scenario = tmp_path / "no-plot.yaml"
    scenario.write_text("output:\n  plot: false\n")
    out = cli(str(scenario), "--nodes", "6", "--sizes", "1:64KiB", "--seed", "11", "--output", str(tmp_path / "a"))
    assert out.returncode == 0, out.stderr
    assert config.load(str(tmp_path / "a" / "config.yaml")).seed == 11
    assert json.loads((tmp_path / "a" / "provenance.json").read_text())["seed"] == 11


def test_scenario_file_and_analytic_engine(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\nengine: analytic\nfabric: {preset: eth-100g-roce, nodes: 64}\n"
                    "workload: {algorithm: ring, sizes: '1B:1MiB'}\noutput: {plot: false}\n")
    out = cli(str(path), "--output", str(tmp_path / "w"))
    assert out.returncode == 0, out.stderr
    assert "(analytic engine)" in out.stdout and "1 B-1 MiB ring" in out.stdout


def _bad(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return cli(str(path), "--output", str(tmp_path / "w"))


@pytest.mark.parametrize("text, message", [
    ("fabric: {preset: ib-xdr, nodes: 4}\n", "fabric.preset: unknown preset 'ib-xdr'"),
    ("fabric: {preset: ib-hdr, nodes: 4, links: {bandwidth: '-3 GB/s'}}\n",
     "fabric.links.bandwidth: expected a bandwidth like '25 GB/s', got '-3 GB/s'"),
    ("fabric: {preset: ib-hdr, nodes: 0}\n", "fabric.nodes: expected an integer >= 1, got 0"),
    ("fabric: {preset: ib-hdr, nodes: 4}\nworkload: {algorithm: tree}\n",
     "workload.algorithm: unknown allgather algorithm 'tree'"),
])
def test_bad_scenarios_exit_2_with_a_clear_message(tmp_path, text, message):
    out = _bad(tmp_path, text)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_disconnected_topology_file_exits_2(tmp_path):
    topo = tmp_path / "topo.yaml"
    topo.write_text("nodes:\n  - {name: a, kind: host}\n  - {name: b, kind: host}\n"
                    "  - {name: s1, kind: switch}\n  - {name: s2, kind: switch}\n"
                    "links:\n  - {a: a, b: s1}\n  - {a: b, b: s2}\n")
    out = _bad(tmp_path, f"fabric: {{preset: ib-hdr, nodes: 2, topology: '{topo}'}}\n")
    assert out.returncode == 2 and "disconnected" in out.stderr, out.stderr


def test_flag_errors_exit_2(tmp_path):
    assert cli("--nodes", "0", "--output", str(tmp_path / "w")).returncode == 2
    out = cli("--sizes", "lots", "--output", str(tmp_path / "w"))
    assert out.returncode == 2 and "size" in out.stderr


def test_run_reports_fallbacks_and_checks_payloads():
    cfg = config.with_overrides(config.from_dict(DEFAULT_SCENARIO),
                                {"fabric.nodes": 6, "workload.algorithm": "recursive_doubling",
                                 "workload.sizes": [8]})
    (row,) = run(cfg)
    assert row["algorithm"] == "bruck" and "fell back to bruck" in row["note"] and row["events"] > 0


def test_reduce_runs_by_auto_on_a_network_and_both_engines_agree():
    # 6 hosts: ranks 2 and 4 send to the root at once, so the DES and the form meet on the shared downlink.
    cfg = config.from_dict({"fabric": {"preset": "ib-hdr", "nodes": 6},
                            "workload": {"collective": "reduce", "sizes": [1024, 65536, 1 << 20]}})
    des = run(cfg)
    form = run(config.with_overrides(cfg, {"engine": "analytic"}))
    assert [r["algorithm"] for r in des] == ["binomial"] * 3 and des[0]["note"] == ""
    assert all("reduce_scatter_gather" in r["note"] for r in des[1:])  # MPICH's choice above 2 KiB, noted
    for a, b in zip(des, form):
        assert b["latency_us"] == pytest.approx(a["latency_us"], rel=1e-9)


@pytest.mark.parametrize("engine", ["analytic", "des"])
@pytest.mark.parametrize("collective", ["allgather", "broadcast", "alltoall"])
def test_a_zero_copy_row_says_what_its_latency_leaves_to_the_caller(collective, engine):
    from cxlsim.projection import ZERO_COPY_NOTE

    cfg = config.from_dict({"engine": engine, "fabric": {"preset": "cxl3-pool", "nodes": 4},
                            "workload": {"collective": collective, "algorithm": "cxl_pool_zero_copy",
                                         "sizes": [64, 1 << 20]}})
    rows = run(cfg)
    assert all(ZERO_COPY_NOTE in r["note"] for r in rows)
    copy = run(config.with_overrides(cfg, {"workload.algorithm": "cxl_pool"}))
    assert not any(ZERO_COPY_NOTE in r["note"] for r in copy)


def test_hierarchical_reports_the_leaders_fallback():
    cfg = config.with_overrides(config.from_dict(DEFAULT_SCENARIO),
                                {"fabric.nodes": 6, "fabric.ranks_per_node": 2, "workload.algorithm": "hierarchical",
                                 "workload.inter_algorithm": "recursive_doubling", "workload.sizes": [8]})
    for engine in ("des", "analytic"):
        (row,) = run(config.with_overrides(cfg, {"engine": engine}))
        assert row["algorithm"] == "hierarchical" and "leaders: recursive_doubling" in row["note"]


BLOCK_KERNELS = """# cxlsim simulate with the compiled emulator (and its primitives) unimportable
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith("cxlsim.emulator._") or name.startswith("cxlsim.emulator.primitives"):
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
from cxlsim.cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.startswith("cxlsim.emulator"))
print("emulator modules:", loaded)
sys.exit(code)
"""


@pytest.mark.parametrize("preset", ["cxl3-pool", "profile"])
def test_simulate_runs_without_the_compiled_extension(tmp_path, preset):
    if preset == "profile":
        preset = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "local_host_profile_np2.json")
    out = subprocess.run([sys.executable, "-c", BLOCK_KERNELS, "simulate", "--quiet", "--preset", preset,
                          "--nodes", "2", "--sizes", "1,64", "--output", str(tmp_path / "w")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "emulator modules:" in out.stdout and "_kernels" not in out.stdout


def test_the_docs_table_of_keys_is_the_presets_declarations():
    """docs/simulator.md shows which scenario keys each preset kind uses; it must say what the records declare."""
    import dataclasses
    import re

    from cxlsim.simulate import applies_to

    doc = (Path(__file__).resolve().parents[1] / "docs" / "simulator.md").read_text(encoding="utf-8")
    lines = [line for line in doc.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    kinds = [f"{k}s" for k in header[1:]]
    checked = set()
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not cells[0].startswith("`"):
            continue
        marked = {kind for kind, cell in zip(kinds, cells[1:]) if cell == "yes"}
        for pattern in re.findall(r"`([^`]+)`", cells[0]):
            key = pattern
            if pattern.endswith(".*"):  # a section: check one of its keys
                section = config.get(config.from_dict({"fabric": {"preset": "x", "nodes": 1}}), pattern[:-2])
                key = pattern[:-1] + dataclasses.fields(section)[0].metadata["key"]
            want = {"every preset"} if marked == set(kinds) else marked
            assert set(applies_to(key)) == want, (pattern, applies_to(key), want)
            checked.add(pattern)
    # and every scenario key is in it
    def leaves(cls, path=""):
        for f in dataclasses.fields(cls):
            key = f"{path}.{f.metadata['key']}" if path else f.metadata["key"]
            yield from leaves(f.metadata["section"], key) if "section" in f.metadata else [key]
    missing = [k for k in leaves(config.Scenario)
               if not any(k == p or p.endswith(".*") and k.startswith(p[:-1]) for p in checked)]
    assert not missing, missing


@pytest.mark.parametrize("collective", ["reduce", "scatter"])
def test_a_rooted_collective_takes_workload_root_and_both_engines_agree(collective):
    # 5 hosts, root 3: the DES run checks its payloads against root 3 (runner.verify: the root holds the sum, or
    # sent every block), so a root the run ignored would fail; on a star the time does not depend on the root.
    cfg = config.from_dict({"fabric": {"preset": "ib-hdr", "nodes": 5},
                            "workload": {"collective": collective, "sizes": [65536], "root": 3}})
    (des,) = run(cfg)
    (form,) = run(config.with_overrides(cfg, {"engine": "analytic"}))
    assert form["latency_us"] == pytest.approx(des["latency_us"], rel=1e-9)
    with pytest.raises(InputError, match="workload.root"):
        run(config.with_overrides(cfg, {"workload.root": 5}))
