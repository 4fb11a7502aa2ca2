"""The numerics behind the scalable fit's speed (docs/speed.md): the neighbour lookup equals the
general form, the labeled-tokens first sweep, Boehning's covariance step, the single-precision
L-BFGS pairs, the remaining-time estimate. (Speed itself is measured in bench.partial and
bench.scale, not here.)"""

from __future__ import annotations

import numpy as np
import pytest

from gpsl.kernels import make_kernel
from gpsl.likelihood import Problem
from gpsl.progress import _converged, fit_eta, remaining_sweeps
from gpsl.sparse import SparseGPSLInference, lbfgs_min
from tests.support.helpers import random_task


def engine(seed=0, missing=0.4, lse_bound="bohning", lam=1.0, family="meanfield", J=3,
           offsets=(-1, 1), **kw):
    lengths, X, y, J = random_task(seed, 8, J, 15, missing)
    prob = Problem.build(lengths, y, offsets, J, missing_weight=lam)
    k = make_kernel("linear")
    theta0 = np.array([np.log(2.0)])
    feats = k.weight_space(X, np.tile(theta0, (J, 1)), exact=family == "khan")
    return SparseGPSLInference(prob, feats, family=family, theta0=theta0, lambda_floor=0.0,
                               lse_bound=lse_bound, **kw)


def _general(inf, fn):
    """``fn()`` with the engine on the general (non-lookup) form of the neighbour terms."""
    inf.lookup_neighbours = False
    try:
        return fn()
    finally:
        del inf.lookup_neighbours  # back to the class attribute (True)


# --------------------------------------------------------------------------- the lookup


@pytest.mark.parametrize("lse_bound", ["jensen", "bohning"])
@pytest.mark.parametrize("offsets", [(-1, 1), (-2, -1, 1)])
@pytest.mark.parametrize("missing", [0.4, 0.0, 0.95, 1.0])
def test_the_neighbour_lookup_is_the_general_form(lse_bound, offsets, missing):
    """An observed neighbour's log E_r[exp g] with one-hot r is g[y_nb]: the lookup gives the
    same terms, pair counts, q(f^S) objective and r update (to rounding); with every label
    observed, nearly every label missing (a crowd's: only the observed neighbours' rows are
    looked up) and none observed."""
    inf = engine(3, missing=missing, lse_bound=lse_bound, lam=0.4, offsets=offsets)
    for _ in range(2):
        inf.sweep()
    assert inf.lookup_neighbours
    rng = np.random.default_rng(0)
    inf.s.m_S += rng.normal(scale=0.5, size=inf.s.m_S.shape)
    T, Tg = inf.terms(), _general(inf, inf.terms)
    np.testing.assert_allclose(T["a"], Tg["a"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(T["pi"], Tg["pi"], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(T["lse"], Tg["lse"], rtol=1e-12)
    np.testing.assert_allclose(inf.pair_counts(), _general(inf, inf.pair_counts), rtol=1e-12,
                               atol=1e-12)
    assert inf.elbo() == pytest.approx(_general(inf, inf.elbo), rel=1e-12)
    fun, args = inf._S_problem()
    x = np.concatenate([inf.s.m_S.ravel(), np.log(inf.s.v_S).ravel()])
    f, g = fun(x, *args)
    fg, gg = _general(inf, lambda: inf._S_objective(x, *inf._S_problem()[1]))
    assert f == pytest.approx(fg, rel=1e-12)
    np.testing.assert_allclose(g, gg, rtol=1e-9, atol=1e-9)
    r0 = inf.s.r.copy()
    inf.update_r()
    r_lookup = inf.s.r.copy()
    inf.s.r = r0
    _general(inf, inf.update_r)
    np.testing.assert_allclose(r_lookup, inf.s.r, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("J", [3, 70])
def test_the_neighbour_groups_code_the_observed_neighbours_labels(J):
    """``Problem.neighbour_groups``: each token's code spells its observed neighbours' labels
    (``J`` for a missing or absent one) in base ``J + 1``; offsets share a table only while it
    has at most ``GROUP_ROWS`` rows (J = 70: 71^2 > 4096, one offset a group); the lookup's
    terms equal the scatter form's (no groups) to rounding."""
    from gpsl.problem import GROUP_ROWS

    rng = np.random.default_rng(J)
    lengths = [7, 1, 12, 5]
    n = sum(lengths)
    y = rng.integers(0, J, n)
    y[rng.random(n) < 0.3] = -1
    prob = Problem.build(lengths, y, (-1, 1, 2), J)
    groups = prob.neighbour_groups()
    assert [d for ds, _ in groups for d in ds] == [0, 1, 2]
    assert all((J + 1) ** len(ds) <= GROUP_ROWS for ds, _ in groups)
    assert len(groups) == (1 if J == 3 else 3)
    for ds, code in groups:
        rest = code.copy()
        for d in reversed(ds):
            digit = rest % (J + 1)
            rest //= J + 1
            nbd = prob.nb[:, d]
            want = np.where(nbd >= 0, y[np.where(nbd >= 0, nbd, 0)], -1)
            np.testing.assert_array_equal(digit, np.where(want >= 0, want, J))
        assert not rest.any()
    gS = rng.normal(size=(3, J, J))
    r = rng.dirichlet(np.ones(J), size=n)
    from gpsl.likelihood import PseudoLikelihoodBound

    bound = PseudoLikelihoodBound.__new__(PseudoLikelihoodBound)
    bound.p = prob
    a = rng.normal(size=(n, J))
    grouped = a.copy()
    bound._neighbour_sum(gS, r, grouped)
    prob._groups = []  # the scatter over the observed tokens alone
    scattered = a.copy()
    bound._neighbour_sum(gS, r, scattered)
    np.testing.assert_allclose(grouped, scattered, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("lam", [1.0, 0.3])
def test_the_q_fS_gradient_with_missing_neighbours_matches_finite_differences(lam):
    inf = engine(5, missing=0.5, lam=lam)
    for _ in range(2):
        inf.sweep()
    fun, args = inf._S_problem()
    rng = np.random.default_rng(1)
    x = np.concatenate([inf.s.m_S.ravel() + rng.normal(scale=0.3, size=inf.s.m_S.size),
                        np.log(inf.s.v_S).ravel() + rng.normal(scale=0.3, size=inf.s.v_S.size)])
    U = rng.normal(size=x.size)
    eps = 1e-6
    fd = (fun(x + eps * U, *args)[0] - fun(x - eps * U, *args)[0]) / (2 * eps)
    assert float(fun(x, *args)[1] @ U) == pytest.approx(fd, rel=1e-6, abs=1e-6)


# --------------------------------------------------------------------------- the first sweep


def test_the_m_steps_at_weight_zero_never_lower_that_bound():
    """sweep_labels_first's M-steps are the ordinary block updates of the bound with the
    missing tokens' own factors at weight 0: each one is monotone in that bound."""
    inf = engine(7, missing=0.7, lam=0.3)
    inf.p.set_missing_weight(0.0)
    steps = [inf.update_mean_U, inf.update_cov_U, inf.update_S]
    before = inf.elbo()
    for step in steps * 2:
        step()
        after = inf.elbo()
        assert after >= before - 1e-9 * abs(before), step.__name__
        before = after


def test_the_fit_with_missing_labels_starts_on_the_labeled_tokens():
    inf = engine(8, missing=0.6, lam=0.4)
    assert inf._labels_first_applies()
    start = inf.elbo()
    trace = inf.fit(max_iter=6, tol=0.0, learn_hyper=False)
    assert inf.p.missing_weight == 0.4  # lambda restored after the first sweep
    np.testing.assert_array_equal(inf.p.weight[inf.p.missing], 0.4)
    assert trace[0] == start and trace[1] > start  # the first sweep, at lambda's bound
    assert np.all(np.diff(trace[1:]) >= -1e-9 * np.abs(trace[1:-1]))  # then monotone
    miss = inf.p.missing
    assert np.abs(inf.s.r[miss] - 1.0 / inf.p.J).max() > 0.1  # every guess informed
    # evidence, or no missing label: the ordinary first sweep
    complete = engine(8, missing=0.0)
    assert not complete._labels_first_applies()
    inf2 = engine(8, missing=0.6)
    inf2.p.set_evidence(np.zeros((inf2.p.n, inf2.p.J)))
    assert not inf2._labels_first_applies()
    off = engine(8, missing=0.6, labels_first=False)
    assert not off._labels_first_applies()


# --------------------------------------------------------------------------- covariance


@pytest.mark.parametrize("family", ["meanfield", "khan"])
def test_bohnings_covariance_step_is_the_exact_maximiser(family):
    """Under Boehning's bound the covariance fixed point does not read the means: one step is
    the maximiser (mean-field: dL/ds = 0; Khan: lambda = 2 kappa w) and never lowers L."""
    inf = engine(9, missing=0.3, lam=0.5, family=family)
    inf.update_mean_U()
    before = inf.elbo()
    inf.update_cov_U()
    assert inf.elbo() >= before - 1e-12 * abs(before)
    if family == "meanfield":
        np.testing.assert_allclose(inf.gradients()["s"], 0.0, atol=1e-9)
    else:
        target = np.broadcast_to(2 * inf.kappa * inf.p.w, inf.s.cov.shape)
        np.testing.assert_allclose(inf.s.cov, target, rtol=1e-12)
    again = inf.elbo()
    inf.update_cov_U()
    assert inf.elbo() == pytest.approx(again, rel=1e-13)


# --------------------------------------------------------------------------- L-BFGS


def test_lbfgs_with_single_precision_pairs_reaches_an_ill_conditioned_optimum():
    """The pairs are kept in float32, every decision in float64: still monotone, still the
    optimum of a quadratic with curvatures from 1 to 1e4 (the feature counts' spread)."""
    rng = np.random.default_rng(0)
    N = 3000
    h = 10 ** rng.uniform(0, 4, N)
    b = rng.normal(size=N) * h
    seen = []

    def fun(x):
        f = 0.5 * float(x @ (h * x)) - float(b @ x)
        seen.append(f)
        return f, h * x - b

    x, f = lbfgs_min(fun, np.zeros(N), maxiter=2000, ftol=0.0, gtol=1e-8)
    f_star = -0.5 * float(b @ (b / h))
    # to the precision of f itself (the Armijo test cannot see smaller gains): x within
    # sqrt(2 (f - f*) / min h)
    assert f - f_star <= 1e-6
    np.testing.assert_allclose(x, b / h, atol=1e-3)
    accepted = np.minimum.accumulate(seen)
    assert f == pytest.approx(accepted[-1]) and f <= seen[0]
    # the relative stop ends a run early, downhill
    seen.clear()
    x2, f2 = lbfgs_min(fun, np.zeros(N), maxiter=2000, ftol=1e-3)
    assert len(seen) < 200 and f2 < seen[0]


# --------------------------------------------------------------------------- progress


def _geometric(L_star, c, rho, k):
    return [L_star - c * rho ** i for i in range(k)]


@pytest.mark.parametrize("rho", [0.05, 0.3, 0.7])
def test_remaining_sweeps_follow_the_stop_rule_on_a_geometric_trace(rho):
    """With improvements shrinking by a constant ratio the estimate after any sweep is the
    number of sweeps the stop rule (relative improvement <= tol) still needs."""
    tol, L_star, c = 1e-4, -5000.0, 4000.0
    full = _geometric(L_star, c, rho, 200)
    stop = next(k for k in range(1, len(full)) if _converged(full[k - 1], full[k], tol))
    for k in range(3, stop + 1):
        assert remaining_sweeps(full[:k], tol=tol, max_iter=500) == pytest.approx(
            stop + 1 - k, abs=1), (k, stop)
    assert remaining_sweeps(full[:stop + 1], tol=tol, max_iter=500) == 0
    assert remaining_sweeps(full[:3], tol=tol, max_iter=4) == 1  # the cap
    assert remaining_sweeps(full[:1], tol=tol, max_iter=500) == 1  # no rate known yet
    assert remaining_sweeps([], tol=tol, max_iter=500) == 2


def test_fit_eta_is_the_remaining_sweeps_times_the_measured_sweep():
    bounds = _geometric(-5000.0, 4000.0, 0.3, 4)
    seconds = [3.0, 5.0, 7.0, 9.0]  # the first sweep 3 s, then 2 s each
    left = remaining_sweeps(bounds, tol=1e-4, max_iter=100)
    assert left > 0
    assert fit_eta(bounds, seconds, tol=1e-4, max_iter=100) == pytest.approx(2.0 * left)
    assert fit_eta([], [], tol=1e-4, max_iter=100) is None
    assert fit_eta(bounds[:1], seconds[:1], tol=1e-4, max_iter=100) == pytest.approx(3.0)


def test_the_estimate_on_a_real_fit_counts_down_to_the_stop():
    from gpsl.model import GPSL
    from gpsl.synthetic import UNIGRAM_TEMPLATE, hide_labels, make_chain_task

    X, y = make_chain_task(60, n_labels=4, seed=2)
    seen = []

    def cb(info):
        seen.append((info["bound"], info["seconds"]))

    m = GPSL(template=UNIGRAM_TEMPLATE, tol=1e-4, max_iter=60, callback=cb)
    m.fit(X, hide_labels(y, 0.5, seed=3))
    bounds = [b for b, _ in seen]
    assert len(bounds) == m.n_iter_ >= 2
    est = [remaining_sweeps(bounds[:k], tol=1e-4, max_iter=60) for k in range(1, len(bounds))]
    assert est[0] >= 1 and remaining_sweeps(bounds, tol=1e-4, max_iter=60) == 0
    actual = [len(bounds) - k for k in range(1, len(bounds))]
    assert all(e >= 1 for e in est)  # never "done" before the stop rule fires
    # the last sweeps (the geometric tail) within two sweeps
    assert all(abs(e - a) <= 2 for e, a in zip(est[-4:], actual[-4:])), (est, actual)


def test_the_labeled_tokens_start_is_taken_with_bohnings_bound_only():
    """missing_start="labels" under Jensen's bound is the uniform start (the weight-0 sweep
    does not recover there, bench.partial --diagnose); the default differs from it."""
    from gpsl.model import GPSL
    from gpsl.synthetic import UNIGRAM_TEMPLATE, hide_labels, make_chain_task

    X, y = make_chain_task(40, n_labels=4, seed=4)
    part = hide_labels(y, 0.6, seed=1)
    kw = dict(template=UNIGRAM_TEMPLATE, inference="sparse", max_iter=4)
    jensen = GPSL(lse_bound="jensen", **kw).fit(X, part)
    uniform = GPSL(lse_bound="jensen", missing_start="uniform", **kw).fit(X, part)
    assert jensen.bound_trace_ == uniform.bound_trace_
    labels = GPSL(**kw).fit(X, part)
    assert labels.bound_trace_ != GPSL(missing_start="uniform", **kw).fit(X, part).bound_trace_
