"""GPU and DNN profiles: how long one training iteration takes, and how many gradient bytes it makes.

The figures live in two YAML files shipped with the package, each figure with
its source in a comment:

- `gpus.yaml`: per GPU, ResNet-50 v1.5 training throughput (images/s) on one
  GPU at a stated batch, per precision, from one public benchmark set, plus the
  GPU's memory bandwidth (used for GPU-side reductions in collectives) and its
  memory capacity. GPUs with no figure from that set are listed as left out,
  each with the reason, rather than filled in from another set.
- `dnns.yaml`: per model, the parameter count, the forward multiply-accumulates
  per sample and a reference batch.

Each file also maps its source tags to what they stand for (`sources`); each
entry names the tags its figures come from. `gpu_catalog()` and
`dnn_catalog()` return the entries with those notes.

Time model (all assumptions are stated in the YAML headers):

    ns_per_sample(gpu, model, precision) = 1e9 / resnet50_img_per_s(gpu, precision)
                                           * gmacs(model) / gmacs(resnet50)
    iteration_ns(gpu, model, batch, precision) = batch * ns_per_sample

i.e. throughput is taken as independent of the batch size, and other models
scale from ResNet-50 by their forward cost. The iteration covers forward,
backward and the optimizer step of one GPU, without communication.

Precisions: `fp32`, `tf32` and `amp`. Pre-Ampere GPUs have no TF32 units, so
`tf32` runs their fp32 figure. On Ampere GPUs the public "FP32" figure ran in
TF32, so they have no plain-fp32 figure and `fp32` is an InputError there.

Gradient bytes: parameters * 4 (fp32) or * 2 (fp16). With PyTorch AMP the
parameters and their gradients stay fp32 (master weights), so communication
is fp32 unless a run asks for fp16 gradient compression explicitly.

Memory: data-parallel training keeps the whole training state on every GPU,
STATE_BYTES_PER_PARAMETER = 16 bytes per parameter (mixed-precision Adam, as
counted in the ZeRO paper: fp16 weights and gradients, fp32 master weights,
momentum and variance). A model whose state exceeds a GPU's memory is refused
there (`check_fits`, an InputError naming both figures); activations are not
counted, so a model that passes may still not fit.

>>> round(iteration_ns("v100", "resnet50", 32, "fp32") / 1e6, 2)  # ms, 32 / 368 img/s
86.96
>>> dnn("ResNet50").gradient_bytes("fp32")
102228128
>>> dnn("llama-2-7b").state_bytes / 1e9  # GB, 6,738,415,616 parameters x 16 B
107.814649856
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import yaml

from cxlsim.errors import InputError

__all__ = ["PRECISIONS", "GRADIENT_DTYPES", "STATE_BYTES_PER_PARAMETER", "GpuProfile", "DnnProfile", "Catalog",
           "gpu_catalog", "dnn_catalog", "gpus", "dnns", "gpu", "dnn", "check_fits", "iteration_ns",
           "REFERENCE_MODEL"]

PRECISIONS = ("fp32", "tf32", "amp")
"""Training precisions a run can ask for."""
GRADIENT_DTYPES = {"fp32": 4, "fp16": 2}
"""Bytes per gradient element."""
STATE_BYTES_PER_PARAMETER = 16
"""Bytes of training state per parameter on every data-parallel GPU: mixed-precision Adam keeps fp16 weights
and gradients (2 + 2) and fp32 master weights, momentum and variance (4 + 4 + 4); ZeRO (Rajbhandari et al.
2020), section 3.1."""
REFERENCE_MODEL = "resnet50"
"""The model whose throughput gpus.yaml holds; others scale from it."""

GIB = 1 << 30
_HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True, kw_only=True)
class GpuProfile:
    """One GPU type's ResNet-50 training speed, per precision."""

    key: str
    """Registry name, e.g. 'v100' (lower case)."""
    name: str
    """Product name."""
    architecture: str
    """'pascal', 'volta', 'turing' or 'ampere'; Ampere has TF32."""
    memory_bw_bytes_per_ns: float
    """Memory bandwidth, bytes/ns (= GB/s)."""
    memory_bytes: int
    """Memory capacity, bytes (the datasheet's binary GB; an upper bound of what training can use)."""
    reference_batch: int
    """Batch of the published ResNet-50 figures."""
    img_per_s: dict
    """ResNet-50 images/s by precision ('fp32' or 'tf32', and 'amp')."""
    derived_from: str | None = None
    """Set when the figures are derived from another GPU (see gpus.yaml)."""
    sources: tuple = ()
    """Tags of the sources of its figures (keys of its catalog's `sources`)."""

    @property
    def has_tf32(self) -> bool:
        return self.architecture == "ampere"

    @property
    def reduce_bw_bytes_per_ns(self) -> float:
        """GPU reduction speed: a reduction reads two operands and writes one (bandwidth / 3)."""
        return self.memory_bw_bytes_per_ns / 3.0

    def resnet50_ns_per_sample(self, precision: str) -> float:
        """ns per ResNet-50 sample at `precision` (see the module docstring for fp32/tf32)."""
        if precision not in PRECISIONS:
            raise InputError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
        use = precision
        if precision == "tf32" and not self.has_tf32:
            use = "fp32"  # no TF32 units before Ampere: PyTorch runs plain fp32
        if use not in self.img_per_s:
            usable = [p for p in PRECISIONS if p in self.img_per_s or (p == "tf32" and not self.has_tf32)]
            raise InputError(f"precision: {self.name} has no public {precision} figure (its 'FP32' benchmark "
                             f"column ran in TF32); expected one of {', '.join(usable)}")
        return 1e9 / self.img_per_s[use]


@dataclass(frozen=True, kw_only=True)
class DnnProfile:
    """One model's size and forward cost."""

    key: str
    """Registry name, e.g. 'resnet50' (lower case)."""
    name: str
    parameters: int
    """Trainable parameters."""
    gmacs_per_sample: float
    """Forward multiply-accumulates per sample, in units of 1e9."""
    reference_batch: int
    """Per-worker batch used when a run does not give one."""
    sample: str
    """What one sample is (e.g. 'image (224 px)')."""
    sources: tuple = ()
    """Tags of the sources of its figures (keys of its catalog's `sources`)."""

    @property
    def state_bytes(self) -> int:
        """Bytes of training state data parallelism keeps on every GPU (STATE_BYTES_PER_PARAMETER each)."""
        return self.parameters * STATE_BYTES_PER_PARAMETER

    def gradient_bytes(self, dtype: str = "fp32") -> int:
        """Bytes of one full gradient in `dtype` ('fp32' or 'fp16')."""
        if dtype not in GRADIENT_DTYPES:
            raise InputError(f"gradient dtype: expected one of {', '.join(GRADIENT_DTYPES)}, got {dtype!r}")
        return self.parameters * GRADIENT_DTYPES[dtype]


def _need(where: str, entry: dict, key: str, kind):
    """entry[key] if it is a `kind` (a non-empty str, or a number > 0); else an InputError naming the key."""
    value = entry.get(key) if isinstance(entry, dict) else None
    if kind is str:
        ok, expect = isinstance(value, str) and bool(value), "a non-empty string"
    else:
        ok = isinstance(value, kind) and not isinstance(value, bool) and value > 0
        expect = "an integer > 0" if kind is int else "a number > 0"
    if not ok:
        raise InputError(f"{where}.{key}: expected {expect}, got {value!r}")
    return value


@dataclass(frozen=True)
class Catalog:
    """One catalog file: its entries by registry name, what its source tags stand for, and the entries it
    leaves out (registry name -> why)."""

    entries: dict
    sources: dict
    left_out: dict


def _load_yaml(filename: str, top: str) -> dict:
    path = os.path.join(_HERE, filename)
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    if not isinstance(doc, dict) or not isinstance(doc.get(top), dict) or not doc[top]:
        raise InputError(f"{filename}: expected a non-empty mapping under {top!r}")
    return doc


def _text_mapping(doc: dict, filename: str, key: str) -> dict:
    """doc[key] as {str: non-empty str} (absent: empty); else an InputError naming the key."""
    raw = doc.get(key) or {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) and v for v in raw.values()):
        raise InputError(f"{filename}: {key}: expected a mapping of names to non-empty texts, got {raw!r}")
    return {str(k): v for k, v in raw.items()}


def _sources_of(where: str, entry: dict, known: dict | None) -> tuple:
    """entry['sources'] as a tuple of tags, each a key of `known` (None: not checked)."""
    tags = entry.get("sources", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise InputError(f"{where}.sources: expected a list of source tags, got {tags!r}")
    unknown = [t for t in tags if known is not None and t not in known]
    if unknown:
        raise InputError(f"{where}.sources: unknown tag(s) {', '.join(unknown)}; expected tags of "
                         f"{', '.join(sorted(known)) or 'the file (it declares none)'}")
    return tuple(tags)


def _catalog(filename: str, top: str, parse) -> Catalog:
    doc = _load_yaml(filename, top)
    sources = _text_mapping(doc, filename, "sources")
    left_out = {k.lower(): v for k, v in _text_mapping(doc, filename, "left_out").items()}
    entries = parse(doc[top], filename, sources)
    both = sorted(set(entries) & set(left_out))
    if both:
        raise InputError(f"{filename}: left_out: {', '.join(both)} is also an entry of {top}")
    return Catalog(entries=entries, sources=sources, left_out=left_out)


def _parse_gpus(raw: dict, filename: str = "gpus.yaml", sources: dict | None = None) -> dict:
    out = {}
    for key, entry in raw.items():
        where = f"{filename}: gpus.{key}"
        r50 = entry.get("resnet50") if isinstance(entry, dict) else None
        if not isinstance(r50, dict):
            raise InputError(f"{where}.resnet50: expected a mapping with batch and *_img_per_s figures")
        rates = {}
        for precision in PRECISIONS:
            if f"{precision}_img_per_s" in r50:
                rates[precision] = float(_need(f"{where}.resnet50", r50, f"{precision}_img_per_s", (int, float)))
        arch = _need(where, entry, "architecture", str)
        if "amp" not in rates or not ({"fp32", "tf32"} & set(rates)):
            raise InputError(f"{where}.resnet50: expected amp_img_per_s and fp32_img_per_s or tf32_img_per_s")
        if ("tf32" in rates) != (arch == "ampere"):
            raise InputError(f"{where}.resnet50: tf32_img_per_s is for Ampere GPUs and fp32_img_per_s for older "
                             f"ones; got architecture {arch!r} with {sorted(rates)}")
        out[key.lower()] = GpuProfile(
            key=key.lower(), name=_need(where, entry, "name", str), architecture=arch,
            memory_bw_bytes_per_ns=float(_need(where, entry, "memory_bw_bytes_per_ns", (int, float))),
            memory_bytes=_need(where, entry, "memory_bytes", int),
            reference_batch=_need(f"{where}.resnet50", r50, "batch", int),
            img_per_s=rates, derived_from=entry.get("derived_from"), sources=_sources_of(where, entry, sources))
    return out


def _parse_dnns(raw: dict, filename: str = "dnns.yaml", sources: dict | None = None) -> dict:
    out = {}
    for key, entry in raw.items():
        where = f"{filename}: dnns.{key}"
        out[key.lower()] = DnnProfile(
            key=key.lower(), name=_need(where, entry, "name", str),
            parameters=_need(where, entry, "parameters", int),
            gmacs_per_sample=float(_need(where, entry, "gmacs_per_sample", (int, float))),
            reference_batch=_need(where, entry, "reference_batch", int),
            sample=_need(where, entry, "sample", str), sources=_sources_of(where, entry, sources))
    if REFERENCE_MODEL not in out:
        raise InputError(f"{filename}: the reference model {REFERENCE_MODEL!r} is missing")
    return out


@functools.lru_cache(maxsize=None)
def gpu_catalog() -> Catalog:
    """The packaged gpus.yaml: GPU profiles, source notes, and the GPUs left out with the reason."""
    return _catalog("gpus.yaml", "gpus", _parse_gpus)


@functools.lru_cache(maxsize=None)
def dnn_catalog() -> Catalog:
    """The packaged dnns.yaml: DNN profiles and source notes."""
    return _catalog("dnns.yaml", "dnns", _parse_dnns)


def gpus() -> dict:
    """All GPU profiles by registry name (from the packaged gpus.yaml)."""
    return gpu_catalog().entries


def dnns() -> dict:
    """All DNN profiles by registry name (from the packaged dnns.yaml)."""
    return dnn_catalog().entries


def _norm(name) -> str:
    return str(name).strip().lower()


def gpu(name: str) -> GpuProfile:
    """The profile of GPU `name` (case-insensitive); an InputError lists the known names."""
    key = _norm(name)
    try:
        return gpus()[key]
    except KeyError:
        left_out = gpu_catalog().left_out.get(key)
        why = f" ({key} is left out of the catalog: {left_out})" if left_out else ""
        raise InputError(f"gpu: unknown GPU {name!r}; expected one of {', '.join(sorted(gpus()))}{why}") from None


def dnn(name: str) -> DnnProfile:
    """The profile of model `name` (case-insensitive, '-' and '_' optional); an InputError lists the known names."""
    table = dnns()
    key = _norm(name)
    if key not in table:
        loose = {k.replace("-", "").replace("_", ""): k for k in table}
        key = loose.get(key.replace("-", "").replace("_", ""), key)
    try:
        return table[key]
    except KeyError:
        raise InputError(f"model: unknown model {name!r}; expected one of {', '.join(sorted(table))}") from None


def check_fits(gpu_name: str, model: str) -> None:
    """InputError, naming both figures, if the training state of `model` exceeds the memory of one `gpu_name`."""
    g, m = gpu(gpu_name), dnn(model)
    if m.state_bytes > g.memory_bytes:
        raise InputError(
            f"model: {m.key} does not fit one {g.key} ({g.name}): data-parallel training keeps its whole state on "
            f"every GPU, {m.state_bytes:,} B ({m.state_bytes / GIB:.1f} GiB: {m.parameters:,} parameters x "
            f"{STATE_BYTES_PER_PARAMETER} B, mixed-precision Adam), and the GPU has {g.memory_bytes:,} B "
            f"({g.memory_bytes / GIB:.1f} GiB) of memory")


def iteration_ns(gpu_name: str, model: str, batch: int, precision: str) -> float:
    """Time of one training iteration of `model` on one `gpu_name` at `batch` samples, ns; an InputError if
    the model's training state does not fit the GPU (`check_fits`)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(f"batch: expected an integer >= 1, got {batch!r}")
    check_fits(gpu_name, model)
    g, m = gpu(gpu_name), dnn(model)
    ref = dnns()[REFERENCE_MODEL]
    return batch * g.resnet50_ns_per_sample(precision) * (m.gmacs_per_sample / ref.gmacs_per_sample)
