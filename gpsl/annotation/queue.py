"""The annotation queue: the one source of the order in which sentences are offered.

A sentence's score is :func:`gpsl.active.sentence_scores` (strategy :data:`STRATEGY`) over
its *unlabeled* tokens under a model version's marginals; it is stored with the prediction
(``predictions.queue_score``) and recomputed whenever a label of the sentence changes, so
the queue is one indexed SQL query that sorts by it.  The Confidence page shows the same
ranking (:func:`ranked`)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from sqlalchemy import text

from gpsl import active
from gpsl.annotation.db import Database

STRATEGY = "sentence_least_confidence"
AGGREGATE = "max"
ORDERS = ("uncertainty", "sequential")


def queue_score(marginals: np.ndarray, labeled: Iterable[int]) -> float | None:
    """The active-learning score of one sentence (higher: asked first), None when all of
    its tokens are labeled."""
    m = np.asarray(marginals, dtype=float)
    sums = m.sum(axis=1, keepdims=True)
    m = np.where(sums > 0, m / np.where(sums > 0, sums, 1.0), 1.0 / max(1, m.shape[1]))
    mask = np.zeros(m.shape[0], dtype=bool)
    idx = [t for t in labeled if 0 <= t < m.shape[0]]
    mask[idx] = True
    score = active.sentence_scores([m], [mask], strategy=STRATEGY, aggregate=AGGREGATE)[0]
    return None if np.isnan(score) else float(score)


def refresh_scores(conn, sentence_id: int) -> None:
    """Recompute the queue score of every prediction of one sentence (after a label
    change, inside its transaction)."""
    from gpsl.annotation.predictions import decode_marginals

    preds = conn.execute(text("SELECT model_version_id, marginals FROM predictions"
                              " WHERE sentence_id = :s"), {"s": sentence_id}).fetchall()
    if not preds:
        return
    labeled = [r[0] for r in conn.execute(text(
        "SELECT token_index FROM derived_labels WHERE sentence_id = :s"), {"s": sentence_id})]
    conn.execute(text("UPDATE predictions SET queue_score = :q WHERE model_version_id = :v"
                      " AND sentence_id = :s"),
                 [{"q": queue_score(decode_marginals(blob), labeled), "v": vid,
                   "s": sentence_id} for vid, blob in preds])


def queue(db: Database, project_id: int, order: str = "uncertainty",
          annotator: str | None = None, limit: int | None = 100) -> list[int]:
    """Ids of ``'train'`` sentences with at least one unlabeled token, in annotation order.
    ``'uncertainty'``: highest queue score under the active model first (sentences without
    a prediction follow in position order; no active model: ``'sequential'``).
    ``'sequential'``: position order.  Sentences skipped by ``annotator`` come last, least
    recently skipped first."""
    if order not in ORDERS:
        raise ValueError(f"order must be 'uncertainty' or 'sequential', got {order!r}")
    args = {"a": annotator, "p": project_id, "limit": 2 ** 62 if limit is None else int(limit)}

    def tx(conn):
        version = None
        if order == "uncertainty":
            r = conn.execute(text("SELECT id FROM model_versions WHERE project_id = :p AND"
                                  " active = 1"), {"p": project_id}).first()
            version = r[0] if r else None
        if version is None:
            sql = ("SELECT s.id FROM sentences s LEFT JOIN skips k ON k.sentence_id = s.id"
                   " AND k.annotator = :a WHERE s.project_id = :p AND s.split = 'train' AND"
                   " s.n_labeled < s.n_tokens ORDER BY k.at IS NOT NULL, k.at, s.position"
                   " LIMIT :limit")
        else:
            args["v"] = version
            hint = " INDEXED BY predictions_by_score" if db.dialect == "sqlite" else ""
            sql = ("SELECT s.id FROM sentences s LEFT JOIN skips k ON k.sentence_id = s.id"
                   f" AND k.annotator = :a LEFT JOIN predictions p{hint}"
                   " ON p.sentence_id = s.id AND p.model_version_id = :v"
                   " WHERE s.project_id = :p AND s.split = 'train' AND s.n_labeled < s.n_tokens"
                   " ORDER BY k.at IS NOT NULL, k.at, p.queue_score IS NULL,"
                   " p.queue_score DESC, s.position LIMIT :limit")
        return [r[0] for r in conn.execute(text(sql), args)]

    return db.read(tx)


def ranked(db: Database, project_id: int, n: int = 10) -> list[dict]:
    """The first ``n`` sentences of the uncertainty queue with their scores (for display):
    ``dict(sentence_id, position, score, unlabeled)``."""
    ids = queue(db, project_id, "uncertainty", None, n)
    if not ids:
        return []

    def tx(conn):
        out = []
        for sid in ids:
            r = conn.execute(text(
                "SELECT s.position, s.n_tokens - s.n_labeled, p.queue_score FROM sentences s"
                " LEFT JOIN model_versions v ON v.project_id = s.project_id AND v.active = 1"
                " LEFT JOIN predictions p ON p.sentence_id = s.id AND p.model_version_id = v.id"
                " WHERE s.id = :s"), {"s": sid}).first()
            out.append({"sentence_id": sid, "position": r[0], "unlabeled": r[1],
                        "score": r[2]})
        return out

    return db.read(tx)
