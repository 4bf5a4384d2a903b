"""The `cxlsim train` command: project data-parallel training throughput on a cluster spec.

`cxlsim train CLUSTER.yaml --model resnet50 --mode sync|async|hybrid|ddp|horovod`
loads and validates the cluster spec (cxlsim.models.training.cluster), builds
the job from the GPU and DNN profiles, runs the mode (cxlsim.models.training.modes:
the built-in modes and the plug-ins') and prints:
- throughput in samples/s over the whole run;
- the speedup over one GPU of a stated reference type (default v100) running
  the same model, batch and precision alone (no communication);
- each worker's busy, communicating and waiting time;
- for a mode with a memory-server store, the store's load, and a NOTE when
  the store is the bottleneck (store_load.py);
- with `--convergence`, next to the raw throughput, the labelled ESTIMATE of
  the optional staleness-aware convergence model (convergence.py):
  progress factor, effective samples/s and time-to-target.

The mode options are the `Option`s of the modes' records (`option_table`):
each becomes one flag, its help says which modes take it, and a flag the
chosen mode does not declare is an InputError naming the modes it applies to.

The run workspace (cxlsim.results) holds `cluster.yaml` (the spec with the
precision the run used; re-loadable), `summary.json` (mode, model, batch,
precision, steps, seed, the mode's parameters, throughput, speedup and its
reference, and the convergence estimate if asked), `workers.csv`/`workers.json`
(times in ns), `timeline.png` (a Gantt chart of the first `--timeline-steps`
steps: per worker, computing and the time after it until the step ends,
i.e. communicating and waiting) and `provenance.json`.
"""
from __future__ import annotations

import argparse
import dataclasses

import yaml

from cxlsim.errors import InputError
from cxlsim.models.training import cluster, convergence, core, modes, profiles, stragglers
from cxlsim.results import Workspace, make_rng

__all__ = ["run", "summary", "timeline_figure", "option_table", "register", "DEFAULT_STEPS",
           "DEFAULT_REFERENCE_GPU"]

DEFAULT_STEPS = 20
DEFAULT_TIMELINE_STEPS = 5
DEFAULT_REFERENCE_GPU = "v100"
WORKER_COLUMNS = ["worker", "gpu", "steps", "samples", "busy_ns", "communicating_ns", "waiting_ns", "finished_ns"]


def run(spec, model: str, mode: str, *, steps: int = DEFAULT_STEPS, batch: int | None = None,
        precision: str | None = None, gradient_dtype: str = "fp32", seed: int | None = None, **params):
    """(result, job): one simulated run of `mode` (extra keyword parameters go to the mode)."""
    job = core.make_job(spec, model, batch=batch, precision=precision, gradient_dtype=gradient_dtype)
    return modes.simulate(spec, job, mode, steps=steps, seed=seed, **params), job


def summary(result, job, reference_gpu: str = DEFAULT_REFERENCE_GPU, with_convergence: bool = False) -> dict:
    """The run's headline figures, with the speedup over one `reference_gpu` alone (and, if asked,
    the labelled estimate of the optional convergence model)."""
    single = job.batch / profiles.iteration_ns(reference_gpu, job.model, job.batch, job.precision) * 1e9
    return {
        "mode": result.mode, "model": result.model, "batch_per_worker": job.batch, "precision": result.precision,
        "gradient_dtype": job.gradient_dtype, "workers": len(result.workers), "steps": result.steps,
        "samples": result.samples, "elapsed_ns": result.elapsed_ns,
        "throughput_samples_per_s": result.throughput_samples_per_s,
        "reference_gpu": profiles.gpu(reference_gpu).key, "reference_samples_per_s": single,
        "speedup_over_reference": result.throughput_samples_per_s / single,
        "seed": result.seed, "events": result.events, "params": result.params, **result.extra,
        **({"convergence_model": convergence.estimate(result, modes.get(result.mode).convergence)}
           if with_convergence else {}),
    }


def timeline_figure(result, steps: int = DEFAULT_TIMELINE_STEPS):
    """A Gantt chart of the run's first `steps` steps (rounds for hybrid); the caller closes it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"timeline steps: expected an integer >= 1, got {steps!r}")
    if result.step_end_ns:
        until = result.step_end_ns[min(steps, len(result.step_end_ns)) - 1]
    else:  # async: the same share of the run
        until = result.elapsed_ns * min(1.0, steps / result.steps)
    W = len(result.intervals)
    fig, ax = plt.subplots(figsize=(10, 0.35 * W + 1.6))
    for w, spans in enumerate(result.intervals):
        for start, cend, end in spans:
            if start >= until:
                break
            ax.broken_barh([(start / 1e6, (cend - start) / 1e6)], (w - 0.4, 0.8), color="tab:blue")
            if end > cend:
                ax.broken_barh([(cend / 1e6, (end - cend) / 1e6)], (w - 0.4, 0.8), color="tab:orange")
    gpus = [f"{w.worker} {w.gpu}" for w in result.workers]
    ax.set_yticks(range(W), gpus, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, until / 1e6)
    ax.set_xlabel("simulated time [ms]")
    ax.set_title(f"{result.mode}, {result.model}: first {steps} {result.step_unit} (seed {result.seed})",
                 fontsize=9, pad=24)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color="tab:blue", label="computing (GPU)"),
                       Patch(color="tab:orange", label="after compute until the step ends: communicating / waiting")],
              loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    return fig


def _spec_dict(spec) -> dict:
    return {"name": spec.name, "interconnect": spec.interconnect, "precision": spec.precision,
            "memory_servers": spec.memory_servers, "server_cores": spec.server_cores,
            "nodes": [{"gpu": n.gpu, "gpus": n.gpus, "repeat": n.repeat} for n in spec.nodes]}


def _slowdown(text: str):
    """'P,F,D' -> Slowdown(probability=P, factor=F, duration_steps=D)."""
    parts = text.split(",")
    try:
        p, f, d = float(parts[0]), float(parts[1]), int(parts[2])
        if len(parts) != 3:
            raise ValueError
    except (ValueError, IndexError):
        raise InputError(f"--slowdown: expected PROBABILITY,FACTOR,STEPS like 0.05,1.5,10, got {text!r}") from None
    return stragglers.Slowdown(probability=p, factor=f, duration_steps=d)


def _failure(text: str):
    """'W:S' -> Failure(worker=W, step=S)."""
    try:
        w, s = (int(x) for x in text.split(":"))
    except ValueError:
        raise InputError(f"--fail: expected WORKER:ITERATION like 3:10, got {text!r}") from None
    return stragglers.Failure(worker=w, step=s)



def option_table(known: dict | None = None) -> dict:
    """{flag: (Option, [mode names])}: every mode option and the modes that declare it, from the
    Mode records (`known`: name -> Mode, default every mode). Two different Options with one
    flag are an InputError naming the flag and the modes."""
    table = {}
    for mode in (modes.all_modes() if known is None else known).values():
        for option in mode.options:
            if option.flag in table and table[option.flag][0] != option:
                raise InputError(f"{option.flag}: declared differently by modes {', '.join(table[option.flag][1])} "
                                 f"and {mode.name}; modes that share a flag must share its Option record")
            table.setdefault(option.flag, (option, []))[1].append(mode.name)
    return table


def _dest(option) -> str:
    return f"mode_option_{option.name}"


def _mode_params(args, mode) -> dict:
    """The chosen mode's options as given on the command line; an option given that the mode does not
    declare is an InputError naming it and the modes it applies to."""
    declared = {o.flag for o in mode.options}
    params, refused = {}, []
    for flag, (option, users) in option_table(_KNOWN_MODES).items():
        given = getattr(args, _dest(option), None)
        if given is None:
            continue
        if flag not in declared:
            refused.append(f"{flag} (applies to {', '.join(users)})")
        else:
            params[option.name] = option.value(given)
    if refused:
        raise InputError(f"--mode {mode.name} does not take {'; '.join(refused)}")
    return params


def _describe(spec, result) -> str:
    counts = {}
    for w in spec.workers():
        counts[w.gpu] = counts.get(w.gpu, 0) + 1
    gpus = ", ".join(f"{n}x {g}" for g, n in counts.items())
    p = result.params
    if "memory_servers" in p:
        store = f"{p['memory_servers']} memory server(s) x {p['server_cores']} core(s)"
    else:
        store = p.get("store", "no store")
    fabric = spec.interconnect
    if p.get("pool") and "store" not in p:  # ddp, horovod: the all-reduces run on the pool
        fabric = (f"all-reduce on CXL pool {p['pool']} ({p['coherence']}, {p['allreduce']}; "
                  f"{spec.interconnect} unused)")
    return f"{spec.name}: {spec.size} GPUs on {spec.worker_hosts} nodes ({gpus}), {fabric}; store: {store}"


def _store_line(result) -> str | None:
    """The store's load (store_load.py): its busiest resource and, when it is the bottleneck, a NOTE."""
    x = result.extra
    if "store_utilisation" not in x:
        return None
    u = x["store_utilisation"]
    line = (f"# store load: busiest {x['store_busiest']}, {max(u.values()):.0%} of the run (CPU {u['cpu']:.0%}, "
            f"link in {u['link_in']:.0%}, link out {u['link_out']:.0%}); the store serves at most "
            f"{x['store_bound_samples_per_s']:.1f} samples/s, the GPUs alone {x['gpu_bound_samples_per_s']:.1f}")
    if x["store_bound"]:
        line += ("\n# NOTE: the store is the bottleneck: it cannot keep up with the GPUs, so this throughput is the "
                 "store's; a larger store (--memory-servers, --server-cores) would raise it")
    return line


def main(args) -> int:
    if _PLUGIN_ERROR is not None:
        raise _PLUGIN_ERROR
    mode = modes.get(args.mode)
    params = _mode_params(args, mode)
    spec = cluster.load(args.cluster)
    if args.precision is not None:
        spec = dataclasses.replace(spec, precision=args.precision)
    for gpu in dict.fromkeys(w.gpu for w in spec.workers()):
        profiles.check_fits(gpu, args.model)  # every data-parallel worker holds the whole training state
    # Check the speedup's reference before the run: e.g. fp32 has no figure on Ampere GPUs.
    try:
        profiles.check_fits(args.reference_gpu, args.model)
    except InputError as exc:
        raise InputError(f"--reference-gpu {args.reference_gpu}: the speedup's reference trains the model on this "
                         f"GPU alone, and {exc}; pick a larger --reference-gpu") from None
    profiles.iteration_ns(args.reference_gpu, args.model, args.batch or profiles.dnn(args.model).reference_batch,
                          spec.precision)
    params["cv"] = args.cv
    if args.slowdown:
        params["slowdown"] = _slowdown(args.slowdown)
    if args.fail:
        params["failure"] = _failure(args.fail)
    _, seed = make_rng(args.seed)  # draw and record a seed if none was given
    result, job = run(spec, args.model, mode.name, steps=args.steps, batch=args.batch,
                      gradient_dtype=args.gradient_dtype, seed=seed, **params)
    spec = core.with_store(spec, params.get("memory_servers"), params.get("server_cores"))
    head = summary(result, job, args.reference_gpu, with_convergence=args.convergence)
    print(f"# cxlsim training projection: {head['mode']}, {head['model']}, batch {head['batch_per_worker']} "
          f"per worker, precision {head['precision']}, {head['gradient_dtype']} gradients "
          f"({job.gradient_bytes / core.MIB:.1f} MiB)")
    print(f"# cluster {_describe(spec, result)}")
    print(f"# throughput: {head['throughput_samples_per_s']:.1f} samples/s over {head['steps']} {result.step_unit} "
          f"({head['elapsed_ns'] / 1e9:.3f} s simulated); speedup over 1x {head['reference_gpu']}: "
          f"{head['speedup_over_reference']:.2f}x")
    store = _store_line(result)
    if store:
        print(store)
    if args.convergence:
        est = head["convergence_model"]
        ttt = est["time_to_target_s"]
        print(f"# {est['label']}:")
        print(f"#   progress factor {est['progress_factor']:.3f}, effective {est['effective_samples_per_s']:.1f} "
              f"samples/s" + ("" if ttt is None else f", time to target {ttt / 3600:.2f} h "
                                                      f"({est['target']['epochs']} epochs of "
                                                      f"{est['target']['dataset_samples']} samples)"))
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
    import matplotlib.pyplot as plt
    fig = timeline_figure(result, args.timeline_steps)
    workspace.save_plot("timeline", fig)
    plt.close(fig)
    print(f"# workspace: {workspace.path}")
    return 0


_KNOWN_MODES = None
"""The modes the parser was built with (built-in and plug-in), set by `register`."""
_PLUGIN_ERROR = None
"""A plug-in that failed to load while the parser was built: raised when the command runs."""


def register(subparsers) -> None:
    global _KNOWN_MODES, _PLUGIN_ERROR
    _PLUGIN_ERROR = None
    try:
        _KNOWN_MODES = modes.all_modes()
        table = option_table(_KNOWN_MODES)
    except InputError as exc:  # a broken plug-in: the built-in modes still get their flags
        _KNOWN_MODES, _PLUGIN_ERROR = {m.name: m for m in modes.BUILT_IN}, exc
        table = option_table(_KNOWN_MODES)
    p = subparsers.add_parser(
        "train", help="project data-parallel training throughput (EDDIS sync/async/hybrid, PyTorch DDP, Horovod)",
        description="Simulate data-parallel training of a model on the GPUs of CLUSTER.yaml (see "
                    "cxlsim.models.training.cluster for the format). Prints throughput in samples/s, the "
                    "speedup over one reference GPU and each worker's busy/communicating/waiting time, "
                    "and writes a run workspace. Options marked with modes apply to those modes only; "
                    "any other mode refuses them.")
    p.add_argument("cluster", help="cluster spec YAML file")
    p.add_argument("--model", required=True, help=f"model: {', '.join(sorted(profiles.dnns()))}")
    p.add_argument("--mode", required=True,
                   help="training mode: " + "; ".join(f"{m.name} ({m.summary})" if m.summary else m.name
                                                      for m in _KNOWN_MODES.values()))
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"steps per worker (async: the budget is steps x workers local steps; hybrid: rounds); "
                        f"default {DEFAULT_STEPS}")
    p.add_argument("--batch", type=int, help="samples per worker per step (default: the model's reference batch)")
    p.add_argument("--precision", choices=list(profiles.PRECISIONS), help="override the spec's precision")
    p.add_argument("--gradient-dtype", choices=sorted(profiles.GRADIENT_DTYPES), default="fp32",
                   help="element type of communicated gradients (default fp32; AMP keeps fp32 gradients)")
    p.add_argument("--cv", type=float, default=0.0,
                   help="coefficient of variation of the per-iteration lognormal jitter (default 0: exact profile times)")
    p.add_argument("--seed", type=int, help="random seed (drawn and recorded if not given)")
    p.add_argument("--slowdown", help="transient slowdowns PROBABILITY,FACTOR,STEPS per iteration, e.g. 0.05,1.5,10")
    p.add_argument("--fail", help="failed node WORKER:ITERATION: that worker never finishes that iteration "
                                  "(synchronous modes then stall and say so)")
    p.add_argument("--timeline-steps", type=int, default=DEFAULT_TIMELINE_STEPS,
                   help=f"steps (hybrid: rounds) shown in timeline.png (default {DEFAULT_TIMELINE_STEPS})")
    p.add_argument("--convergence", action="store_true",
                   help="also print the OPTIONAL staleness-aware convergence model's ESTIMATE (progress factor, "
                        "effective samples/s, time-to-target) next to the raw throughput")
    p.add_argument("--reference-gpu", default=DEFAULT_REFERENCE_GPU,
                   help=f"GPU type of the one-GPU baseline for the speedup (default {DEFAULT_REFERENCE_GPU})")
    p.add_argument("--output", help="workspace directory (default runs/train-NAME-TIMESTAMP)")
    for flag, (option, users) in table.items():
        text = f"{'/'.join(users)}: {option.help}"
        try:
            if option.switch is not None:
                p.add_argument(flag, dest=_dest(option), action="store_const", const=True, default=None, help=text)
            else:
                p.add_argument(flag, dest=_dest(option), default=None, choices=list(option.choices) or None,
                               help=text, metavar=None if option.choices else flag[2:].upper().replace("-", "_"))
        except argparse.ArgumentError:  # a plug-in mode's flag that cxlsim train already has
            _PLUGIN_ERROR = InputError(f"{flag}: the option of mode(s) {', '.join(users)} clashes with a cxlsim "
                                       "train option; give it another flag")
    p.set_defaults(func=main)
