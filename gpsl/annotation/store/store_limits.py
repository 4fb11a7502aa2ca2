"""The limits a lead sets for a store (``store_info.limits``, schema 7): the upload size and
the tokens per sentence of the app's imports, each within the hard ceiling the server was
started with (:func:`gpsl.limits.upload_ceiling_mb`, :func:`gpsl.limits.tokens_ceiling`);
unset, the server's defaults (:mod:`gpsl.limits`).

The app's own exports always import back: a file over the upload limit is still taken when
it is no larger than the store's own largest export could be (:func:`export_bound`), and a
sentence as long as the store's longest is never refused."""

from __future__ import annotations

import json

from sqlalchemy import text

from gpsl import limits
from gpsl.annotation.store.db import Database
from gpsl.errors import InputError

#: characters per token an export writes besides the token and its label (separators,
#: quotes, brackets), and per sentence (its line ends, the JSONL keys)
TOKEN_EXTRA, SENTENCE_EXTRA = 8, 64


def get(db: Database) -> dict:
    """``{"upload_mb": float | None, "max_tokens": int | None}`` as the lead set them (None:
    the server's default)."""
    raw = db.read(lambda c: c.execute(text(
        "SELECT value FROM store_info WHERE key = 'limits'")).scalar())
    found = json.loads(raw) if raw else {}
    return {"upload_mb": found.get("upload_mb"), "max_tokens": found.get("max_tokens")}


def put(db: Database, upload_mb: float | None = None, max_tokens: int | None = None) -> dict:
    """Set the store's limits (None: back to the server's default); a value that is not a
    positive number or is over its ceiling is refused with one line, and nothing changes."""
    for name, value, ceiling, unit in (
            ("upload size", upload_mb, limits.upload_ceiling_mb(), "MB"),
            ("tokens per sentence", max_tokens, limits.tokens_ceiling(), "tokens")):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise InputError(f"{name}: expected a positive number, got {value!r}",
                             source="limits")
        if value > ceiling:
            raise InputError(f"{name}: {value:g} {unit} is over the ceiling of {ceiling:g} "
                             f"{unit} set when the server started", source="limits")
    body = json.dumps({"upload_mb": None if upload_mb is None else float(upload_mb),
                       "max_tokens": None if max_tokens is None else int(max_tokens)})

    def tx(conn):
        conn.execute(text("DELETE FROM store_info WHERE key = 'limits'"))
        conn.execute(text("INSERT INTO store_info (key, value) VALUES ('limits', :v)"),
                     {"v": body})

    db.write(tx)
    return get(db)


def effective(db: Database) -> tuple[int | None, int | None]:
    """``(bytes per upload, tokens per sentence)`` in force (None: no limit): the lead's,
    never above the ceiling in force now, else the server's defaults."""
    mine = get(db)
    size = limits.max_upload_bytes() if mine["upload_mb"] is None else \
        int(min(mine["upload_mb"], limits.upload_ceiling_mb()) * limits.MB)
    tokens = limits.max_tokens() if mine["max_tokens"] is None else \
        min(int(mine["max_tokens"]), limits.tokens_ceiling())
    return size, tokens


def export_bound(db: Database) -> tuple[int, int]:
    """``(bytes, tokens)``: no CoNLL or JSONL export of one project of the store is larger,
    and none of its sentences longer (the tokens as stored, JSON, plus each token's longest
    label and separators)."""
    octets = "OCTET_LENGTH(tokens)" if db.dialect == "postgresql" else \
        "LENGTH(CAST(tokens AS BLOB))"

    def tx(conn):
        rows = conn.execute(text(
            f"SELECT project_id, SUM({octets}), SUM(n_tokens), COUNT(*), MAX(n_tokens)"
            " FROM sentences GROUP BY project_id")).fetchall()
        labels = dict(conn.execute(text("SELECT id, labels FROM projects")).fetchall())
        return rows, labels

    rows, labels = db.read(tx)
    size, longest = 0, 0
    for pid, chars, n_tok, n_sent, most in rows:
        label = max((len(lab) for lab in json.loads(labels.get(pid) or "[]")), default=1)
        size = max(size, int(chars or 0) + int(n_tok or 0) * (label + TOKEN_EXTRA)
                   + int(n_sent or 0) * SENTENCE_EXTRA)
        longest = max(longest, int(most or 0))
    return size, longest


def for_upload(db: Database, n_bytes: int) -> tuple[int | None, int | None]:
    """The limits an upload of ``n_bytes`` is read under: :func:`effective`; a file over the
    size limit but no larger than the store's own largest export can be
    (:func:`export_bound`) nor the ceiling is not held to it (``None``), and the token limit
    is raised to the store's longest sentence, so that the app's own exports always import
    back.  A file that is refused is told the limit in force."""
    size, tokens = effective(db)
    if size is not None and n_bytes > size and \
            n_bytes <= min(export_bound(db)[0], limits.upload_ceiling_mb() * limits.MB):
        size = None
    if tokens is not None:
        longest = db.read(lambda c: c.execute(text("SELECT MAX(n_tokens) FROM sentences"))
                          .scalar())
        tokens = max(tokens, int(longest or 0))
    return size, tokens
