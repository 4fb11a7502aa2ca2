"""Numerical tests of the scalable (weight-space) inference mode (gpsl.sparse)."""

import numpy as np
import pytest

from gpsl.inference import GPSLInference, Problem
from gpsl.kernels import LinearFeatures, NystromFeatures, make_kernel
from gpsl.sparse import SparseGPSLInference, SparseState
from tests.support.helpers import random_task


def data(seed=0, n_sent=5, J=3, P=15, missing=0.0):
    return random_task(seed, n_sent, J, P, missing)


def full_engine(kernel, lengths, X, y, J, sweeps=3, lse_bound="jensen"):
    k = make_kernel(kernel)
    prob = Problem.build(lengths, y, (-1, 1), J)
    inf = GPSLInference(prob, k, k.base(X), k.base_diag(X), lambda_floor=0.0,
                        lse_bound=lse_bound)
    inf.s.theta[:, 0] = np.log(2.0)
    inf.refresh()
    for _ in range(sweeps):
        inf.sweep()
    return inf


def mapped_sparse(full, features):
    """The full mode's state in weight space: W_j = Phi_j' alpha_j, Khan lambda unchanged."""
    th = full.s.theta
    W = features.rtimes(th, full.s.alpha)
    st = SparseState(theta=th.copy(), W=W, cov=full.s.lam.copy(), m_S=full.s.m_S.copy(),
                     v_S=full.s.v_S.copy(), r=full.s.r.copy(), family="khan")
    return SparseGPSLInference(full.p, features, st, lambda_floor=0.0,
                               lse_bound=full.lse_bound)


@pytest.mark.parametrize("lse_bound", ["jensen", "bohning"])
@pytest.mark.parametrize("missing", [0.0, 0.3])
def test_khan_family_with_linear_features_equals_the_full_gp_bound(missing, lse_bound):
    lengths, X, y, J = data(1, missing=missing)
    full = full_engine("linear", lengths, X, y, J, lse_bound=lse_bound)
    k = make_kernel("linear")
    sparse = mapped_sparse(full, LinearFeatures(X, k.jitter(k.base_diag(X))))
    np.testing.assert_allclose(sparse.c.M, full.c.M, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(sparse.c.Vd, full.c.Vd, rtol=1e-6)
    assert sparse.elbo() == pytest.approx(full.elbo(), rel=1e-6)


def test_nystrom_with_every_token_inducing_equals_the_full_gp_bound():
    lengths, X, y, J = data(2, missing=0.2)
    full = full_engine("rbf", lengths, X, y, J)
    k = make_kernel("rbf")
    feats = NystromFeatures(k, X, full.s.theta, np.arange(X.shape[0]), k.jitter(None))
    assert np.max(feats.resid(None)) < 1e-8
    sparse = mapped_sparse(full, feats)
    np.testing.assert_allclose(sparse.c.Vd, full.c.Vd, rtol=1e-6, atol=1e-9)
    assert sparse.elbo() == pytest.approx(full.elbo(), rel=1e-6)


def test_khan_family_sweeps_from_the_mapped_state_stay_at_the_full_gp_bound():
    """Starting both modes at the full mode's optimum, further sweeps of the exact weight-space
    form reach the same bound (same model, same fixed point)."""
    lengths, X, y, J = data(3)
    full = full_engine("linear", lengths, X, y, J, sweeps=40)
    k = make_kernel("linear")
    sparse = mapped_sparse(full, LinearFeatures(X, k.jitter(k.base_diag(X))))
    sparse.mean_iter = 200
    for _ in range(5):
        sparse.sweep()
    assert sparse.elbo() == pytest.approx(full.elbo(), rel=1e-5)


def sparse_engine(family="meanfield", kernel="linear", missing=0.3, seed=4, lse_bound="jensen",
                  missing_weight=1.0, **kw):
    lengths, X, y, J = data(seed, missing=missing)
    k = make_kernel(kernel)
    theta0 = np.array([np.log(2.0)]) if kernel == "linear" else k.default_params(
        k.base_diag(X), k.base(X))
    feats = k.weight_space(X, np.tile(theta0, (J, 1)), inducing=10)
    prob = Problem.build(lengths, y, (-1, 1), J, missing_weight=missing_weight)
    return SparseGPSLInference(prob, feats, family=family,
                               theta0=theta0, lambda_floor=0.0, lse_bound=lse_bound, **kw)


@pytest.mark.parametrize("family,kernel", [("meanfield", "linear"), ("khan", "linear"),
                                           ("meanfield", "rbf"), ("khan", "rbf")])
@pytest.mark.parametrize("missing", [0.0, 0.4])
@pytest.mark.parametrize("lse_bound", ["jensen", "bohning"])
def test_sparse_bound_never_decreases_over_sweeps(family, kernel, missing, lse_bound):
    inf = sparse_engine(family, kernel, missing, lse_bound=lse_bound)
    trace = [inf.elbo()]
    for _ in range(6):
        trace.append(inf.sweep())
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[:-1])), trace
    assert trace[-1] > trace[0]


@pytest.mark.parametrize("family,missing_weight", [("meanfield", 1.0), ("khan", 1.0),
                                                   ("meanfield", 0.3)])
@pytest.mark.parametrize("lse_bound", ["jensen", "bohning"])
def test_sparse_gradients_match_finite_differences(family, lse_bound, missing_weight):
    inf = sparse_engine(family, lse_bound=lse_bound, missing_weight=missing_weight)
    for _ in range(2):
        inf.sweep()
    g = inf.gradients()
    rng = np.random.default_rng(0)
    W0 = inf.s.W.copy()
    U = rng.normal(size=W0.shape)
    eps = 1e-6

    def at(W):
        inf.s.W = W
        inf.refresh()
        return inf.elbo()

    fd = (at(W0 + eps * U) - at(W0 - eps * U)) / (2 * eps)
    at(W0)
    assert float(np.sum(g["W"] * U)) == pytest.approx(fd, rel=1e-5, abs=1e-6)
    if family == "meanfield":
        P0 = inf.s.cov.copy()
        S0 = 1.0 / P0
        dS = rng.normal(size=S0.shape) * S0 * 0.1

        def at_s(S):
            inf.s.cov = 1.0 / S
            inf.refresh()
            return inf.elbo()

        fd = (at_s(S0 + eps * dS) - at_s(S0 - eps * dS)) / (2 * eps)
        at_s(S0)
        assert float(np.sum(g["s"] * dS)) == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_sparse_em_step_for_the_linear_variance_does_not_lower_the_bound():
    inf = sparse_engine("meanfield", missing=0.0)
    for _ in range(3):
        inf.sweep()
    before = inf.elbo()
    inf.update_theta()
    assert inf.elbo() >= before - 1e-9 * abs(before)


def test_sparse_evidence_enters_the_bound_and_r():
    inf = sparse_engine("meanfield", missing=0.5)
    miss = np.flatnonzero(inf.p.missing)
    E = np.zeros((inf.p.n, inf.p.J))
    E[miss, 1] = 6.0
    inf.p.set_evidence(E)
    for _ in range(4):
        inf.sweep()
    assert inf.s.r[miss, 1].mean() > 0.9


def test_lbfgs_minimises_a_convex_quadratic_and_never_goes_uphill():
    from gpsl.sparse import lbfgs_min

    rng = np.random.default_rng(0)
    A = rng.normal(size=(30, 30))
    H = A @ A.T + 0.5 * np.eye(30)
    b = rng.normal(size=30)
    seen = []

    def fun(x):
        f = 0.5 * x @ H @ x - b @ x
        seen.append(f)
        return f, H @ x - b

    x, f = lbfgs_min(fun, np.zeros(30), maxiter=200, ftol=0, gtol=1e-10)
    np.testing.assert_allclose(x, np.linalg.solve(H, b), rtol=1e-5, atol=1e-6)
    assert f <= seen[0]


def _two_loop(S, Y, g, gamma):
    """Nocedal and Wright's Algorithm 7.4 in double precision (pairs oldest first)."""
    q = g.copy()
    alphas = []
    for s, y in zip(reversed(S), reversed(Y)):
        a = (s @ q) / (s @ y)
        q -= a * y
        alphas.append(a)
    q *= gamma
    for (s, y), a in zip(zip(S, Y), reversed(alphas)):
        q += s * (a - (y @ q) / (s @ y))
    return q


@pytest.mark.parametrize("stored", [1, 3, 8])
def test_the_compact_direction_is_the_two_loop_recursion(stored):
    """The compact form's ``H g`` (lbfgs._compact_coefficients) equals the two-loop recursion
    exactly (up to rounding), whatever ring slots the pairs occupy."""
    from gpsl.lbfgs import _compact_coefficients

    rng = np.random.default_rng(stored)
    N, P = 40, 9
    A = rng.normal(size=(N, N))
    H = A @ A.T + np.eye(N)
    S = [rng.normal(size=N) for _ in range(stored)]
    Y = [H @ s for s in S]  # a convex quadratic's pairs: s'y > 0
    g = rng.normal(size=N)
    slots = list(rng.permutation(P)[:stored])  # oldest first, anywhere in the ring
    Z = np.zeros((2 * P, N))
    SY, YY, ag = np.zeros((P, P)), np.zeros((P, P)), np.zeros(2 * P)
    for i, k in enumerate(slots):
        Z[2 * k], Z[2 * k + 1] = S[i], Y[i]
        ag[2 * k], ag[2 * k + 1] = S[i] @ g, Y[i] @ g
        for j, kk in enumerate(slots):
            SY[k, kk] = S[i] @ Y[j]
            YY[k, kk] = Y[i] @ Y[j]
    gamma = (S[-1] @ Y[-1]) / (Y[-1] @ Y[-1])
    coef = _compact_coefficients(slots, SY, YY, ag, gamma, P)
    Hg = gamma * g + coef @ Z
    np.testing.assert_allclose(Hg, _two_loop(S, Y, g, gamma), rtol=1e-9, atol=1e-10)
    unused = sorted(set(range(P)) - set(slots))
    assert not coef[[2 * k for k in unused]].any() and not coef[[2 * k + 1 for k in unused]].any()


def test_bohning_bound_is_above_the_expected_log_sum_exp():
    """E_f[lse(f + s)] <= lse(m + s) + (1 - 1/J)/4 sum_j V_j for f ~ N(m, diag V) (Monte Carlo,
    10^5 draws; the gap is checked with a margin of 5 standard errors)."""
    from scipy.special import logsumexp

    rng = np.random.default_rng(0)
    for J in (2, 5, 12):
        m = rng.normal(size=J) * 2
        V = rng.uniform(0.01, 3.0, size=J)
        f = m + rng.normal(size=(100_000, J)) * np.sqrt(V)
        vals = logsumexp(f, axis=1)
        mc, se = vals.mean(), vals.std() / np.sqrt(vals.size)
        bound = logsumexp(m) + 0.25 * (1 - 1 / J) * V.sum()
        assert mc <= bound + 5 * se, (J, mc, bound)


def test_full_gp_with_the_bohning_bound_never_decreases_and_has_a_fixed_covariance():
    lengths, X, y, J = data(6, missing=0.3)
    full = full_engine("linear", lengths, X, y, J, sweeps=0, lse_bound="bohning")
    trace = [full.elbo()]
    for _ in range(6):
        trace.append(full.sweep())
    assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[:-1]))
    np.testing.assert_allclose(full.s.lam, 2 * full.kappa)  # lambda = 2 kappa everywhere
    g = full.gradients()["m_U"]
    alpha0 = full.s.alpha.copy()
    U = np.random.default_rng(1).normal(size=alpha0.shape)
    eps = 1e-5

    def at(a):
        full.s.alpha = a
        full.c.M = full.K_times(a)
        return full.elbo()

    fd = (at(alpha0 + eps * U) - at(alpha0 - eps * U)) / (2 * eps)
    at(alpha0)
    assert float(np.sum(g * full.K_times(U))) == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_meanfield_without_jitter_weights_keeps_the_jitter_as_prior_variance():
    """exact=False: the jitter part stays at its prior (variance sigma^2 eps added to V, no
    weights), the bound still never decreases and lands next to the exact form's."""
    lengths, X, y, J = data(8, missing=0.3)
    k = make_kernel("linear")
    theta0 = np.array([np.log(2.0)])
    prob = Problem.build(lengths, y, (-1, 1), J)
    runs = {}
    for exact in (True, False):
        feats = k.weight_space(X, np.tile(theta0, (J, 1)), exact=exact)
        inf = SparseGPSLInference(prob, feats, family="meanfield", theta0=theta0,
                                  lambda_floor=0.0)
        trace = [inf.elbo()] + [inf.sweep() for _ in range(6)]
        assert np.all(np.diff(trace) >= -1e-9 * np.abs(trace[:-1]))
        runs[exact] = (feats, inf)
    feats, inf = runs[False]
    assert feats.D == X.shape[1] and runs[True][0].D == X.shape[1] + X.shape[0]
    np.testing.assert_allclose(feats.resid(inf.s.theta), 2.0 * feats.jitter)
    assert inf.elbo() == pytest.approx(runs[True][1].elbo(), rel=1e-3)


@pytest.mark.parametrize("missing", [0.0, 0.4])
def test_the_mean_curvature_is_the_hessian_diagonal_by_finite_differences(missing):
    """``1 + mean_curvature`` is the diagonal of the mean objective's Hessian: each entry
    against the central difference of the analytic gradient along that weight."""
    from gpsl.sparse import mean_curvature

    lengths, X, y, J = data(5, missing=missing)
    k = make_kernel("linear")
    prob = Problem.build(lengths, y, (-1, 1), J)
    inf = SparseGPSLInference(prob, LinearFeatures(X, k.jitter(k.base_diag(X)), exact=False),
                              theta0=np.array([np.log(2.0)]), lse_bound="bohning")
    inf.sweep()  # away from zero weights: pi is not uniform
    fun, h = inf._mean_problem(curvature=True)
    x0 = inf.s.W.ravel().copy()
    # the curvature from the round's own pi equals the one from a fresh softmax at W
    a = inf.features.times(inf.s.theta, inf.s.W).T + (inf.terms()["a"] - inf.c.M.T)
    pi = np.exp(a - a.max(axis=1, keepdims=True))
    pi /= pi.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(h, 1.0 + mean_curvature(inf.features, inf.s.theta, pi,
                                                       inf.p.weight), rtol=1e-12)
    rng = np.random.default_rng(0)
    eps = 1e-5
    for i in rng.choice(x0.size, size=12, replace=False):
        e = np.zeros_like(x0)
        e[i] = eps
        fd = (fun(x0 + e)[1][i] - fun(x0 - e)[1][i]) / (2 * eps)
        assert fd == pytest.approx(h.ravel()[i], rel=1e-5, abs=1e-7)


def test_a_diagonal_preconditioner_reaches_the_same_minimum_in_fewer_steps():
    """``h0``: on an ill-conditioned quadratic (curvatures 1 to 1e4) the preconditioned run
    ends where the plain one does, in fewer evaluations; every accepted step goes down."""
    from gpsl.lbfgs import lbfgs_min

    rng = np.random.default_rng(3)
    N = 400
    d = np.exp(rng.uniform(0, np.log(1e4), N))
    A = rng.normal(size=(N, 5)) * 0.3
    H = np.diag(d) + A @ A.T
    b = rng.normal(size=N)
    counts = {}

    def make(name):
        seen = counts.setdefault(name, [])

        def fun(x):
            seen.append(0.5 * x @ H @ x - b @ x)
            return seen[-1], H @ x - b
        return fun

    x_opt = np.linalg.solve(H, b)
    x1, f1 = lbfgs_min(make("plain"), np.zeros(N), maxiter=500, ftol=0, gtol=1e-9)
    x2, f2 = lbfgs_min(make("pre"), np.zeros(N), maxiter=500, ftol=0, gtol=1e-9,
                       h0=1.0 / np.diag(H))
    f_opt = -0.5 * b @ x_opt
    assert f1 == pytest.approx(f_opt, rel=1e-7) and f2 == pytest.approx(f_opt, rel=1e-7)
    np.testing.assert_allclose(x2, x_opt, rtol=0, atol=1e-3 * np.abs(x_opt).max())
    assert len(counts["pre"]) < len(counts["plain"]) / 2
    assert f2 <= counts["pre"][0]


def test_only_a_warm_start_preconditions_the_mean_step():
    """The engine preconditions the mean step when it starts from a previous fit (the
    app's refit), never on a cold start (whose path the documented figures follow)."""
    from gpsl import GPSL
    from gpsl.synthetic import UNIGRAM_TEMPLATE, make_chain_task

    X, y = make_chain_task(40, n_labels=3, seed=4)
    rng = np.random.default_rng(1)
    labels = [[None if rng.random() < 0.3 else v for v in s] for s in y]
    sents = X
    seen = []
    orig = SparseGPSLInference.update_mean_U

    def spy(self, *a, **kw):
        seen.append(self.precondition)
        return orig(self, *a, **kw)

    SparseGPSLInference.update_mean_U = spy
    try:
        model = GPSL(template=UNIGRAM_TEMPLATE, inference="sparse", warm_start=True,
                     max_iter=3).fit(sents, labels)
        cold = list(seen)
        seen.clear()
        model.fit(sents, labels)
    finally:
        SparseGPSLInference.update_mean_U = orig
    assert cold and not any(cold)
    assert seen and all(seen)


def test_the_block_steps_stop_rules_follow_the_fits_tol():
    """``inner_ftols``: at ``tol`` 1e-4 or less the fixed values measured before, at 1e-3 ten
    times looser; a fit sets them on its engine (and the stop rule is the only difference:
    at ``tol`` 1e-4 a fit is bitwise the fit with the fixed values)."""
    from gpsl.likelihood import PseudoLikelihoodBound
    from gpsl.sparse import MEAN_FTOL, S_FTOL, inner_ftols

    assert inner_ftols(1e-4) == (MEAN_FTOL, S_FTOL) == (1e-6, 1e-7)
    assert inner_ftols(1e-8) == (1e-6, 1e-7)
    assert inner_ftols(1e-3) == pytest.approx((1e-5, 1e-6))
    lengths, X, y, J = data(3, n_sent=30, missing=0.4)
    k = make_kernel("linear")

    def fit(tol, fixed):
        prob = Problem.build(lengths, y, (-1, 1), J)
        inf = SparseGPSLInference(prob, LinearFeatures(X, k.jitter(k.base_diag(X)), exact=False),
                                  theta0=np.array([np.log(2.0)]))
        # fixed: Algorithm 1 with the engine's fixed stop rules, whatever the fit's tol
        run = PseudoLikelihoodBound.fit if fixed else SparseGPSLInference.fit
        return inf, run(inf, max_iter=50, tol=tol, learn_hyper=False)

    a, ta = fit(1e-4, fixed=False)
    b, tb = fit(1e-4, fixed=True)
    assert (a.mean_ftol, a.S_ftol) == (1e-6, 1e-7)
    assert ta == tb
    np.testing.assert_array_equal(a.s.W, b.s.W)
    c, tc = fit(1e-3, fixed=False)
    assert (c.mean_ftol, c.S_ftol) == pytest.approx((1e-5, 1e-6))
    d, td = fit(1e-3, fixed=True)
    # looser block steps, the same stop rule: within the fit's own tolerance of the fit with
    # the tight block steps
    assert abs(tc[-1] - td[-1]) <= 1e-3 * abs(td[-1])
    assert np.all(np.diff(tc) >= -1e-9 * np.abs(tc[:-1]))
