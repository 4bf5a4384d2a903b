"""Small classifiers in numpy on one flat float64 parameter vector: logreg, mlp and cnn-small.

A `Model` is a stack of layers. Its parameters live in one contiguous float64 vector, the
layers' arrays one after the other in forward order (each layer's weights, then its bias), so
an allreduce, a shared region or a bucket is a slice of one array. `loss_grad` runs the
forward pass, the softmax cross-entropy loss (mean over the batch, natural log) and the
backward pass, writing the gradient into a vector of the same layout. The backward pass
fills that vector from its end towards its start, one layer at a time; after each layer with
parameters it calls ``on_ready(offset)``: from then on ``grad[offset:]`` is final (a bucketed
allreduce starts there). Inputs are (batch, 64) float64 (8 x 8 images for cnn-small).

Results are bitwise reproducible for one input on one machine (numpy's BLAS limited to one
thread, as every rank is).
"""
from __future__ import annotations

import math

import numpy as np

from cxlsim.errors import InputError

FEATURES = 64  # 8 x 8 inputs
CLASSES = 10


class Dense:
    """y = x W + b; W (n_in, n_out) initialised He-normal, b zero."""

    def __init__(self, n_in: int, n_out: int):
        self.shapes = ((n_in, n_out), (n_out,))

    def init(self, rng, params) -> None:
        w, b = params
        w[...] = rng.normal(0.0, math.sqrt(2.0 / self.shapes[0][0]), size=w.shape)
        b[...] = 0.0

    def forward(self, params, x):
        w, b = params
        return x @ w + b, x

    def backward(self, params, x, dy, grads):
        w, _ = params
        gw, gb = grads
        np.matmul(x.T, dy, out=gw)
        np.sum(dy, axis=0, out=gb)
        return dy @ w.T


class ReLU:
    shapes = ()

    def forward(self, params, x):
        return np.maximum(x, 0.0), x > 0

    def backward(self, params, mask, dy, grads):
        return dy * mask


class Reshape:
    """(batch, ...) -> (batch, *shape)."""

    shapes = ()

    def __init__(self, *shape):
        self.shape = shape

    def forward(self, params, x):
        return x.reshape((x.shape[0],) + self.shape), x.shape

    def backward(self, params, shape, dy, grads):
        return dy.reshape(shape)


class Conv3x3:
    """A 3 x 3 convolution, stride 1, zero padding 1, on (batch, c_in, H, W), by im2col: W (9 c_in, c_out)."""

    K = 3

    def __init__(self, c_in: int, c_out: int):
        self.c_in, self.c_out = c_in, c_out
        self.shapes = ((self.K * self.K * c_in, c_out), (c_out,))

    def init(self, rng, params) -> None:
        w, b = params
        w[...] = rng.normal(0.0, math.sqrt(2.0 / w.shape[0]), size=w.shape)
        b[...] = 0.0

    def forward(self, params, x):
        w, b = params
        n, c, h, wd = x.shape
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.empty((n, h, wd, c, self.K, self.K))
        for i in range(self.K):
            for j in range(self.K):
                cols[..., i, j] = padded[:, :, i:i + h, j:j + wd].transpose(0, 2, 3, 1)
        cols = cols.reshape(n * h * wd, -1)
        y = (cols @ w + b).reshape(n, h, wd, self.c_out).transpose(0, 3, 1, 2)
        return y, (cols, x.shape)

    def backward(self, params, cache, dy, grads):
        w, _ = params
        gw, gb = grads
        cols, (n, c, h, wd) = cache
        dy2 = dy.transpose(0, 2, 3, 1).reshape(n * h * wd, self.c_out)
        np.matmul(cols.T, dy2, out=gw)
        np.sum(dy2, axis=0, out=gb)
        dcols = (dy2 @ w.T).reshape(n, h, wd, c, self.K, self.K)
        dpad = np.zeros((n, c, h + 2, wd + 2))
        for i in range(self.K):
            for j in range(self.K):
                dpad[:, :, i:i + h, j:j + wd] += dcols[..., i, j].transpose(0, 3, 1, 2)
        return dpad[:, :, 1:-1, 1:-1]


class AvgPool2:
    """2 x 2 average pooling, stride 2, on (batch, c, H, W) with H and W even."""

    shapes = ()

    def forward(self, params, x):
        n, c, h, w = x.shape
        return x.reshape(n, c, h // 2, 2, w // 2, 2).mean(axis=(3, 5)), None

    def backward(self, params, cache, dy, grads):
        return np.repeat(np.repeat(dy, 2, axis=2), 2, axis=3) * 0.25


class Model:
    """A stack of layers on one flat parameter vector (see the module docstring)."""

    def __init__(self, name: str, layers):
        self.name = name
        self.layers = list(layers)
        self.offsets = []  # per layer: ((start, stop, shape) per array)
        offset = 0
        for layer in self.layers:
            spans = []
            for shape in layer.shapes:
                size = int(np.prod(shape))
                spans.append((offset, offset + size, shape))
                offset += size
            self.offsets.append(tuple(spans))
        self.size = offset
        self.nbytes = 8 * offset

    def views(self, flat: np.ndarray):
        """Per layer, the list of its arrays as views of `flat`."""
        return [[flat[a:b].reshape(shape) for a, b, shape in spans] for spans in self.offsets]

    def init(self, seed: int) -> np.ndarray:
        """Initial parameters (float64, length `size`), the same for one seed."""
        flat = np.zeros(self.size)
        rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
        for layer, params in zip(self.layers, self.views(flat)):
            if params:
                layer.init(rng, params)
        return flat

    def logits(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        out = x
        for layer, p in zip(self.layers, self.views(params)):
            out, _ = layer.forward(p, out)
        return out

    def loss_grad(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, grad: np.ndarray, on_ready=None) -> float:
        """The batch's mean cross-entropy; the gradient goes into `grad` (same layout as params).
        on_ready(offset) is called after each layer with parameters: grad[offset:] is then final."""
        pviews, gviews = self.views(params), self.views(grad)
        caches, out = [], x
        for layer, p in zip(self.layers, pviews):
            out, cache = layer.forward(p, out)
            caches.append(cache)
        loss, dout = softmax_cross_entropy(out, y)
        for index in range(len(self.layers) - 1, -1, -1):
            layer = self.layers[index]
            dout = layer.backward(pviews[index], caches[index], dout, gviews[index])
            if self.offsets[index] and on_ready is not None:
                on_ready(self.offsets[index][0][0])
        return loss

    def evaluate(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, chunk: int = 512) -> tuple[float, float]:
        """(mean cross-entropy, accuracy) of `params` on (x, y)."""
        loss_sum, correct = 0.0, 0
        for start in range(0, len(y), chunk):
            logits = self.logits(params, x[start:start + chunk])
            loss, _ = softmax_cross_entropy(logits, y[start:start + chunk])
            loss_sum += loss * len(logits)
            correct += int(np.sum(np.argmax(logits, axis=1) == y[start:start + chunk]))
        return loss_sum / len(y), correct / len(y)

    def layer_starts(self) -> list[int]:
        """The offsets at which the backward pass reports grad[offset:] final, in the order it reports them."""
        return [spans[0][0] for spans in reversed(self.offsets) if spans]


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """(mean cross-entropy, its gradient with respect to the logits)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    total = exp.sum(axis=1, keepdims=True)
    n = len(y)
    loss = float(np.mean(np.log(total[:, 0]) - shifted[np.arange(n), y]))
    dlogits = exp / total
    dlogits[np.arange(n), y] -= 1.0
    return loss, dlogits / n


BUILDERS = {
    "logreg": lambda: Model("logreg", [Dense(FEATURES, CLASSES)]),
    "mlp": lambda: Model("mlp", [Dense(FEATURES, 128), ReLU(), Dense(128, 64), ReLU(), Dense(64, CLASSES)]),
    "cnn-small": lambda: Model("cnn-small", [Reshape(1, 8, 8), Conv3x3(1, 16), ReLU(), AvgPool2(), Reshape(256),
                                             Dense(256, CLASSES)]),
}
MODEL_NAMES = tuple(BUILDERS)


def build(name: str) -> Model:
    """The model named `name` (logreg, mlp, cnn-small)."""
    try:
        return BUILDERS[name]()
    except KeyError:
        raise InputError(f"--model: expected one of {', '.join(MODEL_NAMES)}, got {name!r}") from None
