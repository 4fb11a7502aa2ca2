"""The store's schema migrations, each frozen as it was written.

A migration runs once, on a store of its time, and must do then what it did when it was
written, whatever the rest of gpsl has become: so it reads and writes with its own SQL and its
own code (its own copy of the queue score of its schema, its own NPY decoding), and imports
nothing of the back end but the table definitions it creates. :class:`gpsl.annotation.db.Database`
runs them in order, in the one transaction that opens an older store.

* 1 -> 2 (:func:`migrate_1_to_2`): one label per token becomes votes per annotator;
* 2 -> 3 (:func:`migrate_2_to_3`): the team tables, project guidelines, version numbers;
* 3 -> 4 (:func:`migrate_3_to_4`): the per-token query scores of the queue;
* 4 -> 5 (:func:`migrate_4_to_5`): project memberships, the sign-in rate limit, setup tokens;
* 5 -> 6 (:func:`migrate_5_to_6`): the store's own id and the per-version summaries.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from io import BytesIO

import numpy as np
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from gpsl.annotation import schema

__all__ = ["migrate_1_to_2", "migrate_2_to_3", "migrate_3_to_4", "migrate_4_to_5",
           "migrate_5_to_6", "run"]


def run(conn: Connection, version: int) -> None:
    """Bring a store of schema ``version`` (1 to 5) to the newest schema's tables, in the
    caller's transaction (schema 0, a new store: :data:`schema.metadata` is created)."""
    if version == 1:
        migrate_1_to_2(conn)
    if version in (1, 2):
        migrate_2_to_3(conn)
    if version in (1, 2, 3):
        migrate_3_to_4(conn)
    if version in (1, 2, 3, 4):
        migrate_4_to_5(conn)
    if version in (1, 2, 3, 4, 5):
        migrate_5_to_6(conn)
    if version == 0:
        schema.metadata.create_all(conn)
        _new_store_id(conn)


# ----------------------------------------------------------------------------- 1 -> 2


def _decode_npy_2(blob: bytes) -> np.ndarray:
    """Schema 2's marginals blob: a float32 NPY array, read without pickle."""
    return np.load(BytesIO(bytes(blob)), allow_pickle=False)


def _queue_score_2(marginals: np.ndarray, labeled: Iterable[int]) -> float | None:
    """Schema 2's queue score of a sentence: the largest least confidence ``1 - max_j p_tj``
    of its unlabeled tokens under the stored marginals (rows normalised to sum to 1); None
    when every token is labeled."""
    m = np.asarray(marginals, dtype=float)
    sums = m.sum(axis=1, keepdims=True)
    m = np.where(sums > 0, m / np.where(sums > 0, sums, 1.0), 1.0 / max(1, m.shape[1]))
    mask = np.zeros(m.shape[0], dtype=bool)
    mask[[t for t in labeled if 0 <= t < m.shape[0]]] = True
    free = m[~mask]
    return float((1.0 - free.max(axis=1)).max()) if free.size else None


def migrate_1_to_2(conn: Connection) -> None:
    """Schema 1 (one label per token in ``annotations``) -> 2 (votes per annotator).

    Every annotation becomes its annotator's vote and the token's derived label; the
    history rows stay as they are; predictions get their queue score (schema 2's rule,
    :func:`_queue_score_2`)."""
    schema.metadata.create_all(conn)  # votes, adjudications, derived_labels, schema_version
    conn.execute(text(
        "INSERT INTO votes (sentence_id, token_index, annotator, label, source, updated_at)"
        " SELECT sentence_id, token_index, annotator, label, source, updated_at"
        " FROM annotations"))
    conn.execute(text(  # labels that came with a file: the imports' votes
        "UPDATE votes SET source = 'import' WHERE source = 'human' AND EXISTS (SELECT 1 FROM"
        " annotation_history h WHERE h.sentence_id = votes.sentence_id AND h.token_index ="
        " votes.token_index AND h.annotator = votes.annotator AND h.action = 'import'"
        " AND h.new_label = votes.label) AND NOT EXISTS (SELECT 1 FROM annotation_history h"
        " WHERE h.sentence_id = votes.sentence_id AND h.token_index = votes.token_index"
        " AND h.action <> 'import')"))
    conn.execute(text(
        "INSERT INTO derived_labels (sentence_id, token_index, label, source, annotator)"
        " SELECT sentence_id, token_index, label, source, annotator FROM annotations"))
    conn.execute(text("ALTER TABLE predictions ADD COLUMN queue_score REAL"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS predictions_by_score"
                      " ON predictions (model_version_id, sentence_id, queue_score)"))
    labeled: dict[int, list[int]] = {}
    for sid, t in conn.execute(text("SELECT sentence_id, token_index FROM annotations")):
        labeled.setdefault(sid, []).append(t)
    rows = conn.execute(text("SELECT model_version_id, sentence_id, marginals"
                             " FROM predictions")).fetchall()
    updates = [{"v": v, "s": s, "q": _queue_score_2(_decode_npy_2(m), labeled.get(s, ()))}
               for v, s, m in rows]
    if updates:
        conn.execute(text("UPDATE predictions SET queue_score = :q WHERE model_version_id = :v"
                          " AND sentence_id = :s"), updates)
    conn.execute(text("DROP TABLE annotations"))


# ----------------------------------------------------------------------------- 2 -> 3


def migrate_2_to_3(conn: Connection) -> None:
    """Schema 2 -> 3: the team tables (accounts, sign-in tokens, leases, adjudication
    history), ``projects.guidelines`` and ``model_versions.number`` (the versions of each
    project numbered 1, 2, ... in the order of their ids).  Every row is kept."""
    schema.metadata.create_all(conn)  # the new tables only (create_all skips existing ones)
    insp = inspect(conn)
    if "guidelines" not in {c["name"] for c in insp.get_columns("projects")}:
        conn.execute(text("ALTER TABLE projects ADD COLUMN guidelines TEXT NOT NULL"
                          " DEFAULT ''"))
    if "number" not in {c["name"] for c in insp.get_columns("model_versions")}:
        conn.execute(text("ALTER TABLE model_versions ADD COLUMN number INTEGER"))
    conn.execute(text(
        "UPDATE model_versions SET number = (SELECT COUNT(*) FROM model_versions m"
        " WHERE m.project_id = model_versions.project_id AND m.id <= model_versions.id)"))


# ----------------------------------------------------------------------------- 3 -> 4


def migrate_3_to_4(conn: Connection) -> None:
    """Schema 3 -> 4: ``predictions.query_scores`` (the per-token query scores of the queue)
    and ``model_versions.query_strategy`` (their name), both NULL for the rows already there,
    whose stored queue scores keep schema 2's rule (least confidence; the queue reads a NULL
    strategy as ``least_confidence``).  Every row is kept."""
    blob = "BYTEA" if conn.dialect.name == "postgresql" else "BLOB"
    insp = inspect(conn)
    if "query_scores" not in {c["name"] for c in insp.get_columns("predictions")}:
        conn.execute(text(f"ALTER TABLE predictions ADD COLUMN query_scores {blob}"))
    if "query_strategy" not in {c["name"] for c in insp.get_columns("model_versions")}:
        conn.execute(text("ALTER TABLE model_versions ADD COLUMN query_strategy TEXT"))


# ----------------------------------------------------------------------------- 4 -> 5


def migrate_4_to_5(conn: Connection) -> None:
    """Schema 4 -> 5: ``memberships``, ``sign_in_failures`` and ``setup_tokens``.  Before
    schema 5 every annotator could open every project: every existing annotator account
    becomes a member of every existing project, so nobody loses access in the upgrade (the
    lead removes what should not be there).  Every row is kept."""
    schema.metadata.create_all(conn)  # the new tables only
    conn.execute(text(
        "INSERT INTO memberships (project_id, account_id, added_at)"
        " SELECT p.id, a.id, a.created_at FROM projects p CROSS JOIN accounts a"
        " WHERE a.role = 'annotator'"))


# ----------------------------------------------------------------------------- 5 -> 6


def _new_store_id(conn: Connection) -> None:
    """The store's own random id (``store_info.store_id``, 32 hex digits), once."""
    if conn.execute(text("SELECT 1 FROM store_info WHERE key = 'store_id'")).first() is None:
        conn.execute(text("INSERT INTO store_info (key, value) VALUES ('store_id', :v)"),
                     {"v": uuid.uuid4().hex})


def migrate_5_to_6(conn: Connection) -> None:
    """Schema 5 -> 6: ``store_info`` with the store's own id, and ``version_summaries``.

    Before schema 6 two stores in one folder shared ``models/<project>/<version>``, and their
    ids collide.  From now on a store writes only under ``models/store-<its id>/``; the model
    folders already recorded keep their paths and load only when the saved model is the one
    the version recorded (its bound trace, :func:`gpsl.annotation.owned.model_path`).  The
    summaries of versions trained before are computed the first time a page asks.  Every
    row is kept."""
    schema.metadata.create_all(conn)  # the new tables only
    _new_store_id(conn)
