"""Run workspaces: resolved config, provenance, results (CSV, JSON) and plots (PNG).

Every run writes one directory:
- `config.yaml`: the resolved scenario (re-loadable with cxlsim.config.load);
- `provenance.json`: seed, versions of python/numpy/simpy/cxlsim, git commit,
  hostname, UTC timestamp and the command line;
- result tables as `NAME.csv` and `NAME.json`, plots as `NAME.png`.
Every file is written atomically (a temporary file in the same directory,
then `os.replace`), so a reader never sees half a file.

Randomness: one `numpy.random.Generator` per run from `make_rng(seed)`; if no
seed is given one is drawn from the OS and recorded.
"""
from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile

import numpy as np
import yaml

from cxlsim import __version__
from cxlsim.errors import InputError

__all__ = ["atomic_write", "make_rng", "provenance", "Workspace"]


def atomic_write(path: str, data) -> None:
    """Write text or bytes to `path` atomically (temp file in the same directory + os.replace)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def make_rng(seed: int | None = None) -> tuple[np.random.Generator, int]:
    """The run's one random generator and its seed (drawn from the OS if `seed` is None)."""
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % 2**63)
    return np.random.default_rng(seed), seed


def _git_commit() -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance(seed: int) -> dict:
    """Where and with what a run was made."""
    import simpy

    return {
        "seed": seed,
        "cxlsim": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "simpy": simpy.__version__,
        "git_commit": _git_commit(),
        "hostname": socket.gethostname(),
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "argv": list(sys.argv),
    }


class Workspace:
    """A run directory; every write is atomic. `path` is created if missing."""

    def __init__(self, path: str):
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise InputError(f"output: cannot create directory {path!r} ({exc.strerror})") from None
        self.path = path

    @classmethod
    def new(cls, root: str, name: str) -> "Workspace":
        """A fresh workspace `root/NAME-YYYYmmdd-HHMMSS[-k]` that did not exist before."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        base = os.path.join(root, f"{name}-{stamp}")
        path, k = base, 1
        while True:  # mkdir is atomic, so parallel runs never share a directory
            try:
                os.makedirs(root, exist_ok=True)
                os.mkdir(path)
                return cls(path)
            except FileExistsError:
                path, k = f"{base}-{k}", k + 1
            except OSError as exc:
                raise InputError(f"output: cannot create directory {path!r} ({exc.strerror})") from None

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def write_text(self, name: str, text: str) -> str:
        atomic_write(self.file(name), text)
        return self.file(name)

    def write_config(self, config_dict: dict) -> str:
        """The resolved scenario as YAML (`config.yaml`)."""
        return self.write_text("config.yaml", yaml.safe_dump(config_dict, sort_keys=False))

    def write_provenance(self, seed: int, **extra) -> str:
        return self.write_json("provenance", {**provenance(seed), **extra})

    def write_json(self, name: str, obj) -> str:
        return self.write_text(f"{name}.json", json.dumps(obj, indent=2, sort_keys=False) + "\n")

    def write_csv(self, name: str, rows: list[dict], columns: list[str] | None = None) -> str:
        """Rows of dicts as CSV; floats are written with repr, so equal runs give equal bytes."""
        columns = columns or (list(rows[0]) if rows else [])
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([repr(v) if isinstance(v, float) else v for v in (row[c] for c in columns)])
        return self.write_text(f"{name}.csv", buf.getvalue())

    def save_plot(self, name: str, figure) -> str:
        """A matplotlib figure as `NAME.png`."""
        buf = io.BytesIO()
        figure.savefig(buf, format="png", dpi=120, bbox_inches="tight")
        atomic_write(self.file(f"{name}.png"), buf.getvalue())
        return self.file(f"{name}.png")
