"""The settings of one `cxlsim bench train` run, checked once, the same on every rank.

Heterogeneity has two parts. The per-rank slow-down factor (1.0 = none) comes from `--factors`
or from a GPU mix (`--gpus`): a rank's factor is the fastest GPU's time per ResNet-50 sample
over its own GPU's (the catalog models/training/gpus.yaml, tf32 column: plain fp32 before
Ampere), so the fastest GPU of the mix runs at this CPU's speed and the others proportionally
slower. Stragglers multiply that per step by the DES's seeded steps x ranks matrix
(`cxlsim.models.training.stragglers.multipliers`: jitter `--cv`, transient `--slowdown`, a failed
rank `--fail`); a failed rank's multiplier is infinite from its failure step on.
"""
from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from cxlsim.coherence import Coherence
from cxlsim.errors import InputError
from cxlsim.models.training import profiles, stragglers

GPU_PRECISION = "tf32"  # the catalog column the GPU mix is read from (fp32 on pre-Ampere GPUs)
PIN_CHOICES = ("auto", "on", "off")  # auto: pin when every rank has a core of its own
STRAGGLER_STREAM = 1  # the straggler matrix's own random stream: SeedSequence(seed).spawn index


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One run's settings. Times in seconds; `factors` per rank (>= 1.0; empty: 1.0 each), `gpus` per rank
    (names or None; empty: None each); `targets` are test accuracies whose time to reach is reported;
    `pin`: whether rank r runs on core r of this process's CPUs (see `pinned_cores`); `overlap`
    (ddp) defaults to True."""

    mode: str
    nranks: int
    model: str = "mlp"
    dataset: str = "synthetic"
    steps: int = 200
    batch_size: int = 32
    lr: float = 0.1
    seed: int = 1
    coherence: Coherence = Coherence.HW
    pool: str = "shm"
    overlap: bool | None = None
    buckets: int | None = None
    lockstep: bool = False
    factors: tuple = ()
    gpus: tuple = ()
    cv: float = 0.0
    slowdown: stragglers.Slowdown | None = None
    failure: stragglers.Failure | None = None
    eval_every: int = 10
    timeout_s: float = 30.0
    targets: tuple = (0.8, 0.9)
    pin: str = "auto"

    def __post_init__(self):
        for name in ("nranks", "steps", "batch_size", "eval_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"--{_flag(name)}: expected a whole number >= 1, got {value!r}")
        object.__setattr__(self, "coherence", Coherence.parse(self.coherence, "--coherence"))
        if self.mode == "ddp" and self.overlap is None:
            object.__setattr__(self, "overlap", True)  # ddp overlaps unless asked not to
        object.__setattr__(self, "factors", tuple(self.factors) or (1.0,) * self.nranks)
        object.__setattr__(self, "gpus", tuple(self.gpus) or (None,) * self.nranks)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InputError(f"--seed: expected a whole number >= 0, got {self.seed!r}")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr < math.inf):
            raise InputError(f"--lr: expected a positive learning rate, got {self.lr!r}")
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            raise InputError(f"--timeout: expected a positive number of seconds, got {self.timeout_s!r}")
        if len(self.factors) != self.nranks:
            raise InputError(f"--factors: expected {self.nranks} factors (one per rank), got {len(self.factors)}")
        for f in self.factors:
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not 1.0 <= f < math.inf:
                raise InputError(f"--factors: expected finite slow-down factors >= 1 (1 = none), got {f!r}")
        if len(self.gpus) != self.nranks:
            raise InputError(f"--gpus: expected {self.nranks} GPU names (one per rank), got {len(self.gpus)}")
        if self.pin not in PIN_CHOICES:
            raise InputError(f"--pin: expected one of {', '.join(PIN_CHOICES)}, got {self.pin!r}")
        for t in self.targets:
            if not (isinstance(t, (int, float)) and 0 < t <= 1):
                raise InputError(f"--target-accuracy: expected accuracies in (0, 1], got {t!r}")
        if self.failure is not None:
            try:
                self.failure.check(self.steps, self.nranks)
            except InputError as exc:
                raise InputError(f"--fail: {exc}".replace("failure.worker", "rank").replace("failure.step", "step")
                                 .replace("worker index", "rank")) from None
            if self.nranks < 2:
                raise InputError("--fail: needs --np 2 or more (a run of one failed rank has no survivor)")

    @property
    def stragglers(self) -> dict | None:
        """The straggler settings as train.json records them (None: no stragglers)."""
        if not self.cv and self.slowdown is None and self.failure is None:
            return None
        return {"cv": self.cv,
                "slowdown": dataclasses.asdict(self.slowdown) if self.slowdown else None,
                "failure": dataclasses.asdict(self.failure) if self.failure else None}

    def multipliers(self) -> np.ndarray:
        """The steps x ranks compute multipliers (ones without stragglers; inf from a failure step on)."""
        stream = np.random.default_rng(np.random.SeedSequence(self.seed).spawn(STRAGGLER_STREAM + 1)[-1])
        return stragglers.multipliers(stream, self.steps, self.nranks, self.cv, slowdown=self.slowdown,
                                      failure=self.failure)


def pinned_cores(nranks: int, pin: str) -> list:
    """Per rank, the CPU it is pinned to, or None. The ranks take this process's CPUs in order
    (round robin past the last); auto pins only when every rank gets a CPU of its own, since two
    ranks on one CPU must take turns anyway. Pinned, two ranks never share a core while another
    stays idle or runs other work, which on a loaded host otherwise costs a scheduler time slice at
    many of their waits for each other."""
    cpus = sorted(os.sched_getaffinity(0))
    if pin == "off" or (pin == "auto" and nranks > len(cpus)):
        return [None] * nranks
    return [cpus[r % len(cpus)] for r in range(nranks)]


def _flag(name: str) -> str:
    return {"nranks": "np", "batch_size": "batch-size", "eval_every": "eval-every"}.get(name, name)


def gpu_factors(names) -> tuple[float, ...]:
    """Per-rank slow-down factors of a GPU mix: the fastest GPU's time per sample over each one's (>= 1)."""
    ns = [profiles.gpu(name).resnet50_ns_per_sample(GPU_PRECISION) for name in names]
    fastest = min(ns)
    return tuple(t / fastest for t in ns)


def parse_list(flag: str, text: str, nranks: int) -> list[str]:
    """'a,b,c' -> ['a', 'b', 'c'] with exactly `nranks` items (one item is repeated for every rank)."""
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise InputError(f"{flag}: expected a comma-separated list, got {text!r}")
    if len(items) == 1:
        items = items * nranks
    if len(items) != nranks:
        raise InputError(f"{flag}: expected {nranks} values (one per rank, --np {nranks}) or one, got {len(items)}")
    return items


def parse_factors(text: str, nranks: int) -> tuple[float, ...]:
    values = []
    for item in parse_list("--factors", text, nranks):
        try:
            values.append(float(item))
        except ValueError:
            raise InputError(f"--factors: expected numbers like 1,2.5, got {item!r}") from None
    return tuple(values)


def parse_failure(text: str) -> stragglers.Failure:
    """'R:S' -> Failure(worker=R, step=S): rank R fails at its step S."""
    try:
        w, s = (int(x) for x in text.split(":"))
    except ValueError:
        raise InputError(f"--fail: expected RANK:STEP like 1:10, got {text!r}") from None
    return stragglers.Failure(worker=w, step=s)
