"""Read-only queries over a project's sentences: search and filters, a sentence by the
number the app shows, the annotators of a project and the history of one token.

Nothing here writes.  The filters (:func:`find`) combine with AND:

* ``text``: the sentence's text (the tokens' first column joined by spaces) contains it,
  case-insensitively (an SQL ``LIKE`` narrows the candidates, the exact test is in Python);
* ``label``: a token's training label (``derived_labels``) is that label;
* ``annotator``: that annotator voted on a token of the sentence;
* ``status``: ``"unlabeled"`` (no token labeled), ``"partial"``, ``"complete"``;
* ``conflicts``: a token whose votes from different annotators disagree (a label against
  another label or against a cleared "no label"; labels imported with a file are not votes
  of an annotator and never conflict).

Sentences are numbered as the app shows them: ``position + 1`` (positions are per project,
held-out sentences included).
"""

from __future__ import annotations

import re

from sqlalchemy import bindparam, text

from gpsl.annotation.store.db import Database, loads

STATUSES = ("unlabeled", "partial", "complete")
_STATUS_SQL = {"unlabeled": "s.n_labeled = 0",
               "partial": "s.n_labeled > 0 AND s.n_labeled < s.n_tokens",
               "complete": "s.n_labeled = s.n_tokens"}
_CONFLICT_SQL = ("SELECT sentence_id, token_index FROM votes WHERE source <> 'import'"
                 " GROUP BY sentence_id, token_index"
                 " HAVING COUNT(DISTINCT COALESCE(label, '')) > 1")


def _like_pattern(word: str) -> str:
    return "%" + re.sub(r"([\\%_])", r"\\\1", word.lower()) + "%"


def _text_marks(tokens: list[str], needle: str) -> list[int] | None:
    """Indices of the tokens covered by the occurrences of ``needle`` in the sentence text
    (tokens joined by one space), or None when it does not occur."""
    hay = " ".join(tokens).casefold()
    needle = needle.casefold()
    starts, pos = [], 0
    for tok in tokens:
        starts.append(pos)
        pos += len(tok) + 1
    marks: set[int] = set()
    at = hay.find(needle)
    if at < 0:
        return None
    while at >= 0:
        end = at + len(needle)
        marks.update(t for t, s in enumerate(starts) if s < end and s + len(tokens[t]) > at)
        at = hay.find(needle, at + 1)
    return sorted(marks)


def find(db: Database, project_id: int, *, text_query: str | None = None,
         label: str | None = None, annotator: str | None = None, status: str | None = None,
         conflicts: bool = False, split: str | None = "train", offset: int = 0,
         limit: int | None = 20) -> dict:
    """Sentences of a project matching every given filter, in position order.

    Returns ``dict(total, hits)``; each hit is ``dict(sentence_id, number (position + 1),
    split, n_tokens, n_labeled, tokens (first column), marks)`` where ``marks`` are the
    indices of the tokens that matched (the text, the label, the annotator's votes or the
    conflicting votes)."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    needle = " ".join((text_query or "").split())
    where = ["s.project_id = :p"]
    args: dict = {"p": project_id}
    if split is not None:
        where.append("s.split = :split")
        args["split"] = split
    if status is not None:
        where.append(_STATUS_SQL[status])
    for k, word in enumerate(needle.split()):
        if word.isascii():  # SQLite's LOWER and LIKE fold ASCII letters only
            where.append(f"LOWER(s.tokens) LIKE :w{k} ESCAPE '\\'")
            args[f"w{k}"] = _like_pattern(word)
    if label:
        where.append("EXISTS (SELECT 1 FROM derived_labels d WHERE d.sentence_id = s.id"
                     " AND d.label = :label)")
        args["label"] = label
    if annotator:
        where.append("EXISTS (SELECT 1 FROM votes v WHERE v.sentence_id = s.id"
                     " AND v.annotator = :ann)")
        args["ann"] = annotator
    if conflicts:
        where.append(f"s.id IN (SELECT sentence_id FROM ({_CONFLICT_SQL}) c)")
    cond = " AND ".join(where)
    offset = max(0, int(offset))

    def tx(conn):
        if needle:
            rows = conn.execute(text(
                "SELECT s.id, s.position, s.split, s.n_tokens, s.n_labeled, s.tokens FROM"
                f" sentences s WHERE {cond} ORDER BY s.position"), args).fetchall()
            found = []
            for r in rows:
                toks = [str(tok[0]) for tok in loads(r[5])]
                marks = _text_marks(toks, needle)
                if marks is not None:
                    found.append((r, toks, marks))
            total = len(found)
            page = found[offset:None if limit is None else offset + int(limit)]
        else:
            total = conn.execute(text(f"SELECT COUNT(*) FROM sentences s WHERE {cond}"),
                                 args).scalar_one()
            rows = conn.execute(text(
                "SELECT s.id, s.position, s.split, s.n_tokens, s.n_labeled, s.tokens FROM"
                f" sentences s WHERE {cond} ORDER BY s.position LIMIT :lim OFFSET :off"),
                {**args, "lim": 2 ** 62 if limit is None else int(limit),
                 "off": offset}).fetchall()
            page = [(r, [str(tok[0]) for tok in loads(r[5])], []) for r in rows]
        ids = [r[0] for r, _, _ in page]
        extra: dict[int, set[int]] = {sid: set() for sid in ids}
        if ids:
            queries = []
            if label:
                queries.append(("SELECT sentence_id, token_index FROM derived_labels WHERE"
                                " label = :label AND sentence_id IN :ids", {"label": label}))
            if annotator:
                queries.append(("SELECT sentence_id, token_index FROM votes WHERE"
                                " annotator = :ann AND sentence_id IN :ids", {"ann": annotator}))
            if conflicts:
                queries.append((f"SELECT sentence_id, token_index FROM ({_CONFLICT_SQL}) c"
                                " WHERE sentence_id IN :ids", {}))
            for sql, a in queries:
                for sid, t in conn.execute(text(sql).bindparams(
                        bindparam("ids", expanding=True)), {**a, "ids": ids}):
                    extra[sid].add(t)
        hits = [{"sentence_id": r[0], "number": r[1] + 1, "split": r[2], "n_tokens": r[3],
                 "n_labeled": r[4], "tokens": toks, "marks": sorted(set(marks) | extra[r[0]])}
                for r, toks, marks in page]
        return {"total": int(total), "hits": hits}

    return db.read(tx)


def annotators(db: Database, project_id: int) -> list[str]:
    """Everyone with a vote in the project (imports included), sorted."""
    return db.read(lambda conn: [r[0] for r in conn.execute(text(
        "SELECT DISTINCT v.annotator FROM votes v JOIN sentences s ON s.id = v.sentence_id"
        " WHERE s.project_id = :p ORDER BY v.annotator"), {"p": project_id})])


def by_number(db: Database, project_id: int, number: int) -> dict | None:
    """The sentence the app shows as ``Sentence <number>``: ``dict(sentence_id, split)``,
    or None when the project has no such sentence."""
    r = db.read(lambda conn: conn.execute(text(
        "SELECT id, split FROM sentences WHERE project_id = :p AND position = :pos"),
        {"p": project_id, "pos": int(number) - 1}).first())
    return None if r is None else {"sentence_id": r[0], "split": r[1]}


def numbers(db: Database, project_id: int, split: str | None = None) -> tuple[int, int, int]:
    """``(first, last, count)`` of the sentence numbers of a project (of one split);
    ``(0, 0, 0)`` without sentences."""
    sql = "SELECT MIN(position), MAX(position), COUNT(*) FROM sentences WHERE project_id = :p"
    args: dict = {"p": project_id}
    if split is not None:
        sql += " AND split = :split"
        args["split"] = split
    lo, hi, n = db.read(lambda conn: conn.execute(text(sql), args).one())
    return (0, 0, 0) if not n else (int(lo) + 1, int(hi) + 1, int(n))


def token_history(db: Database, sentence_id: int, token_index: int,
                  limit: int | None = 50) -> list[dict]:
    """Every change of a token's votes, newest first: ``dict(id, annotator, action,
    old_label, new_label, source, at, undone)`` (``action``: set, clear, undo, import)."""
    rows = db.read(lambda conn: conn.execute(text(
        "SELECT id, annotator, action, old_label, new_label, source, at, undone_by FROM"
        " annotation_history WHERE sentence_id = :s AND token_index = :t ORDER BY id DESC"
        " LIMIT :n"), {"s": sentence_id, "t": int(token_index),
                       "n": 2 ** 62 if limit is None else int(limit)}).fetchall(),
        single=True)
    return [{"id": r[0], "annotator": r[1], "action": r[2], "old_label": r[3],
             "new_label": r[4], "source": r[5], "at": r[6], "undone": r[7] is not None}
            for r in rows]


__all__ = ["STATUSES", "annotators", "by_number", "find", "numbers", "token_history"]
