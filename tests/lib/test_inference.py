"""Numerical tests of the variational bound and Algorithm 1 (gpsl.inference)."""

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import logsumexp

from gpsl.inference import GPSLInference, Problem, neighbour_index, train_matrix
from gpsl.kernels import make_kernel
from tests.support.helpers import random_task


def tiny(kernel="linear", offsets=(-1, 1), missing=0.0, seed=0, n_sent=4, J=3, P=12,
         missing_weight=1.0):
    lengths, X, y, J = random_task(seed, n_sent, J, P, missing)
    k = make_kernel(kernel)
    prob = Problem.build(lengths, y, offsets, J, missing_weight=missing_weight)
    inf = GPSLInference(prob, k, k.base(X), k.base_diag(X), lambda_floor=0.0)
    return inf


def warm(inf, sweeps=3):
    for _ in range(sweeps):
        inf.sweep()
    return inf


def set_alpha(inf, alpha):
    inf.s.alpha = alpha
    inf.c.M = inf.K_times(alpha)


def test_neighbour_index_respects_sentence_boundaries():
    nb = neighbour_index([2, 3], (-1, 1, 2))
    assert nb.tolist() == [[-1, 1, -1], [0, -1, -1], [-1, 3, 4], [2, 4, -1], [3, -1, -1]]


@pytest.mark.parametrize("missing_weight", [1.0, 0.3])  # 0.3: EM-lambda's weighted bound
@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_gradient_m_U_matches_finite_differences(kernel, missing_weight):
    inf = warm(tiny(kernel, missing=0.3, missing_weight=missing_weight))
    g_m = inf.gradients()["m_U"]
    rng = np.random.default_rng(1)
    for _ in range(3):
        U = rng.normal(size=inf.s.alpha.shape)
        alpha0 = inf.s.alpha.copy()
        eps = 1e-5
        set_alpha(inf, alpha0 + eps * U)
        up = inf.elbo()
        set_alpha(inf, alpha0 - eps * U)
        down = inf.elbo()
        set_alpha(inf, alpha0)
        fd = (up - down) / (2 * eps)
        analytic = float(np.sum(g_m * inf.K_times(U)))  # dm = K dalpha
        assert fd == pytest.approx(analytic, rel=1e-5, abs=1e-6)


def _check_pair_gradients(inf, seed):
    """The bound's gradients in ``m_S`` and ``v_S`` against central differences of the bound
    at six random entries of each."""
    g = inf.gradients()
    rng = np.random.default_rng(seed)
    for name in ("m_S", "v_S"):
        arr = getattr(inf.s, name)
        for _ in range(6):
            idx = tuple(int(rng.integers(n)) for n in arr.shape)
            old = arr[idx]
            eps = 1e-6 * max(1.0, abs(old))
            arr[idx] = old + eps
            up = inf.elbo()
            arr[idx] = old - eps
            down = inf.elbo()
            arr[idx] = old
            assert (up - down) / (2 * eps) == pytest.approx(g[name][idx], rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("offsets,missing_weight", [((-1,), 1.0), ((-1, 1), 1.0),
                                                    ((-2, -1, 1, 2), 1.0), ((-1, 1), 0.3)])
def test_gradient_m_S_and_v_S_match_finite_differences(offsets, missing_weight):
    inf = warm(tiny(offsets=offsets, missing=0.25, seed=3, missing_weight=missing_weight))
    _check_pair_gradients(inf, seed=2)


def dense_neg_kl(m, V, K):
    """-KL(N(m, V) || N(0, K)) by dense linear algebra."""
    n = K.shape[0]
    Kinv = np.linalg.inv(K)
    return 0.5 * (np.linalg.slogdet(V)[1] - np.linalg.slogdet(K)[1] - np.trace(Kinv @ V)
                  - m @ Kinv @ m + n)


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_gradient_theta_matches_finite_differences_with_q_fixed(kernel):
    inf = warm(tiny(kernel, seed=4))
    g = inf.gradients()["theta"]
    for j in range(inf.p.J):
        th0 = inf.s.theta[j].copy()
        K0 = train_matrix(inf.kernel, th0, inf.base, inf.jitter)
        m = K0 @ inf.s.alpha[j]
        V = np.linalg.inv(np.linalg.inv(K0) + np.diag(inf.s.lam[j]))
        for p in range(th0.size):
            eps = 1e-5
            vals = []
            for sgn in (1, -1):
                th = th0.copy()
                th[p] += sgn * eps
                vals.append(dense_neg_kl(m, V, train_matrix(inf.kernel, th, inf.base,
                                                            inf.jitter)))
            fd = (vals[0] - vals[1]) / (2 * eps)
            assert fd == pytest.approx(g[j, p], rel=1e-4, abs=1e-5)


def test_kl_U_equals_dense_kl_from_the_cholesky_identities():
    inf = warm(tiny("rbf", seed=5))
    total = 0.0
    for j in range(inf.p.J):
        K = inf.K(j)
        V = np.linalg.inv(np.linalg.inv(K) + np.diag(inf.s.lam[j]))
        total += dense_neg_kl(K @ inf.s.alpha[j], V, K)
        assert np.allclose(np.diag(V), inf.c.Vd[j], rtol=1e-7, atol=1e-10)
    assert inf.kl_U() == pytest.approx(total, rel=1e-8)


def test_bound_is_the_papers_eq_lb2_when_all_labels_are_observed():
    inf = warm(tiny(offsets=(-1, 1), seed=6))
    p, s = inf.p, inf.s
    M, Vd, gS = inf.c.M, inf.c.Vd, s.m_S + 0.5 * s.v_S
    data = 0.0
    for t in range(p.n):
        y = p.y[t]
        num = M[y, t] + sum(s.m_S[d, p.y[p.nb[t, d]], y] for d in range(p.R) if p.nb[t, d] >= 0)
        a = [M[q, t] + 0.5 * Vd[q, t] + sum(gS[d, p.y[p.nb[t, d]], q]
                                            for d in range(p.R) if p.nb[t, d] >= 0)
             for q in range(p.J)]
        data += num - logsumexp(a)
    kl_S = 0.5 * np.sum(np.log(s.v_S) - s.v_S - s.m_S ** 2 + 1)
    assert inf.elbo() == pytest.approx(inf.kl_U() + kl_S + data, rel=1e-10)


@pytest.mark.parametrize("kernel,offsets,missing", [
    ("linear", (-1, 1), 0.0), ("linear", (-2, -1, 1, 2), 0.3), ("rbf", (-1,), 0.4),
    ("linear", (-1, 1), 0.6)])
def test_bound_never_decreases_over_sweeps_with_fixed_hyperparameters(kernel, offsets, missing):
    inf = tiny(kernel, offsets, missing, seed=7, n_sent=6)
    trace = [inf.elbo()]
    for _ in range(12):
        inf.update_mean_U()
        trace.append(inf.elbo())
        inf.update_cov_U()
        trace.append(inf.elbo())
        inf.update_S()
        trace.append(inf.elbo())
        inf.update_r()
        trace.append(inf.elbo())
    steps = np.diff(trace)
    assert np.all(steps >= -1e-8 * np.abs(trace[1:])), steps.min()
    assert trace[-1] > trace[0] + 1.0


def test_khan_fixed_point_matches_direct_optimisation_of_V():
    inf = warm(tiny("rbf", offsets=(-1,), seed=8, n_sent=2, J=2), sweeps=4)
    for _ in range(60):
        inf.update_cov_U(skip_tol=0.0)
    n = inf.p.n
    tril = np.tril_indices(n)

    def neg_bound(x):
        total = 0.0
        Vd = np.empty((inf.p.J, n))
        for j in range(inf.p.J):
            C = np.zeros((n, n))
            C[tril] = x[j * len(tril[0]):(j + 1) * len(tril[0])]
            V = C @ C.T + 1e-12 * np.eye(n)
            K = inf.K(j)
            total += dense_neg_kl(inf.c.M[j], V, K)
            Vd[j] = np.diag(V)
        return -(total + inf.kl_S() + inf.data_term(inf.terms(Vd=Vd)))

    x0 = np.concatenate([np.linalg.cholesky(inf.K(j))[tril] for j in range(inf.p.J)])
    res = minimize(neg_bound, x0, method="L-BFGS-B", options={"maxiter": 5000, "ftol": 1e-14})
    assert -res.fun == pytest.approx(inf.elbo(), abs=1e-4)
    assert -res.fun <= inf.elbo() + 1e-6  # the fixed point is the optimum
    x = res.x
    for j in range(inf.p.J):
        C = np.zeros((n, n))
        C[tril] = x[j * len(tril[0]):(j + 1) * len(tril[0])]
        assert np.allclose(np.diag(C @ C.T), inf.c.Vd[j], rtol=2e-2, atol=1e-3)


def test_missing_label_distributions_recover_hidden_labels():
    from gpsl.features import FeatureExtractor
    from gpsl.synthetic import UNIGRAM_TEMPLATE, make_chain_task

    X, Y = make_chain_task(30, seed=3)
    fx = FeatureExtractor(UNIGRAM_TEMPLATE)
    Xf = fx.fit_transform(X)
    y = np.array([int(v[1:]) for lab in Y for v in lab])
    rng = np.random.default_rng(0)
    hidden = rng.random(y.size) < 0.3
    y_obs = np.where(hidden, -1, y)
    k = make_kernel("linear")
    inf = GPSLInference(Problem.build([len(s) for s in X], y_obs, (-1, 1), 3), k, k.base(Xf),
                        k.base_diag(Xf))
    inf.fit(max_iter=30, learn_hyper=False)
    assert np.allclose(inf.s.r.sum(axis=1), 1.0)
    assert np.all(inf.s.r[~hidden].max(axis=1) == 1.0)  # observed labels stay one-hot
    assert np.mean(inf.s.r[hidden].argmax(axis=1) == y[hidden]) > 0.8


def test_em_hyperparameter_steps_increase_the_bound_for_the_linear_kernel():
    inf = tiny("linear", seed=9, n_sent=6)
    trace = inf.fit(max_iter=40, tol=1e-7, learn_hyper=True)
    # the M-step maximises the bound in sigma^2 with q fixed; after the E-step the
    # bound must end above where coordinate ascent alone had left it
    fixed = tiny("linear", seed=9, n_sent=6)
    trace_fixed = fixed.fit(max_iter=40, tol=1e-7, learn_hyper=False)
    assert trace[-1] >= trace_fixed[-1] - 1e-6
    assert not np.allclose(inf.s.theta, fixed.s.theta)


def test_rbf_m_step_maximises_the_bound_in_theta_with_q_fixed():
    from gpsl.inference import neg_kl_and_grad

    inf = warm(tiny("rbf", seed=10, n_sent=5))
    before = []
    for j in range(inf.p.J):
        K = inf.K(j)
        m = K @ inf.s.alpha[j]
        V = np.linalg.inv(np.linalg.inv(K) + np.diag(inf.s.lam[j]))
        before.append((m, V, dense_neg_kl(m, V, K)))
        # the analytic value and gradient agree with the dense KL and finite differences
        f, g = neg_kl_and_grad(inf.kernel, inf.s.theta[j], inf.base, inf.jitter, m, V,
                               np.linalg.slogdet(V)[1])
        assert f == pytest.approx(before[-1][2], rel=1e-8)
        for p in range(g.size):
            th = inf.s.theta[j].copy()
            th[p] += 1e-6
            up = dense_neg_kl(m, V, train_matrix(inf.kernel, th, inf.base, inf.jitter))
            th[p] -= 2e-6
            down = dense_neg_kl(m, V, train_matrix(inf.kernel, th, inf.base, inf.jitter))
            assert (up - down) / 2e-6 == pytest.approx(g[p], rel=1e-4, abs=1e-6)
    theta_old = inf.s.theta.copy()
    inf.update_theta()
    assert not np.allclose(inf.s.theta, theta_old)
    for j, (m, V, f_old) in enumerate(before):
        K_new = inf.K(j)
        assert dense_neg_kl(m, V, K_new) >= f_old - 1e-8  # an M-step never lowers it
        assert np.allclose(K_new @ inf.s.alpha[j], m, atol=1e-6)  # the mean is kept


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_joint_khan_step_never_lowers_the_bound_and_ignores_the_thread_count(kernel):
    """update_cov_U (all labels from the same pi, refreshed in threads) is monotone, and
    one thread or four give the same lambda, diag V and bound to round-off."""
    runs = []
    for threads in (1, 4):
        inf = tiny(kernel, missing=0.2, J=4, n_sent=6)
        inf.n_threads = threads
        bounds = [inf.elbo()]
        for _ in range(6):
            inf.update_mean_U()
            inf.update_cov_U()
            bounds.append(inf.elbo())
        assert np.all(np.diff(bounds) >= -1e-9 * np.abs(bounds[1:])), bounds
        assert bounds[-1] > bounds[0] + 1.0
        runs.append((inf.s.lam.copy(), inf.c.Vd.copy(), bounds[-1]))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-10, atol=1e-12)
    assert runs[0][2] == pytest.approx(runs[1][2], rel=1e-12)


def test_joint_khan_step_reaches_the_label_by_label_fixed_point():
    """Block-Jacobi and Algorithm 1's label-by-label order converge to the same V_U
    (the bound is concave in each lambda_j block; both are monotone ascent)."""
    a, b = tiny(seed=3), tiny(seed=3)
    for step in (a.update_cov_U, b.update_cov_U_sequential):
        for _ in range(200):
            step(skip_tol=1e-9)
    np.testing.assert_allclose(a.s.lam, b.s.lam, atol=1e-5)
    assert a.elbo() == pytest.approx(b.elbo(), rel=1e-9)


def test_evidence_that_names_the_label_reproduces_the_observed_label_fit():
    """A missing token whose evidence is 0 at its true label and -inf elsewhere is an
    observed token: the same bound after the same sweeps."""
    base = tiny(missing=0.0, seed=3)
    y = base.p.y.copy()
    hidden = np.array([1, 4, 7])
    y_missing = y.copy()
    y_missing[hidden] = -1
    E = np.zeros((y.size, base.p.J))
    E[hidden] = -np.inf
    E[hidden, y[hidden]] = 0.0
    k = base.kernel
    lengths = np.diff(np.r_[0, np.flatnonzero(base.p.nb[:, 1] < 0) + 1])
    with_ev = GPSLInference(Problem.build(lengths, y_missing, (-1, 1), base.p.J, evidence=E),
                            k, base.base, base.base_diag, lambda_floor=0.0)
    observed = GPSLInference(Problem.build(lengths, y, (-1, 1), base.p.J), k, base.base,
                             base.base_diag, lambda_floor=0.0)
    for _ in range(3):
        a, b = with_ev.sweep(), observed.sweep()
    np.testing.assert_allclose(with_ev.s.r[hidden], observed.s.r[hidden])
    assert a == pytest.approx(b, rel=1e-9)


def test_evidence_pulls_missing_labels_and_the_bound_never_decreases():
    inf = tiny(missing=0.5, seed=4)
    miss = np.flatnonzero(inf.p.missing)
    E = np.zeros((inf.p.n, inf.p.J))
    E[miss, 2] = 6.0  # strong evidence for label 2
    inf.p.set_evidence(E)
    trace = [inf.elbo()]
    for _ in range(5):
        trace.append(inf.sweep())
    assert np.all(np.diff(trace) >= -1e-8 * np.abs(trace[:-1]))
    assert inf.s.r[miss, 2].mean() > 0.9
    with pytest.raises(ValueError):
        inf.p.set_evidence(np.zeros((inf.p.n + 1, inf.p.J)))


@pytest.mark.parametrize("pair_variance", [4.0, 0.25])
def test_pair_prior_variance_kl_and_gradient(pair_variance):
    """``f^S ~ N(0, s2 I)``: ``kl_S`` is the closed form of ``-KL(q(f^S) || N(0, s2 I))`` and
    the gradients of ``m_S``, ``v_S`` match finite differences of the bound; the update of
    ``q(f^S)`` never lowers the bound."""
    inf = tiny(offsets=(-1, 1), missing=0.25, seed=5)
    inf.pair_variance = pair_variance
    warm(inf)
    s = inf.s
    expected = 0.5 * np.sum(np.log(s.v_S / pair_variance) - s.v_S / pair_variance
                            - s.m_S ** 2 / pair_variance + 1)
    assert inf.kl_S() == pytest.approx(expected, rel=1e-12)
    _check_pair_gradients(inf, seed=7)
    before = inf.elbo()
    inf.update_S()
    assert inf.elbo() >= before - 1e-9 * abs(before)


def test_a_wider_pair_prior_lets_the_pair_functions_grow():
    """With the same data, the pair means' largest magnitude grows with the prior variance
    (the prior is the only thing holding a never-seen pair's score near 0)."""
    sizes = []
    for s2 in (1.0, 4.0, 16.0):
        inf = tiny(offsets=(-1, 1), seed=6)
        inf.pair_variance = s2
        sizes.append(float(np.abs(warm(inf).s.m_S).max()))
    assert sizes[0] < sizes[1] < sizes[2]
