"""gpsl.calibration.rule: which data a model is calibrated on (the rule the app and
``gpsl train`` share), the fold fits in processes, and the record saved with the model."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from gpsl.calibration import (
    MIN_TOKENS,
    CalibrationRun,
    Plan,
    calibrate,
    calibrate_model,
    fold_processes,
    not_calibrated,
    out_of_fold_scores,
    plan,
)
from gpsl.calibration import decisions as D
from gpsl.calibration import rule as R
from gpsl.errors import InputError, ModelFormatError
from gpsl.model import GPSL
from gpsl.synthetic import make_chain_task


@pytest.mark.parametrize("counts, expected", [
    # held-out gold: 50 tokens in two sentences or more
    (dict(labeled_sentences=40, labeled_tokens=400, held_out_sentences=2,
          held_out_tokens=50), ("held-out", None)),
    # too few held-out tokens, or one sentence: folds of the training sentences
    (dict(labeled_sentences=40, labeled_tokens=400, held_out_sentences=2,
          held_out_tokens=49), ("folds", 5)),
    (dict(labeled_sentences=40, labeled_tokens=400, held_out_sentences=1,
          held_out_tokens=80), ("folds", 5)),
    # calibration_folds: 5 up to 250 sentences, 2 above, 3 from 6 to 9
    (dict(labeled_sentences=250, labeled_tokens=9000), ("folds", 5)),
    (dict(labeled_sentences=251, labeled_tokens=9000), ("folds", 2)),
    (dict(labeled_sentences=6, labeled_tokens=60), ("folds", 3)),
    (dict(labeled_sentences=5, labeled_tokens=60), ("none", None)),
    (dict(labeled_sentences=40, labeled_tokens=49), ("none", None)),
    # a K asked for, and what it needs: two sentences a fold
    (dict(labeled_sentences=20, labeled_tokens=200, folds=10), ("folds", 10)),
    (dict(labeled_sentences=19, labeled_tokens=200, folds=10), ("none", None)),
])
def test_the_rule(counts, expected):
    p = plan(**counts)
    assert isinstance(p, Plan) and (p.source, p.folds) == expected and p.reason


def test_the_rules_reasons_say_why():
    assert plan(labeled_sentences=40, labeled_tokens=30).reason == (
        f"30 labeled training tokens are too few to calibrate on (at least {MIN_TOKENS})")
    assert plan(labeled_sentences=4, labeled_tokens=60).reason == (
        "4 labeled training sentences are too few for 3 calibration folds (at least 6)")
    assert plan(labeled_sentences=40, labeled_tokens=400, held_out_sentences=3,
                held_out_tokens=12).reason.startswith(
        "12 held-out labeled tokens in 3 sentences (needs 50 in two); 40 labeled")


def test_the_record_round_trips_and_refuses_damage():
    run = CalibrationRun("folds", 5, 1200, 60, 2, 3.5, "60 labeled training sentences")
    assert CalibrationRun.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    assert run.summary() == ("calibrated on 5 folds of the training sentences (1200 tokens, "
                             "3.50 s in 2 processes)")
    assert CalibrationRun("none", reason="--no-calibrate").summary() == \
        "not calibrated: --no-calibrate"
    for bad in ({"source": "magic"}, {"source": "folds"}, {"source": "folds", "folds": 1},
                {"source": "none", "tokens": -1}, {"source": "none", "tokens": 2.5},
                {"source": "none", "seconds": float("nan")}, {"source": "none", "reason": 3},
                {"source": "none", "seconds": True}, []):
        with pytest.raises(ValueError):
            CalibrationRun.from_dict(bad)


def test_fold_processes():
    model = GPSL()
    assert fold_processes(5, 3) == 3 and fold_processes(2, 8) == 2 and fold_processes(5, 1) == 1
    assert fold_processes(5, None) == min(5, R.cpu_count())
    model.fit_seconds_ = R.PROCESS_MIN_FIT_SECONDS / 2  # a quick fit: no processes by default
    assert fold_processes(5, None, model) == 1 and fold_processes(5, 2, model) == 2
    model.fit_seconds_ = R.PROCESS_MIN_FIT_SECONDS
    assert fold_processes(5, None, model) == min(5, R.cpu_count())
    model.cluster = "tcp://127.0.0.1:1"  # fits on a cluster: here, one after the other
    assert fold_processes(5, 2, model) == 1


def test_the_start_method_forks_only_a_single_threaded_process():
    import threading

    assert R._context().get_start_method() == (
        "fork" if sys.platform.startswith("linux") and threading.active_count() == 1
        else "spawn")
    done = threading.Event()
    t = threading.Thread(target=done.wait)
    t.start()
    try:
        assert R._context().get_start_method() == "spawn"
    finally:
        done.set()
        t.join()


@pytest.fixture(scope="module")
def chain():
    X, y = make_chain_task(50, seed=11)
    return X[:30], y[:30], X[30:], y[30:]


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_fold_fits_in_processes_equal_the_fits_here(chain, start, monkeypatch):
    """Two processes (forked or spawned) give the out-of-fold inputs of the same K models as
    one."""
    import multiprocessing

    monkeypatch.setattr(R, "_context", lambda: multiprocessing.get_context(start))
    Xtr, ytr, _, _ = chain
    model = GPSL(max_iter=5).fit(Xtr, ytr)
    here, gold = out_of_fold_scores(model, Xtr, ytr, 3, jobs=1)
    there, gold2 = out_of_fold_scores(model, Xtr, ytr, 3, jobs=2)
    assert len(here) == len(there) == 3
    for a, b in zip(here, there):
        np.testing.assert_allclose(a.mean, b.mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(a.var, b.var, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(a.m_S, b.m_S, rtol=1e-10, atol=1e-12)
    assert all(np.array_equal(a, b) for a, b in zip(gold, gold2))
    # and they are fits without the fold: fold 0's held-out sentences, by a model on the rest
    held = R.fold_indices(len(Xtr), 3, 0)[0]
    rest = [i for i in range(len(Xtr)) if i not in set(held.tolist())]
    fm = GPSL(max_iter=5).fit([Xtr[i] for i in rest], [ytr[i] for i in rest],
                              classes=model.classes_)
    np.testing.assert_allclose(fm.calibration_scores([Xtr[i] for i in held]).mean,
                               here[0].mean, rtol=1e-10, atol=1e-12)


def test_calibrate_model_follows_the_rule_and_records_it(chain, tmp_path):
    Xtr, ytr, Xte, yte = chain
    model = GPSL(max_iter=5).fit(Xtr, ytr)
    n_tokens = sum(len(s) for s in ytr)
    run = calibrate_model(model, Xtr, ytr, jobs=1)
    assert (run.source, run.folds, run.sentences, run.processes) == ("folds", 5, 30, 1)
    assert run.tokens == n_tokens == model.calibrator_.n_tokens and run.seconds > 0
    assert model.calibrator_.source == "5-fold" and model.calibration_run_ is run
    # saved and loaded with the model
    model.save(tmp_path / "m")
    back = GPSL.load(tmp_path / "m")
    assert back.calibration_run_ == model.calibration_run_
    for a, b in zip(back.predict_marginals(Xte), model.predict_marginals(Xte)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    # held-out gold with enough tokens wins
    run = calibrate_model(model, Xtr, ytr, held_out=(Xte, yte), held_out_source="gold")
    assert run.source == "held-out" and model.calibrator_.source == "gold"
    assert run.sentences == len(Xte) and run.tokens == sum(len(s) for s in yte)
    # too few held-out tokens: asked for explicitly, refused (before any fit); else the app's
    # fallback, folds of the training sentences
    few = ([Xte[0], Xte[1]], [yte[0][:3] + [None] * (len(yte[0]) - 3), [None] * len(yte[1])])
    with pytest.raises(InputError, match="cannot calibrate on --calibrate FILE: 3 held-out"):
        calibrate_model(model, Xtr, ytr, held_out=few, required="held-out")
    assert model.calibration_run_.source == "held-out"  # unchanged by the refusal
    run = calibrate_model(model, Xtr, ytr, held_out=few, jobs=1)
    assert run.source == "folds" and run.reason.startswith("3 held-out labeled tokens")
    # a refit forgets it
    model.fit(Xtr, ytr)
    assert model.calibrator_ is None and model.calibration_run_ is None


def test_too_little_data_and_no_calibrate_leave_the_model_uncalibrated(chain, tmp_path):
    Xtr, ytr, _, _ = chain
    model = GPSL(max_iter=3).fit(Xtr[:4], ytr[:4])
    run = calibrate_model(model, Xtr[:4], ytr[:4])
    assert run.source == "none" and model.calibrator_ is None and "too few" in run.reason
    with pytest.raises(InputError, match="cannot calibrate on 3 calibration folds: 26 labeled"):
        calibrate_model(model, Xtr[:4], ytr[:4], folds=3, required="folds")
    model = GPSL(max_iter=3).fit(Xtr, ytr)
    calibrate(model, Xtr, ytr, folds=2)
    assert model.calibration_run_.source == "folds" and model.calibration_run_.folds == 2
    not_calibrated(model, "--no-calibrate")
    assert model.calibrator_ is None
    model.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["calibration"] is None and meta["calibration_run"]["reason"] == "--no-calibrate"
    assert GPSL.load(tmp_path / "m").calibration_run_.source == "none"


@pytest.mark.parametrize("record, needle", [
    ({"source": "folds", "folds": "five"}, "calibration_run: calibration run record's counts"),
    ({"source": "held-out"}, "calibration_run does not match the calibration"),
])
def test_a_damaged_record_is_one_line(chain, tmp_path, record, needle):
    from gpsl.persist import _meta_digest

    Xtr, ytr, _, _ = chain
    model = GPSL(max_iter=3).fit(Xtr, ytr)
    not_calibrated(model, "--no-calibrate")
    model.save(tmp_path / "m")
    path = tmp_path / "m" / "model.json"
    meta = json.loads(path.read_text())
    meta["calibration_run"] = record
    meta["sha256"]["model.json"] = _meta_digest(meta)
    path.write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError, match=needle) as exc:
        GPSL.load(tmp_path / "m")
    assert "\n" not in str(exc.value)


def test_the_estimators_fit_stays_uncalibrated(chain):
    """scikit-learn's convention: fit never calibrates (``gpsl train`` does)."""
    Xtr, ytr, _, _ = chain
    model = GPSL(max_iter=3).fit(Xtr, ytr)
    assert model.calibrator_ is None and model.calibration_run_ is None


def test_the_command_lines_help_states_the_rules_numbers():
    from gpsl.cli import build_parser

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    text = " ".join(train.format_help().split())
    assert f"{MIN_TOKENS} labeled tokens or more" in text
    assert f"when the model's fit took {R.PROCESS_MIN_FIT_SECONDS:g} s or more" in text


# --------------------------------------------------------------------------- the decisions


def test_errors_and_changed_decisions_by_hand():
    y = np.array([0, 1, 2, 1])
    P0 = np.eye(3)[[0, 1, 1, 0]]  # right, right, wrong, wrong
    P = np.eye(3)[[0, 2, 2, 1]]  # right, wrong, right, right
    assert D.errors(P0, y) == 2 and D.errors(P, y) == 1
    assert D.changed(P0, P, y) == {"fixed": 2, "broken": 1}
    assert D.changed(P0, P0, y) == {"fixed": 0, "broken": 0}


@pytest.mark.parametrize("fixed, broken, ok", [
    (0, 0, True),  # changes nothing (the mean-only temperature): always admissible
    (10, 9, False), (16, 16, False), (21, 20, False),  # basenp's coin flips
    (3, 0, True),  # 3 >= 1.645 * sqrt(3) = 2.85
    (2, 0, False),  # 2 < 1.645 * sqrt(2) = 2.33
    (20, 5, True),  # 15 >= 1.645 * 5
    (13, 5, True),  # 8 >= 1.645 * sqrt(18) = 6.98
    (11, 5, False),  # 6 < 1.645 * sqrt(16) = 6.58
])
def test_a_calibrator_changes_the_decisions_only_beyond_chance(fixed, broken, ok):
    cv = {D.UNCALIBRATED: {"errors": 50, "fixed": 0, "broken": 0},
          "t": {"errors": 50, "fixed": 0, "broken": 0},
          "a": {"errors": 50 - fixed + broken, "fixed": fixed, "broken": broken}}
    assert D.admissible(cv, ["t", "a"]) == (["t", "a"] if ok else ["t"])
    assert D.admissible(cv, ["t", "a"], z=None) == ["t", "a"]  # no test: the rule before it
    # when none qualifies (no candidate that keeps the decisions), the fewest errors
    assert D.admissible(cv, ["a"]) == ["a"]
    # without cross-validated figures every candidate is admissible
    assert D.admissible({"a": {"errors": None, "fixed": None, "broken": None}}, ["a"]) == ["a"]


def test_choose_keeps_the_decisions_when_the_best_nll_would_break_them():
    """Hand-made figures: the structured candidate has the lowest cross-validated NLL but
    fixes 16 left-out decisions and breaks 16 (basenp's pattern): the mean-only temperature
    is chosen; a structured candidate that fixes 30 and breaks 4 would be."""
    from gpsl.calibration import Calibrator

    fits = {"mean/temperature": Calibrator(method="mean", kind="temperature", temperature=0.8,
                                           w=np.full(3, 1.25), c=np.zeros(3), nll_after=0.2),
            "mean/structured": Calibrator(method="mean", kind="structured", w=np.ones(3),
                                          c=np.zeros(3), t_unary=1.2, t_pair=2.4,
                                          nll_after=0.1)}

    def cv(fixed, broken):
        return {D.UNCALIBRATED: {"nll": 0.3, "brier": 0.1, "ece": 0.03, "errors": 100,
                                 "fixed": 0, "broken": 0},
                "mean/temperature": {"nll": 0.18, "brier": 0.08, "ece": 0.01, "errors": 100,
                                     "fixed": 0, "broken": 0},
                "mean/structured": {"nll": 0.17, "brier": 0.07, "ece": 0.005,
                                    "errors": 100 - fixed + broken, "fixed": fixed,
                                    "broken": broken}}

    best = Calibrator.choose(fits, cv(16, 16))
    assert best.kind == "temperature"
    assert best.candidates["mean/structured"]["admissible"] is False
    assert best.candidates["mean/structured"]["cv_fixed"] == 16
    assert best.candidates["mean/temperature"]["cv_errors_uncalibrated"] == 100
    assert Calibrator.choose(fits, cv(16, 16), decision_z=None).kind == "structured"
    assert Calibrator.choose(fits, cv(30, 4)).kind == "structured"
    for crit in ("brier", "ece"):  # whatever the criterion
        assert Calibrator.choose(fits, cv(16, 16), crit).kind == "temperature"


def test_select_keeps_the_decisions_where_the_lowest_nll_raises_the_fold_loss():
    """Algorithm 2's inputs with gold drawn from the structured marginals (T_U 2, T_S 5), then
    30% of the tokens whose argmax the structured temperature moves given back the
    uncalibrated argmax: the structured kind still has the lowest cross-validated NLL but
    more left-out errors than the uncalibrated model. Its figures obey the identity
    ``errors - errors(uncalibrated) = broken - fixed``, and the default rule chooses the
    lowest-NLL candidate among the admissible ones."""
    from gpsl.calibration import Calibrator
    from tests.lib.test_calibration import _scores_case

    sc = _scores_case(seed=2)
    truth, raw = sc.marginals("mean", 2.0, 5.0), sc.marginals("mean")
    rng = np.random.default_rng(0)
    gold = np.array([rng.choice(3, p=p) for p in truth])
    moved = np.flatnonzero(truth.argmax(axis=1) != raw.argmax(axis=1))
    back = moved[rng.random(moved.size) < 0.3]
    gold[back] = raw.argmax(axis=1)[back]
    part = list(range(150))
    fits, cv = Calibrator.select_all([sc.take(part)], [gold[sc.rows(part)]], ensemble=None,
                                     kinds=("temperature", "structured", "structured+vector"))
    ref = cv[D.UNCALIBRATED]["errors"]
    for name in fits:
        assert cv[name]["errors"] - ref == cv[name]["broken"] - cv[name]["fixed"]
    assert cv["mean/temperature"]["fixed"] == cv["mean/temperature"]["broken"] == 0
    st = cv["mean/structured"]
    singles = [k for k in fits if "kept" not in k]
    assert st["nll"] == min(cv[k]["nll"] for k in singles)  # NLL alone would take it ...
    assert st["errors"] > ref  # ... and raise the fold loss
    assert Calibrator.choose({k: fits[k] for k in singles}, cv, decision_z=None).kind \
        == "structured"
    best = Calibrator.choose(fits, cv)
    ok = D.admissible(cv, list(fits))
    assert "mean/structured" not in ok and "mean/temperature" in ok
    # the structured marginals with the uncalibrated decisions kept compete: they change
    # none, and their left-out predictions are the structured ones where the argmax agrees
    kept = "mean/structured (decisions kept)"
    assert kept in ok and cv[kept]["fixed"] == cv[kept]["broken"] == 0
    assert cv[kept]["errors"] == ref
    name = kept if best.kind == "kept" else f"{best.method}/{best.kind}"
    assert best.kind != "structured"
    assert cv[name]["nll"] == min(cv[k]["nll"] for k in ok)
    # on every token the kept calibrator's label is the uncalibrated one
    sub, sub_rows = sc.take(part), sc.rows(part)
    P = fits[kept].apply(sub)
    assert np.array_equal(P.argmax(axis=1), sub.marginals("mean").argmax(axis=1))
    Ps, Pt = fits["mean/structured"].apply(sub), fits["mean/temperature"].apply(sub)
    agree = Ps.argmax(axis=1) == Pt.argmax(axis=1)
    assert 0 < agree.sum() < agree.size
    assert np.array_equal(P[agree], Ps[agree]) and np.array_equal(P[~agree], Pt[~agree])
    back = Calibrator.from_dict(fits[kept].to_dict(), 3)
    assert back.kind == "kept" and np.array_equal(back.apply(sub), P)
    assert "decisions kept" in back.describe()
    d = fits[kept].to_dict()
    with pytest.raises(ValueError, match="kept decisions"):
        Calibrator.from_dict({**d, "members": d["members"][:1]}, 3)
    with pytest.raises(ValueError, match="kept decisions"):  # the fallback is no temperature
        Calibrator.from_dict({**d, "members": d["members"][::-1]}, 3)
    # the app's refit between selections refits both members alike
    from gpsl.calibration import refit_like

    again = refit_like(fits[kept], [sub], [gold[sub_rows]])
    assert again.kind == "kept" and [m.kind for m in again.members] == ["structured",
                                                                         "temperature"]
    assert np.array_equal(again.apply(sub).argmax(axis=1), sub.marginals("mean").argmax(axis=1))


def test_kept_marginals_by_hand():
    P = np.array([[0.7, 0.2, 0.1], [0.3, 0.6, 0.1], [0.2, 0.3, 0.5]])
    F = np.array([[0.5, 0.3, 0.2], [0.5, 0.4, 0.1], [0.1, 0.2, 0.7]])
    out = D.kept_marginals(P, F)
    assert np.array_equal(out, np.array([P[0], F[1], P[2]]))
    assert np.array_equal(out.argmax(axis=1), F.argmax(axis=1))
