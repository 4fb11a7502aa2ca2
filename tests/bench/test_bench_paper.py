"""Tests of bench/paper.py and its parts (bench/paper_*.py): the exact pseudo-likelihood
decoder and a tiny harness run.

The harness test reads the CRF++ data sets from ../shared/data/crfpp (next to the repository)
and is skipped when they are absent; it writes to a temporary folder, never bench/results.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from bench import paper, paper_report, paper_setup, paper_summary
from bench.common import DATA_DIR, hide_labels, partitions
from gpsl.predict import pl_exact_decode, pl_log_score

HAVE_DATA = all((DATA_DIR / "seg" / f).is_file() for f in ("train.data", "test.data", "template"))
needs_data = pytest.mark.skipif(
    not HAVE_DATA, reason=f"shared CRF++ data absent ({DATA_DIR}); see ../shared/data/README.md"
)


def brute_log_pl(b, g, offsets, y) -> float:
    """log prod_l softmax_q(b[l, q] + sum_d g[d][y_{l+o_d}, q])[y_l], straight from the model."""
    L = b.shape[0]
    total = 0.0
    for t in range(L):
        s = b[t].copy()
        for d, o in enumerate(offsets):
            if 0 <= t + o < L:
                s = s + g[d][y[t + o], :]
        m = s.max()
        total += s[y[t]] - m - np.log(np.exp(s - m).sum())
    return total


@pytest.mark.parametrize("offsets", [(-1, 1), (1, -1), (-1,), (1,)])
def test_exact_decoding_matches_brute_force(offsets):
    rng = np.random.default_rng(7)
    J = 3
    for L in range(1, 7):
        for _ in range(6 if L < 6 else 3):
            b = rng.normal(scale=2.0, size=(L, J))
            g = rng.normal(scale=2.0, size=(len(offsets), J, J))
            scores = {y: brute_log_pl(b, g, offsets, y)
                      for y in itertools.product(range(J), repeat=L)}
            best = max(scores, key=scores.get)
            y, score = pl_exact_decode(b, g, offsets)
            assert score == pytest.approx(scores[best], abs=1e-9)
            assert tuple(int(v) for v in y) == best
            assert pl_log_score(b, g, offsets, y) == pytest.approx(score, abs=1e-9)


def test_exact_decoding_rejects_long_range_offsets():
    with pytest.raises(ValueError):
        pl_exact_decode(np.zeros((3, 2)), np.zeros((4, 2, 2)), (-2, -1, 1, 2))


def test_partitions_disjoint_and_reproducible():
    a = partitions(54, 20, 16, 3, seed=5, name="seg")
    b = partitions(54, 20, 16, 2, seed=5, name="seg")
    for (tr, te), (tr2, te2) in zip(a, b):
        assert len(tr) == 20 and len(te) == 16 and not set(tr) & set(te)
        np.testing.assert_array_equal(tr, tr2)
        np.testing.assert_array_equal(te, te2)
    assert not np.array_equal(a[0][0], a[1][0])
    with pytest.raises(ValueError):
        partitions(10, 8, 8, 1, seed=0, name="seg")


def test_hide_labels_exact_and_nested():
    y = [["a"] * 7, ["b"] * 5, ["c"] * 8]
    order = np.random.default_rng(0).permutation(20)
    prev = set()
    for f in (0.1, 0.3, 0.5):
        yh, k = hide_labels(y, f, None, order=order)
        assert k == round(20 * f)
        hidden = {(i, j) for i, lab in enumerate(yh) for j, v in enumerate(lab) if v is None}
        assert len(hidden) == k and prev <= hidden
        assert all(v == y[i][j] for i, lab in enumerate(yh) for j, v in enumerate(lab)
                   if v is not None)
        prev = hidden


def test_missing_data_exits_2(tmp_path, capsys):
    rc = paper.main(["--datasets", "seg", "--data-dir", str(tmp_path / "nope"),
                     "--out", str(tmp_path / "out"), "-q"])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "shared data absent" in err and "\n" not in err
    assert not (tmp_path / "out").exists()


@needs_data
def test_tiny_harness_run(tmp_path, capsys):
    out = tmp_path / "res"
    rc = paper.main(["--datasets", "seg", "--partitions", "1", "--sizes", "4/3",
                     "--max-iter", "3", "--missing-fractions", "0.2", "0.5",
                     "--out", str(out), "--seed", "3", "-q"])
    assert rc == 0, capsys.readouterr()
    rep = json.loads((out / "paper.json").read_text(encoding="utf-8"))
    assert rep["complete"] and rep["errors"] == []
    assert rep["machine"]["cpu_model"] and rep["command"].startswith("python -m bench.paper")
    res = rep["results"]["seg"]
    assert set(res) == {*paper_setup.DEFAULT_METHODS, paper_setup.PAPER_RNS}
    for m, r in res.items():
        assert len(r["losses"]) == 1, m
        assert 0.0 <= r["loss_mean"] <= 100.0
        assert r["loss_std"] == 0.0
        assert r["fit_median_s"] > 0 and r["predict_median_s"] > 0
    assert sum(r["is_best"] for r in res.values()) == 1
    assert res["GPSL2"]["paper_loss_mean"] == 23.51 and res["CRFsuite"]["paper_loss_mean"] == 24.10
    assert res["CRFsuite"]["ratio_fit_to_crfsuite"] == pytest.approx(1.0)
    assert res["GPSL1"]["n_iter"] == [3]
    # partitions are recorded and disjoint
    part = rep["partitions"]["seg"][0]
    assert len(part["train"]) == 4 and len(part["test"]) == 3
    assert not set(part["train"]) & set(part["test"])
    # Table 3
    t3 = rep["table3"]["seg"]
    assert 0 <= t3["loss_rns_mean"] <= 100 and 0 <= t3["loss_viterbi_mean"] <= 100
    assert t3["rns_iterations"][0] >= 1 and t3["rns_matches_predict_marginals"]
    assert t3["loss_rns_mean"] == pytest.approx(res["GPSL1"]["loss_mean"])
    # Figure 3
    ml = rep["missing_labels"]["seg"]
    assert ml["fractions"] == [0.0, 0.2, 0.5]
    for m in ("GPSL1", "GPSL2", "GPSL4"):
        acc = ml["methods"][m]["accuracy_mean"]
        assert len(acc) == 3 and all(0 <= a <= 100 for a in acc)
        assert acc[0] == pytest.approx(100 - res[m]["loss_mean"])
    assert paper_setup.CRF_COMPLETE in ml["methods"]
    # calibration
    cal = rep["calibration"]["seg"]
    assert {"GPSL2", "CRFsuite"} <= set(cal)
    for c in cal.values():
        assert 0 <= c["ece_mean"] <= 1 and c["n_tokens"] == part["n_test_tokens"]
        assert sum(b["count"] for b in c["reliability"]) == c["n_tokens"]
    # exact decoding
    ex = rep["exact_decoding"]["seg"]
    assert 0 <= ex["loss_exact_mean"] <= 100 and 0 <= ex["frac_sentences_differ"] <= 1
    assert ex["min_log_pl_gain"] >= -1e-9
    md = (out / "paper.md").read_text(encoding="utf-8")
    for heading in ("machine:", "Table 1", "Table 2", "Table 3", "Figure 3", "Calibration",
                    "Exact pseudo-likelihood"):
        assert heading in md
    assert (out / "missing_labels.html").stat().st_size > 0
    assert (out / "calibration.html").stat().st_size > 0


@needs_data
def test_missing_partitions_subset(tmp_path):
    out = tmp_path / "res"
    rc = paper.main(["--datasets", "seg", "--partitions", "2", "--sizes", "seg=3/2",
                     "--max-iter", "2", "--methods", "GPSL1", "CRFsuite",
                     "--missing-fractions", "0.3", "--missing-partitions", "1",
                     "--out", str(out), "-q"])
    assert rc == 0
    rep = json.loads((out / "paper.json").read_text(encoding="utf-8"))
    assert set(rep["results"]["seg"]) == {"GPSL1", "CRFsuite"}
    assert len(rep["results"]["seg"]["GPSL1"]["losses"]) == 2
    assert "exact_decoding" not in rep or "seg" not in rep["exact_decoding"]
    ml = rep["missing_labels"]["seg"]["methods"]
    assert [len(a) for a in ml["GPSL1"]["accuracy"]] == [1, 1]  # fraction 0 and 0.3, 1 partition


def test_merge_reports_combines_disjoint_runs(tmp_path):
    a = {"command": "python -m bench.paper --datasets seg", "complete": True, "errors": [],
         "total_seconds": 2.0, "config": {"sizes": {"seg": [20, 16]}},
         "results": {"seg": {"GPSL2": {"loss_mean": 16.0}}}, "partitions": {"seg": [{}, {}]},
         "table3": {}, "exact_decoding": {}, "missing_labels": {}, "calibration": {}, "data": {}}
    b = json.loads(json.dumps(a))
    b["command"] = "python -m bench.paper --datasets basenp"
    b["config"]["sizes"] = {"basenp": [150, 150]}
    b["results"] = {"basenp": {"GPSL2": {"loss_mean": 8.0}}}
    b["partitions"] = {"basenp": [{}]}
    m = paper_summary.merge_reports([a, b])
    assert set(m["results"]) == {"seg", "basenp"}
    assert m["config"]["n_partitions"] == 2
    assert m["config"]["partitions_per_dataset"] == {"seg": 2, "basenp": 1}
    assert "--datasets seg ; python -m bench.paper --datasets basenp" in m["command"]
    with pytest.raises(ValueError, match="overlap"):
        paper_summary.merge_reports([a, a])


@needs_data
def test_figure3_run_apart_is_merged_into_the_main_report(tmp_path):
    common = ["--datasets", "seg", "--sizes", "seg=3/2", "--max-iter", "2",
              "--methods", "GPSL1", "CRFsuite", "-q"]
    main_dir, fig_dir, other_dir, out = (tmp_path / n for n in ("main", "fig", "other", "out"))
    assert paper.main([*common, "--partitions", "2", "--missing-fractions",
                       "--out", str(main_dir)]) == 0
    assert paper.main([*common, "--partitions", "1", "--missing-fractions", "0.3",
                       "--out", str(fig_dir)]) == 0
    main_json = json.loads((main_dir / "paper.json").read_text(encoding="utf-8"))
    assert not main_json["missing_labels"]
    rc = paper.main(["--merge", str(main_dir / "paper.json"),
                     "--figure3", str(fig_dir / "paper.json"), "--out", str(out)])
    assert rc == 0
    rep = json.loads((out / "paper.json").read_text(encoding="utf-8"))
    ml = rep["missing_labels"]["seg"]
    assert ml["n_partitions"] == 1
    assert ml["fractions"] == [0.0, 0.3]
    assert ml["table1_max_abs_diff"] == 0.0  # same code, same partition: same Table 1 fits
    assert rep["results"] == main_json["results"]  # Table 1 stays the main run's
    assert "Figure 3: python -m bench.paper" in rep["command"]
    md = (out / "paper.md").read_text(encoding="utf-8")
    assert "**seg** (1 partition); run apart" in md

    # a run on other partitions (another seed) is refused, with a one-line message
    assert paper.main([*common, "--partitions", "1", "--seed", "5", "--missing-fractions",
                       "0.3", "--out", str(other_dir)]) == 0
    with pytest.raises(ValueError, match="partition 0 differs"):
        paper_summary.merge_figure3(main_json, [json.loads((other_dir / "paper.json").read_text())])
    assert paper.main(["--figure3", str(fig_dir / "paper.json")]) == 2


def test_above_paper_notes_compare_the_gap_with_the_sampling_error():
    losses = [8.0, 9.0, 8.5, 8.5]  # mean 8.5, sd 0.408
    rep = {"results": {"JapaneseNE": {
        "GPSL2": {"loss_mean": 8.5, "loss_std": float(np.std(losses, ddof=1)), "losses": losses},
        "GPSL1": {"loss_mean": 8.0, "loss_std": 0.5, "losses": losses},  # below the paper
        "CRFsuite": {"loss_mean": 7.5, "loss_std": 0.5, "losses": losses}}}}
    notes = paper_report.above_paper_notes(rep)
    assert len(notes) == 1
    se = np.hypot(np.std(losses, ddof=1) / 2, 2.45 / np.sqrt(10))
    assert notes[0].startswith("JapaneseNE GPSL2: +0.64 points above the paper")
    assert f"{(8.5 - 7.86) / se:.1f} combined standard errors" in notes[0]
    assert "ours is +1.00 (CRFsuite), the paper's +0.10 (its CRF)" in notes[0]
