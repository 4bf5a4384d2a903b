"""Verification: the DES against its closed forms, and what congestion adds.

Run: python experiments/verify_simulator.py

1. Every allgather algorithm on an uncongested ib-hdr star, one rank per host:
   the largest |DES / closed form - 1| over P in {2,3,4,7,8,16,64} and
   sizes 1 B..16 MiB (expected: 0, the DES follows the forms' own rules).
2. Recursive doubling on fat trees of 8 hosts, 4 per leaf, with 1:1, 2:1 and
   4:1 oversubscription (one spine): the DES / closed form ratio of the whole
   allgather at 1 MiB per rank (16 KiB chunks); the last step crosses the
   leaves, so the ratio grows with the oversubscription. (With chunks as large
   as the messages, a fast uplink must wait for each whole chunk to arrive
   before it can send it, which the closed form does not model.)
"""
from __future__ import annotations

from cxlsim.fabric import Environment, NetworkTransport, Placement, build, fat_tree, get_preset, star
from cxlsim.models.collectives import analytic, base, runner


def ratio(graph, nodes, name, size, chunk=1 << 20):
    net = build(graph, get_preset("ib-hdr"), Environment())
    t = NetworkTransport(net, Placement(nodes, 1), chunk)
    ctx = runner.Context(groups=tuple((r,) for r in range(nodes)))
    out = runner.run(t, "allgather", name, size, ctx)
    runner.verify("allgather", nodes, ctx, out.results)
    closed, _, _ = analytic.cost("allgather", name, nodes, size, analytic.CostModel.from_network(net, chunk), ctx)
    return out.latency_ns / closed


def main() -> None:
    print("1. uncongested star, max |DES / closed form - 1| over P and sizes")
    for name in base.names("allgather", "network"):
        worst = 0.0
        for p in (2, 3, 4, 7, 8, 16, 64):
            algo = base.ALGORITHMS[("allgather", name)]
            if algo.check and algo.check(p) and not algo.fallback:
                continue
            for size in (1, 1024, 65536, 1 << 20, 16 << 20 if p < 64 else 4 << 20):
                worst = max(worst, abs(ratio(star(p), p, name, size) - 1))
        print(f"   {name:20s} {worst:.2e}")
    print("2. recursive doubling, 8 hosts, 4 per leaf, 1 MiB per rank: DES / closed form")
    for oversub in (1.0, 2.0, 4.0):
        r = ratio(fat_tree(8, 4, oversub, spines=1), 8, "recursive_doubling", 1 << 20, chunk=16384)
        print(f"   {oversub:.0f}:1  {r:.3f}")


if __name__ == "__main__":
    main()
