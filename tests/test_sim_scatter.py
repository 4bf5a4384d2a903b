"""Scatter as a registry collective: MPICH's binomial scatter in the DES, its closed form, the selectors, the CLI."""
import pytest

from cxlsim.errors import InputError
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.network import build
from cxlsim.fabric.placement import Placement
from cxlsim.fabric.presets import get_preset
from cxlsim.fabric.topology import star
from cxlsim.fabric.transport import NetworkTransport
from cxlsim.models.collectives import analytic, base, registry, runner, selectors


def test_scatter_is_a_collective_with_the_binomial_record_and_both_selectors_pick_it():
    assert "scatter" in base.COLLECTIVES and registry.names("scatter") == ["binomial"]
    for library in ("mpich", "ompi"):
        assert selectors.select(library, "scatter", 8, 4096) == ("binomial", None)


@pytest.mark.parametrize("nodes, rpn", [(5, 1), (8, 1), (3, 2)])
def test_each_rank_gets_its_segment_from_any_root_and_the_des_equals_the_form(nodes, rpn):
    for root in sorted({0, 1, nodes * rpn - 1}):
        for size in (1, 4096, 1 << 20):
            t = NetworkTransport(build(star(nodes), get_preset("ib-hdr"), Environment()), Placement(nodes, rpn), 65536)
            ctx = runner.Context(groups=tuple(map(tuple, t.placement.groups())), root=root)
            out = runner.run(t, "scatter", "binomial", size, ctx)
            runner.verify("scatter", t.size, ctx, out.results)
            cm = analytic.CostModel.from_network(t.network, 65536)
            form, _, note = analytic.cost("scatter", "binomial", t.size, size, cm, ctx)
            if note is None:  # one rank per host: exact
                assert form == pytest.approx(out.latency_ns, rel=1e-6), (nodes, root, size)


def test_verify_catches_a_wrong_segment():
    good = {r: ("data-from", 1, r) for r in range(3)}
    runner.verify("scatter", 3, runner.Context(root=1), good)
    with pytest.raises(AssertionError, match="rank 2"):
        runner.verify("scatter", 3, runner.Context(root=1), {**good, 2: ("data-from", 1, 0)})
    with pytest.raises(InputError, match="scatter"):
        registry.algorithm("scatter", "ring")
