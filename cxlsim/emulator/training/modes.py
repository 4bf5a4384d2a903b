"""The training modes of `cxlsim bench train` and the dispatch from a mode's name to its loop.

Each mode is one `TrainMode` record in `MODES`. Its loop and its optional launcher-side hook
are named as "module:function" and imported only when the mode runs, so a mode's module can
use everything below it (context, models, the pool) and the registry never imports it at
load time.

- ``loop(ctx: RankContext) -> None`` runs on every rank (the contract: `context`'s docstring).
- ``shared(config, model) -> context manager``, if given, runs in the launcher before the ranks
  start; what it yields reaches every rank as ``ctx.shared`` (the async and hybrid modes' shared
  parameter region, a pool segment the context manager removes again, also on failure).
"""
from __future__ import annotations

import dataclasses
import importlib

from cxlsim.errors import InputError

OPTIONS = ("overlap", "buckets", "lockstep")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainMode:
    """One training mode of the emulator."""

    name: str
    help: str
    loop: str
    """"module:function" of the rank loop, ``loop(ctx) -> None``."""
    synchronous: bool
    """True: a failed rank fails the run (RankFailure); False: the others go on without it."""
    options: frozenset = frozenset()
    """Which of OPTIONS the mode uses; asking another is an InputError."""
    always_lockstep: bool = False
    """True: the ranks move in lockstep by construction (every step waits for every rank)."""
    shared: str | None = None
    """"module:function" of the launcher-side hook, ``shared(config, model) -> context manager``."""
    des_mode: str = ""
    """The `cxlsim train` (DES) mode this mode is projected with."""

    def resolve(self, which: str = "loop"):
        """The function named by `loop` or `shared`; InputError if its module is not there."""
        target = getattr(self, which)
        module_name, _, function = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            raise InputError(f"--mode {self.name}: not available in this installation ({module_name} is missing)") \
                from None
        return getattr(module, function)


PACKAGE = "cxlsim.emulator.training"
MODES = {m.name: m for m in (
    TrainMode(name="sync", help="an allreduce of the gradients on the pool at every step",
              loop=f"{PACKAGE}.sync:sync_loop", synchronous=True, always_lockstep=True,
              des_mode="sync, aggregation allreduce, on the pool"),
    TrainMode(name="ddp", help="bucketed allreduce on a communication thread, overlapped with the backward pass",
              loop=f"{PACKAGE}.ddp:ddp_loop", synchronous=True, options=frozenset({"overlap", "buckets"}),
              always_lockstep=True, des_mode="ddp on the pool"),
    TrainMode(name="async", help="EASGD-style elastic averaging through a shared parameter region, no barrier",
              loop=f"{PACKAGE}.elastic:async_loop", synchronous=False, options=frozenset({"lockstep"}),
              shared=f"{PACKAGE}.elastic:shared_region", des_mode="async on the pool's per-worker slots"),
    TrainMode(name="hybrid", help="shared global parameters and step counter in the pool; stop by the counter",
              loop=f"{PACKAGE}.elastic:hybrid_loop", synchronous=False, options=frozenset({"lockstep"}),
              shared=f"{PACKAGE}.elastic:shared_region", des_mode="hybrid on the pool's per-worker slots"),
)}


def mode(name: str) -> TrainMode:
    """The record of mode `name`; InputError listing the modes otherwise."""
    try:
        return MODES[name]
    except (KeyError, TypeError):
        raise InputError(f"--mode: expected one of {', '.join(MODES)}, got {name!r}") from None
