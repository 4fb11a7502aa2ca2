"""bench.calibration: the paired differences and a tiny end-to-end run on seg (cached fits,
the report rebuilt from them)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import calibration as CAL
from bench.active_learning import DEFAULT_DATA

HAVE_DATA = (DEFAULT_DATA / "seg" / "train.data").is_file()


def test_paired_differences_by_hand():
    a, b = [0.03, 0.05, 0.02], [0.04, 0.04, 0.02]
    q = CAL._paired(a, b)
    d = np.array(a) - np.array(b)
    assert q["diff"] == pytest.approx(d.mean())
    assert q["se"] == pytest.approx(d.std(ddof=1) / np.sqrt(3))
    assert q["at_or_below"] == 2 and q["n"] == 3 and 0.0 <= q["p"] <= 1.0


def test_missing_data_is_one_line_exit_2(tmp_path, capsys):
    assert CAL.main(["--data-dir", str(tmp_path / "absent"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench.calibration:") and err.count("\n") == 1


@pytest.mark.skipif(not HAVE_DATA, reason="../shared/data/crfpp is not beside the checkout")
def test_end_to_end_on_one_seg_partition(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "out"
    args = ["--datasets", "seg", "--partitions", "1", "--other-partitions", "0", "--folds",
            "2", "--cache", str(cache), "--out", str(out)]
    assert CAL.main(args) == 0
    assert len(list(cache.glob("seg_p0_GPSL2_k2_s0_v2.npz"))) == 1
    rep = json.loads((out / "calibration.json").read_text())
    g = rep["summary"]["seg"]["GPSL2"]
    assert set(CAL.VARIANTS + CAL.PEER_VARIANTS + CAL.EXTRA_PEERS) <= set(g)
    assert "cross-fit" in g and "CRFsuite+T cross-fit" in g
    for v in g.values():  # every variant's figures are figures
        assert 0.0 <= v["ece_mass"][0] <= 1.0 and v["nll"][0] > 0
        assert 0.0 < v["ece_mass_floor"][0] < 0.5 and 0.0 < v["ece_width_floor"][0] < 0.5
    # the excess over the noise floor, paired against both peers
    for peer in CAL.PEER_VARIANTS:
        q = g["default"]["paired_excess"][peer]
        want = (g["default"]["ece_mass"][0] - g["default"]["ece_mass_floor"][0]
                - g[peer]["ece_mass"][0] + g[peer]["ece_mass_floor"][0])
        assert q["diff"] == pytest.approx(want) and q["n"] == 1
    # the default keeps the lowest cross-validated NLL among the singles and the stack allowed
    # to change the decisions, so on the test tokens it is one of them, unless it is the best
    # one with the decisions kept (gpsl.calibration.decisions)
    d = g["default"]["ece_mass"][0]
    if not any(c.endswith("/kept") for c in g["default"]["chosen"]):
        assert any(d == pytest.approx(g[k]["ece_mass"][0]) for k in
                   ("raw+T", "probit+T", "structured", "structured+V", "stack ensemble"))
    else:  # the decisions kept: the uncalibrated labels, so the uncalibrated loss
        assert g["default"]["loss"][0] == pytest.approx(g["raw"]["loss"][0])
    assert rep["ensemble"] == "stack"
    md = (out / "calibration.md").read_text()
    assert "## Acceptance (issue 14, GPSL2)" in md and "Paired per-partition" in md
    assert "| seg | " in md and "uniform ensemble" in md and "Noise floor" in md
    assert "cross-fit" in md and "ECE15 floor" in md
    # the report rebuilt from the cache alone gives the same figures
    again = tmp_path / "again"
    assert CAL.main([*args[:-1], str(again), "--report-only"]) == 0
    rep2 = json.loads((again / "calibration.json").read_text())
    assert rep2["summary"]["seg"]["GPSL2"]["default"]["ece_mass"] == g["default"]["ece_mass"]
