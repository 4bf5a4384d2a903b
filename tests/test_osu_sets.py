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


@pytest.mark.parametrize("sets", SETS, ids=os.path.basename)
def test_model_reproduces_the_committed_check(sets):
    with open(os.path.join(sets, "check.json")) as fh:
        committed = json.load(fh)["fastest cma-on model"]
    files = [os.path.join(sets, "fastest", f"osu_{b}_cma-on.txt") for b in ("fresh", "bw", "bibw", "allgather")]
    result = from_osu(files, nodes=2, protocol_switch_bytes=8192, rendezvous_fin=True)
    errors = [abs(r["full_error"]) for r in result["rows"] if not r["anchor"]]
    assert statistics.median(errors) == pytest.approx(committed["median_abs"], rel=1e-9)
    assert max(errors) == pytest.approx(committed["worst_abs"], rel=1e-9)
    assert result["model"]["own_copy_in_line"] and result["model"]["exchange"]["fin_ns"] > 0
