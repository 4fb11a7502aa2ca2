"""Accounts, roles, sign-in links and sessions of an annotation team.

* An **account** has a unique name (the name every vote of that person is credited to), a
  role (``lead``: settings, training, import/export, adjudication, deleting; ``annotator``:
  labels only) and optionally a password, stored as an argon2id hash (argon2-cffi's
  :class:`~argon2.PasswordHasher` with its default, RFC 9106 low-memory parameters).
* A **sign-in link** (``?token=...``) is issued by a lead for one account; a **session**
  (``?session=...``) is what a browser tab keeps after signing in (by password or link).
  Both are 256-bit random tokens (:func:`secrets.token_urlsafe`) of which only the SHA-256
  hash is stored: a token is a random key, not a password, so a fast hash is enough (nobody
  can guess a 256-bit preimage) and lets a token be found by its hash in one indexed look-up.
  Both expire (:data:`LINK_DAYS`, :data:`SESSION_DAYS`); issuing a new link revokes the
  account's older links, and deleting an account or changing its password or role ends its
  sessions.
* With **no account at all** the store is in single-user local mode (the app's user is the
  lead); creating the first account (which must be a lead) turns sign-in on.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import text

from gpsl.annotation.db import Database, now
from gpsl.annotation.errors import NotFoundError
from gpsl.errors import InputError

ROLES = ("lead", "annotator")
LINK_DAYS = 14
SESSION_DAYS = 30
MIN_PASSWORD = 8
MAX_NAME = 60
RESERVED = ("import", "adjudicated", "model")  # names the store uses for non-people

_HASHER = PasswordHasher()


class Identity(NamedTuple):
    """Who is using the app: the name votes are credited to, the role, the account id
    (None in single-user local mode) and whether this is the local mode."""

    name: str
    role: str
    account_id: int | None = None
    local: bool = False

    @property
    def is_lead(self) -> bool:
        return self.role == "lead"


def token_hash(token: str) -> str:
    return hashlib.sha256(str(token).encode("utf-8")).hexdigest()


def _expiry(days: float) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat(timespec="milliseconds")


def check_name(name) -> str:
    text_ = " ".join(str(name or "").split())
    if not text_:
        raise InputError("the account name is empty", source="<account>")
    if len(text_) > MAX_NAME:
        raise InputError(f"the account name is longer than {MAX_NAME} characters",
                         source="<account>")
    low = text_.lower()
    if low in RESERVED or low.startswith("import:"):
        raise InputError(f"{text_!r} is reserved for labels that no person set",
                         source="<account>")
    return text_


def check_role(role) -> str:
    if role not in ROLES:
        raise InputError(f"role must be 'lead' or 'annotator', got {role!r}",
                         source="<account>")
    return role


def check_password(password) -> str:
    password = "" if password is None else str(password)
    if len(password) < MIN_PASSWORD:
        raise InputError(f"the password needs at least {MIN_PASSWORD} characters",
                         source="<account>")
    return password


def _as_dict(m) -> dict:
    return {"id": m["id"], "name": m["name"], "role": m["role"],
            "has_password": m["password_hash"] is not None, "created_at": m["created_at"]}


def count(db: Database) -> int:
    """How many accounts there are (0: single-user local mode)."""
    return db.read(lambda conn: conn.execute(text("SELECT COUNT(*) FROM accounts"))
                   .scalar_one())


def list_all(db: Database) -> list[dict]:
    """``dict(id, name, role, has_password, created_at, link_expires)`` by name."""

    def tx(conn):
        links = dict(conn.execute(text(
            "SELECT account_id, MAX(expires_at) FROM auth_tokens WHERE kind = 'link'"
            " AND expires_at > :now GROUP BY account_id"), {"now": now()}).fetchall())
        rows = conn.execute(text("SELECT * FROM accounts ORDER BY name")).fetchall()
        return [{**_as_dict(r._mapping), "link_expires": links.get(r._mapping["id"])}
                for r in rows]

    return db.read(tx)


def create(db: Database, name: str, role: str, password: str | None = None) -> int:
    """A new account; the first one must be a lead (it turns sign-in on).  ``password``
    None: the account signs in by links only."""
    name, role = check_name(name), check_role(role)
    hashed = None if password is None else _HASHER.hash(check_password(password))

    def tx(conn):
        db.lock(conn, 0x61636374)
        n = conn.execute(text("SELECT COUNT(*) FROM accounts")).scalar_one()
        if n == 0 and role != "lead":
            raise InputError("the first account must be a lead (it manages the others)",
                             source="<account>")
        if n == 0 and hashed is None:
            raise InputError("the first account needs a password (a lead signs in with it)",
                             source="<account>")
        if conn.execute(text("SELECT 1 FROM accounts WHERE lower(name) = lower(:n)"),
                        {"n": name}).first():
            raise InputError(f"an account named {name!r} already exists", source="<account>")
        return conn.execute(text(
            "INSERT INTO accounts (name, role, password_hash, created_at)"
            " VALUES (:n, :r, :h, :at) RETURNING id"),
            {"n": name, "r": role, "h": hashed, "at": now()}).scalar_one()

    return db.write(tx)


def _row(conn, account_id: int):
    r = conn.execute(text("SELECT * FROM accounts WHERE id = :i"), {"i": account_id}).first()
    if r is None:
        raise NotFoundError(f"no account with id {account_id}")
    return r._mapping


def _leads_left(conn, without: int) -> int:
    return conn.execute(text("SELECT COUNT(*) FROM accounts WHERE role = 'lead' AND id <> :i"),
                        {"i": without}).scalar_one()


def set_password(db: Database, account_id: int, password: str | None) -> None:
    """Set (or with None remove) an account's password; its sessions end."""
    hashed = None if password is None else _HASHER.hash(check_password(password))

    def tx(conn):
        m = _row(conn, account_id)
        if hashed is None and m["role"] == "lead":
            raise InputError("a lead needs a password", source="<account>")
        conn.execute(text("UPDATE accounts SET password_hash = :h WHERE id = :i"),
                     {"h": hashed, "i": account_id})
        conn.execute(text("DELETE FROM auth_tokens WHERE account_id = :i AND kind = 'session'"),
                     {"i": account_id})

    db.write(tx)


def set_role(db: Database, account_id: int, role: str) -> None:
    """Change an account's role (the last lead stays a lead); its sessions end."""
    role = check_role(role)

    def tx(conn):
        m = _row(conn, account_id)
        if m["role"] == role:
            return
        if role == "annotator" and _leads_left(conn, account_id) == 0:
            raise InputError("the last lead cannot become an annotator", source="<account>")
        if role == "lead" and m["password_hash"] is None:
            raise InputError("give the account a password before making it a lead",
                             source="<account>")
        conn.execute(text("UPDATE accounts SET role = :r WHERE id = :i"),
                     {"r": role, "i": account_id})
        conn.execute(text("DELETE FROM auth_tokens WHERE account_id = :i AND kind = 'session'"),
                     {"i": account_id})

    db.write(tx)


def delete(db: Database, account_id: int) -> None:
    """Delete an account with its links and sessions (its votes stay, credited to its
    name); the last lead cannot be deleted while other accounts exist."""

    def tx(conn):
        m = _row(conn, account_id)
        others = conn.execute(text("SELECT COUNT(*) FROM accounts WHERE id <> :i"),
                              {"i": account_id}).scalar_one()
        if m["role"] == "lead" and others and _leads_left(conn, account_id) == 0:
            raise InputError("the last lead cannot be deleted while other accounts exist",
                             source="<account>")
        conn.execute(text("DELETE FROM auth_tokens WHERE account_id = :i"), {"i": account_id})
        conn.execute(text("DELETE FROM accounts WHERE id = :i"), {"i": account_id})

    db.write(tx)


def verify_password(db: Database, name: str, password: str) -> Identity | None:
    """The account's identity when ``password`` is right, else None (also for an unknown
    name or an account without a password; the hash is checked either way)."""
    r = db.read(lambda conn: conn.execute(text(
        "SELECT * FROM accounts WHERE lower(name) = lower(:n)"),
        {"n": " ".join(str(name or "").split())}).first())
    stored = r._mapping["password_hash"] if r is not None else None
    try:
        _HASHER.verify(stored or _dummy_hash(), str(password or ""))
    except (VerificationError, InvalidHashError):
        return None
    if stored is None:
        return None
    m = r._mapping
    if _HASHER.check_needs_rehash(stored):
        new = _HASHER.hash(str(password))
        db.write(lambda conn: conn.execute(text(
            "UPDATE accounts SET password_hash = :h WHERE id = :i"), {"h": new, "i": m["id"]}))
    return Identity(m["name"], m["role"], m["id"])


@functools.cache
def _dummy_hash() -> str:
    """A hash to verify against for unknown names (the same cost as a real check)."""
    return _HASHER.hash(secrets.token_urlsafe(16))


def _new_token(conn, account_id: int, kind: str, days: float) -> str:
    token = secrets.token_urlsafe(32)
    conn.execute(text("INSERT INTO auth_tokens (token_hash, account_id, kind, created_at,"
                      " expires_at) VALUES (:h, :a, :k, :at, :exp)"),
                 {"h": token_hash(token), "a": account_id, "k": kind, "at": now(),
                  "exp": _expiry(days)})
    return token


def issue_link(db: Database, account_id: int, days: float = LINK_DAYS) -> str:
    """A new sign-in link token for an account (its older links stop working)."""

    def tx(conn):
        _row(conn, account_id)
        conn.execute(text("DELETE FROM auth_tokens WHERE account_id = :a AND kind = 'link'"),
                     {"a": account_id})
        return _new_token(conn, account_id, "link", days)

    return db.write(tx)


def _identity(conn, token: str | None, kind: str) -> Identity | None:
    if not token or len(str(token)) > 200:
        return None
    r = conn.execute(text(
        "SELECT a.id, a.name, a.role FROM auth_tokens t JOIN accounts a ON a.id = t.account_id"
        " WHERE t.token_hash = :h AND t.kind = :k AND t.expires_at > :now"),
        {"h": token_hash(token), "k": kind, "now": now()}).first()
    return None if r is None else Identity(r[1], r[2], r[0])


def start_session(db: Database, account_id: int, days: float = SESSION_DAYS) -> str:
    """A new session token for an account (after a password or link sign-in)."""

    def tx(conn):
        _row(conn, account_id)
        conn.execute(text("DELETE FROM auth_tokens WHERE expires_at <= :now"), {"now": now()})
        return _new_token(conn, account_id, "session", days)

    return db.write(tx)


def redeem_link(db: Database, token: str | None) -> tuple[Identity, str] | None:
    """Sign in with a link token: ``(identity, new session token)``, or None when the link
    is unknown, revoked or expired.  The link stays valid (a bookmark keeps working)."""

    def tx(conn):
        who = _identity(conn, token, "link")
        if who is None:
            return None
        return who, _new_token(conn, who.account_id, "session", SESSION_DAYS)

    return db.write(tx)


def session_identity(db: Database, token: str | None) -> Identity | None:
    """The identity of a session token, or None (unknown, ended or expired)."""
    if not token:
        return None
    return db.read(lambda conn: _identity(conn, token, "session"))


def end_session(db: Database, token: str | None) -> None:
    if token:
        db.write(lambda conn: conn.execute(text(
            "DELETE FROM auth_tokens WHERE token_hash = :h AND kind = 'session'"),
            {"h": token_hash(token)}))
