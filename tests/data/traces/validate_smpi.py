"""Compare `cxlsim replay` with `smpirun -replay` (SimGrid 3.32) on equivalent fabrics.

    python tests/data/traces/validate_smpi.py [--repeat 100] [--write]

Needs SimGrid's smpirun (Debian: apt-get install libsimgrid-dev); the test suite does not.
The SimGrid side is platform.xml (four hosts, 25 GB/s and 25 ns links, a 400 ns switch)
with the figures cxlsim's ib-hdr preset uses: 350 ns send, isend and receive overheads
(smpi/os, ois, or), no bandwidth or latency correction factors, no cross traffic, and
recursive doubling for the allreduce (MPICH's choice at 8 B). The cxlsim side is ib-hdr
on a star. Compared: the halo trace as recorded (compute included), and its communication
alone (compute lines dropped) repeated --repeat times, so SimGrid's printed time (1 us
resolution) resolves it. Prints both times and their difference; --write stores SimGrid's
times in smpi_replay.json, which tests/test_replay_smpi.py compares the replay with (so the
suite checks the agreement without SimGrid).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from cxlsim.replay import engine, fabrics, simgrid

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "smpi_replay.json")
SMPI_CONFIG = ["--cfg=smpi/os:0:3.5e-7:0", "--cfg=smpi/ois:0:3.5e-7:0", "--cfg=smpi/or:0:3.5e-7:0",
               "--cfg=smpi/bw-factor:0:1", "--cfg=smpi/lat-factor:0:1", "--cfg=network/crosstraffic:0",
               "--cfg=smpi/allreduce:rdb"]


def smpi_seconds(index: str, ranks: int) -> float:
    out = subprocess.run(["smpirun", "-np", str(ranks), "-platform", os.path.join(HERE, "platform.xml"),
                          "-hostfile", os.path.join(HERE, "hostfile"), "-replay", os.path.basename(index),
                          *SMPI_CONFIG], cwd=os.path.dirname(index), capture_output=True, text=True, timeout=300)
    found = re.findall(r"Simulation time ([0-9.]+)", out.stdout + out.stderr)
    if not found:
        sys.exit(f"smpirun -replay failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return float(found[-1])


def cxlsim_seconds(index: str) -> float:
    trace = simgrid.read(index, 1e9)
    return engine.replay(trace, fabrics.resolve("ib-hdr", trace.size).make()).total_ns / 1e9


def communication_only(index: str, directory: str, repeat: int) -> str:
    """The trace without its compute lines, every rank's body repeated `repeat` times."""
    trace_dir = os.path.dirname(index)
    names = []
    with open(index) as fh:
        entries = [line.strip() for line in fh if line.strip()]
    for i, entry in enumerate(entries):
        with open(os.path.join(trace_dir, entry)) as fh:
            lines = [line for line in fh if line.split()[1] != "compute"]
        head, body, tail = lines[:1], lines[1:-1], lines[-1:]
        name = f"comm_rank-{i + 1}.txt"
        with open(os.path.join(directory, name), "w") as fh:
            fh.writelines(head + body * repeat + tail)
        names.append(name)
    path = os.path.join(directory, "comm.txt")
    with open(path, "w") as fh:
        fh.write("\n".join(names) + "\n")
    return path


def cases(tmp: str, repeat: int) -> list:
    """(label, index file) of the compared traces; the communication-only one is written into `tmp`."""
    halo = os.path.join(HERE, "halo", "halo.txt")
    return [("halo (as traced)", halo), (f"halo communication x{repeat}", communication_only(halo, tmp, repeat))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--write", action="store_true", help=f"store SimGrid's times in {RESULTS}")
    args = ap.parse_args()
    measured = {}
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'trace':<28} {'smpirun -replay (s)':>20} {'cxlsim replay (s)':>18} {'difference':>11}")
        for label, index in cases(tmp, args.repeat):
            theirs, ours = smpi_seconds(index, 4), cxlsim_seconds(index)
            measured[label] = theirs
            print(f"{label:<28} {theirs:>20.6f} {ours:>18.9f} {ours / theirs - 1:>+11.2%}")
    if args.write:
        version = subprocess.run(["smpirun", "-version"], capture_output=True, text=True).stdout.strip().splitlines()
        with open(RESULTS, "w") as fh:
            json.dump({"simgrid": version[-1] if version else "", "repeat": args.repeat, "config": SMPI_CONFIG,
                       "seconds": measured, "resolution_s": 1e-6}, fh, indent=2)
            fh.write("\n")


if __name__ == "__main__":
    main()
