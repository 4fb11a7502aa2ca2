"""The queue scores stored with predictions, kept current.

A sentence's queue score (:func:`gpsl.annotation.labeling.rules.queue_score`, the largest query
score of its unlabeled tokens) is written with its prediction (:func:`save_predictions`) and
recomputed from the stored arrays inside every label transaction (:func:`refresh_scores`, no
model loaded), so the queue is one indexed SQL query (:mod:`gpsl.annotation.labeling.queue`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gpsl.annotation.corpus import predictions
from gpsl.annotation.labeling import rules, votes
from gpsl.annotation.store.db import Database


def save_predictions(db: Database, version_id: int, marginals: Mapping[int, np.ndarray],
                     query_scores: Mapping[int, np.ndarray] | None = None) -> int:
    """Store ``{sentence_id: (L, J) array}`` of a version in one transaction (replacing
    earlier ones of the same sentence), with ``query_scores`` ``{sentence_id: (L,) array}``
    (the queue's per-token scores, :func:`gpsl.active.score_tokens`) when given, and each
    sentence's queue score under its labels now; returns the count."""
    items, scores = predictions.check(marginals, query_scores)
    if not items:
        return 0

    def tx(conn):
        predictions.check_shapes(conn, version_id, items, scores)
        labeled = votes.labeled_tokens(conn, [sid for sid, _ in items])
        queue = {sid: rules.queue_score(arr, labeled.get(sid, ()), scores.get(sid))
                 for sid, arr in items}
        return predictions.write(conn, version_id, items, scores, queue)

    return db.write(tx)


def refresh_scores(conn, sentence_id: int) -> None:
    """Recompute the queue score of every prediction of one sentence (after a label change,
    inside its transaction) from the stored query scores, or the stored marginals where there
    are none; no model is loaded."""
    stored = predictions.stored_arrays(conn, sentence_id)
    if not stored:
        return
    labeled = votes.labeled_tokens(conn, [sentence_id]).get(sentence_id, [])
    predictions.set_queue_scores(conn, sentence_id, {
        vid: rules.queue_score(marginals, labeled, scores)
        for vid, scores, marginals in stored})
