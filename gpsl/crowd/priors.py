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

A choice on the grid's edge is not yet a choice: the score may keep rising past it (on the
CoNLL crowd the fixed grid's best was its corner ``kappa = 3, shrink = 10``). Both rules here
therefore extend their grid past an edge the best candidate sits on (:func:`edge_steps`), at
the grid's own spacing along that axis, and score the new candidates; they stop when a round
finds no better one, when the step would leave the parameter's range, or after
:data:`EDGE_ROUNDS` rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpsl import params
from gpsl.crowd.sequential import previous_labels
from gpsl.crowd.vote_matrix import Votes

__all__ = ["EDGE_ROUNDS", "GRID", "REFIT_FACTORS", "PriorChoice", "RefitChoice", "choose_priors",
           "choose_refit_variance", "edge_steps", "heldout_score", "sentence_folds", "split_votes",
           "tagger_heldout_score"]

#: the ``(kappa, shrink)`` pairs the rule chooses from
GRID = ((3.0, 10.0), (30.0, 10.0), (3.0, 100.0), (30.0, 100.0), (3.0, 1000.0), (30.0, 1000.0))
#: the most rounds of candidates past the grid's edges (:func:`edge_steps`)
EDGE_ROUNDS = 3


def _spacing(values) -> float | None:
    """The smallest ratio between adjacent distinct positive values of one axis (``None``
    for an axis with one value: no spacing to step by)."""
    v = np.unique(np.asarray([x for x in values if x > 0], dtype=float))
    return float(np.min(v[1:] / v[:-1])) if v.size > 1 else None


def edge_steps(best: tuple, tried, spacing, allowed) -> list[tuple]:
    """The candidates one step past the edges of the ``tried`` points that ``best`` sits on.

    Along each axis ``d`` where ``best[d]`` is the smallest (largest) value tried, the point
    with ``best[d]`` divided (multiplied) by ``spacing[d]``, if ``allowed[d]`` accepts that
    value and the point was not tried. An axis with ``spacing[d] = None`` is not
    stepped along. ``best`` inside the tried range on every axis: no step.
    """
    tried = [tuple(float(x) for x in t) for t in tried]
    out = []
    for d, r in enumerate(spacing):
        if r is None:
            continue
        vals = [t[d] for t in tried]
        for edge, factor in ((min(vals), 1.0 / r), (max(vals), r)):
            if best[d] != edge:
                continue
            v = float(f"{best[d] * factor:.12g}")  # 3 / 10 is 0.3, not 0.30000000000000004
            q = tuple(best[:d]) + (v,) + tuple(best[d + 1:])
            if allowed[d](v) and q not in tried and q not in out:
                out.append(q)
    return out


def _allowed(name: str):
    """The predicate ``v -> bool``: whether :mod:`gpsl.params` allows parameter ``name`` the
    value ``v``."""
    return params.param(name).accepts


def _walk(grid, score, spacing, allowed, rounds: int) -> tuple[list, int]:
    """Both rules' search: every point of ``grid`` scored by ``score(point)``, then up to
    ``rounds`` rounds of :func:`edge_steps` past the edges the best point sits on, until a
    round finds no better point. Returns ``[(point, score)]`` in the order scored and the
    index of the best (the first on a tie)."""
    scored = []

    def run(points):
        for pt in points:
            pt = tuple(float(x) for x in pt)
            scored.append((pt, float(score(pt))))

    def best():
        return max(range(len(scored)), key=lambda i: (scored[i][1], -i))

    run(grid)
    for _ in range(rounds):
        before = best()
        steps = edge_steps(scored[before][0], [pt for pt, _ in scored], spacing, allowed)
        if not steps:
            break
        run(steps)
        if best() == before:
            break
    return scored, best()


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
                  seed: int = 0, edge_rounds: int = EDGE_ROUNDS) -> PriorChoice:
    """The ``(kappa, shrink)`` of ``grid``, extended past the edge the best sits on
    (:func:`edge_steps`, up to ``edge_rounds`` rounds), whose joint fit on the kept votes gives
    the left-out votes the largest score. ``make_joint(kappa, shrink)`` returns an unfitted
    :class:`gpsl.crowd.CrowdGPSL` (or any model with ``fit(X, votes)``, ``probas_`` and
    ``crowd_``). ``scores`` lists every candidate in the order scored."""
    kept, held = split_votes(votes, fold, seed)

    def score(point):
        joint = make_joint(*point).fit(X, kept)
        return heldout_score(joint.probas_, joint.crowd_, held)

    scored, b = _walk(grid, score, (_spacing([k for k, _ in grid]),
                                    _spacing([s for _, s in grid])),
                      (_allowed("kappa"), _allowed("shrink")), edge_rounds)
    scores = [(k, s, v) for (k, s), v in scored]
    return PriorChoice(scores[b][0], scores[b][1], scores, int(held.token.size))


# --------------------------------------------------------------------------- the refit's prior

#: the refit tagger's prior variance as factors of ``model``'s own (``GPSL.start_variance``)
REFIT_FACTORS = (1.0, 0.25, 0.0625)


@dataclass
class RefitChoice:
    """The refit rule's choice of the tagger's prior variance, and every candidate's score
    (the held-out documents' votes, nats, summed over the folds)."""

    variance: float
    scores: list = field(default_factory=list)  # [(variance, score)]
    folds: int = 0


def sentence_folds(n_sentences: int, folds: int) -> list[np.ndarray]:
    """``folds`` contiguous blocks of sentence indices (a file's documents are contiguous,
    so a block holds whole documents but the two at its ends)."""
    return [b for b in np.array_split(np.arange(n_sentences), folds) if b.size]


def _vote_subset(votes: Votes, sents: np.ndarray) -> tuple[Votes, np.ndarray]:
    """The votes of the sentences ``sents`` with their own token indices, and the global
    token index of each of their tokens."""
    starts = np.cumsum(votes.lengths) - votes.lengths
    tok = np.concatenate([np.arange(starts[i], starts[i] + votes.lengths[i]) for i in sents]
                         ) if len(sents) else np.zeros(0, dtype=np.int64)
    local = np.full(votes.n, -1, dtype=np.int64)
    local[tok] = np.arange(tok.size)
    m = local[votes.token] >= 0
    obs = None if votes.observed is None else np.asarray(votes.observed)[tok]
    sub = Votes(lengths=np.asarray(votes.lengths)[sents], token=local[votes.token[m]],
                annotator=votes.annotator[m], label=votes.label[m],
                annotators=list(votes.annotators), classes=list(votes.classes), observed=obs)
    return sub, tok


def tagger_heldout_score(marginals: np.ndarray, crowd, votes: Votes) -> float:
    r"""The votes of sentences a tagger did not train on, predicted through the annotator
    model: ``sum_t log sum_y p(y_t | x) prod_v pi_a[y, p_v, l_v]`` (eq. H with the tagger's
    marginals ``p(y_t | x)`` (n, J) in place of ``r_t``)."""
    held = Votes(lengths=votes.lengths, token=votes.token, annotator=votes.annotator,
                 label=votes.label, annotators=list(votes.annotators),
                 classes=list(votes.classes), observed=None)
    return heldout_score(marginals, crowd, held)


def choose_refit_variance(X, q: np.ndarray, keep: np.ndarray, votes: Votes, crowd,
                          fit_tagger, variances, folds: int = 3,
                          edge_rounds: int = EDGE_ROUNDS) -> RefitChoice:
    r"""The refit tagger's prior variance by held-out votes (cross-validation folds of the
    training sentences; no gold read).

    For each fold ``k`` (:func:`sentence_folds`) and candidate variance ``v``, the tagger
    ``fit_tagger(v, X, q, keep, classes, split)`` is fitted on the other folds' soft labels
    ``q`` (the caller's refit, :func:`gpsl.crowd.joint.fit_soft` at variance ``v``: passed in,
    so this module does not import the joint model that calls it) and predicts the marginals
    of fold ``k``'s sentences, which it never saw; their votes are scored through the fitted
    annotator model ``crowd`` (:func:`tagger_heldout_score`): how well a tagger predicts what
    the crowd says about new text. ``crowd`` and ``q`` come from the joint fit on all votes
    and are the same for every candidate, so the candidates differ only in the tagger. The
    variance with the largest total is the choice (the first on a tie); a choice at the
    smallest or largest candidate extends the candidates past it at their own spacing
    (:func:`edge_steps`, up to ``edge_rounds`` rounds). With fewer than two
    folds, or a fold without a kept token to train on or a vote to score, the rule does not
    run: the first candidate, with no scores."""

    n_s = len(X)
    lengths = np.asarray(votes.lengths)
    starts = np.cumsum(lengths) - lengths
    classes = list(votes.classes)
    blocks = sentence_folds(n_s, folds)
    per_sent = np.add.reduceat(np.asarray(keep, dtype=np.int64), starts) if n_s else []
    held_votes = np.bincount(np.repeat(np.arange(n_s), lengths)[votes.token], minlength=n_s)
    if (len(blocks) < 2 or any(per_sent[np.setdiff1d(np.arange(n_s), b)].sum() == 0
                               or held_votes[b].sum() == 0 for b in blocks)):
        # too few sentences, or a fold with nothing to train on or to score: the first
        # candidate (the model's own variance), unscored
        return RefitChoice(float(variances[0]), [], 0)

    def score(point):
        v, total = point[0], 0.0
        for block in blocks:
            train = np.setdiff1d(np.arange(n_s), block)
            tok = np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in train])
            cuts = np.cumsum(lengths[train])[:-1]

            def split(flat, cuts=cuts):
                return np.split(np.asarray(flat), cuts)

            tagger = fit_tagger(v, [X[i] for i in train], q[tok], keep[tok], classes, split)
            sub, _ = _vote_subset(votes, block)
            marg = tagger.predict_marginals([X[i] for i in block])
            marg = np.concatenate([np.asarray(m) for m in marg]) if len(marg) else \
                np.zeros((0, len(classes)))
            total += tagger_heldout_score(marg, crowd, sub)
        return total

    scored, b = _walk([(v,) for v in variances], score, (_spacing(variances),),
                      (_allowed("variance"),), edge_rounds)
    scores = [(v, sc) for (v,), sc in scored]
    return RefitChoice(scores[b][0], scores, len(blocks))
