"""No silent wrong answers from `cxlsim sweep` and `cxlsim plot` (issue 12: cases 4, 5, 6 and 9).

Each test runs the command the issue reports and checks that it now either
does the right thing or refuses with exit 2 and a message naming the key.
"""
import os

import pytest

from cxlsim.cli import main as cli_main

ANALYTIC = """\
name: a
engine: analytic
fabric: {preset: ib-hdr, nodes: 4}
workload: {algorithm: ring, sizes: [1 KiB, 1 MiB]}
sweep:
  vary:
    fabric.nodes: [2, 4, 8]
"""


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    return str(path)


def snapshot(ws):
    """Every file of a workspace (but its lock) and its bytes."""
    out = {}
    for root, _, files in os.walk(ws):
        for name in files:
            if name != ".lock":
                path = os.path.join(root, name)
                with open(path, "rb") as fh:
                    out[os.path.relpath(path, ws)] = fh.read()
    return out


def data_rows(ws):
    return (ws / "sweep.csv").read_text().splitlines()[1:]


@pytest.fixture
def finished(tmp_path, capsys):
    """A finished 6-point analytic sweep (nodes 2, 4, 8 x sizes 1 KiB, 1 MiB) and its scenario file."""
    path = write(tmp_path, ANALYTIC)
    ws = tmp_path / "w"
    assert cli_main(["sweep", path, "--output", str(ws)]) == 0
    capsys.readouterr()
    return path, ws


# ---------------------------------------------------------------- case 4: --resume never redefines a sweep

def test_resume_with_other_values_is_refused_naming_the_key_and_changes_nothing(finished, capsys):
    path, ws = finished
    before = snapshot(ws)
    assert cli_main(["sweep", str(ws), "--resume", "--vary", "fabric.nodes=8,16"]) == 2
    err = capsys.readouterr().err
    assert "fabric.nodes: [2, 4, 8] there, [8, 16] here" in err and "--extend" in err
    assert "Traceback" not in err
    assert snapshot(ws) == before


def test_resume_with_another_axis_is_refused_naming_it(finished, capsys):
    path, ws = finished
    before = snapshot(ws)
    assert cli_main(["sweep", path, "--output", str(ws), "--resume", "--vary", "fabric.preset=ib-hdr,ib-ndr"]) == 2
    assert "fabric.preset: not an axis there, an axis here" in capsys.readouterr().err
    assert cli_main(["sweep", path, "--output", str(ws), "--resume", "--vary", "workload.sizes=1 KiB"]) == 2
    assert "workload.sizes: [1024, 1048576] there, [1024] here" in capsys.readouterr().err
    assert snapshot(ws) == before


def test_extend_adds_points_and_the_old_definition_no_longer_resumes(finished, capsys):
    path, ws = finished
    assert cli_main(["sweep", str(ws), "--extend", "--vary", "fabric.nodes=2,4,8,16"]) == 0
    assert "8 points, 6 already finished, 2 run, 0 failed" in capsys.readouterr().out
    assert len(data_rows(ws)) == 8
    rows = snapshot(ws)
    # The scenario file still says [2, 4, 8]: resuming with it would cut the sweep, so it is refused.
    assert cli_main(["sweep", path, "--output", str(ws), "--resume"]) == 2
    assert "fabric.nodes: [2, 4, 8, 16] there, [2, 4, 8] here" in capsys.readouterr().err
    assert snapshot(ws) == rows
    assert cli_main(["sweep", str(ws), "--resume"]) == 0
    assert "8 points, 8 already finished, 0 run" in capsys.readouterr().out
    assert len(data_rows(ws)) == 8


def test_extend_refuses_to_drop_points_or_change_the_base(finished, capsys):
    path, ws = finished
    before = snapshot(ws)
    assert cli_main(["sweep", str(ws), "--extend", "--vary", "fabric.nodes=8,16"]) == 2
    err = capsys.readouterr().err
    assert "--extend" in err and "fabric.nodes: [2, 4, 8] there, [8, 16] here, without 2, 4" in err
    other = write(ws.parent, ANALYTIC.replace("ib-hdr", "ib-ndr"), "other.yaml")
    assert cli_main(["sweep", other, "--output", str(ws), "--extend"]) == 2
    assert "another base scenario (fabric.preset: 'ib-hdr' there, 'ib-ndr' here)" in capsys.readouterr().err
    assert snapshot(ws) == before


def test_extend_needs_a_sweep_to_extend(tmp_path, capsys):
    path = write(tmp_path, ANALYTIC)
    assert cli_main(["sweep", path, "--output", str(tmp_path / "new"), "--extend"]) == 2
    assert "holds no sweep to extend" in capsys.readouterr().err
    assert cli_main(["sweep", path, "--extend"]) == 2
    assert "--extend: give the workspace" in capsys.readouterr().err


def test_resume_may_change_how_points_run(finished, capsys):
    """The executor and the pool size are not part of what a sweep computes."""
    _, ws = finished
    assert cli_main(["sweep", str(ws), "--resume", "--workers", "1", "--executor", "local"]) == 0
    assert "6 points, 6 already finished, 0 run" in capsys.readouterr().out


# ---------------------------------------------------------------- case 5: an axis that does not apply

MIXED = """\
name: m
engine: analytic
fabric: {preset: ib-hdr, nodes: 4}
workload: {algorithm: auto, sizes: [1 MiB]}
"""


def test_an_axis_a_preset_does_not_use_is_said_and_each_distinct_point_runs_once(tmp_path, capsys):
    import pandas as pd

    from cxlsim import config, simulate

    path = write(tmp_path, MIXED)
    ws = tmp_path / "w"
    assert cli_main(["sweep", path, "--output", str(ws), "--vary", "fabric.nodes=2,4",
                     "--vary", "fabric.preset=ib-hdr,cxl3-pool", "--vary", "fabric.cxl.switch_levels=1,2"]) == 0
    out = capsys.readouterr().out
    assert ("fabric.cxl.switch_levels does not apply to 2 of 6 points (fabric.preset ib-hdr): "
            "each of them runs once") in out
    assert "6 points, 0 already finished, 6 run, 0 failed" in out
    frame = pd.read_csv(ws / "sweep.csv")
    network = frame[frame["fabric.preset"] == "ib-hdr"]
    pool = frame[frame["fabric.preset"] == "cxl3-pool"]
    assert len(network) == 2 and network["fabric.cxl.switch_levels"].isna().all()
    assert sorted(pool["fabric.cxl.switch_levels"]) == [1, 1, 2, 2]
    assert frame["point"].tolist() == list(range(6)) and frame["point_id"].is_unique
    # Each row is the simulation of its own scenario, the unused key left unset.
    for _, row in network.iterrows():
        scenario = config.from_dict({"engine": "analytic", "fabric": {"preset": "ib-hdr", "nodes": int(row["fabric.nodes"])},
                                     "workload": {"algorithm": "auto", "sizes": [1 << 20]}})
        assert simulate.run(simulate.resolved(scenario))[0]["latency_us"] == row["latency_us"]
    assert cli_main(["sweep", str(ws), "--resume"]) == 0
    assert "6 points, 6 already finished, 0 run" in capsys.readouterr().out


def test_an_axis_no_point_uses_is_refused(tmp_path, capsys):
    path = write(tmp_path, MIXED)
    assert cli_main(["sweep", path, "--output", str(tmp_path / "w"), "--vary", "fabric.cxl.switch_levels=1,2"]) == 2
    err = capsys.readouterr().err
    assert ("sweep fabric.cxl.switch_levels: no point uses it (fabric.preset ib-hdr does not; "
            "it applies to CXL pool presets and hybrid pod fabrics); remove the axis") in err
    assert not os.path.exists(tmp_path / "w" / "sweep.csv")


def test_plot_hue_on_an_axis_some_points_do_not_use(tmp_path, capsys):
    import matplotlib.pyplot as plt

    from cxlsim import plot

    path = write(tmp_path, MIXED)
    ws = tmp_path / "w"
    assert cli_main(["sweep", path, "--output", str(ws), "--vary", "fabric.nodes=2,4",
                     "--vary", "fabric.preset=ib-hdr,cxl3-pool", "--vary", "fabric.cxl.switch_levels=1,2"]) == 0
    _, fig, ax = plot.plot(str(ws), "fabric.nodes", "latency_us", hue="fabric.cxl.switch_levels")
    try:
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["1", "2", plot.NOT_USED]
        assert all(list(line.get_xdata()) == [2, 4] for line in ax.get_lines())
    finally:
        plt.close(fig)


# ---------------------------------------------------------------- case 9: plot --where

@pytest.fixture
def swept(tmp_path, capsys):
    path = write(tmp_path, ANALYTIC)
    ws = tmp_path / "w"
    assert cli_main(["sweep", path, "--output", str(ws)]) == 0
    capsys.readouterr()
    return ws


def test_plots_with_other_where_filters_get_other_files(swept, capsys):
    common = ["plot", str(swept), "--x", "fabric.nodes", "--y", "latency_us"]
    assert cli_main([*common, "--where", "workload.sizes=1024"]) == 0
    small = capsys.readouterr().out.split("# plot: ")[1].strip()
    assert cli_main([*common, "--where", "workload.sizes=1048576"]) == 0
    large = capsys.readouterr().out.split("# plot: ")[1].strip()
    assert small != large and os.path.isfile(small) and os.path.isfile(large)
    assert "1024" in os.path.basename(small) and "1048576" in os.path.basename(large)
    assert open(small, "rb").read() != open(large, "rb").read()


def test_where_takes_values_as_vary_does(swept, capsys):
    common = ["plot", str(swept), "--x", "fabric.nodes", "--y", "latency_us"]
    assert cli_main([*common, "--where", "workload.sizes=1 MiB"]) == 0
    with_unit = capsys.readouterr().out.split("# plot: ")[1].strip()
    assert cli_main([*common, "--where", "workload.sizes=1048576"]) == 0
    in_bytes = capsys.readouterr().out.split("# plot: ")[1].strip()
    assert with_unit == in_bytes  # the same points, so the same plot
    assert cli_main([*common, "--where", "workload.sizes=3 MiB"]) == 2
    err = capsys.readouterr().err
    assert "workload.sizes='3 MiB' (3145728): no point has this value; the sweep has 1024, 1048576" in err
    assert cli_main([*common, "--where", "workload.sizes=lots"]) == 2
    assert "--where workload.sizes='lots': workload.sizes: expected sizes like" in capsys.readouterr().err


# ---------------------------------------------------------------- case 6: bad files are exit-2 errors

BAD_FILES = {
    "binary": bytes(range(256)) * 4,
    "utf16": ANALYTIC.encode("utf-16"),
    "duplicate-keys": (ANALYTIC + "fabric: {preset: ib-ndr, nodes: 8}\n").encode(),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_scenario_files_are_refused_with_exit_2(tmp_path, capsys, kind):
    path = write(tmp_path, BAD_FILES[kind], f"{kind}.yaml")
    assert cli_main(["sweep", path, "--output", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert f"{kind}.yaml" in err and "Traceback" not in err
    assert not os.path.exists(tmp_path / "w" / "sweep.csv")


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_workspace_with_a_bad_sweep_yaml_is_refused_with_exit_2(finished, capsys, kind):
    _, ws = finished
    (ws / "sweep.yaml").write_bytes(BAD_FILES[kind])
    assert cli_main(["sweep", str(ws), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "sweep.yaml" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["provenance.json", "points"])
@pytest.mark.parametrize("damage, message", [(BAD_FILES["utf16"], "UTF-16"),
                                             (b'{"index": 0, "point', "not a JSON file written by cxlsim sweep")])
def test_a_workspace_with_a_bad_json_file_is_refused_with_exit_2(finished, capsys, name, damage, message):
    _, ws = finished
    target = ws / name if name != "points" else sorted((ws / "points").iterdir())[0]
    target.write_bytes(damage)
    assert cli_main(["sweep", str(ws), "--resume"]) == 2
    err = capsys.readouterr().err
    assert target.name in err and message in err and "Traceback" not in err
