"""`cxlsim bench train`: the subcommand's options, the run, the summary table and the record files."""
from __future__ import annotations

import argparse

from cxlsim.coherence import Coherence
from cxlsim.emulator.launch import check_np
from cxlsim.emulator.pool import parse_pool_spec
from cxlsim.emulator.training import config as settings
from cxlsim.emulator.training import data, models, modes, run_record
from cxlsim.emulator.training.launcher import train
from cxlsim.errors import InputError
from cxlsim.models.training.stragglers import Slowdown

HELP = "data-parallel training of a small numpy model among local ranks on the pool (sync, async, hybrid, ddp)"


def register(kinds) -> None:
    """Add the `train` parser to `cxlsim bench`'s subparsers."""
    p = kinds.add_parser("train", help=HELP, description=HELP + "; writes DIR/train.json and DIR/steps.csv with --out.")
    p.add_argument("--np", type=_whole("--np"), default=2, help="local ranks (default 2)")
    p.add_argument("--mode", default="sync", help="; ".join(f"{m.name}: {m.help}" for m in modes.MODES.values()))
    p.add_argument("--model", default="mlp", help=f"{', '.join(models.MODEL_NAMES)} (default mlp)")
    p.add_argument("--dataset", default="synthetic",
                   help="synthetic (default, generated from the seed) or digits (scikit-learn's, extra 'digits')")
    p.add_argument("--steps", type=_whole("--steps"), default=200, help="training steps per rank (default 200)")
    p.add_argument("--batch-size", type=_whole("--batch-size"), default=32, help="samples per rank and step (default 32)")
    p.add_argument("--lr", type=_number("--lr"), default=0.1, help="SGD learning rate (default 0.1)")
    p.add_argument("--seed", type=_whole("--seed"), default=1, help="seed of data, initial parameters, stragglers")
    p.add_argument("--pool", default="shm", help="pool backend: shm (default), file:PATH, dax:PATH or numa:N")
    p.add_argument("--coherence", choices=Coherence.names(), default=None,
                   help="hw: plain stores; flush: clflushopt/clwb + fences (default: the backend's)")
    p.add_argument("--overlap", choices=("on", "off"), default=None,
                   help="ddp: start each bucket's allreduce during the backward pass (default on)")
    p.add_argument("--buckets", type=_whole("--buckets"), default=None,
                   help="ddp: gradient buckets (default 4; PyTorch's 25 MiB cap would give one)")
    p.add_argument("--lockstep", action="store_true",
                   help="async, hybrid: the deterministic variant (sync and ddp always are)")
    p.add_argument("--factors", default=None, metavar="F1,F2,...",
                   help="per-rank compute slow-down factors >= 1 (one value: every rank)")
    p.add_argument("--gpus", default=None, metavar="GPU1,GPU2,...",
                   help="per-rank GPU mix from the catalog (cxlsim list gpus), mapped to slow-down factors")
    p.add_argument("--cv", type=_number("--cv"), default=0.0,
                   help="straggler jitter: coefficient of variation of the per-step compute time (default 0)")
    p.add_argument("--slowdown", default=None, metavar="P,F,D",
                   help="transient stragglers: probability per step, factor, duration in steps, e.g. 0.05,1.5,10")
    p.add_argument("--fail", default=None, metavar="RANK:STEP",
                   help="that rank fails at that step: sync and ddp fail (RankFailure), async and hybrid go on")
    p.add_argument("--eval-every", type=_whole("--eval-every"), default=10,
                   help="global steps between the parameter snapshots evaluated on the test set (default 10)")
    p.add_argument("--target-accuracy", default="0.8,0.9", metavar="A1,A2",
                   help="test accuracies whose time to reach is reported (default 0.8,0.9)")
    p.add_argument("--timeout", type=_number("--timeout"), default=30.0,
                   help="seconds a rank waits for the others before failing (default 30)")
    p.add_argument("--pin", choices=settings.PIN_CHOICES, default="auto",
                   help="pin rank r to CPU r: auto (default) when every rank has a CPU of its own, on, off")
    p.add_argument("--out", default=None, metavar="DIR", help="write DIR/train.json and DIR/steps.csv (atomically)")
    p.set_defaults(func=bench_train)


def _whole(flag):
    def parse(text):
        try:
            return int(text)
        except ValueError:
            raise InputError(f"{flag}: expected a whole number, got {text!r}") from None
    parse.__name__ = "whole number"  # argparse's message: "invalid whole number value: 'x'"
    return parse


def _number(flag):
    def parse(text):
        try:
            return float(text)
        except ValueError:
            raise InputError(f"{flag}: expected a number, got {text!r}") from None
    parse.__name__ = "number"
    return parse


def config_from(args: argparse.Namespace) -> settings.TrainConfig:
    """The TrainConfig of parsed `bench train` arguments (InputError naming the flag on bad input)."""
    nranks = check_np(args.np)
    mode = modes.mode(args.mode)
    if args.model not in models.MODEL_NAMES:
        raise InputError(f"--model: expected one of {', '.join(models.MODEL_NAMES)}, got {args.model!r}")
    if args.dataset not in data.DATASETS:
        raise InputError(f"--dataset: expected one of {', '.join(data.DATASETS)}, got {args.dataset!r}")
    spec = parse_pool_spec(args.pool)
    coherence = Coherence.parse(args.coherence or spec.default_coherence, "--coherence")
    if args.factors and args.gpus:
        raise InputError("--factors and --gpus: give one of them (a GPU mix is mapped to factors)")
    gpus = tuple(settings.parse_list("--gpus", args.gpus, nranks)) if args.gpus else (None,) * nranks
    factors = (settings.gpu_factors(gpus) if args.gpus else
               settings.parse_factors(args.factors, nranks) if args.factors else (1.0,) * nranks)
    targets = tuple(float(t) for t in _items("--target-accuracy", args.target_accuracy))
    overlap = None if args.overlap is None else args.overlap == "on"
    return settings.TrainConfig(
        mode=mode.name, nranks=nranks, model=args.model, dataset=args.dataset, steps=args.steps,
        batch_size=args.batch_size, lr=args.lr, seed=args.seed, coherence=coherence, pool=str(spec),
        overlap=overlap, buckets=args.buckets,
        lockstep=args.lockstep, factors=factors, gpus=gpus, cv=args.cv,
        slowdown=Slowdown.parse(args.slowdown) if args.slowdown else None,
        failure=settings.parse_failure(args.fail) if args.fail else None,
        eval_every=args.eval_every, timeout_s=args.timeout, targets=targets, pin=args.pin)


def _items(flag: str, text: str) -> list[str]:
    items = [t.strip() for t in text.split(",")]
    try:
        [float(t) for t in items]
    except ValueError:
        raise InputError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    return items


def summary(record: dict) -> str:
    """The run in a few lines: settings, throughput, accuracy, per-rank step times (median and spread)."""
    import numpy as np

    head = (f"# cxlsim bench train: mode {record['mode']}, np {record['np']}, model {record['model']} "
            f"({record['param_count']} parameters, {record['param_bytes']} B), dataset {record['dataset']}, "
            f"{record['steps']} steps x batch {record['batch_size']}, lr {record['lr']:g}, seed {record['seed']}, "
            f"pool {record['pool']}, coherence {record['coherence']}, placement {record['placement']}, "
            f"{_pinning(record.get('pinned_cores'))}")
    lines = [head]
    if record["mode"] == "ddp":
        lines.append(f"# ddp: {record['buckets']} buckets, overlap {'on' if record['overlap'] else 'off'}")
    if any(f != 1.0 for f in record["factors"]) or record["stragglers"]:
        gpus = f" (GPUs {', '.join(str(g) for g in record['gpus'])})" if any(record["gpus"]) else ""
        lines.append(f"# slow-down factors {', '.join(f'{f:.3g}' for f in record['factors'])}{gpus}; "
                     f"stragglers {record['stragglers']}")
    lines += ["# " + w for w in record.get("warnings", ())]
    lines.append(f"{'rank':>4} {'steps':>6} {'step ms (median)':>17} {'min-max':>17} {'compute ms':>11} "
                 f"{'comm ms':>9} {'last loss':>10}")
    for entry in record["ranks"]:
        if not entry["steps_done"]:
            lines.append(f"{entry['rank']:>4} {0:>6}")
            continue
        step_ms = np.array(entry["step_s"]) * 1e3
        lines.append(f"{entry['rank']:>4} {entry['steps_done']:>6} {np.median(step_ms):>17.3f} "
                     f"{f'{step_ms.min():.3f}-{step_ms.max():.3f}':>17} "
                     f"{np.median(entry['compute_s']) * 1e3:>11.3f} {np.median(entry['comm_s']) * 1e3:>9.3f} "
                     f"{entry['loss'][-1]:>10.4f}")
    windows = record.get("time_to_accuracy_window_s", {})
    tta = ", ".join(f"{acc}: {'not reached' if t is None else f'{t:.3f} s'}"
                    + (f" (crossed after {windows[acc][0]:.3f} s)" if windows.get(acc) else "")
                    for acc, t in record["time_to_accuracy_s"].items())
    steps = record.get("step_throughput_samples_per_s")
    by_step = (f" (from the median steps {steps['median']:.0f}, p90-p10 steps {steps['p10_p90'][0]:.0f}-"
               f"{steps['p10_p90'][1]:.0f})" if steps else "")
    lines.append(f"throughput {record['throughput_samples_per_s']:.1f} samples/s{by_step}; final test accuracy "
                 f"{record['final_accuracy']:.4f}; time to accuracy {tta}")
    if record["failed_ranks"]:
        lines.append(f"failed ranks (the others went on): {record['failed_ranks']}")
    return "\n".join(lines) + "\n"


def _pinning(cores) -> str:
    if not cores or all(c is None for c in cores):
        return "ranks not pinned"
    return "ranks pinned to CPUs " + ",".join(str(c) for c in cores)


def bench_train(args) -> int:
    record = train(config_from(args))
    print(summary(record), end="")
    if args.out:
        json_path, csv_path = run_record.write(args.out, record)
        print(f"# wrote {json_path} and {csv_path}")
    return 0
