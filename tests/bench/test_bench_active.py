"""End-to-end test of bench.active_learning on a tiny slice, plus its summary helpers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bench import active_learning as AL

DATA = AL.DEFAULT_DATA


def test_tokens_to_reach_interpolates():
    x = [10, 20, 30, 40]
    acc = [0.5, 0.6, 0.8, 0.9]
    assert AL.tokens_to_reach(x, acc, 0.7) == pytest.approx(25.0)
    assert AL.tokens_to_reach(x, acc, 0.9) == pytest.approx(40.0)
    assert AL.tokens_to_reach(x, acc, 0.4) == pytest.approx(10.0)
    assert AL.tokens_to_reach(x, acc, 0.95) is None


def test_normalised_auc():
    f = [0.0, 0.5, 1.0]
    a = [0.0, 1.0, 1.0]
    # area 0.25 + 0.5 over a range of 1
    assert AL.normalised_auc(f, a, 0.0, 1.0) == pytest.approx(0.75)
    # sub-range [0.25, 0.5]: linear 0.5 -> 1.0, mean 0.75
    assert AL.normalised_auc(f, a, 0.25, 0.5) == pytest.approx(0.75)
    assert AL.normalised_auc([0.3], [0.8], 0.3, 0.3) == pytest.approx(0.8)


def test_mean_curve_uses_common_rounds():
    runs = [
        {"labeled_tokens": [10, 20, 30], "fraction": [0.1, 0.2, 0.3], "accuracy": [0.5, 0.6, 0.7]},
        {"labeled_tokens": [12, 22], "fraction": [0.12, 0.22], "accuracy": [0.7, 0.8]},
    ]
    c = AL.mean_curve(runs)
    assert c["labeled_tokens"] == pytest.approx([11, 21])
    assert c["accuracy"] == pytest.approx([0.6, 0.7])
    assert c["accuracy_std"] == pytest.approx([0.1, 0.1])


def test_bad_strategy_and_missing_data(tmp_path, capsys):
    with pytest.raises(ValueError):
        AL.parse_strategy("nope")
    assert AL.parse_strategy("sentence_entropy:sum") == ("sentence_entropy", "sum")
    rc = AL.main(["--quick", "--data-dir", str(tmp_path / "absent"), "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert "shared data absent" in err and "\n" not in err
    assert AL.main(["--strategies", "least_confidence,bogus", "--out", str(tmp_path)]) == 2
    assert "unknown strategy 'bogus'" in capsys.readouterr().err


@pytest.mark.skipif(not (DATA / "basenp" / "train.data").is_file(), reason=f"{DATA} absent")
def test_end_to_end_tiny(tmp_path):
    pytest.importorskip("gpsl.model")
    out = tmp_path / "results"
    rc = AL.main(
        [
            "--dataset", "basenp", "--pool", "8", "--test", "6", "--rounds", "2", "--seeds", "1",
            "--max-iter", "4", "--batch", "12", "--quiet", "--out", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    report = json.loads((out / "active_learning.json").read_text())
    assert (out / "active_learning.md").read_text().startswith("# Active learning")
    assert "plotly" in (out / "active_learning_basenp.html").read_text().lower()
    for key in ("command", "date", "machine", "config", "total_seconds", "datasets"):
        assert key in report
    d = report["datasets"]["basenp"]
    assert d["pool_sentences"] == 8 and d["pool_tokens"] > 0
    assert 0.0 <= d["full_accuracy"] <= 1.0
    assert set(d["strategies"]) == set(AL.DEFAULT_STRATEGIES)
    lo, hi = d["auc_range"]
    assert 0.0 < lo <= hi <= 1.0
    for spec, s in d["strategies"].items():
        for key in ("tokens_to_95", "tokens_to_99", "auc", "seconds_per_round", "curve"):
            assert key in s, (spec, key)
        c = s["curve"]
        assert 1 <= len(c["accuracy"]) <= 3
        assert all(0.0 <= a <= 1.0 for a in c["accuracy"])
        assert all(0.0 < f <= 1.0 for f in c["fraction"])
        assert c["labeled_tokens"] == sorted(c["labeled_tokens"])
        assert 0.0 <= s["auc"] <= 1.0
        assert s["seconds_per_round"] >= 0.0
        for t in (s["tokens_to_95"], s["tokens_to_99"]):
            assert t is None or 0 < t <= d["pool_tokens"]
        if s["level"] == "token":
            # token strategies reveal exactly the batch each round
            assert all(math.isclose(b - a, 12) for a, b in zip(c["labeled_tokens"],
                                                              c["labeled_tokens"][1:]))


def test_cold_check_fits_each_round_again_from_scratch(tmp_path):
    out = tmp_path / "results"
    rc = AL.main(
        [
            "--dataset", "basenp", "--pool", "8", "--test", "6", "--rounds", "2", "--seeds", "1",
            "--max-iter", "4", "--batch", "12", "--quiet", "--out", str(out),
            "--strategies", "entropy", "--cold-check",
        ]
    )  # fmt: skip
    assert rc == 0
    s = json.loads((out / "active_learning.json").read_text())["datasets"]["basenp"][
        "strategies"]["entropy"]
    assert s["cold_seconds_per_round"] > 0 and s["warm_to_cold_time"] > 0
    assert -1.0 <= s["warm_minus_cold_accuracy"] <= 1.0
    seed = s["per_seed"][0]
    assert len(seed["accuracy"]) == 3
    assert "warm time / cold time" in (out / "active_learning.md").read_text()


def test_warm_start_moves_each_kept_sentence_state_and_only_theta_with_missing_labels(
        monkeypatch):
    """Complete labels: alpha and lambda follow each kept sentence (reordered, grown set; new
    sentences start cold). Missing labels: only theta is carried over."""
    from gpsl.engines import FullEngine
    from gpsl.model import GPSL

    X, y, template = AL.load_dataset(AL.DEFAULT_DATA, "basenp")
    X, y = X[:12], y[:12]
    m = GPSL(template=template, max_iter=5, warm_start=True, inference="full")
    m.fit(X[:6], y[:6])
    old_alpha, old_lam = m.state_.alpha.copy(), m.state_.lam.copy()
    starts = np.cumsum(m.lengths_) - m.lengths_
    seen = {}

    warm = FullEngine._warm

    def spy(engine, prev, problem, classes, keys, lengths):
        s = warm(engine, prev, problem, classes, keys, lengths)
        seen.update(alpha=s.alpha.copy(), lam=s.lam.copy(), lengths=lengths, theta=s.theta,
                    m_S=s.m_S.copy())
        return s

    monkeypatch.setattr(FullEngine, "_warm", spy)
    order = [8, 5, 4, 3, 2, 1, 0, 9]  # the same sentences reversed, two new ones around them
    m_S = m.state_.m_S.copy()
    m.fit([X[i] for i in order], [y[i] for i in order])
    new_starts = np.cumsum(seen["lengths"]) - seen["lengths"]
    for pos, i in enumerate(order):
        sl = slice(new_starts[pos], new_starts[pos] + len(X[i]))
        if i < 6:
            np.testing.assert_array_equal(seen["alpha"][:, sl],
                                          old_alpha[:, starts[i]:starts[i] + len(X[i])])
            np.testing.assert_array_equal(seen["lam"][:, sl],
                                          old_lam[:, starts[i]:starts[i] + len(X[i])])
        else:
            assert not seen["alpha"][:, sl].any()
            assert np.all(seen["lam"][:, sl] == 1.0 / len(m.classes_))
    np.testing.assert_array_equal(seen["m_S"], m_S)
    theta = m.state_.theta.copy()
    partial = [[v if k % 2 else None for k, v in enumerate(lab)] for lab in y]
    m.fit(X, partial)  # missing labels: zero means, cold lambda and q(f_S), previous theta
    assert not seen["alpha"].any() and not seen["m_S"].any()
    np.testing.assert_array_equal(seen["theta"], theta)


def test_batch_fraction_sets_the_round_size_and_bad_values_are_refused(tmp_path):
    out = tmp_path / "results"
    rc = AL.main(["--dataset", "basenp", "--pool", "8", "--test", "6", "--rounds", "1",
                  "--seeds", "1", "--max-iter", "3", "--batch-fraction", "0.05", "--quiet",
                  "--strategies", "random", "--out", str(out)])
    assert rc == 0
    d = json.loads((out / "active_learning.json").read_text())["datasets"]["basenp"]
    assert d["token_batch"] == max(1, round(0.05 * d["pool_tokens"]))
    assert AL.main(["--batch-fraction", "0", "--quiet", "--out", str(out)]) == 2


def test_calibrate_auto_takes_the_apps_folds(tmp_path):
    from gpsl.calibration import calibration_folds

    assert AL._folds(0, 50) is None
    assert AL._folds(3, 5) is None and AL._folds(3, 6) == 3
    assert [AL._folds(AL.AUTO_FOLDS, n) for n in (4, 6, 12, 2000)] == \
        [calibration_folds(n) for n in (4, 6, 12, 2000)] == [None, 3, 5, 2]
    out = tmp_path / "results"
    rc = AL.main(["--dataset", "basenp", "--pool", "8", "--test", "6", "--rounds", "1",
                  "--seeds", "1", "--max-iter", "3", "--batch", "12", "--quiet", "--out",
                  str(out), "--strategies", "entropy", "--calibrate", "auto"])
    assert rc == 0
    assert "the app's folds" in (out / "active_learning.md").read_text()
