"""Cross-fitted taggers as the crowd posterior's prior (gpsl.crowd.crossfit): the chain's
posteriors against brute force, a fold's posteriors independent of its own labels, the
rounds' stop rule, observed labels kept, and the option on the command line."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from scipy.special import logsumexp

from gpsl import cli
from gpsl.crowd import CrowdGPSL, Votes
from gpsl.crowd.crossfit import chain_posteriors, crossfit_posteriors
from gpsl.crowd.joint import fit_soft
from gpsl.io import CrowdSentence
from gpsl.model import GPSL
from gpsl.predict import chain_transitions
from gpsl.synthetic import UNIGRAM_TEMPLATE
from tests.lib.test_crowd_priors import _write_crowd
from tests.lib.test_crowd_seq import BIO, sticky_crowd


def _brute(b, T):
    """Marginals and log Z of one chain by enumerating every labeling."""
    L, J = b.shape
    scores = {}
    for Y in itertools.product(range(J), repeat=L):
        scores[Y] = sum(b[t, y] for t, y in enumerate(Y)) + sum(
            T[Y[t - 1], Y[t]] for t in range(1, L))
    log_z = logsumexp(list(scores.values()))
    q = np.zeros((L, J))
    for Y, s in scores.items():
        q[np.arange(L), Y] += np.exp(s - log_z)
    return q, log_z


def test_chain_posteriors_equal_enumeration():
    rng = np.random.default_rng(0)
    lengths = np.array([3, 1, 4, 2])
    J = 3
    b = rng.normal(scale=2.0, size=(lengths.sum(), J))
    T = rng.normal(scale=2.0, size=(J, J))
    q, log_z = chain_posteriors(b, T, lengths)
    start = 0
    for s, L in enumerate(lengths):
        want_q, want_z = _brute(b[start:start + L], T)
        np.testing.assert_allclose(q[start:start + L], want_q, rtol=1e-10, atol=1e-12)
        assert log_z[s] == pytest.approx(want_z, rel=1e-12)
        start += L
    np.testing.assert_allclose(q.sum(axis=1), 1.0)


def _crowd(n_sent=36, seed=0):
    X, y, sents = sticky_crowd(n_sent=n_sent, seed=seed)
    votes = Votes.from_sentences([CrowdSentence(s.tokens, None, 1, None,
                                                annotations=s.annotations) for s in sents],
                                 classes=BIO)
    return X, y, votes


def _fit_tagger(k, *data):
    return fit_soft(GPSL(template=UNIGRAM_TEMPLATE, max_iter=30), *data)


def test_a_folds_posteriors_never_read_its_own_labels():
    """The tagger that reads fold k was trained on the other folds only: changing the soft
    labels of fold k's tokens leaves fold k's posteriors exactly as they were (no echo), and
    changes the other folds'."""
    X, _, votes = _crowd()
    rng = np.random.default_rng(1)
    r = rng.dirichlet(np.ones(len(BIO)), size=votes.n)
    keep = np.ones(votes.n, dtype=bool)
    ev = rng.normal(size=(votes.n, len(BIO)))
    q1, s1 = crossfit_posteriors(X, r, keep, votes, ev, _fit_tagger, folds=3)
    first = np.arange(int(np.sum(votes.lengths[:12])))  # fold 0: the first 12 sentences
    r2 = r.copy()
    r2[first] = rng.dirichlet(np.ones(len(BIO)), size=first.size)
    q2, s2 = crossfit_posteriors(X, r2, keep, votes, ev, _fit_tagger, folds=3)
    np.testing.assert_array_equal(q1[first], q2[first])
    assert not np.allclose(q1[first.size:], q2[first.size:])
    assert np.isfinite(s1) and s1 != s2


def test_without_votes_the_posterior_is_the_taggers_chain_and_scores_zero():
    X, _, votes = _crowd(n_sent=30)
    r = np.eye(len(BIO))[np.random.default_rng(2).integers(len(BIO), size=votes.n)]
    keep = np.ones(votes.n, dtype=bool)
    fitted = {}

    def fit_tagger(k, *data):
        fitted[k] = _fit_tagger(k, *data)
        return fitted[k]

    q, score = crossfit_posteriors(X, r, keep, votes, np.zeros((votes.n, len(BIO))),
                                   fit_tagger, folds=2)
    assert score == pytest.approx(0.0, abs=1e-9)
    half = int(np.sum(votes.lengths[:15]))
    m = fitted[0]  # fold 0 (the first 15 sentences) is read by a tagger of the other
    u, lens = m.local_scores(X[:15])
    want, _ = chain_posteriors(u, chain_transitions(m.state_.m_S, m.offsets_), lens)
    np.testing.assert_allclose(q[:half], want)


def test_the_rounds_stop_when_the_posteriors_settle_and_keep_observed_labels():
    X, y, sents = sticky_crowd(n_sent=45)
    for s, labs in zip(sents[:5], y[:5]):  # a lead adjudicated five sentences
        s.annotations["lead"] = list(labs)
    votes = Votes.from_sentences([CrowdSentence(s.tokens, None, 1, None,
                                                annotations=s.annotations) for s in sents],
                                 classes=BIO, trusted=["lead"])
    plain = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=20), refit=False,
                      crossfit=0).fit(X, votes)
    assert plain.crossfit_ is None
    joint = CrowdGPSL(GPSL(template=UNIGRAM_TEMPLATE, max_iter=20), refit=False,
                      crossfit=6).fit(X, votes)
    rounds = joint.crossfit_.rounds
    assert 1 <= len(rounds) <= 6
    # the same joint fit before the rounds
    np.testing.assert_array_equal(np.array(joint.joint_trace_), np.array(plain.joint_trace_))
    if len(rounds) < 6:
        assert rounds[-1]["moved"] < 2e-3 <= min(r["moved"] for r in rounds[:-1])
    obs = votes.observed >= 0
    np.testing.assert_array_equal(joint.probas_[obs].argmax(axis=1), votes.observed[obs])
    assert np.all(joint.probas_[obs].max(axis=1) == 1.0)
    truth = [BIO.index(v) for lab in y for v in lab]
    acc = lambda j: np.mean(np.array(truth) == j.probas_.argmax(axis=1))  # noqa: E731
    assert acc(joint) >= acc(plain) - 0.02  # looked at, never chosen by it


def test_the_command_line_option(tmp_path):
    _, _, sents = sticky_crowd(n_sent=24)
    path = _write_crowd(tmp_path / "crowd.jsonl", sents, False)
    rep = tmp_path / "r.json"
    assert cli.main(["aggregate", "--model", "joint", "--crossfit", "2", "--max-iter", "6",
                     "-q", "--labels", ",".join(BIO), str(path), "-o",
                     str(tmp_path / "o.txt"), "--report", str(rep)]) == 0
    rounds = json.loads(rep.read_text())["crossfit"]["rounds"]
    assert 1 <= len(rounds) <= 2 and all(np.isfinite(r["heldout_log_lik"]) for r in rounds)
    assert cli.main(["aggregate", "--model", "joint", "--crossfit", "-1", "-q",
                     str(path), "-o", str(tmp_path / "o2.txt")]) == 2
