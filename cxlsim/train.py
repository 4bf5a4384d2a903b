"""The `cxlsim train` command: project data-parallel training throughput on a cluster spec.

`cxlsim train CLUSTER.yaml --model resnet50 --mode sync|async|ddp` loads and
validates the cluster spec (cxlsim.models.training.cluster), builds the job
from the GPU and DNN profiles, runs the mode's DES and prints:
- throughput in samples/s over the whole run;
- the speedup over one GPU of a stated reference type (default v100) running
  the same model, batch and precision alone (no communication);
- each worker's busy, communicating and waiting time.

The run workspace (cxlsim.results) holds `cluster.yaml` (the spec with the
precision the run used; re-loadable), `summary.json` (mode, model, batch,
precision, steps, seed, the mode's parameters, throughput, speedup and its
reference), `workers.csv`/`workers.json` (times in ns) and `provenance.json`.
"""
from __future__ import annotations

import dataclasses
import sys

import yaml

from cxlsim.errors import InputError
from cxlsim.models.training import cluster, modes, profiles
from cxlsim.results import Workspace, make_rng
from cxlsim.units import UnitError, parse_size

__all__ = ["run", "summary", "register", "DEFAULT_STEPS", "DEFAULT_REFERENCE_GPU"]

DEFAULT_STEPS = 20
DEFAULT_REFERENCE_GPU = "v100"
WORKER_COLUMNS = ["worker", "gpu", "steps", "samples", "busy_ns", "communicating_ns", "waiting_ns", "finished_ns"]


def run(spec, model: str, mode: str, *, steps: int = DEFAULT_STEPS, batch: int | None = None,
        precision: str | None = None, gradient_dtype: str = "fp32", seed: int | None = None, **params):
    """(result, job): one simulated run of `mode` (extra keyword parameters go to the mode)."""
    job = modes.make_job(spec, model, batch=batch, precision=precision, gradient_dtype=gradient_dtype)
    return modes.simulate(spec, job, mode, steps=steps, seed=seed, **params), job


def summary(result, job, reference_gpu: str = DEFAULT_REFERENCE_GPU) -> dict:
    """The run's headline figures, with the speedup over one `reference_gpu` alone."""
    single = job.batch / profiles.iteration_ns(reference_gpu, job.model, job.batch, job.precision) * 1e9
    return {
        "mode": result.mode, "model": result.model, "batch_per_worker": job.batch, "precision": result.precision,
        "gradient_dtype": job.gradient_dtype, "workers": len(result.workers), "steps": result.steps,
        "samples": result.samples, "elapsed_ns": result.elapsed_ns,
        "throughput_samples_per_s": result.throughput_samples_per_s,
        "reference_gpu": profiles.gpu(reference_gpu).key, "reference_samples_per_s": single,
        "speedup_over_reference": result.throughput_samples_per_s / single,
        "seed": result.seed, "events": result.events, "params": result.params, **result.extra,
    }


def _spec_dict(spec) -> dict:
    return {"name": spec.name, "interconnect": spec.interconnect, "precision": spec.precision,
            "memory_servers": spec.memory_servers, "server_cores": spec.server_cores,
            "nodes": [{"gpu": n.gpu, "gpus": n.gpus, "repeat": n.repeat} for n in spec.nodes]}


def _size(flag: str, value, default: int) -> int:
    """A size flag in bytes (`default` if not given)."""
    if value is None:
        return default
    try:
        return parse_size(value)
    except UnitError as exc:
        raise InputError(f"{flag}: {exc}") from None


def _describe(spec) -> str:
    counts = {}
    for w in spec.workers():
        counts[w.gpu] = counts.get(w.gpu, 0) + 1
    gpus = ", ".join(f"{n}x {g}" for g, n in counts.items())
    return (f"{spec.name}: {spec.size} GPUs on {spec.worker_hosts} nodes ({gpus}), {spec.interconnect}, "
            f"{spec.memory_servers} memory server(s) x {spec.server_cores} core(s)")


def main(args) -> int:
    spec = cluster.load(args.cluster)
    if args.memory_servers is not None or args.server_cores is not None:
        for flag, value in (("--memory-servers", args.memory_servers), ("--server-cores", args.server_cores)):
            if value is not None and value < 1:
                raise InputError(f"{flag}: expected an integer >= 1, got {value}")
        spec = dataclasses.replace(spec, memory_servers=args.memory_servers or spec.memory_servers,
                                   server_cores=args.server_cores or spec.server_cores)
    if args.precision is not None:
        spec = dataclasses.replace(spec, precision=args.precision)
    # Check the speedup's reference before the run: e.g. fp32 has no figure on Ampere GPUs.
    profiles.iteration_ns(args.reference_gpu, args.model, args.batch or profiles.dnn(args.model).reference_batch,
                          spec.precision)
    params = {"cv": args.cv, "chunk_bytes": _size("--chunk", args.chunk, modes.DEFAULT_TRAINING_CHUNK_BYTES)}
    if args.mode == "ddp":
        params.update(overlap=not args.no_overlap,
                      bucket_cap_bytes=_size("--bucket-cap", args.bucket_cap, 25 * modes.MIB),
                      first_bucket_bytes=_size("--first-bucket", args.first_bucket, modes.MIB))
    elif args.mode == "async":
        params["tau"] = args.tau
    _, seed = make_rng(args.seed)  # draw and record a seed if none was given
    result, job = run(spec, args.model, args.mode, steps=args.steps, batch=args.batch,
                      gradient_dtype=args.gradient_dtype, seed=seed, **params)
    head = summary(result, job, args.reference_gpu)
    print(f"# cxlsim training projection: {head['mode']}, {head['model']}, batch {head['batch_per_worker']} "
          f"per worker, precision {head['precision']}, {head['gradient_dtype']} gradients "
          f"({job.gradient_bytes / modes.MIB:.1f} MiB)")
    print(f"# cluster {_describe(spec)}")
    print(f"# throughput: {head['throughput_samples_per_s']:.1f} samples/s over {head['steps']} steps "
          f"({head['elapsed_ns'] / 1e9:.3f} s simulated); speedup over 1x {head['reference_gpu']}: "
          f"{head['speedup_over_reference']:.2f}x")
    print(f"# {'worker':<7} {'gpu':<15} {'steps':>6} {'busy_s':>10} {'comm_s':>10} {'wait_s':>10}")
    for w in result.workers:
        print(f"{w.worker:<9d} {w.gpu:<15} {w.steps:>6d} {w.busy_ns / 1e9:>10.4f} "
              f"{w.communicating_ns / 1e9:>10.4f} {w.waiting_ns / 1e9:>10.4f}")
    workspace = Workspace(args.output) if args.output else Workspace.new("runs", f"train-{spec.name}")
    workspace.write_text("cluster.yaml", yaml.safe_dump(_spec_dict(spec), sort_keys=False))
    workspace.write_provenance(seed)
    workspace.write_json("summary", head)
    rows = result.worker_rows()
    workspace.write_csv("workers", rows, WORKER_COLUMNS)
    workspace.write_json("workers", rows)
    print(f"# workspace: {workspace.path}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="project data-parallel training throughput (EDDIS sync/async, PyTorch DDP)",
        description="Simulate data-parallel training of a model on the GPUs of CLUSTER.yaml (see "
                    "cxlsim.models.training.cluster for the format). Prints throughput in samples/s, the "
                    "speedup over one reference GPU and each worker's busy/communicating/waiting time, "
                    "and writes a run workspace.")
    p.add_argument("cluster", help="cluster spec YAML file")
    p.add_argument("--model", required=True, help=f"model: {', '.join(sorted(profiles.dnns()))}")
    p.add_argument("--mode", required=True, choices=sorted(modes.MODES), help="training mode")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"steps per worker (async: the budget is steps x workers local steps); default {DEFAULT_STEPS}")
    p.add_argument("--batch", type=int, help="samples per worker per step (default: the model's reference batch)")
    p.add_argument("--precision", choices=list(profiles.PRECISIONS), help="override the spec's precision")
    p.add_argument("--gradient-dtype", choices=sorted(profiles.GRADIENT_DTYPES), default="fp32",
                   help="element type of communicated gradients (default fp32; AMP keeps fp32 gradients)")
    p.add_argument("--cv", type=float, default=0.0,
                   help="coefficient of variation of the per-iteration lognormal jitter (default 0: exact profile times)")
    p.add_argument("--seed", type=int, help="random seed (drawn and recorded if not given)")
    p.add_argument("--tau", type=int, default=1, help="async: local steps between exchanges with the centre (default 1)")
    p.add_argument("--memory-servers", type=int, help="sync/async: override the spec's memory_servers")
    p.add_argument("--server-cores", type=int, help="sync/async: override the spec's server_cores")
    p.add_argument("--bucket-cap", help="ddp: bucket size (default 25MiB)")
    p.add_argument("--first-bucket", help="ddp: first bucket size (default 1MiB)")
    p.add_argument("--no-overlap", action="store_true", help="ddp: start all-reduces only after the backward pass")
    p.add_argument("--chunk", help="network pipelining unit (default 1MiB)")
    p.add_argument("--reference-gpu", default=DEFAULT_REFERENCE_GPU,
                   help=f"GPU type of the one-GPU baseline for the speedup (default {DEFAULT_REFERENCE_GPU})")
    p.add_argument("--output", help="workspace directory (default runs/train-NAME-TIMESTAMP)")
    p.set_defaults(func=main)
