"""Stored predictions of a model version: per-sentence marginals (float32 NPY blobs, never
pickled), per-token confidences, per-token query scores (float32 NPY blobs; schema 4, NULL
before) and the sentence's queue score.

A repository: the queue score is computed by :func:`gpsl.annotation.rules.queue_score` and
written with the prediction by :mod:`gpsl.annotation.scoring`, in one transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from io import BytesIO

import numpy as np
from sqlalchemy import bindparam, text

from gpsl.annotation.db import Database
from gpsl.annotation.errors import NotFoundError


def encode_marginals(arr: np.ndarray) -> bytes:
    buf = BytesIO()
    np.save(buf, np.ascontiguousarray(arr, dtype=np.float32), allow_pickle=False)
    return buf.getvalue()


def decode_marginals(blob: bytes) -> np.ndarray:
    return np.load(BytesIO(bytes(blob)), allow_pickle=False)


def check(marginals: Mapping[int, np.ndarray],
          query_scores: Mapping[int, np.ndarray] | None = None
          ) -> tuple[list[tuple[int, np.ndarray]], dict[int, np.ndarray]]:
    """``marginals`` ``{sentence_id: (L, J) array}`` and ``query_scores`` ``{sentence_id:
    (L,) array}`` as float32 items; query scores of a sentence without marginals raise."""
    items = [(int(sid), np.asarray(m, dtype=np.float32)) for sid, m in marginals.items()]
    scores = {int(sid): np.asarray(q, dtype=np.float32)
              for sid, q in (query_scores or {}).items()}
    if set(scores) - {sid for sid, _ in items}:
        raise ValueError("query scores of sentences without marginals: "
                         f"{sorted(set(scores) - {sid for sid, _ in items})[:5]}")
    return items, scores


def check_shapes(conn, version_id: int, items: list[tuple[int, np.ndarray]],
                 scores: Mapping[int, np.ndarray]) -> None:
    """Every sentence is in the version's project, its marginals are ``(n_tokens, J)`` finite
    numbers and its query scores ``n_tokens`` finite numbers (else NotFoundError /
    ValueError)."""
    r = conn.execute(text("SELECT project_id FROM model_versions WHERE id = :v"),
                     {"v": version_id}).first()
    if r is None:
        raise NotFoundError(f"no model version with id {version_id}")
    project_id = r[0]
    info = {r[0]: (r[1], r[2]) for r in conn.execute(text(
        "SELECT id, project_id, n_tokens FROM sentences WHERE id IN :ids")
        .bindparams(bindparam("ids", expanding=True)), {"ids": [sid for sid, _ in items]})}
    for sid, arr in items:
        if sid not in info or info[sid][0] != project_id:
            raise NotFoundError(f"no sentence {sid} in the project of model version "
                                f"{version_id}")
        n = info[sid][1]
        if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] == 0:
            raise ValueError(f"sentence {sid}: marginals of shape {arr.shape}, "
                             f"expected ({n}, n_classes)")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"sentence {sid}: marginals are not finite")
        q = scores.get(sid)
        if q is not None and (q.shape != (n,) or not np.all(np.isfinite(q))):
            raise ValueError(f"sentence {sid}: query scores must be {n} finite numbers, "
                             f"got shape {q.shape}")


def write(conn, version_id: int, items: list[tuple[int, np.ndarray]],
          scores: Mapping[int, np.ndarray], queue_scores: Mapping[int, float | None]) -> int:
    """Store the checked items of a version (replacing earlier ones of the same sentences)
    with their per-token confidences, query scores and queue scores; returns the count."""
    rows = []
    for sid, arr in items:
        q = scores.get(sid)
        conf = arr.max(axis=1).astype("<f4")
        rows.append({"v": version_id, "s": sid, "m": encode_marginals(arr),
                     "c": conf.tobytes(), "mc": float(conf.min()),
                     "qs": None if q is None else encode_marginals(q), "q": queue_scores[sid]})
    conn.execute(text(
        "INSERT INTO predictions (model_version_id, sentence_id, marginals, confidence,"
        " min_confidence, queue_score, query_scores) VALUES (:v, :s, :m, :c, :mc, :q, :qs)"
        " ON CONFLICT (model_version_id, sentence_id) DO UPDATE SET"
        " marginals = excluded.marginals, confidence = excluded.confidence,"
        " min_confidence = excluded.min_confidence, queue_score = excluded.queue_score,"
        " query_scores = excluded.query_scores"), rows)
    return len(rows)


def stored_arrays(conn, sentence_id: int
                  ) -> list[tuple[int, np.ndarray | None, np.ndarray | None]]:
    """``(version id, query scores, marginals)`` of every prediction of a sentence: the query
    scores where they were stored (then the marginals are not read: None), else None and the
    marginals."""
    return [(vid, decode_marginals(scores), None) if scores is not None
            else (vid, None, decode_marginals(blob))
            for vid, scores, blob in conn.execute(text(
                "SELECT model_version_id, query_scores, marginals FROM predictions"
                " WHERE sentence_id = :s"), {"s": sentence_id})]


def set_queue_scores(conn, sentence_id: int, scores: Mapping[int, float | None]) -> None:
    """``scores``: version id -> the sentence's new queue score under that version."""
    if scores:
        conn.execute(text("UPDATE predictions SET queue_score = :q WHERE model_version_id = :v"
                          " AND sentence_id = :s"),
                     [{"q": q, "v": vid, "s": sentence_id} for vid, q in scores.items()])


def get(db: Database, version_id: int,
        sentence_ids: Sequence[int] | None = None) -> dict[int, np.ndarray]:
    """``{sentence_id: float32 (L, J) array}`` of a version (all, or the given ids)."""
    if sentence_ids is not None:
        sentence_ids = [int(s) for s in sentence_ids]
        if not sentence_ids:
            return {}
        q = text("SELECT sentence_id, marginals FROM predictions WHERE model_version_id = :v"
                 " AND sentence_id IN :ids").bindparams(bindparam("ids", expanding=True))
        args = {"v": version_id, "ids": sentence_ids}
    else:
        q = text("SELECT sentence_id, marginals FROM predictions WHERE model_version_id = :v")
        args = {"v": version_id}
    rows = db.read(lambda conn: conn.execute(q, args).fetchall())
    return {sid: decode_marginals(blob) for sid, blob in rows}


def get_query_scores(db: Database, version_id: int,
                     sentence_ids: Sequence[int] | None = None) -> dict[int, np.ndarray]:
    """``{sentence_id: float32 (L,) array}``: the stored query scores of a version (all, or
    the given ids); sentences whose prediction has none (stored before schema 4) are left
    out."""
    sql = ("SELECT sentence_id, query_scores FROM predictions WHERE model_version_id = :v"
           " AND query_scores IS NOT NULL")
    args: dict = {"v": version_id}
    q = text(sql)
    if sentence_ids is not None:
        sentence_ids = [int(s) for s in sentence_ids]
        if not sentence_ids:
            return {}
        q = text(sql + " AND sentence_id IN :ids").bindparams(bindparam("ids", expanding=True))
        args["ids"] = sentence_ids
    rows = db.read(lambda conn: conn.execute(q, args).fetchall())
    return {sid: decode_marginals(blob) for sid, blob in rows}


def has_any(db: Database, version_id: int) -> bool:
    return db.read(lambda conn: conn.execute(text(
        "SELECT 1 FROM predictions WHERE model_version_id = :v LIMIT 1"),
        {"v": version_id}).first() is not None)


def delete(db: Database, version_id: int) -> int:
    return db.write(lambda conn: conn.execute(text(
        "DELETE FROM predictions WHERE model_version_id = :v"), {"v": version_id}).rowcount)


def prune(db: Database, project_id: int, keep: int = 2) -> int:
    """Keep predictions only for the active version and the ``keep`` newest versions."""

    def tx(conn):
        keep_ids = [r[0] for r in conn.execute(text(
            "SELECT id FROM model_versions WHERE project_id = :p ORDER BY active DESC, id DESC"
            " LIMIT :k"), {"p": project_id, "k": int(keep) + 1})]
        return conn.execute(text(
            "DELETE FROM predictions WHERE model_version_id IN (SELECT id FROM model_versions"
            " WHERE project_id = :p AND id NOT IN :keep)")
            .bindparams(bindparam("keep", expanding=True)),
            {"p": project_id, "keep": keep_ids or [-1]}).rowcount

    return db.write(tx)


__all__ = ["check", "check_shapes", "decode_marginals", "delete", "encode_marginals", "get",
           "get_query_scores", "has_any", "prune", "set_queue_scores", "stored_arrays", "write"]
