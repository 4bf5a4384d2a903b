"""How repeatable the local-host profiles' prices of the pool allreduce are: each profile's own price, and its
price at a common flag round trip (`cxlsim.calibrate.price_spread.price_at`), side by side.

    python benchmarks/calibration_price_spread.py PROFILE.json [PROFILE.json ...] [--roundtrips 90 450]
                                                  [--sizes 8 64KiB] [--large 64KiB] [--calls 402]

For each profile and size (allreduce, hw, np 2, the kernel alone as a replay prices it): the model's price
(`profile_price`, at the round trip its jobs happened to see) and the fields it comes from
(`price_fields`), then per round trip the median of the profile's jobs' prices moved to it (`shifted_price`) and their range.
The last lines give, per column, the spread across the profiles (highest / lowest) and `--calls` x the sum
over the sizes (E's coll trace: 402 calls of each of 8 B and 64 KiB, both ranks). Units: ns unless said.
"""
from __future__ import annotations

import argparse
import sys

from cxlsim.calibrate import price_spread as ps
from cxlsim.calibrate.local_model import LocalModel
from cxlsim.calibrate.profile import load_profile
from cxlsim.errors import InputError
from cxlsim.units import parse_option, parse_sizes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="+")
    parser.add_argument("--roundtrips", type=float, nargs="+", default=[90.0, 450.0],
                        help="flag round trips (ns) to price at: a run's, as its library stats header gives it")
    parser.add_argument("--sizes", default="8,64KiB")
    parser.add_argument("--large", default="64KiB", help="the library's large-allreduce threshold (its stats header)")
    parser.add_argument("--calls", type=int, default=402, help="calls of each size in the total line")
    args = parser.parse_args(argv)
    try:
        sizes = parse_option("--sizes", args.sizes, parse_sizes)
        large = parse_option("--large", args.large, parse_sizes)[0]
        profiles = [(p, load_profile(p)) for p in args.profiles]
    except InputError as exc:
        print(f"calibration_price_spread: error: {exc}")
        return 2
    columns = ["model"] + [f"at {rt:g} ns" for rt in args.roundtrips]
    totals = {p: [0.0] * len(columns) for p, _ in profiles}
    for n in sizes:
        print(f"# allreduce {n} B (hw, kernel alone): profile: model price [its fields] | price at each round trip "
              f"(the jobs' range; jobs)")
        column_values = [[] for _ in columns]
        for path, prof in profiles:
            model = ps.kernel_model(LocalModel.from_dict(prof["model"]))
            fields = ps.price_fields(model, "hw", "allreduce", n, large)
            own = ps.profile_price(prof, "hw", "allreduce", n, large)
            got = [ps.price_at(prof, "hw", "allreduce", n, large, rt) for rt in args.roundtrips]
            values = [own] + [g["price_ns"] for g in got]
            for k, v in enumerate(values):
                column_values[k].append(v)
                totals[path][k] += args.calls * v
            shown = ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}" for k, v in fields.items())
            print(f"{path}: {own:.0f} [{shown}] | " + " | ".join(
                f"{g['price_ns']:.0f} ({g['low_ns']:.0f}-{g['high_ns']:.0f}; {g['jobs']})" for g in got))
            for rt, g in zip(args.roundtrips, got):
                print(f"    at {rt:g} ns: {g['rule']}")
        print("# spread across the profiles (highest / lowest): " + ", ".join(
            f"{c} {max(v) / min(v):.2f}x" for c, v in zip(columns, column_values)))
    print(f"# {args.calls} calls of each size, ms: " + "; ".join(
        f"{path}: " + ", ".join(f"{c} {t / 1e6:.2f}" for c, t in zip(columns, totals[path])) for path, _ in profiles))
    print("# spread of that total across the profiles: " + ", ".join(
        f"{c} {max(t[k] for t in totals.values()) / min(t[k] for t in totals.values()):.2f}x"
        for k, c in enumerate(columns)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
