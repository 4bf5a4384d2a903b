"""Run workspaces: atomic writes, provenance, seeds."""
import json
import os

import pytest

from cxlsim import results
from cxlsim.errors import InputError


def test_atomic_write_leaves_no_temp_files(tmp_path):
    target = tmp_path / "a.txt"
    results.atomic_write(str(target), "one")
    results.atomic_write(str(target), b"two")
    assert target.read_text() == "two" and os.listdir(tmp_path) == ["a.txt"]


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    target = tmp_path / "a.txt"
    results.atomic_write(str(target), "old")
    with pytest.raises(TypeError):
        results.atomic_write(str(target), 123)  # not text or bytes
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["a.txt"]


def test_seeded_generators_repeat_and_unseeded_record_their_seed():
    a, seed_a = results.make_rng(42)
    b, _ = results.make_rng(42)
    assert seed_a == 42 and a.integers(1 << 30, size=4).tolist() == b.integers(1 << 30, size=4).tolist()
    c, seed_c = results.make_rng()
    assert isinstance(seed_c, int) and 0 <= seed_c < 2**63
    assert c.random() == results.make_rng(seed_c)[0].random()


def test_workspace_files(tmp_path):
    ws = results.Workspace(str(tmp_path / "run"))
    ws.write_config({"fabric": {"nodes": 2}})
    ws.write_provenance(5, engine="des")
    ws.write_csv("t", [{"size": 1, "us": 0.1}, {"size": 2, "us": 1 / 3}])
    ws.write_json("t", [{"size": 1}])
    prov = json.loads((tmp_path / "run" / "provenance.json").read_text())
    for key in ("seed", "python", "numpy", "simpy", "cxlsim", "git_commit", "hostname", "timestamp_utc"):
        assert key in prov
    assert prov["seed"] == 5 and prov["engine"] == "des"
    assert (tmp_path / "run" / "t.csv").read_text() == "size,us\n1,0.1\n2,0.3333333333333333\n"
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = plt.figure()
    assert ws.save_plot("p", fig).endswith("p.png") and (tmp_path / "run" / "p.png").read_bytes()[:4] == b"\x89PNG"
    plt.close(fig)


def test_new_workspaces_never_collide(tmp_path):
    a = results.Workspace.new(str(tmp_path), "x")
    b = results.Workspace.new(str(tmp_path), "x")
    assert a.path != b.path and os.path.isdir(a.path) and os.path.isdir(b.path)


def test_unwritable_workspace_is_an_input_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="output: cannot create directory"):
        results.Workspace(str(blocker / "sub"))
    with pytest.raises(InputError, match="output: cannot create directory"):
        results.Workspace.new(str(blocker / "runs"), "x")
