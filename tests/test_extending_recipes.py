"""Every recipe of docs/extending.md, executed as written: one new plug-in file and its test, no file of the package."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
RECIPES = ("Add a collective algorithm", "Add a CXL device preset", "Add a training mode")
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


def recipe(title: str) -> dict:
    """The blocks of one recipe section: {'files': {name: text}, 'bash': [lines], 'expect': [lines]}."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    blocks = {"files": {}, "bash": [], "expect": []}
    for lang, info, body in FENCE.findall(section):
        file = re.search(r"file=(\S+)", info)
        if file:
            blocks["files"][file.group(1)] = body
        elif lang == "bash":
            blocks["bash"] += [line for line in body.splitlines() if line.strip() and not line.startswith("#")]
        elif lang == "text" and "expect" in info:
            blocks["expect"] += [line.strip() for line in body.splitlines() if line.strip()]
    return blocks


@pytest.mark.parametrize("title", RECIPES)
def test_recipe_runs_as_written(title, tmp_path):
    blocks = recipe(title)
    plugins = [name for name in blocks["files"] if not name.startswith("test_")]
    tests = [name for name in blocks["files"] if name.startswith("test_")]
    assert len(plugins) == 1 and len(tests) == 1, f"{title}: one plug-in file and its test, got {list(blocks['files'])}"
    assert blocks["bash"] and blocks["expect"], f"{title}: needs a bash block and an expect block"
    for name, body in blocks["files"].items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    env = dict(os.environ, CXLSIM_PLUGINS=Path(plugins[0]).stem,
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    output = ""
    for line in blocks["bash"]:
        line = re.sub(r"^python(?=\s)", sys.executable, line)
        done = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        output += done.stdout + done.stderr
        assert done.returncode == 0, f"{title}: `{line}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    missing = [line for line in blocks["expect"] if line not in output]
    assert not missing, f"{title}: output lacks {missing}:\n{output}"
