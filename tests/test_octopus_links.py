"""A device's links carry each direction on its own (issue 18): a read:write mix can pass one direction's rate."""
from __future__ import annotations

import dataclasses

import pytest

from cxlsim.fabric import stats
from cxlsim.fabric.cxl_presets import get_cxl_preset
from cxlsim.fabric.cxl_transport import CXLPoolTransport
from cxlsim.models.collectives import runner
from cxlsim.models.collectives.registry import algorithm

MiB = 1 << 20


def x8_device(media_bw: float):
    """cxl2-pool's figures with a x8 link (32 GB/s per direction) to a one-headed device of `media_bw`, and hosts
    that keep enough lines in flight to fill the link (256 x 64 B / 250 ns = 65.5 GB/s, so 32 GB/s each)."""
    base = get_cxl_preset("cxl2-pool")
    return dataclasses.replace(base, switch=dataclasses.replace(base.switch, port_bw_bytes_per_ns=32.0),
                               device=dataclasses.replace(base.device, media_bw_bytes_per_ns=media_bw),
                               host_path=dataclasses.replace(base.host_path, outstanding_lines=256))


def stream(preset, kinds, size=MiB):
    """Ranks that each read ('r') or write ('w', then fence) `size` bytes at once; (GB/s over all, transport)."""
    t = CXLPoolTransport(preset, len(kinds))
    end = {}

    def rank(r, kind):
        if kind == "r":
            yield t.pool_read(r, r * 4 * MiB, size)
        else:
            yield t.pool_write(r, r * 4 * MiB, size, streaming=True)
            yield t.fence(r)
        end[r] = t.env.now

    t.run({r: rank(r, k) for r, k in enumerate(kinds)})
    return len(kinds) * size / max(end.values()), t


def test_a_mix_uses_both_directions_up_to_the_media():
    two_to_one, t = stream(x8_device(48.0), "rrw")
    assert t.path.split_links and 47.0 < two_to_one <= 48.0  # the media binds, not one direction's 32 GB/s
    reads, _ = stream(x8_device(48.0), "rr")
    assert 31.0 < reads <= 32.0  # both reads share the link's downstream direction
    both, _ = stream(x8_device(80.0), "rw")
    assert 62.0 < both <= 64.0  # each direction at its 32 GB/s
    ports = {p.port: p.bytes for p in stats.collect(t).ports if p.component == "device link"}
    assert ports == {"dev0 link up": MiB, "dev0 link down": 2 * MiB}


def test_where_the_media_binds_first_the_device_is_one_fifo():
    mixed, t = stream(x8_device(31.5), "rrw")
    assert not t.path.split_links and t.path.device_links == [] and 31.0 < mixed <= 31.5
    # every built-in preset's device: media at or below its heads' links
    for name in ("cxl2-pool", "cxl3-pool", "mhd2-pool", "mhd3-pool", "octopus4-pool"):
        pre = get_cxl_preset(name)
        assert not CXLPoolTransport(pre, 4, coherence=pre.coherence_modes[0]).path.split_links


@pytest.mark.parametrize("hosts", [2, 4])
def test_the_pool_allgather_still_equals_its_form(hosts):
    pre, algo = x8_device(48.0), algorithm("allgather", "cxl_pool")
    for m in (64, 65536):
        t = CXLPoolTransport(pre, hosts)
        assert t.path.split_links and t.figures().one_device_bw_bytes_per_ns == 32.0
        outcome = runner.run_algorithm(t, algo, m)
        assert outcome.latency_ns == pytest.approx(algo.cost(t.figures(), hosts, m), rel=1e-9)
