"""The annotation queue: the one source of the order in which sentences are offered.

A sentence's score is the largest *query score* of its unlabeled tokens under a model
version (:func:`gpsl.annotation.labeling.rules.queue_score`): the per-token scores the training run
stored with the prediction (``predictions.query_scores``, :func:`gpsl.active.score_tokens`
with the strategy named in ``model_versions.query_strategy``), or for predictions stored
before schema 4 the old rule, least confidence (:data:`FALLBACK_QUERY`).  The score is stored
with the prediction (``predictions.queue_score``) and recomputed from the stored arrays
whenever a label of the sentence changes (:mod:`gpsl.annotation.labeling.scoring`, no model is
loaded), so the queue is one indexed SQL query that sorts by it, in the one order of
:func:`_order_by`.  The Confidence page shows the same ranking (:func:`ranked`).

:func:`route` hands sentences to the members of a team: each annotator gets sentences they
have not labeled, at most ``overlap`` (k, a project setting) people hold one sentence at a
time, and holding means having voted on it or having a *lease* on it (a row of ``leases``
with an expiry time, so a sentence handed to someone who walks away returns to the queue
after :data:`LEASE_SECONDS`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy import bindparam, text

from gpsl.annotation.store import validate
from gpsl.annotation.store.db import Database, loads, now

LEASE_SECONDS = 15 * 60
ORDERS = ("uncertainty", "sequential")
#: the query score named for predictions without stored query scores (schema 3 and older):
#: the old rule, least confidence (:func:`gpsl.annotation.labeling.rules.token_scores`)
FALLBACK_QUERY = "least_confidence"


def _order_by(score: str | None, holders: str | None = None) -> str:
    """The one annotation order, as SQL over ``s`` (sentences) and ``k`` (the annotator's
    skips): sentences the annotator skipped last, least recently skipped first; then the
    queue ``score`` under the active model, highest first, sentences without one after
    (no prediction yet, or no token left without a training label); with a team's
    ``holders`` (k > 1), among equal scores the sentences more people already hold first
    (an overlap is completed before a new one starts, but never ahead of a more
    informative sentence); then file order.  :func:`_segments` reads it in parts."""
    terms = ["k.at IS NOT NULL", "k.at"]
    if score:
        terms += [f"{score} IS NULL", f"{score} DESC"]
    if holders:
        terms.append(f"{holders} DESC")
    return " ORDER BY " + ", ".join(terms + ["s.position"])


#: the project ``:p``'s active model version, inside the queue's statements (a read of it
#: first would be one more round trip on PostgreSQL; without one, no prediction matches)
ACTIVE = "(SELECT id FROM model_versions WHERE project_id = :p AND active = 1)"


def _segments(db: Database, scored: bool, skipper: bool,
              holders: str | None = None) -> list[tuple[str, str, str]]:
    """:func:`_order_by` as consecutive parts, each ``(FROM, WHERE, ORDER BY)`` over ``s``
    (sentences), ``p`` (``scored``: the prediction under the active version,
    :data:`ACTIVE`) and ``k`` (``:a``'s skips),
    so that each is an index walk stopped by its LIMIT, not a sort of every sentence
    (schema 8): the sentences not skipped with a queue score, by score (the index
    ``predictions_by_queue`` walked from the highest), then those without one, by position
    (``sentences_by_split``); then (``skipper``: an annotator) the ones they skipped, by
    when.  The parts follow each other in :func:`_order_by`'s order, so their rows joined
    are its rows: the order is the same, ties included."""
    h = f"{holders} DESC, " if holders else ""
    unskipped = ("NOT EXISTS (SELECT 1 FROM skips k WHERE k.sentence_id = s.id AND"
                 " k.annotator = :a)")
    pred = (f"LEFT JOIN predictions p ON p.sentence_id = s.id AND p.model_version_id = {ACTIVE}"
            if scored else "")
    if not scored:
        parts = [("sentences s", unskipped, f"{h}s.position")]
        skipped_order = f"k.at, {h}s.position"
    else:
        hint = " INDEXED BY predictions_by_queue" if db.dialect == "sqlite" else ""
        parts = [(f"predictions p{hint} JOIN sentences s ON s.id = p.sentence_id",
                  f"p.model_version_id = {ACTIVE} AND p.queue_score IS NOT NULL AND"
                  f" {unskipped}",
                  f"p.queue_score DESC, {h}s.position"),
                 (f"sentences s {pred}", f"p.queue_score IS NULL AND {unskipped}",
                  f"{h}s.position")]
        skipped_order = f"k.at, p.queue_score IS NULL, p.queue_score DESC, {h}s.position"
    if skipper:
        parts.append((f"skips k JOIN sentences s ON s.id = k.sentence_id {pred}",
                      "k.annotator = :a", skipped_order))
    return parts


def _walk(conn, parts: list[tuple[str, str, str]], where: str, args: dict, limit: int,
          ex: bool = False) -> list[int]:
    """The first ``limit`` ids of the parts (:func:`_segments`) joined, each part read only
    while the ones before it gave fewer (``ex``: ``s.id NOT IN :ex`` too)."""
    out: list[int] = []
    for frm, cond, order in parts:
        q = text(f"SELECT s.id FROM {frm} WHERE {where} AND {cond}"
                 + (" AND s.id NOT IN :ex" if ex else "")
                 + f" ORDER BY {order} LIMIT :limit")
        if ex:
            q = q.bindparams(bindparam("ex", expanding=True))
        out += [r[0] for r in conn.execute(q, {**args, "limit": limit - len(out)})]
        if len(out) >= limit:
            break
    return out


def _active_version(conn, project_id: int) -> int | None:
    r = conn.execute(text("SELECT id FROM model_versions WHERE project_id = :p AND"
                          " active = 1"), {"p": project_id}).first()
    return r[0] if r else None


def strategy(db: Database, project_id: int) -> str | None:
    """The query score that orders the uncertainty queue under the project's active model (a
    key of :data:`gpsl.active.QUERY_SCORES`): the one its training run stored, else
    :data:`FALLBACK_QUERY` (a version trained before schema 4); None without an active
    model (the queue is in file order)."""
    r = db.read(lambda conn: conn.execute(text(
        "SELECT query_strategy FROM model_versions WHERE project_id = :p AND active = 1"),
        {"p": project_id}).first(), single=True)
    if r is None:
        return None
    return r[0] or FALLBACK_QUERY


def queue(db: Database, project_id: int, order: str = "uncertainty",
          annotator: str | None = None, limit: int | None = 100) -> list[int]:
    """Ids of ``'train'`` sentences with at least one unlabeled token, in annotation order.
    ``'uncertainty'``: highest queue score under the active model first (sentences without
    a prediction follow in position order; no active model: ``'sequential'``).
    ``'sequential'``: position order.  Sentences skipped by ``annotator`` come last, least
    recently skipped first."""
    if order not in ORDERS:
        raise ValueError(f"order must be 'uncertainty' or 'sequential', got {order!r}")
    limit = 2 ** 62 if limit is None else int(limit)
    if limit <= 0:
        return []

    def tx(conn):
        return _walk(conn, _segments(db, order == "uncertainty", annotator is not None),
                     "s.project_id = :p AND s.split = 'train' AND s.n_labeled < s.n_tokens",
                     {"a": annotator, "p": project_id}, limit)

    return db.read(tx)


def next_unseen(db: Database, project_id: int, order: str, annotator: str,
                current: int | None, seen: Iterable[int]) -> int | None:
    """The next sentence for someone annotating alone: the first one of the queue not seen
    in this session (then the first that is not ``current``); None when the queue is
    empty."""
    seen = set(seen)
    ids = queue(db, project_id, order=order, annotator=annotator, limit=len(seen) + 5)
    for sid in ids:
        if sid not in seen and sid != current:
            return sid
    for sid in ids:
        if sid != current:
            return sid
    return ids[0] if ids else None


def ranked(db: Database, project_id: int, n: int = 10) -> list[dict]:
    """The first ``n`` sentences of the uncertainty queue with their scores (for display):
    ``dict(sentence_id, position, score, unlabeled, strategy)``, ``strategy`` being the
    query score that gave ``score`` (:func:`strategy`)."""
    ids = queue(db, project_id, "uncertainty", None, n)
    if not ids:
        return []

    def tx(conn):
        out = []
        for sid in ids:
            r = conn.execute(text(
                "SELECT s.position, s.n_tokens - s.n_labeled, p.queue_score, v.query_strategy,"
                " v.id FROM sentences s"
                " LEFT JOIN model_versions v ON v.project_id = s.project_id AND v.active = 1"
                " LEFT JOIN predictions p ON p.sentence_id = s.id AND p.model_version_id = v.id"
                " WHERE s.id = :s"), {"s": sid}).first()
            out.append({"sentence_id": sid, "position": r[0], "unlabeled": r[1],
                        "score": r[2], "strategy": None if r[4] is None
                        else (r[3] or FALLBACK_QUERY)})
        return out

    return db.read(tx)


def _holders_sql(db: Database) -> str:
    """How many people other than ``:a`` hold sentence ``s``: voted on it (votes that came
    with an imported file do not count) or hold an unexpired lease on it."""
    return ("(SELECT COUNT(*) FROM (SELECT v.annotator FROM votes v WHERE v.sentence_id = s.id"
            " AND v.source <> 'import' AND v.annotator <> :a UNION SELECT l.annotator FROM"
            " leases l WHERE l.sentence_id = s.id AND l.annotator <> :a AND l.expires_at > :now"
            ") h)")


def route(db: Database, project_id: int, annotator: str, order: str = "uncertainty",
          current: int | None = None, exclude: Iterable[int] = (),
          lease_seconds: float = LEASE_SECONDS) -> int | None:
    """The next sentence for ``annotator`` in a team, leased to them; None when there is none.

    In one write transaction: the annotator's lease on ``current`` ends (they moved on); a
    sentence of this project they still hold a lease on is handed back (a reload or a new
    tab keeps the same sentence); otherwise the first *eligible* training sentence, not in
    ``exclude`` (already seen; ignored when nothing else is left), gets a lease that ends
    after ``lease_seconds``.  With ``k`` = the project's ``overlap`` setting:

    * eligible: fewer than ``k`` other people hold it (voted or leased) and it still needs
      work: ``k = 1``: an unlabeled token (as :func:`queue`); ``k > 1``: the annotator has
      not voted on it, and it has an unlabeled token or someone else has voted on it (it
      waits for its k-th annotator);
    * order (:func:`_order_by`, the one order): sentences the annotator skipped last; then
      the queue score under the active model (``order='uncertainty'``), highest first, so
      the most informative sentence that still needs this annotator's vote comes first,
      whether others hold it or not; with ``k > 1`` among equal scores those that more
      people already hold; then file order.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be 'uncertainty' or 'sequential', got {order!r}")
    annotator = validate.annotator(annotator)
    exclude = sorted({int(x) for x in exclude})

    def tx(conn):
        at = now()
        until = (datetime.now(UTC) + timedelta(seconds=float(lease_seconds))).isoformat(
            timespec="milliseconds")
        conn.execute(text("DELETE FROM leases WHERE expires_at <= :now"), {"now": at})
        prow = conn.execute(text("SELECT settings FROM projects WHERE id = :p" +
                                 db.for_update()), {"p": project_id}).first()
        if prow is None:
            return None
        k = max(1, int(loads(prow[0], {}).get("overlap", 1) or 1))
        if current is not None:
            conn.execute(text("DELETE FROM leases WHERE sentence_id = :s AND annotator = :a"),
                         {"s": int(current), "a": annotator})
        held = conn.execute(text(
            "SELECT l.sentence_id FROM leases l JOIN sentences s ON s.id = l.sentence_id"
            " WHERE l.annotator = :a AND s.project_id = :p ORDER BY l.expires_at DESC"),
            {"a": annotator, "p": project_id}).fetchall()
        for (sid,) in held:
            if sid not in exclude:
                conn.execute(text("UPDATE leases SET expires_at = :u WHERE sentence_id = :s"
                                  " AND annotator = :a"), {"u": until, "s": sid, "a": annotator})
                return sid
        holders = _holders_sql(db)
        if k == 1:
            need = "s.n_labeled < s.n_tokens"
        else:
            need = ("NOT EXISTS (SELECT 1 FROM votes m WHERE m.sentence_id = s.id AND"
                    " m.annotator = :a AND m.source <> 'import') AND (s.n_labeled < s.n_tokens"
                    " OR EXISTS (SELECT 1 FROM votes o WHERE o.sentence_id = s.id AND"
                    " o.annotator <> :a AND o.source <> 'import'))")
        args = {"a": annotator, "p": project_id, "now": at, "k": k}
        parts = _segments(db, order == "uncertainty", True, holders if k > 1 else None)
        where = (f"s.project_id = :p AND s.split = 'train' AND {need} AND {holders} < :k")
        pick = None
        if exclude:
            pick = next(iter(_walk(conn, parts, where, {**args, "ex": exclude}, 1, ex=True)),
                        None)
        if pick is None:
            pick = next(iter(_walk(conn, parts, where, args, 1)), None)
        if pick is None:
            return None
        conn.execute(text(
            "INSERT INTO leases (sentence_id, annotator, expires_at) VALUES (:s, :a, :u)"
            " ON CONFLICT (sentence_id, annotator) DO UPDATE SET expires_at = excluded.expires_at"),
            {"s": pick, "a": annotator, "u": until})
        return pick

    return db.write(tx)


def release(db: Database, annotator: str, sentence_id: int | None = None) -> int:
    """End ``annotator``'s lease on a sentence (all their leases with None)."""
    sql, args = "DELETE FROM leases WHERE annotator = :a", {"a": annotator}
    if sentence_id is not None:
        sql += " AND sentence_id = :s"
        args["s"] = int(sentence_id)
    return db.write(lambda conn: conn.execute(text(sql), args).rowcount)


def leases(db: Database, project_id: int) -> list[dict]:
    """Unexpired leases of a project: ``dict(sentence_id, position, annotator, expires_at)``."""
    return db.read(lambda conn: [dict(r._mapping) for r in conn.execute(text(
        "SELECT l.sentence_id, s.position, l.annotator, l.expires_at FROM leases l JOIN"
        " sentences s ON s.id = l.sentence_id WHERE s.project_id = :p AND l.expires_at > :now"
        " ORDER BY s.position, l.annotator"), {"p": project_id, "now": now()})])
