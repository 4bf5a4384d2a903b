"""Compare `cxlsim replay` with `smpirun -replay` (SimGrid 3.32) on equivalent fabrics.

    python tests/data/traces/validate_smpi.py [--repeat 100] [--write]

Needs SimGrid's smpirun (Debian: apt-get install libsimgrid-dev); the test suite does not.
The SimGrid side is platform.xml (four hosts, 25 GB/s and 25 ns links, a 400 ns switch)
with the figures cxlsim's ib-hdr preset uses: 350 ns send, isend and receive overheads
(smpi/os, ois, or), no bandwidth or latency correction factors, no cross traffic, and
recursive doubling for the allreduce (MPICH's choice at 8 B). The cxlsim side is ib-hdr
on a star. Compared (`cases`): the halo trace as recorded (compute included), and its
communication alone (compute lines dropped) repeated --repeat times, so SimGrid's printed
time (1 us resolution) resolves it; then one collective at a time, 4 ranks calling it
--repeat times back to back, with SimGrid's algorithm set to the one cxlsim's MPICH selector
picks (smpi/COLLECTIVE:ALGORITHM) and, on the cxlsim side, free local copies and reductions
(`fabric.host.memcpy_bandwidth` and `reduce_bandwidth` 10^6 GB/s: SimGrid's replay has no data
and charges an operator only its trace's FLOPS field, 0 here, while cxlsim charges a local copy
or reduction at the host's bandwidths). Prints both times and their difference; --write stores SimGrid's times in
smpi_replay.json, which tests/test_replay_smpi.py compares the replay with (so the suite
checks the agreement without SimGrid) for the cases marked `agrees`.

`python validate_smpi.py --others` also prints the collectives that do not agree (bcast,
reducescatter, reduce, gather, scatter), each with SimGrid's eager setting
(smpi/async-small-thresh and smpi/send-is-detached-thresh at 64 KiB) as well: by default
SimGrid starts a message's transfer once both its send and its receive are posted, while
cxlsim's sends are eager (the message travels as soon as it is sent), which the rooted
collectives called back to back expose.
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


def smpi_seconds(index: str, ranks: int, extra=()) -> float:
    config = [c for c in SMPI_CONFIG if not any(c.startswith(e.split(":", 1)[0]) for e in extra)] + list(extra)
    out = subprocess.run(["smpirun", "-np", str(ranks), "-platform", os.path.join(HERE, "platform.xml"),
                          "-hostfile", os.path.join(HERE, "hostfile"), "-replay", os.path.basename(index),
                          *config], cwd=os.path.dirname(index), capture_output=True, text=True, timeout=300)
    found = re.findall(r"Simulation time ([0-9.]+)", out.stdout + out.stderr)
    if not found:
        sys.exit(f"smpirun -replay failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return float(found[-1])


def cxlsim_seconds(index: str, fabric: str = "ib-hdr") -> float:
    trace = simgrid.read(index, 1e9)
    return engine.replay(trace, fabrics.resolve(fabric, trace.size).make()).total_ns / 1e9


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


COLLECTIVES = [  # (traced line, SimGrid's name of the algorithm cxlsim's MPICH selector picks at 4 ranks, agrees)
    ("allreduce 16 0 0", "allreduce:rdb", True),            # 16 doubles: recursive doubling
    ("allreduce 8192 0 0", "allreduce:rab_rdb", True),      # 64 KiB: Rabenseifner
    ("allgather 1024 1024 1 1", "allgather:rdb", True),
    ("barrier", "barrier:ompi_bruck", True),                # the dissemination barrier
    ("alltoall 512 512 5 5", "alltoall:pair", True),        # pairwise exchange
    ("bcast 4096 1 0", "bcast:binomial_tree", False),
    ("reducescatter 256 256 256 256 0 0", "reduce_scatter:mpich", False),
    ("reduce 1024 0 2 0", "reduce:binomial", False),
    ("gather 1024 1024 1 0 0", "gather:ompi_binomial", False),
    ("scatter 1024 1024 1 0 0", "scatter:ompi_binomial", False),
]
EAGER = ("--cfg=smpi/async-small-thresh:65536", "--cfg=smpi/send-is-detached-thresh:65536")


def repeated(action: str, directory: str, repeat: int) -> str:
    """A 4-rank trace calling `action` `repeat` times back to back; returns its index file."""
    os.makedirs(directory)
    names = [f"coll_rank-{r + 1}.txt" for r in range(4)]
    for r, name in enumerate(names):
        with open(os.path.join(directory, name), "w") as fh:
            fh.write(f"{r} init\n" + f"{r} {action}\n" * repeat + f"{r} finalize\n")
    path = os.path.join(directory, "coll.txt")
    with open(path, "w") as fh:
        fh.write("\n".join(names) + "\n")
    return path


def cases(tmp: str, repeat: int, others: bool = False) -> list:
    """(label, index file, SimGrid settings, cxlsim fabric) of the compared traces, written into `tmp`: the ones
    that agree, or with `others` those that do not."""
    halo = os.path.join(HERE, "halo", "halo.txt")
    free = os.path.join(tmp, "ib-hdr-free-local-work.yaml")
    with open(free, "w") as fh:
        fh.write("fabric:\n  preset: ib-hdr\n  host: {reduce_bandwidth: 1000000 GB/s, memcpy_bandwidth: 1000000 GB/s}\n")
    found = [] if others else [("halo (as traced)", halo, (), "ib-hdr"),
                               (f"halo communication x{repeat}", communication_only(halo, tmp, repeat), (), "ib-hdr")]
    for k, (action, algorithm, agrees) in enumerate(COLLECTIVES):
        if agrees != others:
            index = repeated(action, os.path.join(tmp, f"coll{k}"), repeat)
            found.append((f"{action} x{repeat}", index, (f"--cfg=smpi/{algorithm}",), free))
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--write", action="store_true", help=f"store SimGrid's times in {RESULTS}")
    ap.add_argument("--others", action="store_true", help="the collectives that do not agree, also with SimGrid's "
                                                          "eager setting")
    args = ap.parse_args()
    measured = {}
    with tempfile.TemporaryDirectory() as tmp:
        eager = f"{'eager':>10}" if args.others else ""
        print(f"{'trace':<44} {'smpirun -replay (s)':>20} {'cxlsim replay (s)':>18} {'difference':>11}{eager}")
        for label, index, extra, fabric in cases(tmp, args.repeat, args.others):
            theirs, ours = smpi_seconds(index, 4, extra), cxlsim_seconds(index, fabric)
            measured[label] = theirs
            line = f"{label:<44} {theirs:>20.6f} {ours:>18.9f} {ours / theirs - 1:>+11.2%}"
            if args.others:
                line += f"{ours / smpi_seconds(index, 4, extra + EAGER) - 1:>+10.2%}"
            print(line + f"   ({' '.join(extra) or 'the halo settings'})")
    if args.write and not args.others:
        version = subprocess.run(["smpirun", "-version"], capture_output=True, text=True).stdout.strip().splitlines()
        with open(RESULTS, "w") as fh:
            json.dump({"simgrid": version[-1] if version else "", "repeat": args.repeat, "config": SMPI_CONFIG,
                       "seconds": measured, "resolution_s": 1e-6}, fh, indent=2)
            fh.write("\n")


if __name__ == "__main__":
    main()
