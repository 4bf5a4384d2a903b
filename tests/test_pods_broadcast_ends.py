"""Per-rank ends of the network broadcasts (`broadcast_ends`): their latest is the algorithm's own closed form."""
from __future__ import annotations

import pytest

from cxlsim import config
from cxlsim.fabric.pod_setup import CXL_PODS
from cxlsim.models.collectives import analytic
from cxlsim.models.collectives.base import Context
from cxlsim.models.collectives.broadcast_ends import ENDS, binomial_ends, network_ends
from cxlsim.models.collectives.network_forms import network_closed_form
from cxlsim.models.collectives.registry import lookup, names


def network_figures(nodes=32):
    scenario = config.from_dict({"fabric": {"preset": "cxl-pods", "nodes": nodes, "pods": {"hosts": 4}}})
    return analytic.CostModel.from_network(CXL_PODS.elaborate(scenario.fabric).network.network(), 65536)


@pytest.mark.parametrize("name", sorted(ENDS))
def test_the_latest_rank_end_is_the_algorithm_s_own_form(name):
    cm = network_figures()
    for p in (2, 3, 4, 5, 8):
        algo, _ = lookup("broadcast", name, p)
        if algo.name != name:  # scatter_recursive_doubling_allgather needs a power of two
            continue
        for s in (1, 1000, 65536, 3 << 20):
            for root in (0, p - 1):
                ends = network_ends(name, cm, p, s, root)
                assert len(ends) == p and ends.min() >= 0
                assert ends.max() == pytest.approx(network_closed_form(algo, cm, p, s, Context(root=root)),
                                                   rel=1e-12)


def test_binomial_ends_by_hand():
    cm, s = network_figures(16), 4096
    t, busy = cm.T(s), cm.busy(s, False)
    # relative rank 0 sends to 2, then 1; rank 2 sends to 3
    assert list(binomial_ends(cm, 4, s)) == pytest.approx([2 * busy, busy + t, t + busy, 2 * t])
    assert network_ends("no_such_algorithm", cm, 4, s) is None


def test_every_built_in_network_broadcast_has_per_rank_ends():
    assert set(names("broadcast", "network")) <= set(ENDS)
