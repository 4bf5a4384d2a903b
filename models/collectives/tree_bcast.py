"""Open MPI's tree broadcasts (coll/base `bcast_intra_generic` and `basic_linear`), with one closed form.

Open MPI's fixed decision passes a segment size of 0, so every tree moves the
whole message in one piece: a rank receives it from its parent, then posts an
isend to each child in the tree's order and waits for all of them (the root
starts at once). The trees (5.0.9 `coll_base_topo.c`; ranks shifted by the root):
- `linear` (id 1, `bcast_intra_basic_linear`): the root sends to every other
  rank, in rank order 0..P-1 (not shifted);
- `chain` (ids 2 and 3: `chain` with the fixed rule's fan-out 0, which
  `build_chain` raises to 1, and `pipeline`, a chain of fan-out 1): r -> r+1;
- `binary_tree` (id 5, `build_tree(2)`): rank r on level l (2^l - 1 <= r <
  2^(l+1) - 1) has children r + 2^l and r + 2^(l+1);
- `ompi_binomial` (id 6, `build_bmtree`): children r ^ mask for every mask
  above r, smallest subtree first (MPICH's `binomial` sends largest first and
  blocks on each send);
- `knomial` (id 7, `build_kmtree`, radix 4, the component's default): the
  children r + mask * j, j = 1..3, for each power of 4 below the lowest
  nonzero base-4 digit of r, largest mask first.

Closed form (one rank per host or every rank on one host, every rank starting
together; each host link carries only its rank's sends and each host's
downlink only its parent's, so nothing queues but a rank's own sends): a rank
that has the data at h posts its i-th send at h + i o; it starts on the link
at the later of that, the NIC's gap after the previous one and the end of the
previous one on the link (s beta each), and lands wire(s) after its start,
where the child takes o. A rank is done when its last send has left.
"""
from __future__ import annotations

from functools import partial

from cxlsim.models.collectives.base import Algorithm

__all__ = ["KNOMIAL_RADIX", "TREES", "children", "tree_bcast", "tree_ends", "tree_bcast_cost", "LINEAR", "CHAIN", "BINARY_TREE",
           "OMPI_BINOMIAL", "KNOMIAL", "RECORDS"]

KNOMIAL_RADIX = 4
"""Open MPI's coll_tuned_bcast_knomial_radix default."""


def _linear(rel, p, root):
    return [r for r in range(p) if r != root] if rel == 0 else []


def _chain(rel, p, root):
    return [(rel + 1 + root) % p] if rel + 1 < p else []


def _binary_tree(rel, p, root):
    level, first = 0, 1
    while first <= rel:  # nodes on levels 0..level: 2^(level+1) - 1
        level += 1
        first += 1 << level
    delta = 1 << level
    return [(c + root) % p for c in (rel + delta, rel + 2 * delta) if c < p]


def _ompi_binomial(rel, p, root):
    mask = 1
    while mask <= rel:  # opal_next_poweroftwo(rel): the lowest power of two above rel (1 for the root)
        mask <<= 1
    kids = []
    while mask < p and (rel ^ mask) < p:
        kids.append(((rel ^ mask) + root) % p)
        mask <<= 1
    return kids


def _knomial(rel, p, root, radix=KNOMIAL_RADIX):
    mask = 1
    while mask < p and not rel % (radix * mask):
        mask *= radix
    mask //= radix
    kids = []
    while mask > 0:
        kids += [((rel + mask * j) + root) % p for j in range(1, radix) if rel + mask * j < p]
        mask //= radix
    return kids


TREES = {"linear": _linear, "chain": _chain, "binary_tree": _binary_tree, "ompi_binomial": _ompi_binomial,
         "knomial": _knomial}
"""Tree name -> children(root-relative rank, P, root) as absolute ranks, in send order."""


def children(tree: str, rank: int, p: int, root: int) -> list[int]:
    """The ranks `rank` sends to in `tree`, in order."""
    return TREES[tree]((rank - root) % p, p, root)


def tree_bcast(g, s, data, ctx, tree):
    """Receive from the parent (unless root), post an isend to each child, wait for all; returns the data."""
    p, root, r = g.size, ctx.root, g.rank
    if r != root:
        parent = next(q for q in range(p) if r in children(tree, q, p, root))
        data = yield g.recv(parent)
    sends = [g.send(c, s, data) for c in children(tree, r, p, root)]
    for event in sends:
        yield event
    return data


def tree_ends(cm, p, s, tree, root) -> list[float]:
    """Each root-relative rank's end (ns) of `tree_bcast` from `root` on a network `CostModel`: when
    its last isend has left, or a leaf has its data (`linear` sends in rank order, so the ends
    depend on the root)."""
    o, intra = cm.overhead_ns, cm.intra_only
    have, ends = {root: 0.0}, []
    for rel in range(p):  # parents come before their children in root-relative order
        rank = (rel + root) % p
        cpu = done = have[rank]
        nic = link = float("-inf")
        for child in children(tree, rank, p, root):
            cpu += o
            if intra:  # shared memory: the child copies it once it is posted
                have[child] = cpu + cm.receive(s, True)
                done = cpu
                continue
            start = max(cpu, nic)
            nic = start + cm.gap_ns
            start = max(start, link)
            link = start + s * cm.beta_ns_per_byte
            have[child] = start + cm.wire(s) + cm.receive(s, False)
            done = max(done, link)
        ends.append(done)
    return ends


def tree_bcast_cost(cm, p, s, ctx, tree):
    """Closed form of `tree_bcast` on a network `CostModel`: its last rank's end, ns."""
    return max(0.0, *tree_ends(cm, p, s, tree, ctx.root if ctx is not None else 0))


def _record(name, source):
    return Algorithm("broadcast", name, partial(tree_bcast, tree=name), partial(tree_bcast_cost, tree=name),
                     source=source)


LINEAR = _record("linear", "Open MPI bcast_intra_basic_linear (id 1)")
CHAIN = _record("chain", "Open MPI bcast_intra_chain (id 2, fan-out 0 -> 1) and bcast_intra_pipeline (id 3), "
                         "segment size 0: one chain of the whole message")
BINARY_TREE = _record("binary_tree", "Open MPI bcast_intra_bintree (id 5), segment size 0")
OMPI_BINOMIAL = _record("ompi_binomial", "Open MPI bcast_intra_binomial (id 6: build_bmtree, isends smallest "
                                         "subtree first), segment size 0")
KNOMIAL = _record("knomial", "Open MPI bcast_intra_knomial (id 7, radix 4), segment size 0")
RECORDS = (LINEAR, CHAIN, BINARY_TREE, OMPI_BINOMIAL, KNOMIAL)
