"""The sequential model's pooled target (eq. P3 and G of gpsl.crowd.sequential): the crowd's
matrix is the block maximum, the M-step and the joint fit never lower the bound."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import gammaln

from gpsl.crowd import CrowdGPSL, Votes
from gpsl.crowd.confusion import beta_matrix
from gpsl.crowd.sequential import (
    SequentialModel,
    previous_labels,
    sequential_counts,
    sequential_m_step,
    update_pooled,
)
from gpsl.io import CrowdSentence
from gpsl.model import GPSL
from gpsl.synthetic import UNIGRAM_TEMPLATE
from tests.lib.test_crowd_seq import BIO, annotator_terms, random_votes, sticky_crowd


def objective_g(g, log_c, shrink, beta):
    """``log Dir(g[y]; beta_y) + sum_a log Dir(c_a[y]; 1 + shrink g[y])`` summed over ``y``,
    written out in full (eq. G with its constants)."""
    a = 1.0 + shrink * g
    lp = (gammaln(a.sum(axis=1)) - gammaln(a).sum(axis=1))[None] \
        + ((a - 1.0)[None] * log_c).sum(axis=2)
    prior = gammaln(beta.sum(axis=1)) - gammaln(beta).sum(axis=1) \
        + ((beta - 1.0) * np.log(g)).sum(axis=1)
    return float(lp.sum() + prior.sum())


@pytest.mark.parametrize("shrink", [0.5, 10.0, 300.0])
def test_the_pooled_matrix_is_the_block_maximum(shrink):
    rng = np.random.default_rng(0)
    A, J = 6, 4
    c = rng.dirichlet(np.full(J, 0.7), size=(A, J))
    g = update_pooled(np.log(c), shrink)
    np.testing.assert_allclose(g.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(g > 0)
    beta = beta_matrix(J, 2.0, 0.1)
    best = objective_g(g, np.log(c), shrink, beta)
    for _ in range(300):
        h = g * np.exp(rng.normal(scale=rng.choice([0.01, 0.3]), size=g.shape))
        h /= h.sum(axis=1, keepdims=True)
        assert objective_g(h, np.log(c), shrink, beta) <= best + 1e-9
    # from a start, a row is never made worse
    g2 = update_pooled(np.log(c), shrink, g0=g)
    assert objective_g(g2, np.log(c), shrink, beta) >= best - 1e-9


def test_pooled_m_step_never_lowers_the_bound_and_its_blocks_are_optimal():
    votes, r = random_votes(3)
    prev = previous_labels(votes)
    m = sequential_m_step(votes, r, prev, kappa=5.0, shrink=10.0, inner=1, target="pooled")
    assert m.target == "pooled" and m.pooled.shape == (votes.J, votes.J)
    vals = [annotator_terms(m, votes, r, prev)]
    for _ in range(4):
        m = sequential_m_step(votes, r, prev, kappa=5.0, shrink=10.0, centre=m.centre,
                              inner=1, target="pooled", pooled=m.pooled)
        vals.append(annotator_terms(m, votes, r, prev))
    assert np.all(np.diff(vals) >= -1e-9 * abs(vals[0])), np.diff(vals)
    best = annotator_terms(m, votes, r, prev)
    rng = np.random.default_rng(1)
    N = sequential_counts(votes, r, prev)
    for _ in range(20):  # the crowd's matrix and the centres: no perturbation does better
        g = m.pooled * np.exp(rng.normal(scale=0.1, size=m.pooled.shape))
        g /= g.sum(axis=1, keepdims=True)
        c = m.centre * np.exp(rng.normal(scale=0.1, size=m.centre.shape))
        c /= c.sum(axis=2, keepdims=True)
        for gg, cc in ((g, m.centre), (m.pooled, c)):
            pert = SequentialModel(alpha=N + m.kappa * cc[:, :, None, :], centre=cc,
                                   kappa=m.kappa, prior_diag=m.prior_diag,
                                   prior_off=m.prior_off, shrink=m.shrink, skill_=m.skill_,
                                   pooled=gg)
            assert annotator_terms(pert, votes, r, prev) <= best + 1e-8


def test_the_joint_bound_with_the_pooled_target_never_decreases():
    X, y, sents = sticky_crowd()
    votes = Votes.from_sentences([CrowdSentence(s.tokens, None, 1, None,
                                                annotations=s.annotations) for s in sents],
                                 classes=BIO)
    joint = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=30),
                      centre_target="pooled").fit(X, votes)
    jt = np.array(joint.joint_trace_)
    assert jt.size >= 4
    assert np.all(np.diff(jt) >= -1e-9 * np.abs(jt).max()), np.diff(jt).min()
    assert joint.crowd_.target == "pooled"
    truth = np.array([v for lab in y for v in lab])
    assert np.mean(np.array(joint.labels_array_) == truth) > 0.9


def test_the_pooled_target_is_checked():
    votes, r = random_votes(4)
    with pytest.raises(ValueError, match="target"):
        sequential_m_step(votes, r, previous_labels(votes), target="crowd")
    with pytest.raises(ValueError, match="centre_target"):
        CrowdGPSL(centre_target="crowd").fit([[("a",)]], votes)
