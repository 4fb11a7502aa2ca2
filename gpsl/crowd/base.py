"""What every aggregator shares: the crowd-kit-like surface, annotator accuracy (eq. A)
and the annotator report."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpsl.crowd.vote_matrix import Votes, votes_from_frame

__all__ = ["TIE", "annotator_report", "decide", "entity_reliability"]


#: posteriors within this of the largest are a tie (rounding of the same evidence)
TIE = 1e-12


def decide(r: np.ndarray, classes: Sequence[str], known: np.ndarray | None = None
           ) -> list[str | None]:
    """The one rule that turns posteriors into labels: each token's most probable class. A
    tie (the largest posterior shared by two classes or more, to :data:`TIE`), or a token
    that is not ``known`` (no vote, no observed label), is left missing (None): a tie is no
    evidence for either label, and GPSL marginalises a missing label rather than guess it."""
    r = np.asarray(r, dtype=float)
    if r.shape[0] == 0:
        return []
    single = (r >= r.max(axis=1, keepdims=True) - TIE).sum(axis=1) == 1
    keep = single if known is None else single & np.asarray(known, dtype=bool)
    return [classes[i] if k else None for i, k in zip(r.argmax(axis=1), keep)]


def annotator_accuracy(votes: Votes, r: np.ndarray) -> np.ndarray:
    """Eq. (A): ``acc_a = (1 / n_a) sum_{v: a_v = a} r_{t_v}(l_v)`` (NaN without votes)."""
    c = np.bincount(votes.annotator, weights=r[votes.token, votes.label], minlength=votes.A)
    n = votes.n_votes()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, c / np.maximum(n, 1), np.nan)


class Aggregator:
    """Shared crowd-kit-like surface: ``fit`` / ``fit_predict`` / ``fit_predict_proba``."""

    def fit(self, data) -> Aggregator:
        votes, tasks = votes_from_frame(data)
        self.fit_votes(votes)
        self.tasks_ = tasks
        self.labels_ = dict(zip(tasks, self.labels_array_))
        return self

    def fit_predict(self, data) -> dict:
        return self.fit(data).labels_

    def fit_predict_proba(self, data) -> np.ndarray:
        return self.fit(data).probas_

    def _finish(self, votes: Votes, r: np.ndarray) -> None:
        self.votes_ = votes
        self.classes_ = list(votes.classes)
        self.annotators_ = list(votes.annotators)
        self.probas_ = r
        self.labels_array_ = decide(r, votes.classes, votes.voted() | (votes.observed >= 0))
        self.accuracy_ = annotator_accuracy(votes, r)
        self.skills_ = dict(zip(votes.annotators, self.accuracy_))


def entity_reliability(votes: Votes, r: np.ndarray, outside: str = "O"):
    """Per annotator, under the posteriors ``r``: ``precision`` = expected fraction of their
    votes other than ``outside`` that are right, ``recall`` = expected fraction of the true
    labels other than ``outside`` (on the tokens they voted on) that they gave; (A,) arrays,
    NaN where undefined. None when the label set has no ``outside`` label."""
    if outside not in votes.classes:
        return None
    o = votes.classes.index(outside)
    r = np.asarray(r, dtype=float)
    right = r[votes.token, votes.label]
    ent_vote = votes.label != o
    tp = np.bincount(votes.annotator, weights=right * ent_vote, minlength=votes.A)
    n_pred = np.bincount(votes.annotator, weights=ent_vote.astype(float), minlength=votes.A)
    n_true = np.bincount(votes.annotator, weights=1.0 - r[votes.token, o], minlength=votes.A)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.where(n_pred > 0, tp / np.maximum(n_pred, 1e-300), np.nan),
                np.where(n_true > 0, tp / np.maximum(n_true, 1e-300), np.nan))


def annotator_report(agg, votes: Votes) -> list[dict]:
    """One row per annotator (the reliability figures of a team): votes, model (full /
    one-coin / sequential), estimated accuracy (eq. A), agreement with the aggregated label,
    entity ``precision`` and ``recall`` when the labels have an ``O``
    (:func:`entity_reliability`: a worker who leaves entities unlabeled has a high
    accuracy and a low recall), skill ``s_a`` and the confusion matrix (posterior mean where
    it is variational; the sequential model's plain confusion ``c_a``) as ``{true label:
    {reported label: probability}}``."""
    n = votes.n_votes()
    agree = np.zeros(votes.A)
    idx = np.asarray(agg.probas_).argmax(axis=1)
    np.add.at(agree, votes.annotator, (idx[votes.token] == votes.label).astype(float))
    conf = getattr(agg, "confusions_", None)
    one = getattr(agg, "one_coin_", np.zeros(votes.A, dtype=bool))
    crowd = getattr(agg, "crowd_", None) or getattr(agg, "model_", None)
    skill = getattr(crowd, "skill", None) if crowd is not None else None
    sequential = crowd is not None and hasattr(crowd, "centre")
    ent = entity_reliability(votes, agg.probas_)
    rows = []
    for a, name in enumerate(votes.annotators):
        row = {"annotator": name, "votes": int(n[a]),
               "model": "sequential" if sequential else "one-coin" if one[a] else "full",
               "accuracy": float(agg.accuracy_[a]) if n[a] else None,
               "agreement": float(agree[a] / n[a]) if n[a] else None}
        if ent is not None:
            for key, arr in zip(("precision", "recall"), ent):
                row[key] = float(arr[a]) if np.isfinite(arr[a]) else None
        if skill is not None and np.isfinite(skill[a]):
            row["skill"] = float(skill[a])
        if conf is not None:
            row["confusion"] = {y: {lab: float(conf[a, i, k])
                                    for k, lab in enumerate(votes.classes)}
                                for i, y in enumerate(votes.classes)}
        rows.append(row)
    return rows
