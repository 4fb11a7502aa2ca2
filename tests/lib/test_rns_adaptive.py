"""The adaptive schedule of Algorithm 2 (gpsl.rns_sweeps) against the reference Jacobi code
(gpsl.predict._rns_jacobi, ``schedule="jacobi"``): same paths, same fixed points, same labels."""

import numpy as np
import pytest

from gpsl.predict import rns, viterbi
from gpsl.rns_sweeps import sweep_sentences


def _problem(seed, J=4, lengths=(1, 6, 11, 3, 17, 2), strength=2.5, R=2):
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths)
    b = rng.normal(size=(lengths.sum(), J)) * 2
    g = rng.normal(size=(R, J, J)) * strength
    return b, g, lengths


def _update(P, b, g, lengths, offsets):
    """One undamped pass of Algorithm 2 written token by token (eq. rns)."""
    out = np.empty_like(P)
    start = 0
    for L in lengths:
        for i in range(L):
            a = b[start + i].copy()
            for d, off in enumerate(offsets):
                if 0 <= i + off < L:
                    a += P[start + i + off] @ g[d]
            e = np.exp(a - a.max())
            out[start + i] = e / e.sum()
        start += L
    return out


def _two_cycle():
    """Two tokens pulled apart locally and strongly coupled to agree: undamped Jacobi swaps
    their beliefs every pass, forever."""
    b = np.array([[0.3, 0.0], [0.0, 0.3]])
    g = np.stack([4.0 * np.eye(2), 4.0 * np.eye(2)])
    return b, g, np.array([2])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("offsets", [(-1, 1), (-2, -1, 1, 2), (-1,)])
def test_damped_sweeps_follow_the_reference_path(seed, offsets):
    """sweep_sentences is the reference Jacobi iteration (damped or not) rearranged: the same
    marginals to rounding and the same pass count, with and without clamped labels."""
    b, g, lengths = _problem(seed, R=len(offsets))
    clamp = np.full(b.shape[0], -1)
    clamp[[3, 9, 20]] = [1, 0, 3]
    from scipy.special import softmax

    for eta in (0.5, 1.0):
        for cl in (None, clamp):
            P_ref, it_ref = rns(b, g, lengths, offsets, tol=1e-6, max_iter=200, damping=eta,
                                clamp=cl, schedule="jacobi")
            P0 = softmax(b, axis=1)
            if cl is not None:
                P0[cl >= 0] = np.eye(b.shape[1])[cl[cl >= 0]]
            P, passes, conv = sweep_sentences(P0, b, g, lengths, offsets, tol=1e-6,
                                              max_iter=200, eta=eta, clamp=cl)
            np.testing.assert_allclose(P, P_ref, rtol=0, atol=1e-12)
            assert passes.max() == it_ref


@pytest.mark.parametrize("seed", range(8))
def test_adaptive_reaches_the_reference_fixed_point_and_labels(seed):
    """Random problems, from weak couplings to ones where undamped Jacobi two-cycles (seeds 2,
    4, 6, 7): on every sentence where the reference (damped Jacobi) converges, the adaptive
    schedule converges too, to the same marginals within 1e-6 (a tight stop rule: both at the
    fixed point) and the same argmax labels."""
    from scipy.special import softmax

    b, g, lengths = _problem(seed, strength=1.0 + seed * 0.5)
    kw = {"tol": 1e-11, "max_iter": 5000}
    _, _, undamped = sweep_sentences(softmax(b, axis=1), b, g, lengths, (-1, 1), eta=1.0, **kw)
    _, _, ref_conv = sweep_sentences(softmax(b, axis=1), b, g, lengths, (-1, 1), eta=0.5, **kw)
    P_ref, _ = rns(b, g, lengths, (-1, 1), damping=0.5, schedule="jacobi", **kw)
    P, passes, conv = rns(b, g, lengths, (-1, 1), damping=0.5, schedule="adaptive",
                          per_sentence=True, **kw)
    if seed in (2, 4, 6, 7):
        assert not undamped.all()  # the cases the adaptive schedule is for
    assert ref_conv.any() and conv[ref_conv].all()
    tok = np.repeat(ref_conv, lengths)
    np.testing.assert_allclose(P[tok], P_ref[tok], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(P[tok].argmax(axis=1), P_ref[tok].argmax(axis=1))
    # a fixed point of Algorithm 2 itself
    np.testing.assert_allclose(_update(P, b, g, lengths, (-1, 1))[tok], P[tok], atol=1e-8)


def test_adaptive_at_the_default_tolerance_stays_within_the_stop_rule():
    b, g, lengths = _problem(11, strength=1.5)
    P_ref, _ = rns(b, g, lengths, (-1, 1), damping=0.5, schedule="jacobi")
    P, _ = rns(b, g, lengths, (-1, 1), damping=0.5, schedule="adaptive")
    assert np.abs(P - P_ref).max() < 1e-2  # both within a few tol / (1 - rate) of one point
    np.testing.assert_array_equal(P.argmax(axis=1), P_ref.argmax(axis=1))
    assert np.abs(_update(P, b, g, lengths, (-1, 1)) - P).max() < 1e-3


def test_adaptive_converges_where_undamped_jacobi_two_cycles():
    b, g, lengths = _two_cycle()
    P1, it1 = rns(b, g, lengths, (-1, 1), schedule="jacobi", damping=1.0, max_iter=100)
    assert it1 == 100  # the old undamped schedule never meets the stop rule
    assert np.abs(_update(P1, b, g, lengths, (-1, 1)) - P1).max() > 0.5
    P, passes, conv = rns(b, g, lengths, (-1, 1), schedule="adaptive", damping=0.5,
                          tol=1e-10, max_iter=100, per_sentence=True)
    assert conv.all() and passes[0] < 100
    np.testing.assert_allclose(_update(P, b, g, lengths, (-1, 1)), P, atol=1e-8)
    # the restart follows the damped reference exactly
    P_ref, _ = rns(b, g, lengths, (-1, 1), schedule="jacobi", damping=0.5, tol=1e-10,
                   max_iter=100)
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=1e-12)


def test_adaptive_takes_fewer_passes_than_the_damped_schedule_on_easy_sentences():
    b, g, lengths = _problem(3, strength=0.5)
    _, p_new, _ = rns(b, g, lengths, (-1, 1), damping=0.5, schedule="adaptive",
                      per_sentence=True)
    P, p_old, _ = sweep_sentences(np.full_like(b, 1.0 / b.shape[1]), b, g, lengths, (-1, 1),
                                  tol=1e-4, max_iter=100, eta=0.5)
    assert np.median(p_new) < np.median(p_old)


def test_probit_scores_follow_the_reference():
    b, g, lengths = _problem(5, strength=1.0)
    rng = np.random.default_rng(0)
    bv, gv = rng.random(b.shape), rng.random(g.shape)
    kw = {"tol": 1e-11, "max_iter": 3000, "damping": 0.5, "b_var": bv, "g_var": gv}
    P_ref, _ = rns(b, g, lengths, (-1, 1), schedule="jacobi", **kw)
    P, _ = rns(b, g, lengths, (-1, 1), schedule="adaptive", **kw)
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=1e-6)


def test_the_adaptive_labels_equal_viterbi_on_a_chain_without_ties():
    """GPSL1 with weak couplings: Algorithm 2's argmax and Viterbi agree on each token where
    the reference's do (the new path changes neither)."""
    b, g, lengths = _problem(2, strength=0.2, R=1)
    P_ref, _ = rns(b, g, lengths, (-1,), schedule="jacobi", damping=0.5, tol=1e-10,
                   max_iter=1000)
    P, _ = rns(b, g, lengths, (-1,), schedule="adaptive", damping=0.5, tol=1e-10,
               max_iter=1000)
    vit = viterbi(b, g, lengths, (-1,))
    agree_ref = P_ref.argmax(axis=1) == vit
    np.testing.assert_array_equal(P.argmax(axis=1) == vit, agree_ref)


def test_adaptive_handles_empty_sentences_and_no_dependencies():
    b, g, _ = _problem(1)
    lengths = np.array([0, 5, 0, b.shape[0] - 5])
    P, passes, conv = rns(b, g, lengths, (-1, 1), damping=0.5, schedule="adaptive",
                          per_sentence=True)
    assert passes[0] == 0 and passes[2] == 0 and conv.all()
    P_ref, _ = rns(b, g, lengths, (-1, 1), damping=0.5, schedule="jacobi")
    assert np.abs(P - P_ref).max() < 1e-2
    P0, it = rns(b, g[:0], lengths, (), schedule="adaptive")
    assert it == 0 and np.allclose(P0.sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="adaptive"):
        rns(b, g, lengths, (-1, 1), schedule="jacobi", per_sentence=True)


def _slow_problem(seed):
    """Random chains where a sentence's damped passes creep along a mode that shrinks by a
    few percent a pass (seeds 8, 16, 40, 55: the damped reference hits its 100-pass cap)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 20, size=8)
    J = int(rng.integers(2, 6))
    b = rng.normal(size=(lengths.sum(), J)) * 1.5
    g = rng.normal(size=(2, J, J)) * rng.choice([1.0, 1.5, 2.0, 2.5])
    return b, g, lengths


@pytest.mark.parametrize("seed", [8, 16, 40, 55])
def test_extrapolated_damped_passes_reach_the_same_fixed_point_sooner(seed):
    from scipy.special import softmax

    b, g, lengths = _slow_problem(seed)
    P0 = softmax(b, axis=1)
    tight = {"tol": 1e-12, "max_iter": 20000, "eta": 0.5}
    P_ref, p_ref, c_ref = sweep_sentences(P0, b, g, lengths, (-1, 1), **tight)
    P, p, c = sweep_sentences(P0, b, g, lengths, (-1, 1), extrapolate=True, **tight)
    assert c_ref.all() and c.all() and p.sum() < 0.8 * p_ref.sum()
    np.testing.assert_allclose(P, P_ref, rtol=0, atol=1e-9)  # one fixed point
    # at the default stop rule: no sentence at the cap, and nearer the fixed point
    _, p_cap, c_cap = sweep_sentences(P0, b, g, lengths, (-1, 1), tol=1e-4, max_iter=100,
                                      eta=0.5)
    Pd, pd, cd = sweep_sentences(P0, b, g, lengths, (-1, 1), tol=1e-4, max_iter=100, eta=0.5,
                                 extrapolate=True)
    assert not c_cap.all() and cd.all() and pd.max() < 100
    P_old, _, _ = sweep_sentences(P0, b, g, lengths, (-1, 1), tol=1e-4, max_iter=100, eta=0.5)
    assert np.abs(Pd - P_ref).max() <= np.abs(P_old - P_ref).max()
    assert Pd.min() >= 0.0 and np.allclose(Pd.sum(axis=1), 1.0)
    np.testing.assert_array_equal(Pd.argmax(axis=1), P_ref.argmax(axis=1))


def test_extrapolation_leaves_oscillating_passes_alone():
    """A two-cycle (every step the negative of the one before) is no slow mode: the undamped
    passes with extrapolation are the passes without it."""
    from scipy.special import softmax

    b, g, lengths = _two_cycle()
    kw = {"tol": 1e-10, "max_iter": 60, "eta": 1.0}
    P_ref, p_ref, _ = sweep_sentences(softmax(b, axis=1), b, g, lengths, (-1, 1), **kw)
    P, p, _ = sweep_sentences(softmax(b, axis=1), b, g, lengths, (-1, 1), extrapolate=True,
                              **kw)
    np.testing.assert_array_equal(P, P_ref)
    assert p_ref[0] == p[0] == 60


def test_adaptive_schedule_meets_the_stop_rule_where_the_damped_passes_hit_the_cap():
    b, g, lengths = _slow_problem(16)
    _, p_old, c_old = rns(b, g, lengths, (-1, 1), damping=0.5, schedule="adaptive",
                          per_sentence=True, extrapolate=False)
    P, p, c = rns(b, g, lengths, (-1, 1), damping=0.5, schedule="adaptive", per_sentence=True)
    assert not c_old.all() and c.all() and p.max() < p_old.max()
    assert np.abs(_update(P, b, g, lengths, (-1, 1)) - P).max() < 1e-3


@pytest.mark.parametrize("seed", [8, 16, 40, 55])
def test_a_sentences_extrapolated_passes_do_not_depend_on_its_batch(seed):
    """With extrapolation, a sentence's passes are its own: tagged alone or beside sentences
    that finish earlier (and leave the layout), the same passes and the same RNS, exactly.
    (The extrapolation's history was reset for every sentence when finished ones left the
    layout, so a slow sentence's jumps came at other passes in another batch.)"""
    from scipy.special import softmax

    b, g, lengths = _slow_problem(seed)
    P0 = softmax(b, axis=1)
    kw = {"tol": 1e-4, "max_iter": 100, "eta": 0.5, "extrapolate": True}
    P, passes, conv = sweep_sentences(P0, b, g, lengths, (-1, 1), **kw)
    assert len(set(passes.tolist())) > 1  # sentences finish at different passes
    starts = np.cumsum(lengths) - lengths
    for i, (s, L) in enumerate(zip(starts, lengths)):
        Pi, pi, ci = sweep_sentences(P0[s:s + L], b[s:s + L], g, lengths[i:i + 1], (-1, 1),
                                     **kw)
        assert pi[0] == passes[i] and ci[0] == conv[i]
        np.testing.assert_allclose(Pi, P[s:s + L], rtol=0, atol=1e-13)
