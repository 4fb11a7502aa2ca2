"""Stored predictions of a model version: per-sentence marginals (packed, below), per-token
confidences, per-token query scores and the sentence's queue score.

A repository: the queue score is computed by :func:`gpsl.annotation.labeling.rules.queue_score` and
written with the prediction by :mod:`gpsl.annotation.labeling.scoring`, in one transaction.

**Storage (schema 6).** A sentence's ``(L, J)`` marginals are kept as the labels that carry
probability and their probabilities, quantised to 16-bit levels that sum to 65535 a token
(:func:`_levels`: largest-remainder rounding of ``65535 p``, so a row read back still sums
to 1); the labels at level 0 are left out (:func:`encode_marginals`). A token costs
``1 + 3 k`` bytes (``k`` labels kept: one count byte, one label byte and two level bytes
each; 2-byte counts and labels beyond 255 labels), in place of ``4 J`` (float32) and a
128-byte NPY header per sentence. The read-back error is below ``1 / 65535 = 1.5e-5`` a
probability (the pages show percentages, the exports four decimals: a half unit of the
fourth decimal is 5e-5).
:func:`check` rounds the marginals to what is stored before the confidences and queue scores
are computed from them, so every figure derives from the stored values. Query scores are raw
little-endian float32 behind a 4-byte tag (:func:`encode_scores`, no header). Both readers
also read the NPY blobs of stores before schema 6 (:func:`decode`); the migration to schema
6 packs those (:func:`gpsl.annotation.store.migrations.migrate_5_to_6`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from io import BytesIO

import numpy as np
from sqlalchemy import bindparam, text

from gpsl.annotation.store.db import Database
from gpsl.annotation.store.store_errors import NotFoundError

#: the tags of the packed formats (a NPY blob begins with b"\x93NUMPY")
MARGINALS_TAG, SCORES_TAG = b"GQ16", b"GF32"
#: the quantisation step of a stored probability (its read-back error is below it)
QUANTUM = 1.0 / 65535.0


def _levels(arr) -> np.ndarray:
    """``(L, J)`` probabilities as 16-bit levels summing to 65535 a row: the rows normalised,
    scaled by 65535, rounded down, and the levels a row lacks given to its largest remainders
    (each level within one of ``65535 p``)."""
    m = np.clip(np.asarray(arr, dtype=np.float64), 0.0, None)
    if m.ndim != 2:
        raise ValueError(f"marginals must be (n_tokens, n_classes), got shape {m.shape}")
    sums = m.sum(axis=1, keepdims=True)
    m = np.where(sums > 0, m / np.where(sums > 0, sums, 1.0), 1.0 / max(m.shape[1], 1))
    f = m * 65535.0
    q = np.floor(f)
    short = 65535 - q.sum(axis=1)
    rank = np.empty_like(q, dtype=np.int64)
    rows = np.arange(q.shape[0])[:, None]
    rank[rows, np.argsort(q - f, axis=1, kind="stable")] = np.arange(q.shape[1])
    return (q + (rank < short[:, None])).astype("<u2")


def _levels_many(arrs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """:func:`_levels` of each ``(L, J)`` array, computed on the arrays of each width stacked:
    every step of :func:`_levels` is row by row, so each array's levels are the ones it gets
    alone (a chunk of the pool is one call, not one a sentence: the store's CPU at 100k
    sentences)."""
    out: list = [None] * len(arrs)
    by_width: dict[int, list[int]] = {}
    for k, a in enumerate(arrs):
        a = np.asarray(a)
        if a.ndim != 2:
            out[k] = _levels(a)  # raises its error
        else:
            by_width.setdefault(a.shape[1], []).append(k)
    for ks in by_width.values():
        q = _levels(np.concatenate([np.asarray(arrs[k], dtype=np.float64) for k in ks]))
        cuts = np.cumsum([np.asarray(arrs[k]).shape[0] for k in ks])[:-1]
        for k, part in zip(ks, np.split(q, cuts)):
            out[k] = part
    return out


def quantise(arr: np.ndarray) -> np.ndarray:
    """Probabilities as stored and read back (float32): :func:`_levels` / 65535."""
    return _levels(arr) * np.float32(QUANTUM)


def encode_marginals(arr: np.ndarray) -> bytes:
    """``(L, J)`` probabilities packed (module docstring): the tag, ``J`` (uint16), ``L``
    (uint32), the per-token counts of kept labels, their label indices, their 16-bit levels
    (:func:`_levels`); little-endian."""
    return _pack(_levels(arr))


def _pack(q: np.ndarray) -> bytes:
    """:func:`encode_marginals` of the levels ``q``."""
    L, J = q.shape
    keep = q > 0
    small = "<u1" if J <= 255 else "<u2"
    rows, cols = np.nonzero(keep)
    return b"".join((MARGINALS_TAG, np.array([J], "<u2").tobytes(),
                     np.array([L], "<u4").tobytes(), keep.sum(axis=1).astype(small).tobytes(),
                     cols.astype(small).tobytes(), q[rows, cols].tobytes()))


def _decode_packed(blob: bytes) -> np.ndarray:
    J = int(np.frombuffer(blob, "<u2", 1, 4)[0])
    L = int(np.frombuffer(blob, "<u4", 1, 6)[0])
    small = np.dtype("<u1" if J <= 255 else "<u2")
    counts = np.frombuffer(blob, small, L, 10).astype(np.int64)
    nnz = int(counts.sum())
    at = 10 + L * small.itemsize
    cols = np.frombuffer(blob, small, nnz, at)
    vals = np.frombuffer(blob, "<u2", nnz, at + nnz * small.itemsize)
    q = np.zeros((L, J), dtype="<u2")
    q[np.repeat(np.arange(L), counts), cols] = vals
    return q * np.float32(QUANTUM)


def encode_scores(arr: np.ndarray) -> bytes:
    """Per-token query scores: the tag and raw little-endian float32."""
    return SCORES_TAG + np.ascontiguousarray(arr, dtype="<f4").tobytes()


def decode(blob: bytes) -> np.ndarray:
    """A stored array: packed marginals, tagged float32 scores, or (stores before schema 6)
    an NPY blob, read without pickle."""
    blob = bytes(blob)
    tag = blob[:4]
    if tag == MARGINALS_TAG:
        return _decode_packed(blob)
    if tag == SCORES_TAG:
        return np.frombuffer(blob, "<f4", offset=4).astype(np.float32)
    return np.load(BytesIO(blob), allow_pickle=False)


decode_marginals = decode  # the name the readers used before schema 6


def check(marginals: Mapping[int, np.ndarray],
          query_scores: Mapping[int, np.ndarray] | None = None
          ) -> tuple[list[tuple[int, np.ndarray]], dict[int, np.ndarray]]:
    """``marginals`` ``{sentence_id: (L, J) array}`` (rounded to what is stored,
    :func:`quantise`) and ``query_scores`` ``{sentence_id: (L,) array}`` as float32 items;
    query scores of a sentence without marginals raise."""
    arrs = [np.asarray(m, dtype=np.float32) for m in marginals.values()]
    fit = [k for k, a in enumerate(arrs) if a.ndim == 2 and np.all(np.isfinite(a))]
    for k, q in zip(fit, _levels_many([arrs[k] for k in fit])):
        arrs[k] = q * np.float32(QUANTUM)  # quantise, the chunk at once
    items = [(int(sid), a) for sid, a in zip(marginals, arrs)]
    scores = {int(sid): np.asarray(q, dtype=np.float32)
              for sid, q in (query_scores or {}).items()}
    if set(scores) - {sid for sid, _ in items}:
        raise ValueError("query scores of sentences without marginals: "
                         f"{sorted(set(scores) - {sid for sid, _ in items})[:5]}")
    return items, scores


def _as_stored(m) -> np.ndarray:
    arr = np.asarray(m, dtype=np.float32)
    return quantise(arr) if arr.ndim == 2 and np.all(np.isfinite(arr)) else arr


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
    levels = _levels_many([arr for _, arr in items])
    for (sid, arr), lev in zip(items, levels):
        q = scores.get(sid)
        conf = arr.max(axis=1).astype("<f4")
        rows.append({"v": version_id, "s": sid, "m": _pack(lev),
                     "c": conf.tobytes(), "mc": float(conf.min()),
                     "qs": None if q is None else encode_scores(q), "q": queue_scores[sid]})
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
    return [(vid, decode(scores), None) if scores is not None
            else (vid, None, decode(blob))
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
    rows = db.read(lambda conn: conn.execute(q, args).fetchall(), single=True)
    return {sid: decode(blob) for sid, blob in rows}


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
    rows = db.read(lambda conn: conn.execute(q, args).fetchall(), single=True)
    return {sid: decode(blob) for sid, blob in rows}


def of_sentence(db: Database, version_id: int, sentence_id: int
                ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(marginals, query scores)`` of one sentence under a version, in one statement
    (what :func:`get` and :func:`get_query_scores` give for it; None where there is none)."""
    row = db.read(lambda conn: conn.execute(text(
        "SELECT marginals, query_scores FROM predictions WHERE model_version_id = :v AND"
        " sentence_id = :s"), {"v": int(version_id), "s": int(sentence_id)}).first(),
        single=True)
    if row is None:
        return None, None
    return decode(row[0]), (None if row[1] is None else decode(row[1]))


def has_any(db: Database, version_id: int) -> bool:
    return db.read(lambda conn: conn.execute(text(
        "SELECT 1 FROM predictions WHERE model_version_id = :v LIMIT 1"),
        {"v": version_id}).first() is not None)


def delete(db: Database, version_id: int) -> int:
    return db.write(lambda conn: conn.execute(text(
        "DELETE FROM predictions WHERE model_version_id = :v"), {"v": version_id}).rowcount)


def prune(db: Database, project_id: int, keep: int = 1) -> int:
    """Keep predictions only for the project's active version and its ``keep`` newest other
    versions (what the app shows: the active version's predictions, and on the Confidence
    and Data pages the one before it); returns the rows deleted."""

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


__all__ = ["MARGINALS_TAG", "QUANTUM", "SCORES_TAG", "check", "check_shapes", "decode",
           "decode_marginals", "delete", "encode_marginals", "encode_scores", "get",
           "get_query_scores", "has_any", "prune", "quantise", "set_queue_scores",
           "stored_arrays", "write"]
