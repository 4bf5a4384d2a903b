"""`cxlsim calibrate --from-osu` passes --protocol-switch and --rendezvous-fin to `from_osu`, and refuses them elsewhere."""
import glob

from cxlsim.cli import main as cli_main

FILES = sorted(glob.glob("cxlsim/data/osu/*.txt"))


def test_protocol_switch_and_rendezvous_fin_reach_the_fit(tmp_path, capsys, monkeypatch):
    import cxlsim.calibrate.cli as cli

    seen = {}
    real = cli.from_osu

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)
    monkeypatch.setattr(cli, "from_osu", spy)
    assert cli_main(["calibrate", "--from-osu", *FILES, "--protocol-switch", "8KiB", "--rendezvous-fin",
                     "--output", str(tmp_path / "w")]) == 0
    assert seen["protocol_switch_bytes"] == 8192 and seen["rendezvous_fin"] is True
    assert cli_main(["calibrate", "--from-osu", *FILES, "--output", str(tmp_path / "v")]) == 0
    assert seen["protocol_switch_bytes"] is None and seen["rendezvous_fin"] is False


def test_bad_or_misplaced_protocol_options_are_refused(capsys):
    assert cli_main(["calibrate", "--from-osu", *FILES, "--protocol-switch", "eight"]) == 2
    assert "--protocol-switch:" in capsys.readouterr().err
    assert cli_main(["calibrate", "--validate-only", "tests/data/local_host_profile_np2.json", "--rendezvous-fin"]) == 2
    assert "--rendezvous-fin: --validate-only does not use it" in capsys.readouterr().err


def test_projection_note_names_the_copy_inside_the_line_and_the_exchange_terms():
    from cxlsim.calibrate.project import projection_note

    base = {"kind": "network", "model": {"np": 2, "base_preset": "ib-hdr"}}
    assert projection_note(base, 2) == "network profile fitted at np 2: LogGP on ib-hdr + collective overhead + own-block copy"
    fitted = {"kind": "network", "model": {"np": 2, "base_preset": "ib-hdr", "own_copy_in_line": True,
                                           "exchange": {"contention": {"65536": 1.3}, "contention_source": "c from bibw",
                                                        "fin_ns": 900.0, "fin_source": "L + 2o"}}}
    note = projection_note(fitted, 2)
    assert "own-block copy inside the latency line" in note
    assert "exchange terms (contention: c from bibw; FIN: L + 2o)" in note
