"""The datasets of `cxlsim bench train` and every rank's batches.

- ``synthetic`` (default): 10 classes of 64 features, generated from the seed: each class is a
  mixture of two Gaussian blobs (unit variance) whose centres are drawn N(0, SEPARATION^2),
  so a linear model cannot separate every class and a hidden layer helps. 3,000 training
  and 1,000 test samples, the same for one seed.
- ``digits``: scikit-learn's 8 x 8 handwritten digits (1,797 samples, pixel values scaled to
  [0, 1]), split 80/20 by a seeded permutation. Needs the optional extra
  ``pip install 'cxlsim[digits]'``.

Batches: at step s all ranks together take one global batch of np x B samples, consecutive
in the epoch's seeded permutation of the training set (epoch = s // steps per epoch); rank r
takes the r-th B of them. So the ranks never share a sample within a step, and a run is the
same for one seed whatever the timing.
"""
from __future__ import annotations

import numpy as np

from cxlsim.errors import InputError

DATASETS = ("synthetic", "digits")
SYNTHETIC_TRAIN, SYNTHETIC_TEST = 3000, 1000
SEPARATION = 0.6
BLOBS_PER_CLASS = 2


class Dataset:
    """Training and test arrays (x float64 (n, 64), y int64 labels) and the per-rank batches."""

    def __init__(self, name: str, x_train, y_train, x_test, y_test, seed: int):
        self.name = name
        self.x_train, self.y_train, self.x_test, self.y_test = x_train, y_train, x_test, y_test
        self.seed = seed
        self._epoch, self._perm = None, None

    def batch(self, step: int, rank: int, nranks: int, batch_size: int):
        """Rank `rank`'s batch at `step` (see the module docstring)."""
        global_batch = nranks * batch_size
        per_epoch = len(self.y_train) // global_batch
        if per_epoch < 1:
            raise InputError(f"--batch-size: {nranks} ranks x {batch_size} samples exceed the {self.name} "
                             f"training set's {len(self.y_train)} samples")
        epoch, index = divmod(step, per_epoch)
        if epoch != self._epoch:
            self._perm = np.random.default_rng([self.seed, 2, epoch]).permutation(len(self.y_train))
            self._epoch = epoch
        start = index * global_batch + rank * batch_size
        rows = self._perm[start:start + batch_size]
        return self.x_train[rows], self.y_train[rows]


def synthetic(seed: int) -> Dataset:
    rng = np.random.default_rng([seed, 1])
    centres = rng.normal(0.0, SEPARATION, size=(10 * BLOBS_PER_CLASS, 64))

    def draw(n):
        blob = rng.integers(0, 10 * BLOBS_PER_CLASS, size=n)
        x = centres[blob] + rng.normal(0.0, 1.0, size=(n, 64))
        return x, (blob % 10).astype(np.int64)

    x_train, y_train = draw(SYNTHETIC_TRAIN)
    x_test, y_test = draw(SYNTHETIC_TEST)
    return Dataset("synthetic", x_train, y_train, x_test, y_test, seed)


def digits(seed: int) -> Dataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise InputError("--dataset digits: needs scikit-learn: pip install 'cxlsim[digits]' "
                         "(or use --dataset synthetic)") from None
    bunch = load_digits()
    x, y = bunch.data.astype(np.float64) / 16.0, bunch.target.astype(np.int64)
    order = np.random.default_rng([seed, 3]).permutation(len(y))
    cut = int(0.8 * len(y))
    train, test = order[:cut], order[cut:]
    return Dataset("digits", x[train], y[train], x[test], y[test], seed)


def load(name: str, seed: int) -> Dataset:
    """The dataset `name` (synthetic or digits) for `seed`."""
    if name == "synthetic":
        return synthetic(seed)
    if name == "digits":
        return digits(seed)
    raise InputError(f"--dataset: expected one of {', '.join(DATASETS)}, got {name!r}")
