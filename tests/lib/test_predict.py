"""Tests of prediction (gpsl.predict): predictive moments, RNS (Algorithm 2), Viterbi."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import softmax

from gpsl.inference import GPSLInference, Problem, train_matrix
from gpsl.kernels import make_kernel
from gpsl.predict import LatentPredictor, rns, viterbi


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_predictive_mean_and_variance_equal_dense_computation(kernel):
    rng = np.random.default_rng(0)
    X = sp.random(14, 9, density=0.4, random_state=1, format="csr")
    X.data[:] = 1.0
    Xs = sp.random(5, 9, density=0.4, random_state=2, format="csr")
    Xs.data[:] = 1.0
    k = make_kernel(kernel)
    inf = GPSLInference(Problem.build([7, 7], rng.integers(0, 3, 14), (-1, 1), 3), k,
                        k.base(X), k.base_diag(X), lambda_floor=0.0)
    for _ in range(3):
        inf.sweep()
    inf.s.lam[1, :4] = 0.0  # some tokens outside the active set of label 1
    pred = LatentPredictor(k, X, inf.s.theta, inf.s.alpha, inf.s.lam)
    mean, var = pred(Xs)
    for j in range(3):
        K = train_matrix(k, inf.s.theta[j], k.base(X), inf.jitter)
        Ks = k.matrix(inf.s.theta[j], k.base(X, Xs))
        kss = k.diag(inf.s.theta[j], k.base_diag(Xs))
        Kinv = np.linalg.inv(K)
        m = K @ inf.s.alpha[j]
        V = np.linalg.inv(Kinv + np.diag(inf.s.lam[j]))
        mean_dense = Ks.T @ Kinv @ m
        var_dense = kss - np.einsum("ij,ik,kj->j", Ks, Kinv - Kinv @ V @ Kinv, Ks)
        assert np.allclose(mean[:, j], mean_dense, rtol=1e-6, atol=1e-8)
        assert np.allclose(var[:, j], var_dense, rtol=1e-6, atol=1e-8)


def test_rns_with_empty_dependency_set_is_softmax_of_m_plus_half_v():
    rng = np.random.default_rng(1)
    m, v = rng.normal(size=(9, 4)), rng.random((9, 4))
    P, it = rns(m + 0.5 * v, np.zeros((0, 4, 4)), [4, 5], ())
    assert it == 0
    assert np.allclose(P, softmax(m + 0.5 * v, axis=1))


@pytest.mark.parametrize("schedule", ["jacobi", "sequential"])
def test_rns_is_a_fixed_point_of_the_refined_normalised_score(schedule):
    rng = np.random.default_rng(2)
    b = rng.normal(size=(11, 3))
    g = 0.5 * rng.normal(size=(2, 3, 3))
    lengths, offsets = [5, 6], (-1, 1)
    P, it = rns(b, g, lengths, offsets, tol=1e-12, max_iter=500, schedule=schedule)
    assert it < 500
    # eq. (rns): P_l = softmax(b_l + sum_d sum_p P_{l+o_d}(p) g_d[p, .])
    expected = b.copy()
    starts = [0, 5]
    for s, L in zip(starts, lengths):
        for pos in range(L):
            for d, o in enumerate(offsets):
                if 0 <= pos + o < L:
                    expected[s + pos] += P[s + pos + o] @ g[d]
    assert np.allclose(P, softmax(expected, axis=1), atol=1e-9)
    assert np.allclose(P.sum(axis=1), 1.0)


def test_rns_clamps_known_labels_and_propagates_them():
    b = np.zeros((3, 2))
    g = np.array([[[4.0, -4.0], [-4.0, 4.0]]])  # strong "same as previous" preference
    clamp = np.array([1, -1, -1])
    P, _ = rns(b, g, [3], (-1,), clamp=clamp, tol=1e-10)
    assert P[0].tolist() == [0.0, 1.0]
    assert P[1, 1] > 0.99 and P[2, 1] > 0.99
    P0, _ = rns(b, g, [3], (-1,), tol=1e-10)
    assert np.allclose(P0, 0.5)


def test_viterbi_equals_brute_force_enumeration():
    rng = np.random.default_rng(3)
    for trial in range(20):
        J, L = int(rng.integers(2, 4)), int(rng.integers(1, 6))
        b = rng.normal(size=(L, J))
        g = rng.normal(size=(1, J, J))
        offsets = (-1,) if trial % 2 == 0 else (1,)
        best, best_y = -np.inf, None
        for y in itertools.product(range(J), repeat=L):
            s = sum(b[t, y[t]] for t in range(L))
            if offsets == (-1,):
                s += sum(g[0, y[t - 1], y[t]] for t in range(1, L))
            else:  # g[d][neighbour = y_{t+1}, own = y_t]
                s += sum(g[0, y[t + 1], y[t]] for t in range(L - 1))
            if s > best:
                best, best_y = s, y
        assert viterbi(b, g, [L], offsets).tolist() == list(best_y)


def test_viterbi_refuses_models_with_several_dependencies():
    with pytest.raises(ValueError, match="single dependency"):
        viterbi(np.zeros((3, 2)), np.zeros((2, 2, 2)), [3], (-1, 1))


@pytest.mark.parametrize("offsets", [(-1, 1), (-1,), (1,)])
def test_exact_pl_decoding_equals_brute_force(offsets):
    from scipy.special import log_softmax

    from gpsl.predict import pl_decode

    rng = np.random.default_rng(4)
    for _ in range(12):
        J, L = int(rng.integers(2, 4)), int(rng.integers(1, 6))
        b = rng.normal(size=(L, J))
        g = rng.normal(size=(len(offsets), J, J))
        best, best_y = -np.inf, None
        for y in itertools.product(range(J), repeat=L):
            s = 0.0
            for t in range(L):
                a = b[t].copy()
                for d, o in enumerate(offsets):
                    if 0 <= t + o < L:
                        a += g[d][y[t + o]]
                s += log_softmax(a)[y[t]]
            if s > best:
                best, best_y = s, y
        assert pl_decode(b, g, [L], offsets).tolist() == list(best_y)


def _rns_update(P, b, g, lengths, offsets):
    """One undamped Jacobi pass of Algorithm 2 (the map F of gpsl.predict.rns)."""
    from gpsl.predict import neighbour_index

    nb = neighbour_index(lengths, offsets)
    a = b.copy()
    for d in range(len(offsets)):
        ok = nb[:, d] >= 0
        a[ok] += P[nb[ok, d]] @ g[d]
    return softmax(a, axis=1)


def test_damped_rns_converges_where_algorithm_2_two_cycles_to_a_fixed_point_of_it():
    # two tokens pulled to opposite labels locally, strongly coupled to agree: the undamped
    # Jacobi iteration swaps their beliefs every pass
    b = np.array([[0.3, 0.0], [0.0, 0.3]])
    g = np.stack([4.0 * np.eye(2), 4.0 * np.eye(2)])
    P1, it1 = rns(b, g, [2], (-1, 1), schedule="jacobi", max_iter=60)
    assert it1 == 60
    P1b, _ = rns(b, g, [2], (-1, 1), schedule="jacobi", max_iter=61)
    assert np.abs(P1 - P1b).max() > 0.5  # the answer depends on the parity of max_iter
    P2, it2 = rns(b, g, [2], (-1, 1), schedule="jacobi", max_iter=60, damping=0.5, tol=1e-10)
    assert it2 < 60
    np.testing.assert_allclose(_rns_update(P2, b, g, [2], (-1, 1)), P2, atol=1e-8)


def test_damped_rns_finds_the_same_marginals_when_algorithm_2_converges():
    rng = np.random.default_rng(4)
    lengths = [5, 7, 3]
    b = rng.normal(size=(15, 3))
    g = 0.3 * rng.normal(size=(2, 3, 3))
    P1, it1 = rns(b, g, lengths, (-1, 1), schedule="jacobi", tol=1e-12, max_iter=500)
    P2, it2 = rns(b, g, lengths, (-1, 1), schedule="jacobi", tol=1e-12, max_iter=500,
                  damping=0.5)
    assert it1 < 500 and it2 < 500
    np.testing.assert_allclose(P1, P2, atol=1e-9)
    with pytest.raises(ValueError):
        rns(b, g, lengths, (-1, 1), damping=0.0)


def test_jacobi_rns_of_a_batch_equals_each_sentence_on_its_own():
    """Sentences leave the iteration when they converge: the batch gives exactly what each
    sentence gives alone, with or without clamped labels."""
    rng = np.random.default_rng(7)
    lengths = np.array([1, 5, 9, 3, 12])
    J = 4
    b = rng.normal(size=(lengths.sum(), J)) * 2
    g = rng.normal(size=(2, J, J)) * 2.5  # strong couplings: sentences converge at different passes
    clamp = np.full(lengths.sum(), -1)
    clamp[[2, 10]] = [1, 3]
    for cl in (None, clamp):
        P, it = rns(b, g, lengths, (-1, 1), tol=1e-6, max_iter=300, damping=0.5, clamp=cl)
        start, its = 0, []
        for L in lengths:
            part = None if cl is None else cl[start:start + L]
            Ps, i = rns(b[start:start + L], g, [L], (-1, 1), tol=1e-6, max_iter=300,
                        damping=0.5, clamp=part)
            np.testing.assert_allclose(P[start:start + L], Ps, rtol=0, atol=1e-15)
            its.append(i)
            start += L
        assert it == max(its)
        np.testing.assert_allclose(P.sum(axis=1), 1.0)


# --------------------------------------------------------------------------- the chain decoder


def _brute_chain(b, T):
    """Best labelling of ``sum_l b[l, y_l] + sum_l T[y_{l-1}, y_l]`` by enumeration."""
    L, J = b.shape
    best = max(itertools.product(range(J), repeat=L),
               key=lambda y: sum(b[t, y[t]] for t in range(L))
               + sum(T[y[t - 1], y[t]] for t in range(1, L)))
    return list(best)


@pytest.mark.parametrize("offsets", [(-1, 1), (-1,), (1,)])
def test_chain_decode_equals_enumeration(offsets):
    from gpsl.predict import chain_decode, chain_transitions

    rng = np.random.default_rng(3)
    J, lengths = 3, [1, 4, 5, 2]
    b = rng.normal(size=(sum(lengths), J))
    m_S = rng.normal(scale=2.0, size=(len(offsets), J, J))
    T = chain_transitions(m_S, offsets)
    want = 0.5 * (m_S[0] + m_S[1].T) if offsets == (-1, 1) else (
        m_S[0] if offsets == (-1,) else m_S[0].T)
    assert np.allclose(T, want)
    got = chain_decode(b, m_S, lengths, offsets)
    start = 0
    for L in lengths:
        assert got[start:start + L].tolist() == _brute_chain(b[start:start + L], T)
        start += L
    with pytest.raises(ValueError, match="within"):
        chain_decode(b, np.zeros((4, J, J)), lengths, (-2, -1, 1, 2))


def test_gpsl2_factors_are_the_chain_conditionals():
    """The derivation of :func:`gpsl.predict.chain_decode`: with ``g_{-1} = T`` and
    ``g_{+1} = T^T`` GPSL2's factor ``p(y_l | y_{l-1}, y_{l+1})`` (eq. 4, :func:`pl_factors`)
    is the conditional of the chain ``p(y) ~ exp(sum b + sum T)``, computed by enumeration."""
    from scipy.special import logsumexp

    from gpsl.predict import pl_factors

    rng = np.random.default_rng(4)
    L, J = 4, 3
    b, T = rng.normal(size=(L, J)), rng.normal(size=(J, J))
    phi = pl_factors(b, np.stack([T, T.T]), (-1, 1))
    ys = list(itertools.product(range(J), repeat=L))
    score = np.array([sum(b[t, y[t]] for t in range(L)) + sum(T[y[t - 1], y[t]]
                                                               for t in range(1, L))
                      for y in ys])
    for y in ys[::7]:
        for t in range(L):
            same = [i for i, z in enumerate(ys)
                    if all(z[k] == y[k] for k in range(L) if k != t)]
            cond = score[same] - logsumexp(score[same])
            own = [ys[i][t] for i in same].index(y[t])
            a = y[t - 1] if t > 0 else 0
            c = y[t + 1] if t < L - 1 else 0
            assert phi[t, a, y[t], c] == pytest.approx(cond[own], abs=1e-10)
