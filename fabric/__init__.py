"""Hardware models: links, NICs, switches, topologies, routing and the transport interface.

Build a fabric in one elaboration step and talk to it only through a transport:

>>> from cxlsim.fabric import Environment, NetworkTransport, Placement, build, get_preset, star
>>> net = build(star(2), get_preset("ib-hdr"), Environment())
>>> t = NetworkTransport(net, Placement(2, 1))
>>> def ping(t):
...     yield t.send(0, 1, 1000, payload="hi")
>>> def pong(t):
...     return (yield t.recv(1, 0))
>>> t.run({0: ping(t), 1: pong(t)})[1], t.now()
('hi', 1190.0)

Modules: `link`, `host`, `switch` (elements and their parameter dataclasses),
`topology` (graphs), `routing`, `placement`, `network` (elaboration and the
chunk pipeline), `transport` (the message transport interface), `engine` (the
SimPy environment), `reference` (the slow twin used by tests), `stats` (what a
run's ports and pool counted). Presets: `preset` (the protocol and registry),
`presets` (network), `cxl_presets` (CXL pools), `network_setup` and `cxl_setup`
(a preset elaborated for one scenario), `pods` and `pod_setup` (CXL pods joined
by a network). The CXL pool: `cxl` (hardware parameters), `pool_transport` (the
interface every pool algorithm uses), `cxl_transport` (its DES), `pool_path`,
`pool_coherence` (hw and flush strategies), `snoop_filter`, `pool_memory`.
"""
from cxlsim.fabric.engine import Environment
from cxlsim.fabric.host import Host, HostParams, Nic, NicParams
from cxlsim.fabric.link import Link, LinkParams, Port
from cxlsim.fabric.network import Network, build
from cxlsim.fabric.placement import Placement
from cxlsim.fabric.presets import PRESETS, NetworkPreset, get_preset
from cxlsim.fabric.routing import Router
from cxlsim.fabric.switch import SWITCHES, EthernetSwitch, IBSwitch, Switch, SwitchParams
from cxlsim.fabric.topology import TopologyError, fat_tree, star
from cxlsim.fabric.topology import load as load_topology
from cxlsim.fabric.transport import Endpoint, NetworkTransport, Transport, UnsupportedOperation

__all__ = [
    "Environment", "Host", "HostParams", "Nic", "NicParams", "Link", "LinkParams", "Port", "Network", "build",
    "Placement", "PRESETS", "NetworkPreset", "get_preset", "Router", "SWITCHES", "EthernetSwitch", "IBSwitch", "Switch",
    "SwitchParams", "TopologyError", "fat_tree", "load_topology", "star", "Endpoint", "NetworkTransport", "Transport",
    "UnsupportedOperation",
]
