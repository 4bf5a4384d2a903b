"""Fabric elements: ports, topologies, routing, placement, presets and elaboration."""
import zlib

import networkx as nx
import pytest

from cxlsim.errors import InputError
from cxlsim.fabric import topology
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.link import LinkParams, Port
from cxlsim.fabric.network import build
from cxlsim.fabric.placement import Placement
from cxlsim.fabric.presets import PRESETS, get_preset
from cxlsim.fabric.routing import Router, flow_hash
from cxlsim.fabric.switch import IBSwitch, EthernetSwitch, SwitchParams


def test_port_is_a_fifo_server():
    port = Port("a->b", bw_bytes_per_ns=2.0, latency_ns=5.0)
    assert port.reserve(0.0, 100) == (0.0, 50.0)
    assert port.reserve(10.0, 100) == (50.0, 100.0)   # queued behind the first chunk
    assert port.reserve(200.0, 10) == (200.0, 205.0)  # idle again
    assert port.busy_ns == 105.0 and port.chunks == 3


def test_param_dataclasses_are_frozen_keyword_only_and_checked():
    with pytest.raises(TypeError):
        LinkParams(1.0, 2.0)
    with pytest.raises(ValueError, match="bw_bytes_per_ns"):
        LinkParams(bw_bytes_per_ns=-3.0, latency_ns=1.0)
    with pytest.raises(ValueError, match="mode"):
        SwitchParams(latency_ns=1.0, mode="teleport")


def test_switch_modes():
    ct = IBSwitch("s", SwitchParams(latency_ns=100.0, mode="cut-through"))
    sf = EthernetSwitch("s", SwitchParams(latency_ns=100.0, mode="store-and-forward"))
    # A 1000-byte chunk whose head arrives at 10 ns and tail at 50 ns (25 bytes/ns).
    assert sf.forward_ready_ns(10.0, 50.0, 0.04, 1000) == 150.0
    assert ct.forward_ready_ns(10.0, 50.0, 0.04, 1000) == 110.0
    # A twice-faster egress must wait so it does not outrun the tail.
    assert ct.forward_ready_ns(10.0, 50.0, 0.02, 1000) == 130.0
    assert IBSwitch.default_mode == "cut-through" and EthernetSwitch.default_mode == "store-and-forward"


def test_star_and_fat_tree_shapes():
    g = topology.star(5)
    assert topology.hosts(g) == [f"h{i}" for i in range(5)] and g.degree("sw0") == 5
    ft = topology.fat_tree(8, hosts_per_leaf=4, oversubscription=2.0)
    assert sorted(n for n, k in ft.nodes(data="kind") if k == "switch") == ["leaf0", "leaf1", "spine0", "spine1"]
    # 4 hosts of bandwidth 1 under a leaf, 2:1 -> 2 units of uplink over 2 spines -> factor 1 each.
    assert ft.edges["leaf0", "spine0"]["bw_factor"] == 1.0
    one_spine = topology.fat_tree(8, hosts_per_leaf=4, oversubscription=2.0, spines=1)
    assert one_spine.edges["leaf1", "spine0"]["bw_factor"] == 2.0


@pytest.mark.parametrize("mutate, message", [
    (lambda g: g.add_node("h9", kind="host"), "one link"),
    (lambda g: (g.add_node("h9", kind="host"), g.add_node("sw9", kind="switch"), g.add_edge("h9", "sw9")),
     "disconnected"),
    (lambda g: g.add_node("x", kind="router"), "kind: expected 'host' or 'switch', got 'router'"),
    (lambda g: nx.set_node_attributes(g, {"sw0": "token-ring"}, "switch_kind"), "switch_kind"),
    (lambda g: g.add_edge("h0", "h1"), "exactly one link"),
])
def test_ill_formed_graphs_are_rejected(mutate, message):
    g = topology.star(3)
    mutate(g)
    with pytest.raises(topology.TopologyError, match=message):
        topology.validate(g)
    assert issubclass(topology.TopologyError, InputError)


def test_load_yaml_and_graphml(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("nodes:\n  - {name: a, kind: host}\n  - {name: b, kind: host}\n"
                    "  - {name: s, kind: switch, switch_kind: ethernet, latency: 300 ns}\n"
                    "links:\n  - {a: a, b: s, bandwidth: 10 GB/s}\n  - {a: b, b: s, latency: 1 us}\n")
    g = topology.load(str(path))
    assert g.edges["a", "s"]["bw_bytes_per_ns"] == 10.0 and g.edges["b", "s"]["latency_ns"] == 1000.0
    assert g.nodes["s"]["latency_ns"] == 300.0
    gml = tmp_path / "t.graphml"
    raw = nx.Graph()
    raw.add_node("a", kind="host"), raw.add_node("s", kind="switch"), raw.add_node("b", kind="host")
    raw.add_edge("a", "s", bandwidth="25 GB/s"), raw.add_edge("b", "s")
    nx.write_graphml(raw, str(gml))
    assert topology.load(str(gml)).edges["a", "s"]["bw_bytes_per_ns"] == 25.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - {name: a, kind: host}\nlinks:\n  - {a: a, b: z}\n")
    with pytest.raises(topology.TopologyError, match="unknown node 'z'"):
        topology.load(str(bad))
    bad.write_text("nodes:\n  - {name: a, kind: host}\n  - {name: s, kind: switch}\n"
                   "links:\n  - {a: a, b: s, bandwidth: '-3'}\n")
    with pytest.raises(topology.TopologyError, match=r"links\[0\].bandwidth: expected a bandwidth"):
        topology.load(str(bad))


def test_routing_is_shortest_and_ecmp_uses_crc32():
    g = topology.fat_tree(8, hosts_per_leaf=4, oversubscription=1.0)  # 4 spines
    router = Router(g)
    path = router.route("h0", "h5")
    assert path[0] == "h0" and path[1] == "leaf0" and path[3] == "leaf1" and path[-1] == "h5"
    spines = sorted(n for n in g if n.startswith("spine"))
    assert path[2] == spines[zlib.crc32(b"h0>h5") % 4] and flow_hash("h0", "h5") == zlib.crc32(b"h0>h5")
    used = {router.route(f"h{a}", f"h{b}")[2] for a in range(4) for b in range(4, 8)}
    assert len(used) > 1  # ECMP spreads flows over the spines
    assert router.route("h0", "h1") == ["h0", "leaf0", "h1"]


def test_placement_block_and_round_robin():
    block = Placement(3, 2, "block")
    assert block.host_of == [0, 0, 1, 1, 2, 2] and block.groups() == [[0, 1], [2, 3], [4, 5]]
    rr = Placement(3, 2, "round_robin")
    assert rr.host_of == [0, 1, 2, 0, 1, 2] and rr.ranks_on(1) == [1, 4]
    assert rr.same_host(0, 3) and not rr.same_host(0, 1)
    with pytest.raises(InputError, match="placement"):
        Placement(2, 2, "scatter")


@pytest.mark.parametrize("name, lo_us, hi_us", [
    ("ib-hdr", 1.0, 1.5), ("ib-ndr", 1.0, 1.5), ("eth-100g-roce", 2.0, 3.0),
    ("eth-10g-tcp", 16.0, 18.0), ("eth-25g-tcp", 16.0, 18.0), ("eth-100g-tcp", 16.0, 18.0)])
def test_presets_match_their_sources(name, lo_us, hi_us):
    p = get_preset(name)
    one_way_us = (2 * p.nic.overhead_ns + 2 * p.link.latency_ns + p.switch.latency_ns) / 1e3
    assert lo_us <= one_way_us <= hi_us
    assert p.source


def test_preset_registry_and_link_speeds():
    assert {"eth-10g-tcp", "eth-25g-tcp", "eth-100g-tcp", "eth-100g-roce", "ib-hdr", "ib-ndr"} <= set(PRESETS)
    assert get_preset("ib-hdr").link.bw_bytes_per_ns == 25.0       # 200 Gb/s
    assert get_preset("eth-25g-tcp").link.bw_bytes_per_ns == 3.125  # 25 Gb/s
    with pytest.raises(InputError, match="unknown preset 'ib-xdr'; expected one of"):
        get_preset("ib-xdr")


def test_build_applies_graph_attributes_over_the_preset():
    g = topology.fat_tree(4, hosts_per_leaf=2, oversubscription=2.0, spines=1)
    g.nodes["spine0"]["switch_kind"] = "ethernet"
    net = build(g, get_preset("ib-hdr"), Environment())
    assert [h.name for h in net.hosts] == ["h0", "h1", "h2", "h3"]
    assert isinstance(net.switches["leaf0"], IBSwitch) and isinstance(net.switches["spine0"], EthernetSwitch)
    assert net.switches["spine0"].params.mode == "store-and-forward"  # Ethernet's default
    assert net.port("leaf0", "spine0").ns_per_byte == pytest.approx(1 / 25.0)  # 2 hosts / 2:1 = 1 link
    assert net.hosts[0].uplink is net.port("h0", "leaf0")


def _arrivals(kind, graph, preset, transfers, chunk):
    from cxlsim.fabric.reference import ReferenceNetwork

    env = Environment()
    net = build(graph, preset, env)
    engine = ReferenceNetwork(net) if kind == "reference" else net
    got = {}

    def start(i, src, dst, size):
        def go(_event=None):
            if kind == "reference":
                engine.transfer(src, dst, size, chunk, lambda t: got.__setitem__(i, t))
            else:
                engine.transfer(src, dst, size, chunk, lambda _e: got.__setitem__(i, env.now))
        return go

    for i, (t0, src, dst, size) in enumerate(transfers):
        env.at(t0, start(i, src, dst, size))
    env.run()
    return got


@pytest.mark.parametrize("mode", ["cut-through", "store-and-forward"])
def test_port_reservations_match_the_simpy_resource_twin_under_contention(mode):
    import dataclasses

    preset = get_preset("eth-100g-roce")
    preset = dataclasses.replace(preset, switch=SwitchParams(latency_ns=300.0, mode=mode))
    graph = topology.fat_tree(8, hosts_per_leaf=4, oversubscription=2.0, spines=1)
    # Incast to host 0, cross-leaf flows sharing the 2:1 uplink, and back-to-back sends.
    transfers = [(0.0, 1, 0, 200_000), (10.0, 2, 0, 50_000), (35.0, 3, 0, 123_457), (0.0, 4, 1, 300_000),
                 (5.0, 5, 2, 300_000), (7.0, 6, 3, 70_001), (1.0, 0, 7, 99_999), (2.0, 0, 6, 1_000),
                 (20_000.0, 7, 0, 65_536)]
    fast = _arrivals("fast", graph, preset, transfers, 8192)
    slow = _arrivals("reference", graph, preset, transfers, 8192)
    assert sorted(fast) == list(range(len(transfers)))
    for i in fast:
        assert fast[i] == pytest.approx(slow[i], rel=1e-12), i
    alone = _arrivals("fast", graph, preset, [transfers[1]], 8192)[0]
    assert fast[1] > alone * 1.5  # the incast really queued


# ---------------------------------------------------------------- the preset registry

def _plugin(tmp_path, monkeypatch, name, body):
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CXLSIM_PLUGINS", name)


def test_the_registry_lists_every_builtin_preset_and_finds_them_by_name():
    from cxlsim.fabric import preset
    from cxlsim.fabric.cxl_presets import CXL_PRESETS

    known = preset.presets()
    assert set(known) == set(PRESETS) | set(CXL_PRESETS) | {"cxl-pods"}
    assert preset.find("cxl-pods").kind == "hybrid pod fabric"
    assert preset.find("ib-hdr") is PRESETS["ib-hdr"] and preset.find("cxl3-pool").kind == "CXL pool preset"
    for p in known.values():
        assert isinstance(p, preset.Preset) and p.source
    with pytest.raises(InputError, match="fabric.preset: unknown preset 'ib-xdr'; expected one of cxl-pods, cxl2-pool"):
        preset.find("ib-xdr")
    assert preset.uses(known["ib-hdr"], "fabric.links.latency") and not preset.uses(known["ib-hdr"], "fabric.cxl.chunk")
    assert preset.unused(known["cxl3-pool"], ["fabric.nodes", "fabric.nic.gap", "fabric.cxl.chunk"]) == \
        ["fabric.nic.gap"]


def test_a_plugin_network_preset_is_usable_by_name(tmp_path, monkeypatch):
    from cxlsim import config, simulate

    _plugin(tmp_path, monkeypatch, "slow_ib", (
        "import dataclasses\n"
        "from cxlsim.fabric.presets import get_preset\n"
        "PRESETS = [dataclasses.replace(get_preset('ib-hdr'), name='ib-slow', source='test: ib-hdr at 2x o')]\n"
        "PRESETS[0] = dataclasses.replace(PRESETS[0], nic=dataclasses.replace(PRESETS[0].nic, overhead_ns=700.0))\n"))
    scenario = config.from_dict({"fabric": {"preset": "ib-slow", "nodes": 2}, "workload": {"sizes": [1]},
                                 "engine": "analytic"})
    base = config.with_overrides(scenario, {"fabric.preset": "ib-hdr"})
    # one message of 1 B: 2 o more than ib-hdr's (o: 350 -> 700 ns on each side)
    assert simulate.run(scenario)[0]["latency_us"] - simulate.run(base)[0]["latency_us"] == pytest.approx(0.7)


@pytest.mark.parametrize("module, body, message", [
    ("not_a_preset", "PRESETS = [object()]\n", "a PRESETS record must be a preset"),
    ("twice_a_preset", "from cxlsim.fabric.presets import get_preset\nPRESETS = [get_preset('ib-hdr')]\n",
     "preset 'ib-hdr' is declared twice"),
])
def test_bad_plugin_presets_are_named(tmp_path, monkeypatch, module, body, message):
    from cxlsim.fabric import preset

    _plugin(tmp_path, monkeypatch, module, body)
    with pytest.raises(InputError, match=message):
        preset.presets()
