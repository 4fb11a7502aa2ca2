r"""The sequential annotator model's priors ``(kappa, shrink)`` chosen by held-out votes.

The joint bound (J1, :mod:`gpsl.crowd`) cannot choose them: it keeps rising as ``shrink``
grows (each worker's confusion matrix pulled to their one-coin matrix, fewer effective
parameters, a smaller KL) while the inferred labels get worse (docs/real-crowd.md). The votes
can: leave a fold of them out, fit the joint model on the rest, and score the left-out votes
by the model's predictive probability. Nothing here reads a gold label: only the votes (and
trusted annotators' observed labels, which stay in every fit).

The fold: a random fifth (seed 0) of the (sentence, annotator) pairs, every vote of a pair
together, so each left-out vote's previous label ``p_v`` (the same annotator's vote on the
previous token) is left out with it and known when scoring. For a token ``t`` with left-out
votes ``v_1 .. v_k`` the predictive probability under the fit on the kept votes is

.. math::

   p(l_{v_1}, ..., l_{v_k} \mid \text{kept}) \approx
       \sum_y r_t(y) \prod_i \bar\pi_{a_{v_i}}[y, p_{v_i}, l_{v_i}]           \qquad (H)

with ``r_t`` the fit's posterior of the token's label (which saw only the kept votes) and
``pi-bar`` the posterior means of the annotators' rows (the sequential model's (A, J, J+1, J),
or the confusion model's (A, J, J) without ``p``). The score is the sum of ``log (H)`` over
the tokens with left-out votes; the rule takes the ``(kappa, shrink)`` of the grid with the
largest score (the first on a tie) and the joint fit on all votes then uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpsl.crowd.sequential import previous_labels
from gpsl.crowd.vote_matrix import Votes

__all__ = ["GRID", "PriorChoice", "choose_priors", "heldout_score", "split_votes"]

#: the ``(kappa, shrink)`` pairs the rule chooses from
GRID = ((3.0, 10.0), (30.0, 10.0), (3.0, 100.0), (30.0, 100.0), (3.0, 1000.0), (30.0, 1000.0))


@dataclass
class PriorChoice:
    """The rule's choice and every candidate's held-out score (nats)."""

    kappa: float
    shrink: float
    scores: list = field(default_factory=list)  # [(kappa, shrink, score)]
    heldout_votes: int = 0


def split_votes(votes: Votes, fold: int = 5, seed: int = 0) -> tuple[Votes, Votes]:
    """The kept and the left-out votes: every ``fold``-th (sentence, annotator) pair at
    random (``seed``) is left out whole. Both keep the token, annotator and class indices."""
    sent = np.repeat(np.arange(votes.lengths.size), votes.lengths)[votes.token]
    pair = sent * max(votes.A, 1) + votes.annotator
    uniq, inv = np.unique(pair, return_inverse=True)
    out = np.random.default_rng(seed).random(uniq.size) < 1.0 / fold
    held = out[inv]

    def part(mask, observed):
        return Votes(lengths=votes.lengths, token=votes.token[mask],
                     annotator=votes.annotator[mask], label=votes.label[mask],
                     annotators=list(votes.annotators), classes=list(votes.classes),
                     observed=observed)

    return part(~held, votes.observed), part(held, None)


def heldout_score(r: np.ndarray, crowd, held: Votes) -> float:
    """``sum_t log (H)`` over the tokens with left-out votes (nats)."""
    if held.token.size == 0:
        return 0.0
    pi = crowd.pi
    if pi.ndim == 4:  # sequential: [a, y, p, l]
        rows = pi[held.annotator, :, previous_labels(held), held.label]
    else:
        rows = pi[held.annotator, :, held.label]
    log_lik = held.token_sum(np.log(np.maximum(rows, 1e-300)))  # (n, J), 0 without votes
    tokens = np.unique(held.token)
    a = np.log(np.maximum(np.asarray(r)[tokens], 1e-300)) + log_lik[tokens]
    m = a.max(axis=1, keepdims=True)
    return float(np.sum(m.ravel() + np.log(np.exp(a - m).sum(axis=1))))


def choose_priors(X, votes: Votes, make_joint, grid=GRID, fold: int = 5,
                  seed: int = 0) -> PriorChoice:
    """The ``(kappa, shrink)`` of ``grid`` whose joint fit on the kept votes gives the left-out
    votes the largest score. ``make_joint(kappa, shrink)`` returns an unfitted
    :class:`gpsl.crowd.CrowdGPSL` (or any model with ``fit(X, votes)``, ``probas_`` and
    ``crowd_``)."""
    kept, held = split_votes(votes, fold, seed)
    scores = []
    for kappa, shrink in grid:
        joint = make_joint(kappa, shrink).fit(X, kept)
        scores.append((float(kappa), float(shrink), heldout_score(joint.probas_, joint.crowd_,
                                                                  held)))
    best = max(range(len(scores)), key=lambda i: (scores[i][2], -i))
    return PriorChoice(scores[best][0], scores[best][1], scores, int(held.token.size))
