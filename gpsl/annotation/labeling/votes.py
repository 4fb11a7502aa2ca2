"""The SQL of labels: votes per annotator (``votes``), their history (``annotation_history``),
the leads' decisions (``adjudications`` and ``adjudication_history``), the derived training
labels (``derived_labels``) and skips.

A repository: each function reads or writes rows inside the caller's transaction (``conn``)
or runs one read (``db``); what a label write means (which rows change together, how a
training label is derived) is :mod:`gpsl.annotation.labeling.label_writes`' and
:mod:`gpsl.annotation.labeling.rules`'.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from sqlalchemy import bindparam, text

from gpsl.annotation.store import validate
from gpsl.annotation.store.db import Database
from gpsl.annotation.store.records import Derived, Vote

_IDS = bindparam("ids", expanding=True)
_TS = bindparam("ts", expanding=True)


# ----------------------------------------------------------------------------- votes


def of_tokens(conn, sentence_id: int, tokens: list[int]) -> dict[int, list[Vote]]:
    """Every vote on ``tokens`` of a sentence, oldest first."""
    out: dict[int, list[Vote]] = {t: [] for t in tokens}
    for t, ann, lab, src, at in conn.execute(text(
            "SELECT token_index, annotator, label, source, updated_at FROM votes WHERE"
            " sentence_id = :s AND token_index IN :ts ORDER BY updated_at, annotator")
            .bindparams(_TS), {"s": sentence_id, "ts": tokens}):
        out[t].append(Vote(ann, lab, src, at))
    return out


def cast_and_decisions(conn, sentence_id: int, tokens: list[int]
                       ) -> tuple[dict[int, list[Vote]], dict[int, str]]:
    """:func:`of_tokens` and :func:`adjudicated_of` in one statement (a label write's
    round trip fewer on PostgreSQL)."""
    cast: dict[int, list[Vote]] = {t: [] for t in tokens}
    decided: dict[int, str] = {}
    for kind, t, ann, lab, src, at in conn.execute(text(
            "SELECT 0 AS kind, token_index, annotator, label, source, updated_at FROM votes"
            " WHERE sentence_id = :s AND token_index IN :ts UNION ALL"
            " SELECT 1, token_index, NULL, label, NULL, NULL FROM adjudications"
            " WHERE sentence_id = :s AND token_index IN :ts ORDER BY 1, 6, 3")
            .bindparams(_TS), {"s": sentence_id, "ts": tokens}):
        if kind == 0:
            cast[t].append(Vote(ann, lab, src, at))
        else:
            decided[t] = lab
    return cast, decided


def of_annotator(conn, sentence_id: int, annotator: str) -> dict[int, tuple[str | None, str]]:
    """``{token: (label, source)}`` of one annotator's votes on a sentence."""
    return {r[0]: (r[1], r[2]) for r in conn.execute(text(
        "SELECT token_index, label, source FROM votes WHERE sentence_id = :s AND"
        " annotator = :a"), {"s": sentence_id, "a": annotator})}


def current(conn, sentence_id: int, token_index: int, annotator: str) -> str | None:
    cur = conn.execute(text("SELECT label FROM votes WHERE sentence_id = :s AND"
                            " token_index = :t AND annotator = :a"),
                       {"s": sentence_id, "t": token_index, "a": annotator}).first()
    return cur[0] if cur else None


def put(conn, sid: int, t: int, annotator: str, label: str | None, source: str | None,
        at: str) -> None:
    """Write one vote; ``label`` None deletes it."""
    if label is None:
        conn.execute(text("DELETE FROM votes WHERE sentence_id = :s AND token_index = :t AND"
                          " annotator = :a"), {"s": sid, "t": t, "a": annotator})
    else:
        conn.execute(text(
            "INSERT INTO votes (sentence_id, token_index, annotator, label, source, updated_at)"
            " VALUES (:s, :t, :a, :l, :src, :at) ON CONFLICT (sentence_id, token_index,"
            " annotator) DO UPDATE SET label = excluded.label, source = excluded.source,"
            " updated_at = excluded.updated_at"),
            {"s": sid, "t": t, "a": annotator, "l": label, "src": source, "at": at})


def put_many(conn, sid: int, annotator: str,
             final: Mapping[int, tuple[str | None, str | None, str]]) -> None:
    """Write ``annotator``'s votes on tokens of one sentence, ``{token: (label, source,
    at)}`` (label None deletes the vote): one statement for the deletions and one
    (executemany) for the others, whatever the number of tokens (:func:`put` is one)."""
    gone = sorted(t for t, (lab, _src, _at) in final.items() if lab is None)
    if gone:
        conn.execute(text("DELETE FROM votes WHERE sentence_id = :s AND annotator = :a AND"
                          " token_index IN :ts").bindparams(_TS),
                     {"s": sid, "a": annotator, "ts": gone})
    rows = [{"s": sid, "t": t, "a": annotator, "l": lab, "src": src, "at": at}
            for t, (lab, src, at) in sorted(final.items()) if lab is not None]
    if rows:
        conn.execute(text(
            "INSERT INTO votes (sentence_id, token_index, annotator, label, source, updated_at)"
            " VALUES (:s, :t, :a, :l, :src, :at) ON CONFLICT (sentence_id, token_index,"
            " annotator) DO UPDATE SET label = excluded.label, source = excluded.source,"
            " updated_at = excluded.updated_at"), rows if len(rows) > 1 else rows[0])


def votes_of(db: Database, sentence_id: int) -> list[dict]:
    """Every vote of a sentence: ``dict(token_index, annotator, label, source, updated_at)``."""
    return db.read(lambda conn: [dict(r._mapping) for r in conn.execute(text(
        "SELECT token_index, annotator, label, source, updated_at FROM votes"
        " WHERE sentence_id = :s ORDER BY token_index, updated_at"), {"s": sentence_id})])


def of_project(db: Database, project_id: int) -> list[dict]:
    """Every person's vote of a project (imported labels left out): ``dict(sentence_id,
    position, token_index, annotator, label, source, updated_at)``."""
    rows = db.read(lambda conn: conn.execute(text(
        "SELECT v.sentence_id, s.position, v.token_index, v.annotator, v.label, v.source,"
        " v.updated_at FROM votes v JOIN sentences s ON s.id = v.sentence_id"
        " WHERE s.project_id = :p AND v.source <> 'import'"
        " ORDER BY s.position, v.token_index, v.annotator"), {"p": project_id}).fetchall())
    return [dict(r._mapping) for r in rows if not validate.is_import(r[3], r[5])]


def every_vote(db: Database, project_id: int, split: str | None = None) -> list[dict]:
    """Every vote of a project (imported labels included): ``dict(sentence_id,
    token_index, annotator, label, source)`` by sentence, token and annotator."""
    where, args = "s.project_id = :p", {"p": project_id}
    if split is not None:
        where += " AND s.split = :split"
        args["split"] = split
    return db.read(lambda conn: [dict(r._mapping) for r in conn.execute(text(
        "SELECT v.sentence_id, v.token_index, v.annotator, v.label, v.source FROM votes v"
        f" JOIN sentences s ON s.id = v.sentence_id WHERE {where}"
        " ORDER BY s.position, v.token_index, v.annotator"), args)])


def add_imported(conn, rows: list[dict]) -> None:
    """Votes that arrive with a file, each with its history row (action ``'import'``):
    ``rows`` of ``p, s, t, a, l, src, at`` (``src``: 'human', 'accepted' or 'import')."""
    if not rows:
        return
    conn.execute(text("INSERT INTO votes (sentence_id, token_index, annotator, label, source,"
                      " updated_at) VALUES (:s, :t, :a, :l, :src, :at)"), rows)
    conn.execute(text(
        "INSERT INTO annotation_history (project_id, sentence_id, token_index, old_label,"
        " new_label, source, annotator, at, action) VALUES (:p, :s, :t, NULL, :l, :src,"
        " :a, :at, 'import')"), rows)


def disputed(conn, project_id: int) -> dict[int, list[int]]:
    """Sentence id -> tokens with more than one person's vote."""
    rows = conn.execute(text(
        "SELECT v.sentence_id, v.token_index FROM votes v JOIN sentences s ON s.id ="
        " v.sentence_id WHERE s.project_id = :p AND v.source <> 'import'"
        " GROUP BY v.sentence_id, v.token_index HAVING COUNT(*) > 1"), {"p": project_id})
    out: dict[int, list[int]] = defaultdict(list)
    for sid, t in rows:
        out[sid].append(t)
    return out


# ----------------------------------------------------------------------------- history


def add_history(conn, h: Mapping) -> int:
    """One history row (``p, s, t, old, new, src, a, at, action, b``); returns its id."""
    return conn.execute(text(
        "INSERT INTO annotation_history (project_id, sentence_id, token_index, old_label,"
        " new_label, source, annotator, at, action, batch) VALUES (:p, :s, :t, :old, :new,"
        " :src, :a, :at, :action, :b) RETURNING id"), dict(h)).scalar_one()


#: history rows written by one statement of :func:`add_history_many` (10 parameters a row)
HISTORY_ROWS_A_STATEMENT = 500


def add_history_many(conn, rows: list[Mapping]) -> list[int]:
    """History rows (as :func:`add_history`) in one statement per
    :data:`HISTORY_ROWS_A_STATEMENT`; returns their ids in the order of ``rows`` (ids are
    given in insertion order, so the returned ids sorted are the rows' ids)."""
    ids: list[int] = []
    cols = ("p", "s", "t", "old", "new", "src", "a", "at", "action", "b")
    for a in range(0, len(rows), HISTORY_ROWS_A_STATEMENT):
        page = rows[a:a + HISTORY_ROWS_A_STATEMENT]
        values = ", ".join("(" + ", ".join(f":{c}{i}" for c in cols) + ")"
                           for i in range(len(page)))
        args = {f"{c}{i}": row[c] for i, row in enumerate(page) for c in cols}
        ids += sorted(r[0] for r in conn.execute(text(
            "INSERT INTO annotation_history (project_id, sentence_id, token_index, old_label,"
            " new_label, source, annotator, at, action, batch) VALUES " + values
            + " RETURNING id"), args))
    return ids


def batches_present(conn, annotator: str, batches) -> set[str]:
    """Which of ``batches`` (history batch ids) ``annotator``'s history holds already."""
    batches = sorted({str(b) for b in batches if b})
    if not batches:
        return set()
    names = {f"b{i}": b for i, b in enumerate(batches)}
    rows = conn.execute(text(
        "SELECT DISTINCT batch FROM annotation_history WHERE annotator = :a AND batch IN ("
        + ", ".join(f":{k}" for k in names) + ")"), {"a": annotator, **names}).fetchall()
    return {r[0] for r in rows}


def last_step(conn, project_id: int, annotator: str | None):
    """``(id, batch, sentence_id, annotator)`` of the latest ``set``/``clear`` not undone
    (of ``annotator``, or of anyone), or None."""
    sql = ("SELECT id, batch, sentence_id, annotator FROM annotation_history WHERE"
           " project_id = :p AND undone_by IS NULL AND action IN ('set', 'clear')")
    args = {"p": project_id}
    if annotator is not None:
        sql += " AND annotator = :a"
        args["a"] = annotator
    return conn.execute(text(sql + " ORDER BY id DESC LIMIT 1"), args).first()


def step_entries(conn, history_id: int, batch: str | None, annotator: str) -> list:
    """The history rows of one step (its batch, newest first; the one row without a batch)."""
    if batch is None:
        return conn.execute(text("SELECT * FROM annotation_history WHERE id = :id"),
                            {"id": history_id}).fetchall()
    return conn.execute(text(
        "SELECT * FROM annotation_history WHERE batch = :b AND undone_by IS NULL AND"
        " action IN ('set', 'clear') AND annotator = :a ORDER BY id DESC"),
        {"b": batch, "a": annotator}).fetchall()


def source_before(conn, sentence_id: int, token_index: int, annotator: str, before_id: int,
                  label: str) -> str | None:
    """How ``annotator`` had set ``label`` on the token before history row ``before_id``."""
    prev = conn.execute(text(
        "SELECT source FROM annotation_history WHERE sentence_id = :s AND"
        " token_index = :t AND annotator = :a AND id < :id AND new_label = :l"
        " ORDER BY id DESC LIMIT 1"),
        {"s": sentence_id, "t": token_index, "a": annotator, "id": before_id,
         "l": label}).first()
    return prev[0] if prev else None


def mark_undone(conn, history_id: int, by: int) -> None:
    conn.execute(text("UPDATE annotation_history SET undone_by = :h WHERE id = :id"),
                 {"h": by, "id": history_id})


def history(db: Database, sentence_id: int | None = None, project_id: int | None = None,
            annotator: str | None = None, limit: int | None = 100) -> list[dict]:
    """Vote changes, newest first, filtered by sentence / project / annotator."""
    where, args = [], {}
    for col, key, val in (("h.sentence_id", "s", sentence_id), ("h.project_id", "p", project_id),
                          ("h.annotator", "a", annotator)):
        if val is not None:
            where.append(f"{col} = :{key}")
            args[key] = val
    sql = ("SELECT h.*, s.position FROM annotation_history h"
           " LEFT JOIN sentences s ON s.id = h.sentence_id")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY h.id DESC LIMIT :limit"
    args["limit"] = 2 ** 62 if limit is None else int(limit)
    rows = db.read(lambda conn: conn.execute(text(sql), args).fetchall())
    out = []
    for r in rows:
        m = r._mapping
        out.append({k: m[k] for k in ("id", "project_id", "sentence_id", "position",
                                      "token_index", "old_label", "new_label", "source",
                                      "annotator", "at", "action", "undone_by")})
        out[-1]["undone"] = m["undone_by"] is not None
    return out


def action_times(db: Database, project_id: int) -> list[tuple[str, str]]:
    """``(annotator, at)`` of every ``set``/``clear`` of a project, by annotator, in order."""
    return db.read(lambda conn: conn.execute(text(
        "SELECT annotator, at FROM annotation_history WHERE project_id = :p AND action IN"
        " ('set', 'clear') ORDER BY annotator, id"), {"p": project_id}).fetchall())


# ----------------------------------------------------------------------------- adjudications


def adjudicated_of(conn, sentence_id: int, tokens: list[int]) -> dict[int, str]:
    return {t: lab for t, lab in conn.execute(text(
        "SELECT token_index, label FROM adjudications WHERE sentence_id = :s AND token_index"
        " IN :ts").bindparams(_TS), {"s": sentence_id, "ts": tokens})}


def set_adjudication(conn, sentence_id: int, token_index: int, label: str | None, lead: str,
                     at: str) -> bool:
    """Record a lead's decision (None withdraws it) with its history row; False when it
    was that already."""
    args = {"s": sentence_id, "t": token_index}
    before = conn.execute(text("SELECT label FROM adjudications WHERE sentence_id = :s"
                               " AND token_index = :t"), args).first()
    before = before[0] if before else None
    if before == label:
        return False
    conn.execute(text(
        "INSERT INTO adjudication_history (sentence_id, token_index, old_label, new_label,"
        " annotator, at) VALUES (:s, :t, :old, :new, :a, :at)"),
        {**args, "old": before, "new": label, "a": lead, "at": at})
    if label is None:
        conn.execute(text("DELETE FROM adjudications WHERE sentence_id = :s AND"
                          " token_index = :t"), args)
    else:
        conn.execute(text(
            "INSERT INTO adjudications (sentence_id, token_index, label, annotator, at)"
            " VALUES (:s, :t, :l, :a, :at) ON CONFLICT (sentence_id, token_index) DO UPDATE"
            " SET label = excluded.label, annotator = excluded.annotator, at = excluded.at"),
            {**args, "l": label, "a": lead, "at": at})
    return True


def adjudications_with_leads(db: Database, project_id: int
                             ) -> dict[tuple[int, int], tuple[str, str]]:
    """``{(sentence_id, token_index): (label, lead)}`` of a project's decisions."""
    return {(r[0], r[1]): (r[2], r[3]) for r in db.read(lambda conn: conn.execute(text(
        "SELECT a.sentence_id, a.token_index, a.label, a.annotator FROM adjudications a"
        " JOIN sentences s ON s.id = a.sentence_id WHERE s.project_id = :p"),
        {"p": project_id}).fetchall())}


def adjudications_of_project(db: Database, project_id: int) -> dict[tuple[int, int], str]:
    """``{(sentence_id, token_index): label}`` of a project's decisions."""
    return {(r[0], r[1]): r[2] for r in db.read(lambda conn: conn.execute(text(
        "SELECT a.sentence_id, a.token_index, a.label FROM adjudications a JOIN sentences s"
        " ON s.id = a.sentence_id WHERE s.project_id = :p"), {"p": project_id}).fetchall())}


def adjudication_history(db: Database, sentence_id: int | None = None,
                         project_id: int | None = None, limit: int | None = 100) -> list[dict]:
    """Changes of the leads' decisions, newest first: ``dict(id, sentence_id, position,
    token_index, old_label, new_label, annotator, at)``."""
    where, args = [], {"limit": 2 ** 62 if limit is None else int(limit)}
    if sentence_id is not None:
        where.append("h.sentence_id = :s")
        args["s"] = sentence_id
    if project_id is not None:
        where.append("s.project_id = :p")
        args["p"] = project_id
    sql = ("SELECT h.id, h.sentence_id, s.position, h.token_index, h.old_label, h.new_label,"
           " h.annotator, h.at FROM adjudication_history h JOIN sentences s"
           " ON s.id = h.sentence_id")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY h.id DESC LIMIT :limit"
    return db.read(lambda conn: [dict(r._mapping) for r in conn.execute(text(sql), args)])


# ----------------------------------------------------------------------------- derived labels


def derived_of(conn, sentence_id: int, tokens: Iterable[int]) -> dict[int, str | None]:
    """The training label now of each of ``tokens`` (None: missing)."""
    tokens = list(tokens)
    got = {t: lab for t, lab in conn.execute(text(
        "SELECT token_index, label FROM derived_labels WHERE sentence_id = :s AND token_index"
        " IN :ts").bindparams(_TS), {"s": sentence_id, "ts": sorted(set(tokens)) or [-1]})}
    return {t: got.get(t) for t in tokens}


def write_derived(conn, sentence_id: int, derived: Mapping[int, Derived | None]) -> None:
    """Replace the derived labels of the tokens in ``derived`` and recount the sentence's
    labeled tokens."""
    gone = sorted(t for t, d in derived.items() if d is None)
    if gone:
        conn.execute(text("DELETE FROM derived_labels WHERE sentence_id = :s AND token_index"
                          " IN :ts").bindparams(_TS), {"s": sentence_id, "ts": gone})
    rows = [{"s": sentence_id, "t": t, "l": d.label, "src": d.source, "a": d.annotator}
            for t, d in sorted(derived.items()) if d is not None]
    if rows:  # one statement for a click's label (not a delete, then an insert)
        conn.execute(text(
            "INSERT INTO derived_labels (sentence_id, token_index, label, source, annotator)"
            " VALUES (:s, :t, :l, :src, :a) ON CONFLICT (sentence_id, token_index) DO UPDATE"
            " SET label = excluded.label, source = excluded.source,"
            " annotator = excluded.annotator"), rows)
    count = "(SELECT COUNT(*) FROM derived_labels d WHERE d.sentence_id = :s)"
    conn.execute(text(f"UPDATE sentences SET n_labeled = {count} WHERE id = :s AND"
                      f" n_labeled <> {count}"), {"s": sentence_id})  # unchanged: no trigger


def labeled_tokens(conn, sentence_ids: list[int]) -> dict[int, list[int]]:
    """``{sentence id: [token index]}`` of the tokens with a training label."""
    out: dict[int, list[int]] = {}
    for sid, t in conn.execute(text(
            "SELECT sentence_id, token_index FROM derived_labels WHERE sentence_id IN :ids")
            .bindparams(_IDS), {"ids": list(sentence_ids) or [-1]}):
        out.setdefault(sid, []).append(t)
    return out


def decisions_of(conn, sentence_ids: list[int]) -> tuple[dict, dict]:
    """``({(sid, t): derived label}, {(sid, t): adjudicated label})`` of some sentences."""
    derived = {(r[0], r[1]): r[2] for r in conn.execute(text(
        "SELECT sentence_id, token_index, label FROM derived_labels WHERE sentence_id IN"
        " :ids").bindparams(_IDS), {"ids": sentence_ids})}
    adj = {(r[0], r[1]): r[2] for r in conn.execute(text(
        "SELECT sentence_id, token_index, label FROM adjudications WHERE sentence_id IN"
        " :ids").bindparams(_IDS), {"ids": sentence_ids})}
    return derived, adj


# ----------------------------------------------------------------------------- skips


def skip(conn, sentence_id: int, annotator: str, at: str) -> None:
    conn.execute(text("INSERT INTO skips (sentence_id, annotator, at) VALUES (:s, :a, :at)"
                      " ON CONFLICT (sentence_id, annotator) DO UPDATE SET at = excluded.at"),
                 {"s": sentence_id, "a": annotator, "at": at})
