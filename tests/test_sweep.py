"""Sweeps (cxlsim.sweep) and their plots (cxlsim.plot): expansion, errors, interruption, resume, MPI."""
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from cxlsim import config, sweep
from cxlsim.cli import main as cli_main
from cxlsim.errors import InputError

ANALYTIC = """\
name: a
engine: analytic
fabric: {preset: ib-hdr, nodes: 4}
workload: {algorithm: ring, sizes: [1 KiB, 1 MiB]}
sweep:
  vary:
    fabric.nodes: [2, 4, 8]
"""

# 24 DES points of 0.1-0.5 s each (64 ranks, 4 KiB chunks): long enough to interrupt mid-run.
DES = """\
name: d
seed: 5
fabric: {preset: ib-hdr, nodes: 64}
workload: {algorithm: ring, sizes: [32 KiB, 64 KiB], chunk: 4 KiB}
sweep:
  vary:
    fabric.links.latency: [100 ns, 120 ns, 140 ns, 160 ns, 180 ns, 200 ns]
    fabric.nic.overhead: [300 ns, 350 ns]
  workers: 2
"""
DES_POINTS = 24


def base(**fabric):
    return config.from_dict({"engine": "analytic", "fabric": {"preset": "ib-hdr", "nodes": 4, **fabric},
                             "workload": {"algorithm": "ring", "sizes": [1024, 1 << 20]}})


def sweep_cli(*args, timeout=120, **popen):
    return subprocess.run([sys.executable, "-m", "cxlsim", "sweep", *args], capture_output=True, text=True,
                          timeout=timeout, **popen)


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def csv_rows(path):
    """Every line of a sweep CSV, checked to have as many fields as the header."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows and all(len(r) == len(rows[0]) for r in rows), "a partial row"
    return rows


def point_files(ws):
    """Finished point files; an atomic write's temporary (.tmp-*ID.json) may vanish while we list."""
    return {name: (ws / "points" / name).read_bytes() for name in os.listdir(ws / "points")
            if name.endswith(".json") and not name.startswith(".tmp-")}


# ---------------------------------------------------------------- expansion

def test_factorial_expansion_order_values_and_one_size_per_point():
    points = sweep.expand(base(), [("fabric.nodes", (2, 4, 8)), ("fabric.preset", ("ib-hdr", "eth-100g-roce"))])
    assert len(points) == 3 * 2 * 2
    assert [p.index for p in points] == list(range(12))
    assert [dict(p.values) for p in points[:4]] == [
        {"fabric.nodes": 2, "fabric.preset": "ib-hdr", "workload.sizes": 1024},
        {"fabric.nodes": 2, "fabric.preset": "ib-hdr", "workload.sizes": 1 << 20},
        {"fabric.nodes": 2, "fabric.preset": "eth-100g-roce", "workload.sizes": 1024},
        {"fabric.nodes": 2, "fabric.preset": "eth-100g-roce", "workload.sizes": 1 << 20}]
    last = points[-1].scenario
    assert (last.fabric.nodes, last.fabric.preset, last.workload.sizes_bytes) == (8, "eth-100g-roce", (1 << 20,))
    assert last.seed == points[-1].seed and len({p.seed for p in points}) == 12
    assert len({p.point_id for p in points}) == 12


def test_values_are_compared_in_internal_units():
    points = sweep.expand(base(), [("fabric.links.bandwidth", ("25 GB/s", "400 Gb/s"))])
    assert [dict(p.values)["fabric.links.bandwidth"] for p in points] == [25.0, 25.0, 50.0, 50.0]
    with pytest.raises(InputError, match=r"fabric.links.bandwidth: the value 25.0 is given twice"):
        sweep.expand(base(), [("fabric.links.bandwidth", ("25 GB/s", "200 Gb/s"))])  # the same bandwidth


def test_sizes_axis_flattens_ranges_and_lists():
    points = sweep.expand(base(), [("workload.sizes", ("1KiB:4KiB", 8192)), ("fabric.links.latency", ("1 us",))])
    assert [dict(p.values)["workload.sizes"] for p in points] == [1024, 2048, 4096, 8192]
    assert [dict(p.values)["fabric.links.latency"] for p in points] == [1000.0] * 4


def test_seed_depends_only_on_the_point_and_the_base_seed():
    a = sweep.expand(base(), [("fabric.nodes", (2, 4)), ("fabric.preset", ("ib-hdr", "ib-ndr"))])
    b = sweep.expand(base(), [("fabric.preset", ("ib-ndr", "ib-hdr")), ("fabric.nodes", (4, 2))])
    seeds = lambda pts: {json.dumps(dict(p.values), sort_keys=True): (p.seed, p.point_id) for p in pts}
    assert seeds(a) == seeds(b) and [p.index for p in a] == [p.index for p in b]
    assert [dict(p.values) for p in a] != [dict(p.values) for p in b]  # the order did change
    seeded = sweep.expand(config.with_overrides(base(), {"seed": 9}), [("fabric.nodes", (2, 4))])
    assert {p.seed for p in seeded}.isdisjoint({p.seed for p in a})
    # the documented rule, computed independently: SHA-256 of the canonical JSON, top 63 bits
    import hashlib
    key = '{"fabric.nodes":2,"workload.sizes":1024}'
    assert seeded[0].seed == int.from_bytes(hashlib.sha256(f"9|{key}".encode()).digest()[:8], "big") >> 1


def test_example_sweep_file_expands():
    path = os.path.join(os.path.dirname(__file__), "..", "experiments", "configs", "sweep_network_allgather.yaml")
    cfg = sweep.load(path)
    points = sweep.expand(sweep.base_scenario(cfg), cfg.sweep.vary)
    assert len(points) == 2 * 4 * 2 and cfg.sweep.executor == "local"
    assert dict(points[-1].values) == {"fabric.preset": "eth-100g-roce", "fabric.nodes": 32, "workload.sizes": 1 << 20}


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("axes, message", [
    ([("fabric.nodez", (2,))], r"sweep fabric.nodez: unknown key \(did you mean fabric.nodes\?\); "
                               r"expected one of name, engine, fabric.preset, .*fabric.nodes"),
    ([("fabric.nodes", (2, "abc"))], r"sweep fabric.nodes='abc': fabric.nodes: expected an integer >= 1, got 'abc'"),
    ([("fabric.links.latency", ("1 us", "fast"))],
     r"fabric.links.latency: expected a time like '250 ns', got 'fast'"),
    ([("seed", (1, 2))], r"sweep seed: cannot be varied"),
    ([("output.dir", ("x",))], r"sweep output.dir: cannot be varied"),
    ([("fabric.nodes", (2, 2))], r"fabric.nodes: the value 2 is given twice"),
    ([("fabric.nodes", ())], r"fabric.nodes: no values"),
])
def test_unknown_and_ill_typed_keys_are_input_errors(axes, message):
    with pytest.raises(InputError, match=message):
        sweep.expand(base(), axes)


@pytest.mark.parametrize("text, message", [
    ("fabric.nodes", "expected KEY=V1,V2,... like fabric.nodes=4,8,16"),
    ("fabric.nodes=", "expected KEY=V1,V2,..."),
    ("fabric.nodes=2,,4", "an empty value"),
])
def test_bad_vary_flags(text, message):
    with pytest.raises(InputError, match=message):
        sweep.parse_vary(text)


def test_vary_values_are_read_as_yaml():
    assert sweep.parse_vary("fabric.nodes=4, 8") == ("fabric.nodes", (4, 8))
    assert sweep.parse_vary("fabric.links.bandwidth=25 GB/s,200Gb/s") == \
        ("fabric.links.bandwidth", ("25 GB/s", "200Gb/s"))


@pytest.mark.parametrize("section, message", [
    ("sweep: {varry: {fabric.nodes: [2]}}", "sweep.varry: unknown key; expected one of vary, executor, workers"),
    ("sweep: {vary: [fabric.nodes]}", "sweep.vary: expected a mapping of dotted keys to lists of values"),
    ("sweep: {vary: {fabric.nodes: [2]}, executor: slurm}", "sweep.executor: expected 'local' or 'mpi', got 'slurm'"),
    ("sweep: {vary: {fabric.nodes: [2]}, workers: 0}", "sweep.workers: expected an integer >= 1, got 0"),
    ("sweep: {vary: {fabric.nodes: [2, -1]}}", "fabric.nodes: expected an integer >= 1, got -1"),
])
def test_bad_sweep_sections_exit_2_with_a_clear_message(tmp_path, section, message):
    path = write(tmp_path, "fabric: {preset: ib-hdr, nodes: 4}\nengine: analytic\n" + section + "\n")
    out = sweep_cli(path, "--output", str(tmp_path / "w"), "--quiet", timeout=60)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_cli_errors_name_the_flag(tmp_path, capsys):
    path = write(tmp_path, ANALYTIC)
    assert cli_main(["sweep", path, "--vary", "fabric.nodes=2,x", "--output", str(tmp_path / "w")]) == 2
    assert "sweep fabric.nodes='x': fabric.nodes: expected an integer >= 1, got 'x'" in capsys.readouterr().err
    assert cli_main(["sweep", path, "--workers", "0", "--output", str(tmp_path / "w")]) == 2
    assert "--workers: expected an integer >= 1, got 0" in capsys.readouterr().err
    assert cli_main(["sweep", str(tmp_path), "--resume"]) == 2
    assert "a directory without sweep.yaml" in capsys.readouterr().err


# ---------------------------------------------------------------- workspace (analytic: in-process)

def test_analytic_sweep_runs_in_process_and_csv_is_tidy(tmp_path, capsys):
    import pandas as pd

    path = write(tmp_path, ANALYTIC)
    ws = tmp_path / "w"
    assert cli_main(["sweep", path, "--vary", "fabric.preset=ib-hdr,eth-100g-roce", "--output", str(ws)]) == 0
    assert "# sweep: 12 points, 0 already finished, 12 run, 0 failed" in capsys.readouterr().out
    frame = pd.read_csv(ws / "sweep.csv")
    assert list(frame.columns) == ["point", "point_id", "seed", "fabric.nodes", "fabric.preset", "workload.sizes",
                                   "size_bytes", "latency_us", "algorithm", "note", "engine", "events", "error"]
    assert len(frame) == 12 and frame["point"].tolist() == list(range(12))
    assert (frame["size_bytes"] == frame["workload.sizes"]).all() and frame["error"].isna().all()
    # every row is what `cxlsim simulate` projects for that point
    from cxlsim.simulate import run
    row = frame[(frame["fabric.nodes"] == 8) & (frame["fabric.preset"] == "eth-100g-roce")
                & (frame["workload.sizes"] == 1 << 20)].iloc[0]
    direct = run(config.with_overrides(base(preset="eth-100g-roce", nodes=8), {"workload.sizes": [1 << 20]}))
    assert row["latency_us"] == direct[0]["latency_us"] and row["algorithm"] == "ring"
    prov = json.loads((ws / "provenance.json").read_text())
    for key in ("seed", "python", "numpy", "simpy", "cxlsim", "git_commit", "seed_rule", "axes"):
        assert key in prov
    record = json.loads((ws / "points" / f"{frame['point_id'][0]}.json").read_text())
    assert record["pid"] == prov["pid"]  # analytic points ran in the sweep's own process
    assert record["resolved"]["fabric"]["links"]["bandwidth"] == "25.0 GB/s" and record["seed"] == frame["seed"][0]
    assert config.load(str(ws / "sweep.yaml"), sweep.SweepScenario).sweep.vary == \
        (("fabric.nodes", (2, 4, 8)), ("fabric.preset", ("ib-hdr", "eth-100g-roce")))


def test_same_sweep_twice_gives_byte_identical_csv(tmp_path):
    path = write(tmp_path, ANALYTIC)
    for d in ("a", "b"):
        assert cli_main(["sweep", path, "--output", str(tmp_path / d)]) == 0
    assert (tmp_path / "a" / "sweep.csv").read_bytes() == (tmp_path / "b" / "sweep.csv").read_bytes()


def test_workspace_guards(tmp_path, capsys):
    import fcntl

    path = write(tmp_path, ANALYTIC)
    ws = tmp_path / "w"
    assert cli_main(["sweep", path, "--output", str(ws)]) == 0
    assert cli_main(["sweep", path, "--output", str(ws)]) == 2
    assert "already holds a sweep; pass --resume" in capsys.readouterr().err
    other = write(tmp_path, ANALYTIC.replace("ib-hdr", "ib-ndr"), "other.yaml")
    assert cli_main(["sweep", other, "--output", str(ws), "--resume"]) == 2
    assert "another base scenario (fabric.preset: 'ib-hdr' there, 'ib-ndr' here)" in capsys.readouterr().err
    with open(ws / ".lock", "a") as fh:  # a sweep that is still running holds this lock
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert cli_main(["sweep", str(ws), "--resume"]) == 2
        assert "another sweep is running in it" in capsys.readouterr().err
    assert cli_main(["sweep", str(ws), "--resume"]) == 0
    assert "6 points, 6 already finished, 0 run" in capsys.readouterr().out


def test_extend_with_more_values_runs_only_the_new_points(tmp_path, capsys):
    path = write(tmp_path, ANALYTIC)
    ws = tmp_path / "w"
    assert cli_main(["sweep", path, "--output", str(ws)]) == 0
    before = point_files(ws)
    capsys.readouterr()
    assert cli_main(["sweep", path, "--vary", "fabric.nodes=2,4,8,16", "--output", str(ws), "--extend"]) == 0
    assert "8 points, 6 already finished, 2 run" in capsys.readouterr().out
    after = point_files(ws)
    assert all(after[name] == data for name, data in before.items()) and len(after) == 8
    assert len(csv_rows(ws / "sweep.csv")) == 9


def test_failed_points_are_recorded_exit_1_and_run_again_on_resume(tmp_path, capsys):
    path = write(tmp_path, ANALYTIC.replace("algorithm: ring", "algorithm: neighbor_exchange")
                 .replace("[2, 4, 8]", "[3, 4]"))
    ws = tmp_path / "w"
    assert cli_main(["sweep", path, "--output", str(ws)]) == 1
    captured = capsys.readouterr()
    assert "2 of 4 points failed (first: point 0" in captured.err and "needs an even P" in captured.err
    rows = csv_rows(ws / "sweep.csv")
    error = rows[0].index("error")
    assert [bool(r[error]) for r in rows[1:]] == [True, True, False, False]
    assert cli_main(["sweep", str(ws), "--resume"]) == 1
    assert "4 points, 2 already finished, 2 run, 2 failed" in capsys.readouterr().out


# ---------------------------------------------------------------- DES on executors, interruption

@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The DES sweep run to the end without interruption (local pool, 2 workers)."""
    root = tmp_path_factory.mktemp("ref")
    path = write(root, DES)
    out = sweep_cli(path, "--output", str(root / "w"), "--quiet")
    assert out.returncode == 0, out.stderr
    assert f"{DES_POINTS} points, 0 already finished, {DES_POINTS} run, 0 failed" in out.stdout
    return root / "w"


def test_des_points_run_on_the_pool(reference):
    prov = json.loads((reference / "provenance.json").read_text())
    pids = {json.loads(data)["pid"] for data in point_files(reference).values()}
    assert prov["pid"] not in pids and 1 <= len(pids) <= 2 and prov["workers"] == 2
    rows = csv_rows(reference / "sweep.csv")
    assert len(rows) == DES_POINTS + 1 and all(r[rows[0].index("engine")] == "des" for r in rows[1:])


def _wait_for(predicate, proc, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, "the sweep ended before it could be interrupted"
        assert time.monotonic() < deadline, "timed out waiting for the sweep"
        time.sleep(0.02)


def _group_alive(pgid) -> list[int]:
    """Live (not zombie) processes of a process group."""
    out = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(pgid)], capture_output=True, text=True, timeout=10)
    return [int(line.split()[0]) for line in out.stdout.splitlines() if line.split() and
            not line.split()[1].startswith("Z")]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_interrupted_sweep_keeps_whole_rows_and_resume_runs_only_the_rest(tmp_path, reference, sig):
    path = write(tmp_path, DES)
    ws = tmp_path / "w"
    proc = subprocess.Popen([sys.executable, "-m", "cxlsim", "sweep", path, "--output", str(ws), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(lambda: os.path.isdir(ws / "points") and len(point_files(ws)) >= 3, proc)
        proc.send_signal(sig)  # SIGKILL: no handler runs; the CSV is whatever was last written whole
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "interrupted" in err, err
    else:
        assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10  # local workers die with the sweep (no orphans left running)
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _group_alive(proc.pid) == []

    finished = point_files(ws)
    assert 1 <= len(finished) < DES_POINTS, "not interrupted mid-run"
    rows = csv_rows(ws / "sweep.csv")  # whole rows only
    ids = [r[rows[0].index("point_id")] for r in rows[1:]]
    assert {f"{i}.json" for i in ids} <= set(finished)
    if sig == signal.SIGINT:  # the CSV written on the way out holds every finished point
        assert len(ids) == len(finished)
    reference_rows = {r[1]: r for r in csv_rows(reference / "sweep.csv")[1:]}
    assert all(reference_rows[r[1]] == r for r in rows[1:])
    mtimes = {name: os.stat(ws / "points" / name).st_mtime_ns for name in finished}

    out = sweep_cli(str(ws), "--resume", "--quiet")
    assert out.returncode == 0, out.stderr
    assert (f"{DES_POINTS} points, {len(finished)} already finished, {DES_POINTS - len(finished)} run"
            in out.stdout), out.stdout
    assert all(os.stat(ws / "points" / name).st_mtime_ns == t for name, t in mtimes.items())
    assert all(point_files(ws)[name] == data for name, data in finished.items())
    assert (ws / "sweep.csv").read_bytes() == (reference / "sweep.csv").read_bytes()
    assert not [n for n in os.listdir(ws / "points") if n.startswith(".tmp-")]
    prov = json.loads((ws / "provenance.json").read_text())
    assert prov["run"] == 1 and prov["resumed"] and len(prov["earlier_runs"]) == 1
    runs = [json.loads(data)["run"] for data in point_files(ws).values()]
    assert runs.count(0) == len(finished) and runs.count(1) == DES_POINTS - len(finished)


def _mpiexec():
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")


@pytest.mark.skipif(_mpiexec() is None, reason="no mpiexec beside python or on PATH")
def test_mpi_executor_gives_the_same_csv(tmp_path, reference):
    pytest.importorskip("mpi4py.futures")
    path = write(tmp_path, DES)
    ws = tmp_path / "w"
    cmd = [_mpiexec(), "-n", "3", sys.executable, "-m", "mpi4py.futures", "-m", "cxlsim", "sweep", path,
           "--executor", "mpi", "--output", str(ws), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and its ranks: the session this test started
        proc.communicate()
        pytest.fail("the MPI sweep did not finish in 180 s")
    out = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{DES_POINTS} points, 0 already finished, {DES_POINTS} run, 0 failed" in out.stdout
    prov = json.loads((ws / "provenance.json").read_text())
    pids = {json.loads(data)["pid"] for data in point_files(ws).values()}
    assert prov["executor"] == "mpi" and prov["pid"] not in pids and len(pids) <= 2  # the 2 worker ranks
    assert (ws / "sweep.csv").read_bytes() == (reference / "sweep.csv").read_bytes()


def test_any_executor_from_python_even_off_the_main_thread(tmp_path):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from cxlsim.results import Workspace

    text = DES.replace("nodes: 64", "nodes: 4").replace("  workers: 2\n", "")
    path = write(tmp_path, text)
    out = sweep_cli(path, "--output", str(tmp_path / "pool"), "--quiet")
    assert out.returncode == 0, out.stderr
    result = {}

    def body():  # signal handlers may only be set on the main thread: the sweep must not try
        with ThreadPoolExecutor(2) as pool:
            result["counts"] = sweep.Sweep(sweep.load(path), Workspace(str(tmp_path / "threads"))).run(executor=pool)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(timeout=120)
    assert result["counts"] == {"points": DES_POINTS, "skipped": 0, "ran": DES_POINTS, "failed": 0}
    assert json.loads((tmp_path / "threads" / "provenance.json").read_text())["executor"] == "ThreadPoolExecutor"
    assert (tmp_path / "threads" / "sweep.csv").read_bytes() == (tmp_path / "pool" / "sweep.csv").read_bytes()


# ---------------------------------------------------------------- plots

@pytest.fixture()
def analytic_ws(tmp_path):
    path = write(tmp_path, ANALYTIC)
    ws = tmp_path / "w"
    assert cli_main(["sweep", path, "--vary", "fabric.preset=ib-hdr,eth-100g-roce", "--output", str(ws)]) == 0
    return ws


def test_line_plot_has_the_expected_axes_and_data(analytic_ws):
    import matplotlib.image
    import matplotlib.pyplot as plt
    import pandas as pd

    from cxlsim import plot

    path, fig, ax = plot.plot(str(analytic_ws), "fabric.nodes", "latency_us", hue="fabric.preset",
                              where=["workload.sizes=1048576"])
    try:
        assert path == str(analytic_ws / "latency_us-vs-fabric.nodes-by-fabric.preset-where-workload.sizes_1048576.png")
        assert ax.get_xlabel() == "fabric.nodes" and ax.get_ylabel() == "latency_us [us]"
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["eth-100g-roce", "ib-hdr"]
        frame = pd.read_csv(analytic_ws / "sweep.csv")
        want = frame[(frame["fabric.preset"] == "ib-hdr") & (frame["workload.sizes"] == 1 << 20)]
        line = ax.get_lines()[1]
        assert list(line.get_xdata()) == [2, 4, 8] and list(line.get_ydata()) == want["latency_us"].tolist()
    finally:
        plt.close(fig)
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 200 and image.shape[1] > 300


def test_heatmap_and_cli(analytic_ws, capsys):
    import matplotlib.pyplot as plt

    from cxlsim import plot

    path, fig, ax = plot.plot(str(analytic_ws), "fabric.nodes", "workload.sizes", kind="heatmap", z="latency_us",
                              where=["fabric.preset=ib-hdr"])
    try:
        assert ax.images[0].get_array().shape == (2, 3)  # sizes x nodes
        assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4", "8"]
        assert ax.get_ylabel() == "workload.sizes [bytes]" and os.path.getsize(path) > 5000
    finally:
        plt.close(fig)
    assert cli_main(["plot", str(analytic_ws), "--x", "fabric.nodes", "--y", "latency_us",
                     "--hue", "workload.sizes", "--where", "fabric.preset=eth-100g-roce", "--name", "p"]) == 0
    assert (analytic_ws / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_ratio_plot_draws_one_preset_over_the_other_per_point(analytic_ws, capsys):
    import matplotlib.pyplot as plt
    import pandas as pd

    from cxlsim import plot

    path, fig, ax = plot.plot(str(analytic_ws), "fabric.nodes", "latency_us", hue="workload.sizes",
                              ratio="fabric.preset=eth-100g-roce/ib-hdr")
    try:
        frame = pd.read_csv(analytic_ws / "sweep.csv")
        for line, size in zip(ax.get_lines(), sorted(set(frame["workload.sizes"]))):
            rows = frame[frame["workload.sizes"] == size].set_index(["fabric.preset", "fabric.nodes"])["latency_us"]
            want = [rows[("eth-100g-roce", n)] / rows[("ib-hdr", n)] for n in (2, 4, 8)]
            assert list(line.get_xdata()) == [2, 4, 8] and list(line.get_ydata()) == pytest.approx(want, rel=1e-12)
        assert ax.get_ylabel() == "latency_us fabric.preset=eth-100g-roce/ib-hdr"
        assert [tuple(h.get_ydata()) for h in ax.get_lines()[2:]] == [(1.0, 1.0)]  # the dashed line at 1
        assert path == str(analytic_ws / "latency_us_fabric.preset_eth-100g-roce_ib-hdr-vs-fabric.nodes-by-workload.sizes.png")
    finally:
        plt.close(fig)
    assert cli_main(["plot", str(analytic_ws), "--x", "fabric.nodes", "--y", "latency_us", "--hue", "fabric.preset",
                     "--where", "workload.sizes=1 MiB", "--ratio", "fabric.preset=eth-100g-roce/ib-hdr"]) == 2
    assert "fabric.preset is the ratio's own axis" in capsys.readouterr().err
    assert cli_main(["plot", str(analytic_ws), "--x", "fabric.nodes", "--y", "latency_us",
                     "--where", "workload.sizes=1 MiB", "--ratio", "fabric.preset=ib-hdr"]) == 2
    assert "expected KEY=A/B" in capsys.readouterr().err
    assert cli_main(["plot", str(analytic_ws), "--x", "fabric.nodes", "--y", "latency_us",
                     "--where", "workload.sizes=1 MiB", "--ratio", "fabric.preset=ib-hdr/eth-400g"]) == 2
    assert "no finished point has fabric.preset = eth-400g" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--x", "fabric.nodes", "--y", "latency_us"],
     "the sweep also varies fabric.preset, workload.sizes; pin them"),
    (["--x", "fabric.nodez", "--y", "latency_us"], "--x 'fabric.nodez': not a column of sweep.csv; expected one of"),
    (["--x", "fabric.nodes", "--y", "latency_us", "--where", "fabric.nodes=5"],
     "--where fabric.nodes='5': no point has this value; the sweep has 2, 4, 8"),
    (["--x", "fabric.nodes", "--y", "workload.sizes", "--kind", "heatmap"], "give the metric to colour with --z"),
])
def test_plot_errors(analytic_ws, capsys, args, message):
    assert cli_main(["plot", str(analytic_ws), *args]) == 2
    assert message in capsys.readouterr().err


# ---------------------------------------------------------------- the what-if studies' sweeps

def test_whatif_study_sweeps_are_valid_scenarios():
    import importlib.util

    from cxlsim.simulate import resolved

    path = os.path.join(os.path.dirname(__file__), "..", "experiments", "whatif_topologies.py")
    spec = importlib.util.spec_from_file_location("whatif_topologies", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    counts = {}
    for study in ("switches", "devices", "crossover", "crossover-des-check"):
        for _label, base_dict, axes in module.study_sweeps(study):
            cfg = config.from_dict({**base_dict, "sweep": {"vary": axes}}, sweep.SweepScenario)
            points = sweep.expand(sweep.base_scenario(cfg), cfg.sweep.vary)
            for point in points:  # every point builds (lane budget, switch levels, coherence)
                resolved(point.scenario)
            counts[study] = counts.get(study, 0) + len(points)
    assert counts == {"switches": 2 * (4 + 5 + 5), "devices": 4 * 4 * 3, "crossover": 23 * (6 + 4 + 6 + 6),
                      "crossover-des-check": 4 * 3 * 3}
