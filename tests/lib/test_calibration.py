"""Calibration: temperature/vector scaling (gpsl.calibration), the uncertainty-aware RNS
(gpsl.predict.rns with variances), gpsl.calibration.calibrate and its persistence, calibration
metrics."""

import json

import numpy as np
import pytest
from scipy.special import softmax

from gpsl.calibration import (
    ENSEMBLE,
    STACK_MIN_WEIGHT,
    Calibrator,
    Scores,
    calibrate,
    cross_calibrate,
    cross_refit,
    fold_indices,
    nll_and_grad,
    refit_like,
    stacking_weights,
    temperature_nll,
)
from gpsl.errors import InputError, ModelFormatError
from gpsl.metrics import (
    calibration_by_band,
    calibration_summary,
    ece_equal_mass,
    equal_mass_reliability,
    expected_calibration_error,
    frequency_bands,
    selective_accuracy,
    threshold_table,
)
from gpsl.model import GPSL
from gpsl.predict import probit_scale, rns
from gpsl.synthetic import make_chain_task


def _synthetic_logits(T0, n=20000, J=5, seed=0):
    """Tokens whose true label distribution is softmax(z); the model reports softmax(z T0),
    over-confident for T0 > 1: the temperature that calibrates it is T0."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 2.0, size=(n, J))
    p_true = softmax(z, axis=1)
    gold = np.array([rng.choice(J, p=p) for p in p_true])
    return softmax(z * T0, axis=1), gold


@pytest.mark.parametrize("T0", [0.4, 1.0, 2.5])
def test_temperature_fit_recovers_a_known_temperature(T0):
    P, gold = _synthetic_logits(T0)
    cal = Calibrator.fit(P, gold)
    assert cal.temperature == pytest.approx(T0, rel=0.05)
    assert cal.nll_after <= cal.nll_before + 1e-12
    out = cal.transform(P)
    assert np.allclose(out.sum(axis=1), 1.0)
    assert np.array_equal(out.argmax(axis=1), P.argmax(axis=1))  # a temperature keeps argmax


def test_temperature_minimises_the_nll():
    P, gold = _synthetic_logits(1.7, n=3000, seed=1)
    L = np.log(P)
    cal = Calibrator.fit(P, gold)
    best = temperature_nll(cal.temperature, L, gold)
    for T in (cal.temperature * 0.97, cal.temperature * 1.03):
        assert temperature_nll(T, L, gold) > best


def test_vector_scaling_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    P = rng.dirichlet(np.ones(4), size=50)
    g = rng.integers(0, 4, 50)
    L = np.log(P)
    x = np.r_[rng.normal(1, 0.3, 4), rng.normal(0, 0.3, 4)]
    _, grad = nll_and_grad(x, L, g, ridge=0.1)
    eps = 1e-6
    num = np.array([(nll_and_grad(x + eps * e, L, g, 0.1)[0]
                     - nll_and_grad(x - eps * e, L, g, 0.1)[0]) / (2 * eps)
                    for e in np.eye(8)])
    assert np.allclose(grad, num, rtol=1e-5, atol=1e-7)


def test_vector_scaling_is_no_worse_than_temperature_on_its_data():
    P, gold = _synthetic_logits(2.0, n=4000, seed=4)
    t = Calibrator.fit(P, gold)
    v = Calibrator.fit(P, gold, kind="vector", ridge=0.0)
    assert v.nll_after <= t.nll_after + 1e-6
    assert np.allclose(v.transform(P).sum(axis=1), 1.0)


def test_calibrator_needs_labeled_tokens_and_round_trips():
    with pytest.raises(InputError):
        Calibrator.fit(np.full((3, 2), 0.5), [-1, -1, -1])
    P, gold = _synthetic_logits(1.5, n=500)
    cal = Calibrator.fit(P, gold, kind="vector")
    back = Calibrator.from_dict(json.loads(json.dumps(cal.to_dict())), 5)
    assert np.allclose(back.transform(P), cal.transform(P))
    with pytest.raises(ValueError):
        Calibrator.from_dict(cal.to_dict(), 4)  # wrong number of labels


def test_calibration_folds_follow_the_number_of_sentences():
    from gpsl.calibration import FOLDS_SMALL_MAX_SENTENCES, calibration_folds

    assert [calibration_folds(n) for n in (0, 5, 6, 9, 10, 200)] == [None, None, 3, 3, 5, 5]
    assert calibration_folds(FOLDS_SMALL_MAX_SENTENCES) == 5
    # above it two folds: the fold fits then cost about one fit (issue 36)
    assert calibration_folds(FOLDS_SMALL_MAX_SENTENCES + 1) == 2
    assert calibration_folds(50_000) == 2


def test_fold_indices_partition_the_sentences():
    parts = fold_indices(10, 3, seed=2)
    assert sorted(np.concatenate(parts).tolist()) == list(range(10))
    assert [p.size for p in parts] == [4, 3, 3]
    with pytest.raises(ValueError):
        fold_indices(2, 3)


# --------------------------------------------------------------------------- probit RNS


def _rns_case(seed=0, n_sent=4, J=3, offsets=(-1, 1)):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 7, n_sent)
    n = int(lengths.sum())
    b = rng.normal(0, 2, (n, J))
    g = rng.normal(0, 1.5, (len(offsets), J, J))
    return b, g, lengths, offsets


@pytest.mark.parametrize("schedule", ["jacobi", "sequential"])
def test_uncertainty_aware_rns_equals_mean_rns_as_variances_vanish(schedule):
    b, g, lengths, offsets = _rns_case()
    P0, _ = rns(b, g, lengths, offsets, schedule=schedule, damping=0.5, tol=1e-10,
                max_iter=500)
    Pz, _ = rns(b, g, lengths, offsets, schedule=schedule, damping=0.5, tol=1e-10,
                max_iter=500, b_var=np.zeros_like(b), g_var=np.zeros_like(g))
    assert np.array_equal(P0, Pz)  # exactly Algorithm 2 at zero variance
    prev = None
    for s in (1e-2, 1e-4, 1e-6):
        Ps, _ = rns(b, g, lengths, offsets, schedule=schedule, damping=0.5, tol=1e-10,
                    max_iter=500, b_var=np.full_like(b, s), g_var=np.full_like(g, s))
        err = np.abs(Ps - P0).max()
        assert prev is None or err < prev
        prev = err
    assert prev < 1e-5


def test_uncertainty_aware_rns_flattens_with_variance_and_sums_to_one():
    b, g, lengths, offsets = _rns_case(seed=1)
    ent = []
    for s in (0.0, 1.0, 10.0, 100.0):
        P, _ = rns(b, g, lengths, offsets, damping=0.5, b_var=np.full_like(b, s),
                   g_var=np.zeros_like(g))
        assert np.allclose(P.sum(axis=1), 1.0)
        ent.append(float(-(P * np.log(P)).sum(axis=1).mean()))
    assert ent == sorted(ent) and ent[-1] > ent[0] + 0.3


def test_probit_scale_on_a_single_token_is_the_probit_approximation():
    # one token, two labels: softmax(kappa m) = sigma(kappa (m1 - m0)) when both labels share
    # the variance; compare with the exact E[sigma(f)] of a Gaussian f by quadrature
    m, v = np.array([[0.0, 1.5]]), np.array([[2.0, 2.0]])
    P, _ = rns(m, np.zeros((1, 2, 2)), [1], (-1,), b_var=v, g_var=np.zeros((1, 2, 2)))
    x, w = np.polynomial.hermite_e.hermegauss(80)
    exact = np.sum(w / (1 + np.exp(-(1.5 + np.sqrt(2 * 2.0) * x)))) / np.sum(w)
    # the per-label factor is kappa(v) on each score, i.e. kappa(2) on the difference
    assert P[0, 1] == pytest.approx(1 / (1 + np.exp(-probit_scale(2.0) * 1.5)))
    # flatter than the mean-only score, less flat than the exact expectation (the per-label
    # factor ignores that the difference of two scores has twice the variance)
    assert exact < P[0, 1] < 1 / (1 + np.exp(-1.5))
    assert abs(P[0, 1] - exact) < 0.05


def test_rns_variances_must_come_in_pairs():
    b, g, lengths, offsets = _rns_case()
    with pytest.raises(ValueError):
        rns(b, g, lengths, offsets, b_var=np.zeros_like(b))


# --------------------------------------------------------------------------- structured


#: the candidates before issue 36 (the structured temperature's search)
STRUCTURED = ("temperature", "structured", "structured+vector")


def _scores_case(seed=0, n_sent=300, J=3):
    b, g, lengths, offsets = _rns_case(seed=seed, n_sent=n_sent, J=J)
    return Scores(b, np.full_like(b, 0.5), g, np.zeros_like(g), lengths, offsets,
                  {"tol": 1e-6, "max_iter": 200, "damping": 0.5})


def test_structured_temperatures_of_one_are_algorithm_2():
    sc = _scores_case(n_sent=20)
    P0, _ = rns(sc.mean, sc.m_S, sc.lengths, sc.offsets, **sc.rns)
    assert np.array_equal(sc.marginals("mean", 1.0, 1.0), P0)
    cal = Calibrator(method="mean", kind="structured", w=np.ones(3), c=np.zeros(3))
    assert np.array_equal(cal.apply(sc), P0)


def test_structured_fit_recovers_known_temperatures():
    sc = _scores_case(seed=2)
    truth = sc.marginals("mean", 2.0, 5.0)
    rng = np.random.default_rng(0)
    gold = np.array([rng.choice(3, p=p) for p in truth])
    cal = Calibrator.fit_structured([sc], [gold])
    assert cal.t_unary == pytest.approx(2.0, rel=0.15)
    assert cal.t_pair == pytest.approx(5.0, rel=0.35)
    assert cal.nll_after < cal.nll_before
    # select keeps a structured kind (lowest cross-validated NLL); the data has no per-label
    # distortion, so a vector scaling on top stays near the identity
    part = list(range(60))
    # (by the NLL alone: the test of the decisions, gpsl.calibration.decisions, is
    # test_calibration_rule's; on these 60 sentences it keeps the temperature)
    best = Calibrator.select([sc.take(part)], [gold[sc.rows(part)]], ensemble=None,
                             decision_z=None, kinds=STRUCTURED)
    assert best.kind in ("structured", "structured+vector")
    cv = {k: c["cv_nll"] for k, c in best.candidates.items()}
    assert cv[f"mean/{best.kind}"] == min(cv.values())
    assert np.allclose(best.w, 1.0, atol=0.1) and np.allclose(best.c, 0.0, atol=0.1)
    clamp = np.full(sc.n_tokens, -1)
    clamp[::7] = 1
    P = best.apply(sc, clamp)
    assert np.all(P[::7, 1] == 1.0) and np.allclose(P.sum(axis=1), 1.0)
    # the stacked ensemble puts its weight on the structured kinds, and clamps as they do
    ens = Calibrator.select([sc.take(part)], [gold[sc.rows(part)]], ensemble="stack",
                            decision_z=None, kinds=STRUCTURED)
    assert ens.kind == "ensemble"
    on_structured = sum(w for m, w in zip(ens.members, ens.weights)
                        if m.kind in ("structured", "structured+vector"))
    assert on_structured > 0.8
    P = ens.apply(sc, clamp)
    assert np.all(P[::7, 1] == 1.0) and np.allclose(P.sum(axis=1), 1.0)


def test_cross_calibration_never_uses_a_sentence_to_calibrate_itself():
    sc = _scores_case(seed=3, n_sent=40)
    truth = sc.marginals("mean", 3.0, 3.0)
    rng = np.random.default_rng(1)
    flat = np.array([rng.choice(3, p=p) for p in truth])
    gold = np.split(flat, np.cumsum(sc.lengths)[:-1])
    out = cross_calibrate(sc, gold, folds=2)
    assert [o.shape[0] for o in out] == list(sc.lengths)
    halves = fold_indices(len(gold), 2, 0)
    # each half equals what a calibrator fitted on the other half alone gives
    other = Calibrator.select([sc.take(list(halves[1]))],
                              [np.concatenate([gold[i] for i in halves[1]])])
    mine = other.apply(sc.take(list(halves[0])))
    assert np.allclose(np.concatenate([out[i] for i in halves[0]]), mine)


def test_cross_refit_calibrates_each_half_by_the_previous_choice_refitted_on_the_other():
    """The app's refit between selections (gpsl.annotation.training.refit): the held-out marginals
    of each half come from :func:`refit_like` of the previous choice on the other half only."""
    sc = _scores_case(seed=3, n_sent=40)
    truth = sc.marginals("mean", 3.0, 3.0)
    rng = np.random.default_rng(2)
    gold = np.split(np.array([rng.choice(3, p=p) for p in truth]), np.cumsum(sc.lengths)[:-1])
    previous = Calibrator.select([sc], [np.concatenate(gold)], kinds=("temperature",),
                                 ensemble=None, decision_z=None)
    out = cross_refit(previous, sc, gold)
    halves = fold_indices(len(gold), 2, 0)
    for mine, other in (halves, halves[::-1]):
        cal = refit_like(previous, [sc.take(list(other))],
                         [np.concatenate([gold[i] for i in other])])
        assert cal.kind == previous.kind == "temperature"
        assert cal.temperature != previous.temperature  # fitted on the half, not all
        np.testing.assert_array_equal(np.concatenate([out[i] for i in mine]),
                                      cal.apply(sc.take(list(mine))))


# --------------------------------------------------------------------------- the estimator


@pytest.fixture(scope="module")
def chain():
    X, y = make_chain_task(90, seed=5)
    return X[:45], y[:45], X[45:], y[45:]


@pytest.mark.parametrize("inference", ["full", "sparse"])
def test_gpsl_calibrate_by_folds_saves_and_loads(chain, inference, tmp_path):
    Xtr, ytr, Xte, yte = chain
    model = GPSL(inference=inference).fit(Xtr, ytr)
    raw = model.predict_marginals(Xte, method="mean")
    calibrate(model, Xtr, ytr, folds=3)
    cal = model.calibrator_
    assert cal.source == "3-fold" and cal.method == "mean"
    singles = {"mean/temperature", "mean/step", "mean/step+vector"}
    ens = {f"{cal.method}/{ENSEMBLE} ensemble"}
    # the ensemble stacks the candidates allowed to change the decisions, when two are; the
    # lowest-NLL candidate, when not allowed to, competes with the decisions kept
    kept = {f"{k} (decisions kept)" for k in singles | ens}
    # the uncalibrated marginals are a candidate too (issue 36)
    assert singles | {"uncalibrated"} <= set(cal.candidates) \
        <= singles | ens | {"uncalibrated"} | kept
    cv = {k: c["cv_nll"] for k, c in cal.candidates.items()}  # one fold model left out at a time
    assert all(np.isfinite(v) for v in cv.values())
    ok = {k for k, c in cal.candidates.items() if c["admissible"]}
    assert "mean/temperature" in ok  # it keeps the decisions: always admissible
    # the default keeps the lowest cross-validated NLL among them; stacking weights maximise
    # exactly the left-out log score, so the stacked ensemble is never above its members there
    name, = (k for k, c in cal.candidates.items() if c.get("chosen"))
    assert name in ok and cal.candidates[name]["cv_nll"] == min(cv[k] for k in ok)
    assert (cal.kind == "ensemble") == (name in ens) and (cal.kind == "kept") == (name in kept)
    for e in ens & set(cal.candidates):
        # (to the EM's stop: at an optimum on a vertex of the simplex it converges slowly)
        assert cv[e] <= min(cv[k] for k in singles & ok) + 1e-6
        assert sum(cal.candidates[e]["weights"].values()) == pytest.approx(1.0)
    P = model.predict_marginals(Xte)
    assert all(np.allclose(p.sum(axis=1), 1.0) for p in P)
    # the mean-only RNS stays available by name, uncalibrated
    assert all(np.array_equal(a, b) for a, b in
               zip(model.predict_marginals(Xte, method="mean", calibrated=False), raw))
    model.save(tmp_path / "m")
    back = GPSL.load(tmp_path / "m")
    assert back.calibrator_.temperature == cal.temperature
    assert all(np.allclose(a, b) for a, b in zip(back.predict_marginals(Xte), P))
    # a refit drops the calibration of the previous fit
    model.fit(Xtr, ytr)
    assert model.calibrator_ is None


def test_calibration_on_held_out_data_and_clamped_tokens(chain):
    Xtr, ytr, Xte, yte = chain
    model = GPSL(inference="full", marginals="mean").fit(Xtr, ytr)
    calibrate(model, Xte, yte, method="mean", kinds=("temperature",))
    assert model.calibrator_.source == "held-out"
    assert model.calibrator_.temperature > 1.0  # the raw RNS is over-confident here
    known = [[lab[0]] + [None] * (len(lab) - 1) for lab in yte]
    P = model.predict_marginals(Xte, y=known)
    for p, lab in zip(P, known):
        assert p[0, model.classes_.index(lab[0])] == 1.0
    before = model.predict(Xte)
    assert before == [[model.classes_[i] for i in p.argmax(axis=1)]
                      for p in model.predict_marginals(Xte, calibrated=False)]
    # the structured temperature may move the argmax: the labels follow its marginals
    calibrate(model, Xte, yte, method="mean", kinds=("structured",))
    assert model.calibrator_.kind == "structured"
    assert model.predict(Xte) == [[model.classes_[i] for i in p.argmax(axis=1)]
                                  for p in model.predict_marginals(Xte)]


def test_damaged_calibration_record_is_one_line(chain, tmp_path):
    Xtr, ytr, Xte, yte = chain
    model = calibrate(GPSL(inference="full").fit(Xtr[:10], ytr[:10]), Xte[:10], yte[:10])
    model.save(tmp_path / "m")
    meta_path = tmp_path / "m" / "model.json"
    meta = json.loads(meta_path.read_text())
    meta["calibration"]["w"] = [1.0]
    from gpsl.persist import _meta_digest

    meta["sha256"]["model.json"] = _meta_digest(meta)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ModelFormatError) as e:
        GPSL.load(tmp_path / "m")
    assert "calibration" in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------------------------- metrics


def test_equal_mass_ece_hand_computed():
    conf = np.array([0.1, 0.2, 0.9, 0.95, 0.6, 0.7])
    corr = np.array([0, 1, 1, 1, 0, 1], dtype=bool)
    rows = equal_mass_reliability(conf, corr, 3)
    assert [r["count"] for r in rows] == [2, 2, 2]
    # bins {0.1, 0.2}, {0.6, 0.7}, {0.9, 0.95}
    expected = (2 * abs(0.5 - 0.15) + 2 * abs(0.5 - 0.65) + 2 * abs(1.0 - 0.925)) / 6
    assert ece_equal_mass(conf, corr, 3) == pytest.approx(expected)
    assert ece_equal_mass(np.array([0.8] * 10), np.array([1] * 8 + [0] * 2), 15) == \
        pytest.approx(0.0)


def test_selective_accuracy_and_thresholds():
    conf = np.array([0.99, 0.95, 0.9, 0.8, 0.6])
    corr = np.array([1, 1, 0, 1, 0], dtype=bool)
    sel = selective_accuracy(conf, corr, [0.2, 0.4, 0.6, 1.0])
    assert [r["accuracy"] for r in sel] == [1.0, 1.0, pytest.approx(2 / 3), 0.6]
    thr = threshold_table(conf, corr, (0.9, 0.99, 1.0))
    assert thr[0] == {"threshold": 0.9, "count": 3, "share": 0.6, "accuracy": pytest.approx(2 / 3)}
    assert thr[1]["count"] == 1 and thr[2]["count"] == 0 and thr[2]["accuracy"] is None


def test_calibration_summary_and_frequency_bands():
    P = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    s = calibration_summary(P, [0, 0, -1])
    assert s["n"] == 2 and s["accuracy"] == 0.5
    assert s["ece_width"] == pytest.approx(expected_calibration_error([0.9, 0.8], [1, 0]))
    assert s["nll"] == pytest.approx(-(np.log(0.9) + np.log(0.2)) / 2)
    bands = frequency_bands(["A", "B", "C"], [["A"] * 97 + ["B"] * 3])
    assert bands == {"A": "frequent", "B": "rare", "C": "rare"}


def test_calibration_by_band():
    conf = np.array([0.9, 0.8, 0.6, 0.99])
    corr = np.array([1, 0, 1, 1], dtype=bool)
    rows = calibration_by_band(conf, corr, ["A", "A", "B", "A"], {"A": "frequent", "B": "rare"})
    assert [r["band"] for r in rows] == ["frequent", "rare"]
    assert rows[0]["tokens"] == 3 and rows[0]["accuracy"] == pytest.approx(2 / 3)
    assert rows[1] == {"band": "rare", "tokens": 1, "accuracy": 1.0, "mean_confidence": 0.6,
                       "ece_mass": pytest.approx(0.4), "labels": ["B"]}


def test_structured_fit_on_a_subset_above_the_token_cap():
    sc = _scores_case(seed=2)
    truth = sc.marginals("mean", 2.0, 5.0)
    rng = np.random.default_rng(0)
    gold = np.array([rng.choice(3, p=p) for p in truth])
    small = Calibrator.fit_structured([sc], [gold], max_tokens=sc.n_tokens // 2)
    assert small.n_tokens < sc.n_tokens * 0.7
    assert small.t_unary == pytest.approx(2.0, rel=0.3)


# --------------------------------------------------------------------------- structured+vector


def test_structured_vector_recovers_a_known_scaling():
    """Gold drawn from softmax(w0 log q + c0), q the structured marginals at known (T_U, T_S):
    the vector step on that structured calibrator recovers w0 and c0."""
    sc = _scores_case(seed=4, n_sent=1500)
    q = sc.marginals("mean", 2.0, 5.0)
    w0, c0 = np.array([1.6, 0.8, 1.2]), np.array([0.4, -0.3, 0.0])
    truth = softmax(np.log(q) * w0 + c0, axis=1)
    rng = np.random.default_rng(3)
    gold = np.array([rng.choice(3, p=p) for p in truth])
    st = Calibrator(method="mean", kind="structured", w=np.ones(3), c=np.zeros(3), t_unary=2.0,
                    t_pair=5.0)
    cal = st.with_vector([sc], [gold], ridge=0.0)
    assert cal.kind == "structured+vector"
    assert cal.w == pytest.approx(w0, abs=0.15)
    # softmax is shift-invariant: compare the shifts relative to the last label
    assert cal.c - cal.c[-1] == pytest.approx(c0 - c0[-1], abs=0.15)
    assert cal.nll_after < nll_and_grad(np.r_[np.ones(3), np.zeros(3)], np.log(q), gold)[0]
    P = cal.apply(sc)
    assert np.allclose(P.sum(axis=1), 1.0) and np.all(P >= 0)
    assert np.allclose(P, truth, atol=0.05)


def test_structured_vector_identity_is_the_structured_and_the_uncalibrated_marginals():
    sc = _scores_case(n_sent=20)
    P0, _ = rns(sc.mean, sc.m_S, sc.lengths, sc.offsets, **sc.rns)
    ident = Calibrator(method="mean", kind="structured+vector", w=np.ones(3), c=np.zeros(3))
    assert np.allclose(ident.apply(sc), P0, atol=1e-12)  # T_U = T_S = 1, w = 1, c = 0
    st = dict(t_unary=1.7, t_pair=4.0)
    a = Calibrator(method="mean", kind="structured+vector", w=np.ones(3), c=np.zeros(3), **st)
    b = Calibrator(method="mean", kind="structured", w=np.ones(3), c=np.zeros(3), **st)
    assert np.allclose(a.apply(sc), b.apply(sc), atol=1e-12)
    clamp = np.full(sc.n_tokens, -1)
    clamp[::5] = 2
    P = a.apply(sc, clamp)
    assert np.all(P[::5, 2] == 1.0) and np.allclose(P.sum(axis=1), 1.0)
    with pytest.raises(ValueError):
        a.transform(P0)
    # the record round-trips
    c = Calibrator.from_dict(json.loads(json.dumps(a.to_dict())), 3)
    assert c.kind == "structured+vector" and np.allclose(c.apply(sc), a.apply(sc))


def _tempered_scores(seed, J, n_sent, length, temperature):
    """Unary-only scores whose labels were drawn from softmax(z) while the model reports
    ``temperature * z``: calibrated by exactly that temperature. Returns (scores, gold, J, n)."""
    rng = np.random.default_rng(seed)
    lengths = np.full(n_sent, length)
    n = int(lengths.sum())
    z = rng.normal(0.0, 2.0, size=(n, J))
    gold = np.array([rng.choice(J, p=p) for p in softmax(z, axis=1)])
    sc = Scores(z * temperature, np.zeros_like(z), np.zeros((1, J, J)), np.zeros((1, J, J)),
                lengths, (-1,), {"tol": 1e-8, "max_iter": 5})
    return sc, gold, J, n


def test_selection_is_cross_validated_and_resists_over_fitting():
    """Few tokens, many labels, calibrated-by-a-temperature data: the vector scaling fits the
    calibration tokens better (in-sample NLL) but the cross-validated NLL keeps the
    temperature."""
    sc, gold, J, n = _tempered_scores(seed=7, J=12, n_sent=40, length=3, temperature=2.0)
    best = Calibrator.select([sc], [gold], methods=["mean"], kinds=["temperature", "vector"],
                             ensemble=None)
    cand = best.candidates
    assert cand["mean/vector"]["nll_after"] < cand["mean/temperature"]["nll_after"]
    assert cand["mean/temperature"]["cv_nll"] < cand["mean/vector"]["cv_nll"]
    assert best.kind == "temperature" and best.temperature == pytest.approx(2.0, rel=0.3)
    # two Scores: left out one at a time (the K-fold path)
    halves = [list(range(20)), list(range(20, 40))]
    g2 = [gold[sc.rows(h)] for h in halves]
    two = Calibrator.select([sc.take(h) for h in halves], g2, methods=["mean"],
                            kinds=["temperature", "vector"])
    one = Calibrator.fit(sc.take(halves[0]).marginals(), g2[0])
    P = one.transform(sc.take(halves[1]).marginals())
    left = -np.log(P[np.arange(P.shape[0]), g2[1]]).sum()
    other = Calibrator.fit(sc.take(halves[1]).marginals(), g2[1])
    P = other.transform(sc.take(halves[0]).marginals())
    left -= np.log(P[np.arange(P.shape[0]), g2[0]]).sum()
    assert two.candidates["mean/temperature"]["cv_nll"] == pytest.approx(left / n, rel=1e-6)


def test_selection_by_cross_validated_brier_or_ece_is_computed_on_the_left_out_tokens():
    from gpsl.metrics import brier_score, ece_equal_mass

    sc, gold, J, n = _tempered_scores(seed=11, J=4, n_sent=60, length=5, temperature=3.0)
    halves = [list(range(30)), list(range(30, 60))]
    g2 = [gold[sc.rows(h)] for h in halves]
    parts = [sc.take(h) for h in halves]
    fits, cv = Calibrator.select_all(parts, g2, methods=["mean"], kinds=["temperature",
                                                                         "vector"],
                                     ensemble=None)
    # by hand: each half's temperature applied to the other half, pooled
    P = np.concatenate([Calibrator.fit(parts[1].marginals(), g2[1]).transform(
        parts[0].marginals()), Calibrator.fit(parts[0].marginals(), g2[0]).transform(
        parts[1].marginals())])
    y = np.concatenate([g2[0], g2[1]])
    t = cv["mean/temperature"]
    assert t["brier"] == pytest.approx(brier_score(P, y), rel=1e-9)
    assert t["ece"] == pytest.approx(ece_equal_mass(P.max(axis=1), P.argmax(axis=1) == y, 15),
                                     rel=1e-9)
    assert t["nll"] == pytest.approx(-np.mean(np.log(P[np.arange(y.size), y])), rel=1e-9)
    for criterion in ("nll", "brier", "ece"):  # (decision_z=None: every candidate competes)
        best = Calibrator.choose(fits, cv, criterion, decision_z=None)
        name = f"{best.method}/{best.kind}"
        assert cv[name][criterion] == min(cv[k][criterion] for k in fits)
        assert best.criterion == criterion
        back = Calibrator.from_dict(best.to_dict(), J)
        assert back.criterion == criterion and back.candidates[name][f"cv_{criterion}"] \
            == cv[name][criterion]
    with pytest.raises(ValueError, match="criterion"):
        Calibrator.choose(fits, cv, "auc")
    with pytest.raises(ValueError, match="criterion"):
        Calibrator.from_dict({**best.to_dict(), "criterion": "auc"}, J)


# --------------------------------------------------------------------------- stacked ensemble


def test_stacking_weights_never_lower_the_log_score_and_reach_its_maximum():
    """EM for mixture weights: the objective never decreases, the weights stay on the simplex,
    and the end point is the constrained maximum (checked against SLSQP)."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(3)
    Q = rng.uniform(0.01, 1.0, size=(400, 4)) * np.array([1.0, 0.6, 0.9, 0.3])
    hist: list = []
    w = stacking_weights(Q, history=hist)
    assert np.all(np.diff(hist) >= -1e-15) and len(hist) > 2
    assert np.all(w >= 0) and w.sum() == pytest.approx(1.0)
    res = minimize(lambda v: -np.mean(np.log(Q @ v)), np.full(4, 0.25), method="SLSQP",
                   bounds=[(0, 1)] * 4, constraints={"type": "eq", "fun": lambda v: v.sum() - 1},
                   options={"ftol": 1e-14, "maxiter": 500})
    assert np.mean(np.log(Q @ w)) >= -res.fun - 1e-7
    assert np.allclose(w, res.x, atol=2e-3)
    # a candidate that is never worse on any token and better on some takes all the weight
    Q2 = np.column_stack([Q[:, 0], Q[:, 0] * 0.5])
    assert stacking_weights(Q2)[0] == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError):
        stacking_weights(np.zeros((0, 2)))


def _stacking_weights_as_before(Q, max_iter=5000, tol=1e-12, history=None):
    """The EM of stacking_weights as gpsl computed it before (every step through the (N, K)
    responsibilities divided by their row sums): the reference of the cheaper step."""
    Q = np.clip(np.asarray(Q, dtype=float), 1e-300, None)
    w = np.full(Q.shape[1], 1.0 / Q.shape[1])
    prev = float(np.mean(np.log(Q @ w)))
    for _ in range(int(max_iter)):
        R = Q * w
        w = (R / R.sum(axis=1, keepdims=True)).mean(axis=0)
        w /= w.sum()
        val = float(np.mean(np.log(Q @ w)))
        if history is not None:
            history.append(val)
        if val - prev < tol:
            break
        prev = val
    return w


@pytest.mark.parametrize("case", ["spread", "collinear", "dominated", "zeros", "one"])
def test_stacking_weights_equal_the_former_em_steps(case):
    """Two products with Q a step give the former steps' weights (within 1e-10) and
    objective trace, whether EM stops by its tolerance or at its step cap."""
    rng = np.random.default_rng(11)
    N = 3000
    if case == "spread":
        Q = rng.uniform(0.01, 1.0, size=(N, 4)) * np.array([1.0, 0.6, 0.9, 0.3])
    elif case == "collinear":  # slow EM: runs to the cap
        base = rng.beta(5, 1, N)
        Q = np.clip(base[:, None] + 0.05 * rng.standard_normal((N, 5)), 1e-3, 1.0)
    elif case == "dominated":
        Q = rng.uniform(0.2, 1.0, size=(N, 1)) * np.array([[1.0, 0.5, 0.7]])
    elif case == "zeros":  # probabilities at 0 (clipped to the floor)
        Q = rng.uniform(0.0, 1.0, size=(N, 3)) * (rng.random((N, 3)) > 0.1)
    else:
        Q = rng.uniform(0.1, 1.0, size=(N, 1))
    for max_iter in (7, 5000):
        h_new, h_old = [], []
        w = stacking_weights(Q, max_iter=max_iter, history=h_new)
        ref = _stacking_weights_as_before(Q, max_iter=max_iter, history=h_old)
        assert np.max(np.abs(w - ref)) <= 1e-10
        assert len(h_new) == len(h_old)
        assert np.allclose(h_new, h_old, rtol=0, atol=1e-12)


def _three_calibrators(J=3):
    t = Calibrator(method="mean", kind="temperature", temperature=2.0, w=np.full(J, 0.5),
                   c=np.zeros(J))
    s = Calibrator(method="mean", kind="structured", w=np.ones(J), c=np.zeros(J),
                   t_unary=1.5, t_pair=4.0)
    sv = Calibrator(method="mean", kind="structured+vector", w=np.linspace(0.8, 1.2, J),
                    c=np.linspace(-0.2, 0.2, J), t_unary=1.5, t_pair=4.0)
    p = Calibrator(method="probit", kind="temperature", temperature=0.8,
                   w=np.full(J, 1 / 0.8), c=np.zeros(J))
    return t, s, sv, p


def test_an_ensemble_is_the_weighted_mixture_of_its_members():
    sc = _scores_case(n_sent=20)
    sc.var = np.full_like(sc.mean, 0.5)
    t, s, sv, p = _three_calibrators()
    # a one-hot weight is that member exactly (the others are dropped)
    one = Calibrator.stacked([t, s, sv, p], [0.0, 1.0, 0.0, 0.0])
    assert one.members == [s] and one.method == "mean"
    assert np.array_equal(one.apply(sc), s.apply(sc))
    ens = Calibrator.stacked([t, s, sv, p], [1.0, 2.0, 3.0, 4.0])
    assert ens.method == "probit" and ens.weights == pytest.approx([0.1, 0.2, 0.3, 0.4])
    want = sum(w * m.apply(sc) for w, m in zip([0.1, 0.2, 0.3, 0.4], [t, s, sv, p]))
    P = ens.apply(sc)
    assert np.allclose(P, want, atol=1e-12) and np.allclose(P.sum(axis=1), 1.0)
    clamp = np.full(sc.n_tokens, -1)
    clamp[::5] = 2
    Pc = ens.apply(sc, clamp)
    assert np.all(Pc[::5, 2] == 1.0) and np.allclose(Pc.sum(axis=1), 1.0)
    tiny = Calibrator.stacked([t, s], [1.0, STACK_MIN_WEIGHT / 10])
    assert tiny.members == [t] and tiny.weights == pytest.approx([1.0])
    with pytest.raises(ValueError, match="apply"):
        ens.transform(P)
    for bad in ([1.0, -1.0, 1.0, 1.0], [0.0] * 4, [1.0, 2.0], [np.nan, 1, 1, 1]):
        with pytest.raises(ValueError, match="weights"):
            Calibrator.stacked([t, s, sv, p], bad)
    with pytest.raises(ValueError, match="ensembles"):
        Calibrator.stacked([ens, t], [1.0, 1.0])
    # persistence: the record holds the members and the weights
    back = Calibrator.from_dict(json.loads(json.dumps(ens.to_dict())), 3)
    assert back.kind == "ensemble" and [m.kind for m in back.members] == \
        ["temperature", "structured", "structured+vector", "temperature"]
    assert np.array_equal(back.apply(sc), P)
    assert ens.describe() == ("0.10 × [T 2.00] + 0.20 × [T_U 1.50 · T_S 4.00] + 0.30 × "
                              "[T_U 1.50 · T_S 4.00 + vector] + 0.40 × [T 0.80 (probit)]")
    for damage in ({"members": []}, {"weights": [1.0, 1.0]}, {"weights": [1, -1, 1, 1]},
                   {"method": "mean"}):
        with pytest.raises(ValueError, match="calibration record"):
            Calibrator.from_dict({**ens.to_dict(), **damage}, 3)
    for field in ("members", "weights"):  # hostile values: one ValueError, nothing else
        for value in (None, 0, "x", [], {}, [0], ["a"], True, 1e308, float("nan"), [{}],
                      [ens.to_dict()] * 4):
            with pytest.raises(ValueError):
                Calibrator.from_dict({**ens.to_dict(), field: value}, 3)


def test_select_all_scores_the_ensembles_on_the_left_out_predictions():
    """The uniform ensemble's cross-validated figures are the equal mixture of the singles'
    left-out predictions, computed by hand; the stacked one is never above the best single
    there, so choosing by NLL keeps it."""
    sc, gold, J, n = _tempered_scores(seed=5, J=4, n_sent=60, length=5, temperature=2.5)
    halves = [list(range(30)), list(range(30, 60))]
    g2 = [gold[sc.rows(h)] for h in halves]
    parts = [sc.take(h) for h in halves]
    fits, cv = Calibrator.select_all(parts, g2, methods=["mean"],
                                     kinds=["temperature", "vector"],
                                     ensemble=("uniform", "stack"), decision_z=None)
    assert set(fits) == {"mean/temperature", "mean/vector", "mean/uniform ensemble",
                         "mean/stack ensemble"}
    left = []
    for k in ("temperature", "vector"):
        a = Calibrator.fit(parts[1].marginals(), g2[1], kind=k).transform(parts[0].marginals())
        b = Calibrator.fit(parts[0].marginals(), g2[0], kind=k).transform(parts[1].marginals())
        left.append(np.concatenate([a, b]))
    y = np.concatenate(g2)
    mix = (left[0] + left[1]) / 2
    assert cv["mean/uniform ensemble"]["nll"] == pytest.approx(
        -np.mean(np.log(mix[np.arange(y.size), y])), rel=1e-9)
    assert cv["mean/stack ensemble"]["nll"] <= min(cv["mean/temperature"]["nll"],
                                                   cv["mean/vector"]["nll"]) + 1e-12
    best = Calibrator.choose({k: v for k, v in fits.items() if "uniform" not in k}, cv, "nll",
                             decision_z=None)
    assert best.kind == "ensemble"
    assert set(best.candidates["mean/stack ensemble"]["weights"]) <= {"mean/temperature",
                                                                      "mean/vector"}
    # the ensemble's NLL on all its tokens is the mixture's
    P = np.concatenate([best.apply(p) for p in parts])
    assert best.nll_after == pytest.approx(-np.mean(np.log(P[np.arange(y.size), y])),
                                           rel=1e-9)
    with pytest.raises(ValueError, match="ensemble"):
        Calibrator.select_all(parts, g2, ensemble="median")
    # a single candidate has nothing to mix
    fits, cv = Calibrator.select_all(parts, g2, methods=["mean"], kinds=["temperature"])
    assert set(fits) == {"mean/temperature"}


def test_a_model_with_an_ensemble_saves_and_loads(chain, tmp_path):
    Xtr, ytr, Xte, yte = chain
    model = calibrate(GPSL(inference="full").fit(Xtr, ytr), Xte, yte, ensemble="uniform")
    cal = model.calibrator_
    names = [k for k in cal.candidates if k.endswith("/uniform ensemble")]
    assert len(names) <= 1  # the equal mixture of the admissible candidates competes
    chosen, = (k for k, c in cal.candidates.items() if c.get("chosen"))
    ok = [c["cv_nll"] for c in cal.candidates.values() if c["admissible"]]
    assert cal.candidates[chosen]["cv_nll"] == min(ok)
    # a stacked ensemble of every candidate (no test of the decisions), saved and loaded
    model.calibrator_ = Calibrator.select([model.calibration_scores(Xte)],
                                          [np.concatenate(model.gold_index(yte))],
                                          ensemble="stack", decision_z=None)
    assert model.calibrator_.kind == "ensemble"
    P = model.predict_marginals(Xte)
    labels = model.predict(Xte)
    model.save(tmp_path / "m")
    back = GPSL.load(tmp_path / "m")
    assert back.calibrator_.kind == model.calibrator_.kind
    assert all(np.allclose(a, b) for a, b in zip(back.predict_marginals(Xte), P))
    assert back.predict(Xte) == labels
    if back.calibrator_.kind == "ensemble":  # the labels follow the mixture's argmax
        assert labels == [[back.classes_[i] for i in p.argmax(axis=1)] for p in P]
