"""The training modes by name: the built-in ones, listed here, and those of plug-ins.

Each mode is one module exporting one `core.Mode` record (its run function, its
options and its convergence rule). The built-ins:

- `sync` (sync.py): EDDIS synchronous SGD over the SoftMemoryBox store, or over
  a CXL pool store (pool_store.py);
- `async` (asynchronous.py): EDDIS asynchronous SGD, elastic averaging;
- `hybrid` (hybrid.py): EDDIS hybrid SGD, a global step counter in the store;
- `ddp` (ddp.py): PyTorch DistributedDataParallel;
- `horovod` (horovod.py): Horovod's tensor fusion.

A plug-in module adds modes by declaring `MODES = [Mode(...), ...]` and being
named in `CXLSIM_PLUGINS` (cxlsim.plugins); nothing registers on import. A
plug-in mode may not reuse a built-in name.

Not modelled: a CXL-pool store for async and hybrid (sync has one; hybrid's
counter atomic is costed for CXL placements), elastic recovery after a failed
node.
"""
from __future__ import annotations

from cxlsim import plugins
from cxlsim.errors import InputError
from cxlsim.models.training import asynchronous, ddp, horovod, hybrid, sync
from cxlsim.models.training.core import Job, Mode, TrainingResult

__all__ = ["BUILT_IN", "all_modes", "names", "get", "simulate"]

BUILT_IN = (sync.MODE, ddp.MODE, asynchronous.MODE, hybrid.MODE, horovod.MODE)
"""The built-in modes, in the order the CLI lists them."""


def all_modes() -> dict:
    """Every mode, built-in then plug-in, by name; a plug-in record that is not a Mode, or that
    reuses a name, is an InputError naming it."""
    found = {m.name: m for m in BUILT_IN}
    for record in plugins.records("MODES"):
        if not isinstance(record, Mode):
            raise InputError(f"{plugins.ENV_VAR}: a MODES entry must be a cxlsim.models.training.core.Mode, "
                             f"got {record!r}")
        if record.name in found:
            raise InputError(f"{plugins.ENV_VAR}: mode {record.name!r} is declared twice")
        found[record.name] = record
    return found


def names() -> list:
    """The modes' names."""
    return list(all_modes())


def get(name: str) -> Mode:
    """The mode called `name`; an InputError names the known ones."""
    known = all_modes()
    try:
        return known[name]
    except KeyError:
        raise InputError(f"mode: expected one of {', '.join(known)}, got {name!r}") from None


def simulate(spec, job: Job, mode: str, **params) -> TrainingResult:
    """Run the mode called `mode` with its keyword parameters."""
    return get(mode).run(spec, job, **params)
