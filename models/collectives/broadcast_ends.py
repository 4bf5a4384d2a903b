"""When each rank of a network broadcast is done, by the closed forms' own rules (ns, root-relative ranks).

A network broadcast's closed form (`network_forms`, `tree_bcast`, `chain`) is the latency of
its last rank. A hierarchical collective whose next phase starts on each rank when that rank's
broadcast is done (the `pods` broadcast, `hierarchical_pods`) needs every rank's end instead:
`network_ends(algo, cm, p, s, root)` gives them, one per root-relative rank (rank (root + i) % p at
index i), for a call whose root starts at 0 while every other rank already waits. A receiver
that waits early changes nothing, so a root starting at t shifts every end by t.

Each function is its algorithm's recurrence, per rank instead of its maximum (one rank per host,
an uncongested fabric, as those forms assume):

- `binomial` (MPICH): rank i gets the data at h_i; its c-th send (largest subtree first, each
  blocking) delivers at h_i + c busy(s) + T(s); it is done after its last send, h_i + kids busy(s);
- Open MPI's trees (`linear`, `chain`, `binary_tree`, `ompi_binomial`, `knomial`): isends posted
  o apart, each on the link after the NIC gap and the previous send; done when the last has left;
- `pipelined_chain`: the per-segment chain recurrence; a rank is done after its last receive or
  the local completion of its last forward;
- `scatter_ring_allgather`, `scatter_recursive_doubling_allgather`: the binomial scatter's finish
  times start the ring (or pairwise-exchange) recurrence, whose per-rank results these are.

The maximum of the ends is the algorithm's own closed form (tests/test_pods_broadcast_form.py holds
them equal); an algorithm not listed has no per-rank form here (`network_ends` returns None).
"""
from __future__ import annotations

import numpy as np

from cxlsim.models.collectives.chain import pipelined_chain_ends
from cxlsim.models.collectives.network_forms import CostModel, pairwise_steps, ring_recurrence, scatter_tree
from cxlsim.models.collectives.tree_bcast import TREES, tree_ends

__all__ = ["network_ends", "ENDS"]


def _mpich_children(rel: int, p: int) -> list[int]:
    """MPICH's binomial children of relative rank `rel`, largest subtree first."""
    low = rel & -rel if rel else 1 << p.bit_length()
    return [rel + mask for mask in (1 << k for k in reversed(range(p.bit_length()))) if mask < low and rel + mask < p]


def binomial_ends(cm: CostModel, p: int, s: int) -> np.ndarray:
    """MPICH's binomial broadcast of s bytes: each relative rank's end, ns."""
    intra = cm.intra_only
    deliver = cm.Ti(s) if intra else cm.T(s)
    busy = cm.busy(s, intra)
    have, ends = np.zeros(p), np.zeros(p)
    for rel in range(p):  # parents have smaller relative ranks than their children
        kids = _mpich_children(rel, p)
        for i, child in enumerate(kids):
            have[child] = have[rel] + i * busy + deliver
        ends[rel] = have[rel] + len(kids) * busy
    return ends


def _scatter(cm: CostModel, p: int, s: int):
    """(segment bytes, relative hosts, the binomial scatter's per-relative-rank finish times)."""
    seg = -(-s // p)
    rel_hosts = [0] * p if cm.intra_only else list(range(p))
    return seg, rel_hosts, scatter_tree(cm, rel_hosts, seg)


def scatter_ring_ends(cm: CostModel, p: int, s: int) -> np.ndarray:
    """MPICH's scatter + ring allgather broadcast: each relative rank's end, ns."""
    seg, rel_hosts, start = _scatter(cm, p, s)
    return ring_recurrence(cm, rel_hosts, seg, p - 1, 0, start)


def scatter_doubling_ends(cm: CostModel, p: int, s: int) -> np.ndarray:
    """MPICH's scatter + recursive-doubling allgather broadcast (P a power of two): each relative rank's end, ns."""
    seg, _, start = _scatter(cm, p, s)
    return np.array(pairwise_steps(cm, list(start), [(1 << j, (1 << j) * seg, 0) for j in range(p.bit_length() - 1)]))


ENDS = {"binomial": lambda cm, p, s, root: binomial_ends(cm, p, s),
        "pipelined_chain": lambda cm, p, s, root: pipelined_chain_ends(cm, p, s),
        "scatter_ring_allgather": lambda cm, p, s, root: scatter_ring_ends(cm, p, s),
        "scatter_recursive_doubling_allgather": lambda cm, p, s, root: scatter_doubling_ends(cm, p, s),
        **{name: (lambda cm, p, s, root, tree=name: tree_ends(cm, p, s, tree, root)) for name in TREES}}
"""Per-rank end functions f(cm, p, s, root) of the network broadcasts, by algorithm name."""


def network_ends(algo_name: str, cm: CostModel, p: int, s: int, root: int = 0) -> np.ndarray | None:
    """Each root-relative rank's end (ns) of the network broadcast `algo_name` of s bytes on p ranks from
    `root`, the root starting at 0; None for an algorithm without a per-rank form here."""
    if p == 1:
        return np.zeros(1)
    found = ENDS.get(algo_name)
    return None if found is None else np.asarray(found(cm, p, s, root), dtype=float)
