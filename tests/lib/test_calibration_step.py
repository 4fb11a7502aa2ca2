"""gpsl.calibration.step (the default's structured candidate, issue 36): its objective against
finite differences, its exact special case, its convexity, and the rule that calibration never
ships marginals worse than none on the left-out tokens."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpsl.calibration import Calibrator
from gpsl.calibration import decisions as D
from gpsl.calibration import rule as R
from gpsl.calibration import step as S
from gpsl.predict import rns
from gpsl.problem import neighbour_index
from tests.lib.test_calibration import _scores_case


def _gold(P, seed=0):
    rng = np.random.default_rng(seed)
    return np.array([rng.choice(P.shape[1], p=p / p.sum()) for p in P])


@pytest.mark.parametrize("per_label", [False, True])
def test_the_objective_and_its_gradient_against_finite_differences(per_label):
    sc = _scores_case(seed=4, n_sent=30)
    F = S.channels(sc, sc.fixed_point())
    g = _gold(sc.marginals("mean", 2.0, 5.0))
    J = F.shape[2]
    rng = np.random.default_rng(1)
    x = S.identity(J, per_label) + 0.3 * rng.standard_normal(3 * J if per_label else 2)
    value, grad = S.step_nll_and_grad(x, F, g, ridge=0.05, per_label=per_label)
    h = 1e-6
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        fd = (S.step_nll_and_grad(x + e, F, g, 0.05, per_label)[0]
              - S.step_nll_and_grad(x - e, F, g, 0.05, per_label)[0]) / (2 * h)
        assert grad[i] == pytest.approx(fd, rel=1e-5, abs=1e-7)
    # the value is the mean NLL of the step's marginals (plus the ridge)
    w, u, c = S._unpack(x, J, per_label)
    Z = S.logits(F, w, u, c)
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    ridge = 0.025 * np.sum((x - S.identity(J, per_label)) ** 2)
    assert value == pytest.approx(-np.mean(np.log(P[np.arange(g.size), g])) + ridge)


def test_the_identity_returns_the_uncalibrated_marginals_exactly():
    sc = _scores_case(seed=5, n_sent=40)
    P0, _ = rns(sc.mean, sc.m_S, sc.lengths, sc.offsets, **sc.rns)
    J = P0.shape[1]
    cal = Calibrator(method="mean", kind="step", w=np.ones(J), c=np.zeros(J), u=np.zeros(J))
    assert np.allclose(cal.apply(sc), P0, rtol=0, atol=1e-12)
    clamp = np.full(sc.n_tokens, -1)
    clamp[::5] = 2
    Pc, _ = rns(sc.mean, sc.m_S, sc.lengths, sc.offsets, clamp=clamp, **sc.rns)
    assert np.allclose(cal.apply(sc, clamp), Pc, rtol=0, atol=1e-12)


def _messages(sc, P):
    """``M(P)`` of Algorithm 2 (the pair messages), by hand."""
    g = sc.m_S + 0.5 * sc.v_S
    nb = neighbour_index(sc.lengths, sc.offsets)
    M = np.zeros_like(P)
    for d in range(len(sc.offsets)):
        ok = nb[:, d] >= 0
        M[ok] += P[nb[ok, d]] @ g[d]
    return M


def test_the_step_is_one_step_of_the_structured_temperature_at_the_fixed_point():
    """``w = 1/T_S, u = 1/T_U - 1/T_S`` gives ``softmax(b/T_U + M(P)/T_S)`` at Algorithm 2's
    fixed point ``P`` (within its stop rule)."""
    sc = _scores_case(seed=6, n_sent=30)
    P = sc.fixed_point()
    M = _messages(sc, P)
    J = P.shape[1]
    for tu, tp in ((1.0, 1.0), (2.0, 5.0), (0.7, 20.0)):
        Z = sc.mean / tu + M / tp
        Q = np.exp(Z - Z.max(axis=1, keepdims=True))
        Q /= Q.sum(axis=1, keepdims=True)
        step = Calibrator(method="mean", kind="step", w=np.full(J, 1 / tp), c=np.zeros(J),
                          u=np.full(J, 1 / tu - 1 / tp)).apply(sc)
        assert np.abs(step - Q).max() < 1e-4


def test_the_fit_is_convex_and_beats_the_temperature_on_structured_data():
    sc = _scores_case(seed=2)
    g = _gold(sc.marginals("mean", 2.0, 5.0))
    J = 3
    st = Calibrator.fit_step([sc], [g])
    temp = Calibrator.fit(sc.fixed_point(), g)
    assert st.kind == "step" and st.nll_after < temp.nll_after < st.nll_before
    # one optimum: started elsewhere, the same parameters
    far = Calibrator(method="mean", kind="step", w=np.full(J, 0.2), c=np.zeros(J),
                     u=np.full(J, 1.0))
    again = Calibrator.fit_step([sc], [g], start=far)
    assert np.allclose([again.w[0], again.u[0]], [st.w[0], st.u[0]], atol=1e-3)
    vec = Calibrator.fit_step([sc], [g], vector=True, start=st)
    assert vec.kind == "step+vector" and vec.nll_after <= st.nll_after + 1e-3
    # saved and read back, it gives the same marginals
    back = Calibrator.from_dict(json.loads(json.dumps(vec.to_dict())), J)
    assert np.array_equal(back.apply(sc), vec.apply(sc))
    with pytest.raises(ValueError, match="step weights"):
        Calibrator.from_dict({**vec.to_dict(), "u": [1.0]}, J)


def _groups(seed, n_groups=3, n_sent=60, truth=(1.0, 1.0)):
    out = []
    for k in range(n_groups):
        sc = _scores_case(seed=seed * 10 + k, n_sent=n_sent)
        out.append((sc, _gold(sc.marginals("mean", *truth), seed=k)))
    return [o[0] for o in out], [o[1] for o in out]


@pytest.mark.parametrize("seed, truth", [(1, (1.0, 1.0)), (2, (1.0, 1.0)), (3, (2.0, 5.0)),
                                         (4, (0.7, 1.0))])
def test_calibration_is_never_worse_than_none_on_the_left_out_tokens(seed, truth):
    """Gold drawn from the uncalibrated marginals themselves (nothing to fix) or from
    miscalibrated ones: the chosen calibrator's left-out NLL and ECE are at or below the
    uncalibrated marginals', whichever it is."""
    scores, gold = _groups(seed, truth=truth)
    cal = Calibrator.select(scores, gold)
    cand = cal.candidates
    name, = (k for k, c in cand.items() if c.get("chosen"))
    unc = cand[D.UNCALIBRATED]
    assert cand[name]["cv_nll"] <= unc["cv_nll"] and cand[name]["cv_ece"] <= unc["cv_ece"]
    if truth != (1.0, 1.0):  # something to fix: calibration does
        assert name != D.UNCALIBRATED and cand[name]["cv_nll"] < unc["cv_nll"]


def test_a_candidate_worse_than_none_on_ece_is_not_shipped():
    """The lowest left-out NLL with a higher left-out ECE than the uncalibrated marginals:
    the uncalibrated ones (the temperature 1) are shipped."""
    J = 3
    fits = {"mean/temperature": Calibrator(method="mean", kind="temperature", temperature=2.0,
                                           w=np.full(J, 0.5), c=np.zeros(J), n_tokens=9,
                                           nll_before=0.5, nll_after=0.4)}

    def fig(nll, ece):
        return {"nll": nll, "brier": 0.1, "ece": ece, "errors": 3, "loss": 0.1, "fixed": 0,
                "broken": 0}

    cv = {"mean/temperature": fig(0.40, 0.05), D.UNCALIBRATED: fig(0.45, 0.03)}
    best = Calibrator.choose(fits, cv)
    assert best.kind == "temperature" and best.temperature == 1.0
    assert np.array_equal(best.w, np.ones(J)) and best.candidates[D.UNCALIBRATED]["chosen"]
    assert not best.candidates["mean/temperature"]["admissible"]
    cv["mean/temperature"] = fig(0.40, 0.02)  # better on both: calibrated
    assert Calibrator.choose(fits, cv).temperature == 2.0
    P = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    assert np.allclose(best.transform(P), P, rtol=0, atol=1e-15)


def test_out_of_fold_tokens_are_capped_per_fold():
    lengths = [10] * 200
    parts = [np.arange(0, 100), np.arange(100, 200)]
    assert R._scored(parts, lengths, None, 0) is parts
    assert R._scored(parts, lengths, 5000, 0) is parts  # 2,000 tokens: all of them
    sub = R._scored(parts, lengths, 600, 0)
    for held, s in zip(parts, sub):
        assert set(s.tolist()) <= set(held.tolist()) and np.all(np.diff(s) > 0)
        assert sum(lengths[i] for i in s) == 300  # the fold's share, whole sentences
    assert [a.tolist() for a in sub] == [a.tolist() for a in R._scored(parts, lengths, 600, 0)]


def test_the_apps_refit_keeps_the_step_kinds():
    from gpsl.calibration import refit_like

    sc = _scores_case(seed=7, n_sent=80)
    g = _gold(sc.marginals("mean", 2.0, 5.0))
    for vector in (False, True):
        cal = Calibrator.fit_step([sc], [g], vector=vector)
        again = refit_like(cal, [sc], [g])
        assert again.kind == cal.kind and np.allclose(again.apply(sc), cal.apply(sc), atol=1e-4)


def test_the_temperatures_value_is_the_vector_scalings_at_one_over_t():
    from gpsl.calibration import nll_and_grad, temperature_nll

    rng = np.random.default_rng(3)
    L = np.log(rng.dirichlet(np.ones(4), size=50))
    g = rng.integers(0, 4, 50)
    for T in (0.3, 1.0, 2.5):
        want = nll_and_grad(np.r_[np.full(4, 1 / T), np.zeros(4)], L, g)[0]
        assert temperature_nll(T, L, g) == pytest.approx(want, rel=1e-13)
