"""The store's schema migrations, each frozen as it was written.

A migration runs once, on a store of its time, and must do then what it did when it was
written, whatever the rest of gpsl has become: so it reads and writes with its own SQL and its
own code (its own copy of the queue score of its schema, its own NPY decoding), and imports
nothing of the back end but the table definitions it creates.
:class:`gpsl.annotation.store.db.Database` runs them in order, in the one transaction that opens an
older store.

* 1 -> 2 (:func:`migrate_1_to_2`): one label per token becomes votes per annotator;
* 2 -> 3 (:func:`migrate_2_to_3`): the team tables, project guidelines, version numbers;
* 3 -> 4 (:func:`migrate_3_to_4`): the per-token query scores of the queue;
* 4 -> 5 (:func:`migrate_4_to_5`): project memberships, the sign-in rate limit, setup tokens;
* 5 -> 6 (:func:`migrate_5_to_6`): predictions packed, old versions' predictions pruned;
* 6 -> 7 (:func:`migrate_6_to_7`): the store's own id and the per-version summaries;
* 7 -> 8 (:func:`migrate_7_to_8`): the stored progress counts and the queue's index.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from io import BytesIO

import numpy as np
from sqlalchemy import bindparam, inspect, text
from sqlalchemy.engine import Connection

from gpsl.annotation.store import schema

__all__ = ["migrate_1_to_2", "migrate_2_to_3", "migrate_3_to_4", "migrate_4_to_5",
           "migrate_5_to_6", "migrate_6_to_7", "migrate_7_to_8", "progress_triggers", "run"]


def run(conn: Connection, version: int) -> None:
    """Bring a store of schema ``version`` (1 to 7) to the newest schema's tables, in the
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
    if version in (1, 2, 3, 4, 5, 6):
        migrate_6_to_7(conn)
    if version in (1, 2, 3, 4, 5, 6, 7):
        migrate_7_to_8(conn)
    if version == 0:
        schema.metadata.create_all(conn)
        _new_store_id(conn)
        progress_triggers(conn)


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

#: schema 6's prediction formats (:mod:`gpsl.annotation.corpus.predictions`), frozen here
_TAG_6, _SCORES_TAG_6 = b"GQ16", b"GF32"
_BATCH_6 = 2000  # predictions re-encoded per statement (bounds the migration's memory)


def _pack_6(marginals: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Schema 6's packed marginals of an ``(L, J)`` array and the per-token confidences as
    read back: 16-bit levels summing to 65535 a token (the rows normalised, ``65535 p``
    rounded down, the missing levels given to the largest remainders), the labels at level 0
    left out; behind ``GQ16``, J (uint16), L (uint32), the per-token counts, the label
    indices (uint8, uint16 beyond 255 labels), the levels (uint16), little-endian."""
    m = np.clip(np.asarray(marginals, dtype=np.float64), 0.0, None)
    L, J = m.shape
    sums = m.sum(axis=1, keepdims=True)
    m = np.where(sums > 0, m / np.where(sums > 0, sums, 1.0), 1.0 / max(J, 1))
    f = m * 65535.0
    q = np.floor(f)
    rank = np.empty_like(q, dtype=np.int64)
    rank[np.arange(L)[:, None], np.argsort(q - f, axis=1, kind="stable")] = np.arange(J)
    q = (q + (rank < (65535 - q.sum(axis=1))[:, None])).astype("<u2")
    keep = q > 0
    small = "<u1" if J <= 255 else "<u2"
    rows, cols = np.nonzero(keep)
    blob = b"".join((_TAG_6, np.array([J], "<u2").tobytes(), np.array([L], "<u4").tobytes(),
                     keep.sum(axis=1).astype(small).tobytes(), cols.astype(small).tobytes(),
                     q[rows, cols].tobytes()))
    conf = (q.max(axis=1, initial=0) * np.float32(1.0 / 65535.0)).astype("<f4")
    return blob, conf


def migrate_5_to_6(conn: Connection, keep: int = 1) -> None:
    """Schema 5 -> 6: predictions stored compactly, and only for what the app shows.

    * The predictions of versions that are neither a project's active version nor among its
      ``keep`` newest others are deleted (the app shows the active version's predictions
      and, on the Confidence and Data pages, the one before it; every version's row, metrics
      and model folder are kept).
    * Every kept prediction's marginals are packed (:func:`_pack_6`; the read-back error is
      below ``1 / 65535`` a probability) and its query scores become raw float32 behind
      ``GF32``; the confidences are recomputed from the packed values, the queue scores are
      kept as they are (within ``1.5e-5``). In batches of :data:`_BATCH_6`."""
    keep_ids: list[int] = []
    for (pid,) in conn.execute(text("SELECT id FROM projects")).fetchall():
        keep_ids += [r[0] for r in conn.execute(text(
            "SELECT id FROM model_versions WHERE project_id = :p ORDER BY active DESC, id DESC"
            " LIMIT :k"), {"p": pid, "k": int(keep) + 1})]
    conn.execute(text("DELETE FROM predictions WHERE model_version_id NOT IN :keep")
                 .bindparams(bindparam("keep", expanding=True)), {"keep": keep_ids or [-1]})
    for vid in keep_ids:
        after = -1
        while True:
            rows = conn.execute(text(
                "SELECT sentence_id, marginals, query_scores FROM predictions"
                " WHERE model_version_id = :v AND sentence_id > :a ORDER BY sentence_id"
                " LIMIT :n"), {"v": vid, "a": after, "n": _BATCH_6}).fetchall()
            if not rows:
                break
            after = rows[-1][0]
            updates = []
            for sid, blob, scores in rows:
                if bytes(blob[:4]) == _TAG_6:
                    continue
                packed, conf = _pack_6(_decode_npy_2(blob))
                updates.append({"v": vid, "s": sid, "m": packed, "c": conf.tobytes(),
                                "qs": None if scores is None else _SCORES_TAG_6 + np.asarray(
                                    _decode_npy_2(scores), dtype="<f4").tobytes()})
            if updates:
                conn.execute(text(
                    "UPDATE predictions SET marginals = :m, confidence = :c, query_scores = :qs"
                    " WHERE model_version_id = :v AND sentence_id = :s"), updates)


# ----------------------------------------------------------------------------- 6 -> 7

def _new_store_id(conn: Connection) -> None:
    """The store's own random id (``store_info.store_id``, 32 hex digits), once."""
    if conn.execute(text("SELECT 1 FROM store_info WHERE key = 'store_id'")).first() is None:
        conn.execute(text("INSERT INTO store_info (key, value) VALUES ('store_id', :v)"),
                     {"v": uuid.uuid4().hex})


def migrate_6_to_7(conn: Connection) -> None:
    """Schema 6 -> 7: ``store_info`` with the store's own id, and ``version_summaries``.

    Before schema 7 two stores in one folder shared ``models/<project>/<version>``, and their
    ids collide.  From now on a store writes only under ``models/store-<its id>/``; the model
    folders already recorded keep their paths and load only when the saved model is the one
    the version recorded (its bound trace, :func:`gpsl.annotation.store.owned.model_path`).  The
    summaries of versions trained before are computed the first time a page asks.  Every
    row is kept."""
    schema.metadata.create_all(conn)  # the new tables only
    _new_store_id(conn)


# ----------------------------------------------------------------------------- 7 -> 8

#: schema 8's counts of ``project_progress`` and what one sentence (``{r}``: NEW or OLD, or a
#: table's rows summed) adds to each
_COUNTS_8 = {"n_sentences": "1", "n_tokens": "{r}.n_tokens", "n_labeled": "{r}.n_labeled",
             "n_complete": "CASE WHEN {r}.n_labeled = {r}.n_tokens THEN 1 ELSE 0 END",
             "n_partial": "CASE WHEN {r}.n_labeled > 0 AND {r}.n_labeled < {r}.n_tokens"
                          " THEN 1 ELSE 0 END"}
_COLS_8 = ", ".join(_COUNTS_8)


def _slot_8(conn: Connection, r: str) -> str:
    """Schema 8's ``project_progress.slot`` of sentence row ``r``: on PostgreSQL its id modulo
    1024 (a row updated many times in one transaction costs more each time: a bulk write spreads
    over 1024), on SQLite 0 (a row updated in place)."""
    return f"{r}.id % 1024" if conn.dialect.name == "postgresql" else "0"


def _add_8(conn: Connection, rows: str, grouped: bool) -> str:
    """An upsert adding the counts of ``rows`` (NEW: one row; a table: summed per project,
    split and slot) to ``project_progress``."""
    if grouped:
        slot = _slot_8(conn, "r")
        values = (f" SELECT r.project_id, r.split, {slot}, " + ", ".join(
            f"SUM({e.format(r='r')})" for e in _COUNTS_8.values())
            + f" FROM {rows} r GROUP BY 1, 2, 3")
    else:
        values = (f" VALUES ({rows}.project_id, {rows}.split, {_slot_8(conn, rows)}, "
                  + ", ".join(e.format(r=rows) for e in _COUNTS_8.values()) + ")")
    return (f"INSERT INTO project_progress (project_id, split, slot, {_COLS_8}){values}"
            " ON CONFLICT (project_id, split, slot) DO UPDATE SET "
            + ", ".join(f"{c} = project_progress.{c} + excluded.{c}" for c in _COUNTS_8))


def _sub_8(conn: Connection, rows: str, grouped: bool) -> str:
    """An update taking the counts of ``rows`` (OLD, or a table summed) from
    ``project_progress`` (a sentence's row exists since its insert: never an insert, so a
    cascade from a deleted project inserts nothing)."""
    if grouped:
        slot = _slot_8(conn, "r")
        return ("UPDATE project_progress SET " + ", ".join(
            f"{c} = project_progress.{c} - d.{c}" for c in _COUNTS_8)
            + f" FROM (SELECT r.project_id, r.split, {slot} AS slot, " + ", ".join(
                f"SUM({e.format(r='r')}) AS {c}" for c, e in _COUNTS_8.items())
            + f" FROM {rows} r GROUP BY 1, 2, 3) d WHERE"
            " project_progress.project_id = d.project_id AND project_progress.split = d.split"
            " AND project_progress.slot = d.slot")
    return ("UPDATE project_progress SET " + ", ".join(
        f"{c} = {c} - ({e.format(r=rows)})" for c, e in _COUNTS_8.items())
        + f" WHERE project_id = {rows}.project_id AND split = {rows}.split"
        f" AND slot = {_slot_8(conn, rows)}")


def progress_triggers(conn: Connection) -> None:
    """Schema 8's triggers on ``sentences`` that keep ``project_progress`` (the counts of
    each project and split) in the transaction of every insert, delete and update of a
    sentence: per row, except PostgreSQL's inserts, one per statement over its transition
    table (an imported page of sentences is one statement: one upsert per slot)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text(
            "CREATE OR REPLACE FUNCTION gpsl_progress_insert() RETURNS trigger LANGUAGE plpgsql"
            " AS $$ BEGIN " + _add_8(conn, "new_rows", True) + "; RETURN NULL; END $$"))
        conn.execute(text(
            "CREATE OR REPLACE FUNCTION gpsl_progress_row() RETURNS trigger LANGUAGE plpgsql"
            " AS $$ BEGIN " + _sub_8(conn, "OLD", False) + "; IF TG_OP = 'UPDATE' THEN "
            + _add_8(conn, "NEW", False) + "; END IF; RETURN NULL; END $$"))
        for name, event, how in (
                ("insert", "INSERT", "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT"
                 " EXECUTE FUNCTION gpsl_progress_insert()"),
                ("delete", "DELETE", "FOR EACH ROW EXECUTE FUNCTION gpsl_progress_row()"),
                ("update", "UPDATE OF project_id, split, n_tokens, n_labeled",
                 "FOR EACH ROW EXECUTE FUNCTION gpsl_progress_row()")):
            conn.execute(text(f"DROP TRIGGER IF EXISTS progress_on_{name} ON sentences"))
            conn.execute(text(f"CREATE TRIGGER progress_on_{name} AFTER {event} ON sentences"
                              f" {how}"))
        return
    for name, event, body in (
            ("insert", "INSERT", _add_8(conn, "NEW", False)),
            ("delete", "DELETE", _sub_8(conn, "OLD", False)),
            ("update", "UPDATE OF project_id, split, n_tokens, n_labeled",
             _sub_8(conn, "OLD", False) + "; " + _add_8(conn, "NEW", False))):
        conn.execute(text(f"DROP TRIGGER IF EXISTS progress_on_{name}"))
        conn.execute(text(f"CREATE TRIGGER progress_on_{name} AFTER {event} ON sentences"
                          f" FOR EACH ROW BEGIN {body}; END"))


def migrate_7_to_8(conn: Connection) -> None:
    """Schema 7 -> 8: ``project_progress`` (per project and split the sentences, tokens,
    labeled tokens, complete and partly labeled sentences), counted once from ``sentences``
    and kept from now on by :func:`progress_triggers`; and the index
    ``predictions_by_queue`` (version, queue score, sentence) that the queue walks highest
    score first.  Every row is kept."""
    schema.metadata.create_all(conn)  # the new table only
    conn.execute(text("CREATE INDEX IF NOT EXISTS predictions_by_queue"
                      " ON predictions (model_version_id, queue_score, sentence_id)"))
    progress_triggers(conn)
    conn.execute(text("DELETE FROM project_progress"))
    conn.execute(text(
        f"INSERT INTO project_progress (project_id, split, slot, {_COLS_8}) SELECT"
        f" r.project_id, r.split, {_slot_8(conn, 'r')}, "
        + ", ".join(f"SUM({e.format(r='r')})" for e in _COUNTS_8.values())
        + " FROM sentences r GROUP BY 1, 2, 3"))
