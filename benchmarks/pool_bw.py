"""osu_bw / osu_mbw_mr on the pool's send/recv protocol (issue 18 item 1): the DES against its closed form.

    python benchmarks/pool_bw.py                              # osu_bw, 1 B-4 MiB, on vp-cmpi-direct (about 15 s)
    python benchmarks/pool_bw.py --pairs 1 2 4 --sizes 1B:1MiB   # osu_mbw_mr at 2 and 4 pairs as well
    python benchmarks/pool_bw.py --preset vp-cmpi-switch --output pool_bw.csv
    python benchmarks/pool_bw.py --preset cxl3-pool --coherence hw     # CXL 3 back-invalidation, one pair

The loop is OMB's (`cxlsim.replay.pool_bandwidth`): a window of 64 messages in flight, then a 4-byte
acknowledgement, with every sender on one host and every receiver on the other (cMPI's placement for
osu_mbw_mr). `--preset` takes the committed cMPI descriptions of experiments/validate_published_fabrics.py
(`vp-cmpi-direct`, the default, and `vp-cmpi-switch`) or a built-in CXL preset. Each row prints the DES's
steady iteration against the closed form (`iteration_ns`) as aggregate bandwidth in MB/s (OSU's unit,
10^6 B/s), the form's error against the DES and the DES's message rate; the last line gives the
largest |error| per pair count, against the 1% tolerance. The DES is deterministic: there is no spread to print. Exit 1 if a row misses the tolerance.

Not here: the same loop measured on this machine's shared memory (the emulator has no point-to-point
mailbox protocol to run it with).
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import sys
import time

from cxlsim.errors import InputError
from cxlsim.fabric.cxl_presets import CXL_PRESETS
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.replay import pool_bandwidth as pb
from cxlsim.units import format_size, parse_sizes

TOLERANCE = 0.01
"""Largest relative difference between the DES and the closed form the benchmark accepts."""
DESCRIPTIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "experiments",
                            "validate_published_fabrics.py")


def preset_named(name: str):
    """A committed validation description's preset (validate_published_fabrics.PRESETS) or a built-in one."""
    spec = importlib.util.spec_from_file_location("validate_published_fabrics", DESCRIPTIONS)
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    presets = {p.name: p for p in module.PRESETS} | dict(CXL_PRESETS)
    if name not in presets:
        raise InputError(f"--preset: unknown preset {name!r}; expected one of {sorted(presets)}")
    return presets[name]


def rows(preset, sizes, pairs_list, window: int, skip: int, iterations: int, coherence: str = "flush"):
    """One dict per (pairs, size): the DES and closed-form iteration (ns), bandwidths (GB/s), error."""
    out = []
    for pairs in pairs_list:
        fig = CXLPoolTransport(preset, 2, coherence=coherence, ranks_per_host=pairs).figures()
        for size in sizes:
            transport = CXLPoolTransport(preset, 2, coherence=coherence, ranks_per_host=pairs)
            des = pb.simulate_iteration_ns(transport, size, window, pairs, iterations=iterations, skip=skip)
            form = pb.iteration_ns(fig, size, window, pairs)
            out.append({"preset": preset.name, "pairs": pairs, "size_bytes": size, "window": window,
                        "des_iteration_ns": des, "form_iteration_ns": form,
                        "des_gb_s": pb.bandwidth_gb_s(size, des, window, pairs),
                        "form_gb_s": pb.bandwidth_gb_s(size, form, window, pairs),
                        "des_messages_per_s": pairs * window / des * 1e9,
                        "error": des / form - 1})  # the form's bandwidth against the DES's
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="vp-cmpi-direct")
    ap.add_argument("--coherence", default="flush", choices=["flush", "hw"],
                    help="flush (software, as cMPI) or hw (CXL 3 back-invalidation: the form covers one pair)")
    ap.add_argument("--sizes", default="1B:4MiB", help="OSU-style 'LO:HI' (doubling) or 'A,B,C'")
    ap.add_argument("--pairs", type=int, nargs="+", default=[1], help="sender/receiver pairs (1: osu_bw)")
    ap.add_argument("--window", type=int, default=pb.OSU_WINDOW)
    ap.add_argument("--skip", type=int, default=4, help="warm-up iterations (at least the mailbox's 4 slots)")
    ap.add_argument("--iterations", type=int, default=1, help="timed iterations (the DES is deterministic)")
    ap.add_argument("--output", help="also write the rows to this CSV file")
    args = ap.parse_args(argv)
    try:
        preset = preset_named(args.preset)
        sizes = parse_sizes(args.sizes)
        if any(p < 1 for p in args.pairs):
            raise InputError(f"--pairs: expected integers >= 1, got {args.pairs}")
        if args.skip < 4:
            raise InputError(f"--skip: expected at least 4 (the mailbox's slots per pair), got {args.skip}")
        start = time.time()
        table = rows(preset, sizes, args.pairs, args.window, args.skip, args.iterations, args.coherence)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"# pool osu_bw / osu_mbw_mr on {preset.name} ({args.coherence} mode), window {args.window}, "
          f"senders on host 0, receivers on host 1")
    print(f"# {'pairs':>5} {'size':>8} {'DES MB/s':>11} {'form MB/s':>11} {'form err':>8} {'DES msg/s':>12}")
    for r in table:
        print(f"  {r['pairs']:>5} {format_size(r['size_bytes']):>8} {r['des_gb_s'] * 1e3:>11.2f} "
              f"{r['form_gb_s'] * 1e3:>11.2f} {r['error'] * 100:>+7.3f}% {r['des_messages_per_s']:>12.4g}")
    worst = {}
    for r in table:
        worst[r["pairs"]] = max(worst.get(r["pairs"], 0.0), abs(r["error"]))
    met = all(w <= TOLERANCE for w in worst.values())
    print("# largest |error| by pairs: " + ", ".join(f"{p}: {w * 100:.3f}%" for p, w in worst.items())
          + f" (tolerance {TOLERANCE * 100:.0f}%): {'MET' if met else 'MISSED'}; {time.time() - start:.1f} s")
    if args.output:
        with open(args.output, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
