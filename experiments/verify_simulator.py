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
3. The pool allgather (cxl_pool, cxl_pool_zero_copy) on cxl3-pool, hw and
   flush coherence, one device, one switch up to 15 hosts and a two-level
   tree above (as the CLI picks): the largest |DES / closed form - 1| of
   models/collectives/pool_forms.py per (hosts, coherence, algorithm), over
   1 B..1 MiB at 16 and 32 hosts, 1 B, 4 KiB, 64 KiB and 1 MiB at 64 hosts and
   1 B, 4 KiB and 64 KiB at 128 (expected: rounding, ~1e-12; the form follows
   the transport's FIFO chain and snoop-filter rules). 128 hosts at 1 MiB is
   left out: its DES call needs several GB. A 64-host 1 MiB DES call takes
   about 20 s and 650 MB; the section takes a few minutes.
"""
from __future__ import annotations

from cxlsim.coherence import Coherence
from cxlsim.fabric import Environment, NetworkTransport, Placement, build, fat_tree, get_preset, star
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.models.collectives import analytic, registry, runner
from cxlsim.models.collectives.pool_forms import geometry_of, pool_closed_form

KiB, MiB = 1 << 10, 1 << 20
POOL_GRID = {16: (1, 64, KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB),
             32: (1, 64, KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB),
             64: (1, 4 * KiB, 64 * KiB, MiB),
             128: (1, 4 * KiB, 64 * KiB)}


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
    for name in registry.names("allgather", "network"):
        worst = 0.0
        for p in (2, 3, 4, 7, 8, 16, 64):
            algo = registry.algorithm("allgather", name)
            if algo.check and algo.check(p) and not algo.fallback:
                continue
            for size in (1, 1024, 65536, 1 << 20, 16 << 20 if p < 64 else 4 << 20):
                worst = max(worst, abs(ratio(star(p), p, name, size) - 1))
        print(f"   {name:20s} {worst:.2e}")
    print("2. recursive doubling, 8 hosts, 4 per leaf, 1 MiB per rank: DES / closed form")
    for oversub in (1.0, 2.0, 4.0):
        r = ratio(fat_tree(8, 4, oversub, spines=1), 8, "recursive_doubling", 1 << 20, chunk=16384)
        print(f"   {oversub:.0f}:1  {r:.3f}")
    print("3. pool allgather on cxl3-pool, max |DES / closed form - 1| over sizes")
    preset = get_cxl_preset("cxl3-pool")
    for hosts, sizes in POOL_GRID.items():
        levels = 1 if hosts + 1 <= preset.switch.max_ports else 2
        for coherence in Coherence:
            for name in registry.names("allgather", "pool"):
                worst = 0.0
                for size in sizes:
                    t = CXLPoolTransport(preset, hosts, coherence=coherence, switch_levels=levels)
                    out = runner.run(t, "allgather", name, size)
                    runner.verify("allgather", hosts, runner.Context(), out.results)
                    form = pool_closed_form(geometry_of(t), size, coherence, zero_copy=name == "cxl_pool_zero_copy")
                    worst = max(worst, abs(out.latency_ns / form - 1))
                print(f"   {hosts:3d} hosts  {coherence.value:5s}  {name:20s} {worst:.2e}", flush=True)


if __name__ == "__main__":
    main()
