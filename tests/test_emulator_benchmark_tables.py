"""The emulator benchmarks' tables (benchmarks/allgather_parts.py): a side with no job is "not observed", never nan."""
import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _module(name):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_allgather_parts_prints_not_observed_for_an_mpi_setting_without_a_job_in_the_placement(capsys):
    parts = _module("allgather_parts")
    rows = {("1", "mpi", 4096): [10.0, 12.0], ("1", "local", 4096): [1.0]}
    for mode in parts.COPY_INS:
        for kind, us in zip(parts.POOL_PARTS, (1.0, 2.0, 2.5, 3.0, 5.0)):
            rows[("1", f"{mode}:{kind}", 4096)] = [us]
    parts.print_table("slow", rows)
    out = capsys.readouterr().out
    assert "nan" not in out
    lines = [line for line in out.splitlines() if line.strip().startswith("4096")]
    assert len(lines) == 2 and all("not observed" in line for line in lines)
    assert all(line.split()[1:3] == ["11.0", "[10-12]"] and line.split()[-2:] == ["2.20", "-"] for line in lines)
