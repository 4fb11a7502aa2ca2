"""The refit on soft labels (gpsl.crowd.joint.fit_soft): its bound never decreases, and
one-hot soft labels give the hard-label fit exactly."""

from __future__ import annotations

import numpy as np
import pytest

from gpsl.crowd import CrowdGPSL, Votes
from gpsl.crowd.joint import fit_soft
from gpsl.io import CrowdSentence
from gpsl.model import GPSL
from gpsl.synthetic import UNIGRAM_TEMPLATE
from tests.lib.test_crowd_seq import BIO, sticky_crowd


def flat_split(X):
    cuts = np.cumsum([len(x) for x in X])[:-1]
    return lambda a: np.split(np.asarray(a), cuts)


def test_one_hot_soft_labels_are_the_hard_label_fit_exactly():
    X, y, _ = sticky_crowd(n_sent=25)
    flat = [BIO.index(v) for lab in y for v in lab]
    q = np.eye(len(BIO))[flat]
    hard = GPSL(template=UNIGRAM_TEMPLATE, max_iter=20).fit(X, y, classes=BIO)
    soft = fit_soft(GPSL(template=UNIGRAM_TEMPLATE, max_iter=20), X, q,
                    np.ones(len(flat), dtype=bool), BIO, flat_split(X))
    assert soft.n_iter_ == hard.n_iter_
    np.testing.assert_allclose(soft.bound_trace_, hard.bound_trace_, rtol=1e-12)
    # the derivation's claim itself: one-hot evidence (-inf elsewhere) on missing labels is
    # the hard-label fit (entry 0 is the bound before the first sweep, r uniform against
    # -inf evidence)
    with np.errstate(divide="ignore"):
        ev = flat_split(X)(np.log(q))
    missing = GPSL(template=UNIGRAM_TEMPLATE, max_iter=20).fit(
        X, [[None] * len(x) for x in X], classes=BIO, evidence=ev)
    assert missing.n_iter_ == hard.n_iter_
    np.testing.assert_allclose(missing.bound_trace_[1:], hard.bound_trace_[1:], rtol=1e-10)
    for a, b, c in zip(soft.predict_marginals(X), hard.predict_marginals(X),
                       missing.predict_marginals(X)):
        np.testing.assert_allclose(a, b, atol=1e-12)
        np.testing.assert_allclose(c, b, atol=1e-10)


def test_the_soft_label_fits_bound_never_decreases_and_uses_the_distribution():
    X, y, _ = sticky_crowd(n_sent=25, seed=1)
    rng = np.random.default_rng(0)
    flat = [BIO.index(v) for lab in y for v in lab]
    q = 0.6 * np.eye(len(BIO))[flat] + 0.4 * rng.dirichlet(np.ones(len(BIO)), size=len(flat))
    soft = fit_soft(GPSL(template=UNIGRAM_TEMPLATE, max_iter=30), X, q,
                    np.ones(len(flat), dtype=bool), BIO, flat_split(X))
    bt = np.array(soft.bound_trace_[1:])
    assert bt.size >= 3
    assert np.all(np.diff(bt) >= -1e-9 * np.abs(bt).max()), np.diff(bt).min()
    hard = GPSL(template=UNIGRAM_TEMPLATE, max_iter=30).fit(X, y, classes=BIO)
    pa, pb = soft.predict_marginals(X[:3]), hard.predict_marginals(X[:3])
    assert max(np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in zip(pa, pb)) > 1e-3
    # the soft labels' posteriors keep the argmax of q where q is confident
    r = np.asarray(soft.state_.r)
    sure = q.max(axis=1) > 0.75
    assert np.mean(r[sure].argmax(axis=1) == q[sure].argmax(axis=1)) > 0.95


def test_crowd_gpsl_refits_on_the_posteriors():
    X, _, sents = sticky_crowd(n_sent=20)
    noisy = [{k: v for k, v in s.annotations.items() if k in ("s1", "lazy")} for s in sents]
    votes = Votes.from_sentences([CrowdSentence(s.tokens, None, 1, None, annotations=a)
                                  for s, a in zip(sents, noisy)], classes=BIO)
    joint = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=15),
                      refit_on="posterior", refit_prior="model").fit(X, votes)
    soft = int(np.sum(joint.probas_.max(axis=1) < 1.0))
    assert joint.model_ is not joint.joint_model_ and joint.model_.n_missing_ == soft
    again = fit_soft(GPSL(template=UNIGRAM_TEMPLATE, max_iter=15), X, joint.probas_,
                     votes.voted(), BIO, votes.split)
    np.testing.assert_array_equal(np.concatenate(joint.predict_marginals(X[:5])),
                                  np.concatenate(again.predict_marginals(X[:5])))
    with pytest.raises(ValueError, match="refit_on"):
        CrowdGPSL(refit_on="mode").fit(X, votes)


def test_a_fit_takes_over_the_features_of_a_fit_on_the_same_sentences():
    """``GPSL.fit(features=other)``: the joint fit's extractor and matrix are the ones the
    tagger's own extraction gives (same vocabulary, same matrix), so the tagger's fit is the
    same to the last bit; any difference in sentences, template or ``min_freq`` extracts
    anew."""
    X, y, sents = sticky_crowd(n_sent=20, seed=2)
    votes = Votes.from_sentences(sents, classes=BIO)
    joint = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=10)).fit(X, votes)
    shared = joint.joint_model_
    assert joint.model_.extractor_ is shared.extractor_  # the refit took them over
    assert joint.model_.X_train_ is shared.X_train_
    fresh = GPSL(template=UNIGRAM_TEMPLATE, max_iter=10).fit(X, y, classes=BIO)
    assert fresh.extractor_.feature_names_ == shared.extractor_.feature_names_
    assert (fresh.X_train_ != shared.X_train_).nnz == 0
    assert fresh.X_train_.shape == shared.X_train_.shape
    taken = GPSL(template=UNIGRAM_TEMPLATE, max_iter=10).fit(X, y, classes=BIO,
                                                             features=shared)
    assert taken.extractor_ is shared.extractor_
    assert taken.bound_trace_ == fresh.bound_trace_
    for a, b in zip(taken.predict_marginals(X), fresh.predict_marginals(X)):
        np.testing.assert_array_equal(a, b)
    # not the same extraction: the fit's own
    others = [
        (GPSL(template=UNIGRAM_TEMPLATE, max_iter=3), X[:-1], y[:-1]),  # other sentences
        (GPSL(template=UNIGRAM_TEMPLATE, max_iter=3), X[::-1], y[::-1]),  # other order
        (GPSL(template=UNIGRAM_TEMPLATE, max_iter=3, min_freq=2), X, y),
        (GPSL(max_iter=3), X, y),  # the default template
    ]
    for model, Xo, yo in others:
        model.fit(Xo, yo, classes=BIO, features=shared)
        assert model.extractor_ is not shared.extractor_
        own = GPSL(**model.get_params()).fit(Xo, yo, classes=BIO)
        assert model.extractor_.feature_names_ == own.extractor_.feature_names_
    unfitted = GPSL(template=UNIGRAM_TEMPLATE, max_iter=3)
    assert GPSL(template=UNIGRAM_TEMPLATE, max_iter=3).fit(
        X, y, classes=BIO, features=unfitted).extractor_ is not shared.extractor_
