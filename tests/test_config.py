"""Scenario loading: validation messages, unknown keys, dotted lookup and overrides."""
import dataclasses

import pytest

from cxlsim import config
from cxlsim.errors import InputError


def scenario(**fabric):
    return {"fabric": {"preset": "ib-hdr", "nodes": 4, **fabric}}


def test_defaults_and_frozen_keyword_only_dataclasses():
    cfg = config.from_dict(scenario())
    assert cfg.engine == "des" and cfg.fabric.ranks_per_node == 1 and cfg.workload.chunk_bytes == 65536
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.fabric.nodes = 3
    with pytest.raises(TypeError):
        config.LinkConfig(25.0, 1.0)


def test_units_are_parsed_into_internal_units():
    cfg = config.from_dict({**scenario(links={"bandwidth": "200 Gb/s", "latency": "1 us"}),
                            "workload": {"sizes": "1B:8B", "chunk": "4 KiB"}})
    assert cfg.fabric.links.bw_bytes_per_ns == 25.0 and cfg.fabric.links.latency_ns == 1000.0
    assert cfg.workload.sizes_bytes == (1, 2, 4, 8) and cfg.workload.chunk_bytes == 4096


@pytest.mark.parametrize("data, message", [
    (scenario(links={"bandwidth": "-3"}), "fabric.links.bandwidth: expected a bandwidth like '25 GB/s', got '-3'"),
    (scenario(links={"bandwidth": -3}), "fabric.links.bandwidth: expected a bandwidth like '25 GB/s', got -3"),
    ({"fabric": {"nodes": 4}}, "fabric.preset: missing; expected a preset name"),
    ({"fabric": {"preset": "ib-hdr"}}, "fabric.nodes: missing; expected an integer >= 1"),
    (scenario(nodes=0), "fabric.nodes: expected an integer >= 1, got 0"),
    (scenario(nodes=True), "fabric.nodes: expected an integer >= 1, got True"),
    (scenario(colour="red"), "fabric.colour: unknown key; expected one of preset, topology"),
    ({**scenario(), "extra": 1}, "extra: unknown key"),
    (scenario(switch={"mode": "magic"}), "fabric.switch.mode: expected 'cut-through' or 'store-and-forward'"),
    ({**scenario(), "engine": "fast"}, "engine: expected 'des' or 'analytic', got 'fast'"),
    ({**scenario(), "workload": {"sizes": "1KiB:1B"}}, "workload.sizes: expected sizes"),
    ({**scenario(), "workload": []}, "workload: expected a mapping of keys, got []"),
    ({**scenario(), "output": {"plot": 1}}, "output.plot: expected true or false, got 1"),
])
def test_errors_name_key_value_and_expectation(data, message):
    with pytest.raises(config.ConfigError) as info:
        config.from_dict(data)
    assert message in str(info.value)
    assert isinstance(info.value, InputError)


def test_get_and_with_overrides():
    cfg = config.from_dict(scenario())
    assert config.get(cfg, "fabric.preset") == "ib-hdr"
    assert config.get(cfg, "fabric.links.bandwidth") is None
    new = config.with_overrides(cfg, {"fabric.nodes": 8, "fabric.links.bandwidth": "50 GB/s",
                                      "workload.sizes": "1B:4B"})
    assert (new.fabric.nodes, new.fabric.links.bw_bytes_per_ns, new.workload.sizes_bytes) == (8, 50.0, (1, 2, 4))
    assert cfg.fabric.nodes == 4  # the original is untouched
    with pytest.raises(config.ConfigError, match="fabric.nodez: unknown key"):
        config.get(cfg, "fabric.nodez")
    with pytest.raises(config.ConfigError, match="fabric.nodes: expected an integer >= 1, got -1"):
        config.with_overrides(cfg, {"fabric.nodes": -1})


def test_round_trip_through_yaml(tmp_path):
    import yaml

    cfg = config.from_dict({**scenario(links={"bandwidth": "3.125 GB/s"}, nic={"overhead": "0.9 us"}),
                            "seed": 7, "workload": {"sizes": [1, 3, 1000]}})
    path = tmp_path / "resolved.yaml"
    path.write_text(yaml.safe_dump(config.to_dict(cfg)))
    assert config.load(str(path)) == cfg


def test_load_errors(tmp_path):
    with pytest.raises(config.ConfigError, match="no such file"):
        config.load(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("fabric: [unclosed\n")
    with pytest.raises(config.ConfigError, match="not valid YAML"):
        config.load(str(bad))


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Pool:
    """A schema of its own, built from the public value parsers (as cxlsim.sweep's is)."""

    kind: str = config.option("kind", config.choice("local", "mpi"), "'local' or 'mpi'", "local")
    workers: int | None = config.option("workers", config.integer(1), "an integer >= 1", None)


def test_public_value_parsers_accept_good_values():
    assert config.choice("local", "mpi")("mpi") == "mpi" and config.choice(1, 2)(2) == 2
    assert config.integer(0)(0) == 0 and config.integer(1)(8) == 8
    assert config.from_dict({"kind": "mpi", "workers": 3}, _Pool) == _Pool(kind="mpi", workers=3)
    assert config.from_dict({}, _Pool) == _Pool(kind="local", workers=None)


@pytest.mark.parametrize("parse, value", [
    (config.choice("local", "mpi"), "ssh"), (config.choice(1, 2), 3),
    (config.integer(1), 0), (config.integer(1), True), (config.integer(1), 2.0), (config.integer(0), "4"),
])
def test_public_value_parsers_reject_bad_values(parse, value):
    with pytest.raises(ValueError):
        parse(value)


@pytest.mark.parametrize("data, message", [
    ({"kind": "ssh"}, "pool.kind: expected 'local' or 'mpi', got 'ssh'"),
    ({"workers": 0}, "pool.workers: expected an integer >= 1, got 0"),
    ({"workers": True}, "pool.workers: expected an integer >= 1, got True"),
])
def test_public_value_parsers_errors_name_the_key(data, message):
    with pytest.raises(config.ConfigError) as info:
        config.from_dict(data, _Pool, "pool")
    assert str(info.value) == message


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 4096), rpn=st.integers(1, 64), bw=st.floats(0.001, 1000, allow_nan=False),
       lat=st.floats(0, 1e6, allow_nan=False), sizes=st.lists(st.integers(0, 1 << 30), min_size=1, max_size=5),
       chunk=st.integers(1, 1 << 24), seed=st.one_of(st.none(), st.integers(0, 2**63)),
       mode=st.sampled_from([None, "cut-through", "store-and-forward"]))
def test_any_valid_scenario_round_trips(nodes, rpn, bw, lat, sizes, chunk, seed, mode):
    cfg = config.from_dict({"seed": seed, "fabric": {
        "preset": "ib-ndr", "nodes": nodes, "ranks_per_node": rpn,
        "links": {"bandwidth": f"{bw!r} GB/s", "latency": f"{lat!r} ns"}, "switch": {"mode": mode}},
        "workload": {"sizes": sizes, "chunk": chunk}})
    assert config.from_dict(config.to_dict(cfg)) == cfg
    assert config.get(cfg, "workload.chunk") == chunk and config.get(cfg, "fabric.switch.mode") == mode
