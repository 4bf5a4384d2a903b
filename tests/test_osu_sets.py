"""The committed OMB-style sets (experiments/osu_hypotheses/sets_*): the model re-predicts their own
allgather as the committed check says (the memcpy curve is part of the set, so this is exact)."""
import glob
import json
import os
import statistics

import pytest

from cxlsim.calibrate.osu_fit import from_osu

ROOT = os.path.join(os.path.dirname(__file__), "..", "experiments", "osu_hypotheses")
SETS = sorted(glob.glob(os.path.join(ROOT, "sets_*")))
# variant: (tables besides the allgather, rendezvous FIN), as run_hypotheses.VARIANTS, at the 8 KiB switch
MODELS = {"model": (("fresh", "bw", "bibw"), True),
          "x-w1": (("fresh", "bw", "latency", "bibw1"), False),
          "x-w1-fresh": (("fresh", "bw", "freshbibw1"), False)}


@pytest.mark.parametrize("sets", SETS, ids=os.path.basename)
def test_model_reproduces_the_committed_check(sets):
    with open(os.path.join(sets, "check.json")) as fh:
        committed = json.load(fh)
    checked = 0
    for variant, (benches, fin) in MODELS.items():
        files = [os.path.join(sets, "fastest", f"osu_{b}_cma-on.txt") for b in benches + ("allgather",)]
        if not all(os.path.exists(f) for f in files):
            assert f"fastest cma-on {variant}" not in committed
            continue
        result = from_osu(files, nodes=2, protocol_switch_bytes=8192, rendezvous_fin=fin)
        errors = [abs(r["full_error"]) for r in result["rows"] if not r["anchor"]]
        want = committed[f"fastest cma-on {variant}"]
        assert statistics.median(errors) == pytest.approx(want["median_abs"], rel=1e-9)
        assert max(errors) == pytest.approx(want["worst_abs"], rel=1e-9)
        assert result["model"]["own_copy_in_line"]
        assert (result["model"]["exchange"]["fin_ns"] > 0) == fin
        checked += 1
    assert checked >= 1
