"""An OPTIONAL, staleness-aware convergence model: from throughput to an estimated time-to-target.

Faster steps with stale updates are not automatically faster training. This
module is a labelled MODEL, not a measurement: cxlsim simulates time, not
accuracy, and no published figure ties EDDIS' staleness to its accuracy.
Every output of it is an ESTIMATE under the assumptions below, and tools
always print it next to the raw throughput, never instead of it.

Assumptions:

1. Progress per sample. A sample whose gradient is applied with staleness
   x (in equivalent synchronous steps: the local steps that other workers
   applied to the shared model between the worker's read and its write,
   divided by the number of workers W) makes 1 / (1 + x) of the progress of a fresh sample.
   This follows the staleness-dependent learning rate eta / tau of Zhang,
   Gupta, Lian and Liu ("Staleness-aware Async-SGD for Distributed Deep
   Learning", IJCAI 2016), with tau = 1 + x so that a fresh gradient keeps
   the full rate; reading "the learning rate scales the step" as "the
   progress scales the same way" is our assumption, not their result.
2. Per mode (each mode's rule is the `convergence` of its `Mode` record):
   sync, ddp and horovod apply every gradient fresh (`all_fresh`, factor 1);
   hybrid's contribution of round staleness d counts x = d * R / W (R the
   round size); dropped contributions count 0 (they are not in its
   throughput anyway); async's exchange carrying tau local steps counts x =
   u * tau / W, u being the centre updates by others since its previous
   exchange (each carries tau local steps).
3. Target. The number of fresh samples to reach the target accuracy is the
   model's standard recipe (`TARGETS`), independent of the global batch
   (large-batch effects are ignored).

time_to_target_s = target_samples / (throughput_samples_per_s * progress_factor)

>>> discount(0.0), discount(1.0), discount(3.0)
(1.0, 0.5, 0.25)
"""
from __future__ import annotations

from dataclasses import dataclass

from cxlsim.errors import InputError

__all__ = ["Target", "TARGETS", "discount", "all_fresh", "estimate", "LABEL"]

LABEL = "ESTIMATE from the staleness-aware convergence model (assumption: progress 1/(1+staleness), Zhang et al. IJCAI 2016)"


@dataclass(frozen=True, kw_only=True)
class Target:
    """Fresh samples to reach a model's target accuracy by its standard recipe."""

    epochs: int
    dataset_samples: int
    source: str

    @property
    def samples(self) -> int:
        return self.epochs * self.dataset_samples


TARGETS = {
    "yolov5m": Target(epochs=300, dataset_samples=118_287,
                      source="YOLOv5 README: 300 epochs on COCO train2017 (118,287 images), gpus.md"),
    "resnet50": Target(epochs=90, dataset_samples=1_281_167,
                       source="the standard 90-epoch ImageNet-1k recipe (torchvision references; 1,281,167 images)"),
}
"""Targets by model; models without one get throughput only."""


def discount(staleness_steps: float) -> float:
    """Progress of one sample applied `staleness_steps` equivalent sync steps late (assumption 1)."""
    if not staleness_steps >= 0:
        raise InputError(f"staleness: expected >= 0 equivalent steps, got {staleness_steps!r}")
    return 1.0 / (1.0 + staleness_steps)


def all_fresh(result) -> float:
    """Convergence rule of the modes that apply every gradient fresh (sync, ddp, horovod): 1."""
    return 1.0


def estimate(result, rule) -> dict:
    """The model's estimate for `result`, labelled: `rule` is its mode's progress factor rule
    (`Mode.convergence`: result -> mean progress per sample counted in the throughput, in (0, 1])."""
    if rule is None:
        raise InputError(f"mode: {result.mode!r} has no convergence rule")
    target = TARGETS.get(result.model)
    factor = rule(result)
    effective = result.throughput_samples_per_s * factor
    out = {"label": LABEL, "progress_factor": factor, "effective_samples_per_s": effective}
    if target is None:
        return {**out, "target": None, "time_to_target_s": None}
    return {**out, "target": {"epochs": target.epochs, "dataset_samples": target.dataset_samples,
                              "source": target.source},
            "time_to_target_s": target.samples / effective if effective > 0 else float("inf")}
