"""The door: sign-in links, sessions, the first lead's setup token and the sign-in rate limit.

* A **sign-in link** (``?token=...``) is issued by a lead for one account: it is good for
  **one** sign-in within :data:`LINK_HOURS` hours (redeeming it deletes it), and issuing a new
  one revokes the account's older links.
* A **session** is what a browser keeps after signing in (by password, link or setup token):
  the app keeps its token out of every URL (in a cookie and the tab's server-side state); it
  expires after :data:`SESSION_DAYS` days, ends at sign-out, and every session of an account
  ends when a lead revokes them, the password or role changes or the account is deleted.
* A **setup token** creates the first lead account when the app is served beyond a loopback
  address (never first-come): printed by the server on the console while the store has no
  account, good for :data:`SETUP_HOURS` hours and one use.
* Links, sessions and setup tokens are 256-bit random tokens (:func:`secrets.token_urlsafe`)
  of which only the SHA-256 hash is stored: a token is a random key, not a password, so a
  fast hash is enough (nobody can guess a 256-bit preimage) and a token is found by its hash
  in one indexed look-up.
* **Rate limit**: after :data:`MAX_FAILURES_PER_NAME` failed sign-ins for one name, or
  :data:`MAX_FAILURES_PER_CLIENT` from one client address, within :data:`WINDOW_MINUTES`
  minutes, further tries are refused (:class:`TooManyAttempts`) without checking the
  password (which costs an argon2 hash) until the oldest failure leaves the window; the same
  for setup tokens (:data:`MAX_SETUP_FAILURES` in the window, whoever tries).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from gpsl.annotation import accounts
from gpsl.annotation.accounts import Identity
from gpsl.annotation.db import Database, now
from gpsl.annotation.errors import TooManyAttempts
from gpsl.errors import InputError

LINK_HOURS = 24
SESSION_DAYS = 14
SETUP_HOURS = 24
WINDOW_MINUTES = 15
MAX_FAILURES_PER_NAME = 5
MAX_FAILURES_PER_CLIENT = 20
MAX_SETUP_FAILURES = 10
MAX_TOKEN = 200  # a longer "token" is no token of ours: refused unread


def token_hash(token: str) -> str:
    return hashlib.sha256(str(token).encode("utf-8", errors="replace")).hexdigest()


def _expiry(hours: float) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat(timespec="milliseconds")


def _since(minutes: float) -> str:
    return (datetime.now(UTC) - timedelta(minutes=minutes)).isoformat(timespec="milliseconds")


def _plausible(token) -> bool:
    return isinstance(token, str) and 0 < len(token) <= MAX_TOKEN


def _new_token(conn, account_id: int, kind: str, hours: float) -> str:
    token = secrets.token_urlsafe(32)
    conn.execute(text("INSERT INTO auth_tokens (token_hash, account_id, kind, created_at,"
                      " expires_at) VALUES (:h, :a, :k, :at, :exp)"),
                 {"h": token_hash(token), "a": account_id, "k": kind, "at": now(),
                  "exp": _expiry(hours)})
    return token


def _identity(conn, token: str | None, kind: str) -> Identity | None:
    if not _plausible(token):
        return None
    r = conn.execute(text(
        "SELECT a.id, a.name, a.role FROM auth_tokens t JOIN accounts a ON a.id = t.account_id"
        " WHERE t.token_hash = :h AND t.kind = :k AND t.expires_at > :now"),
        {"h": token_hash(token), "k": kind, "now": now()}).first()
    return None if r is None else Identity(r[1], r[2], r[0])


# ----------------------------------------------------------------------------- links


def issue_link(db: Database, account_id: int, hours: float = LINK_HOURS) -> str:
    """A new sign-in link token for an account (its older links stop working): one use,
    within ``hours``."""
    if not 0 < float(hours) <= 24 * 30:
        raise InputError("a sign-in link lasts between a moment and 30 days", source="<link>")

    def tx(conn):
        accounts.row(conn, account_id)
        conn.execute(text("DELETE FROM auth_tokens WHERE account_id = :a AND kind = 'link'"),
                     {"a": account_id})
        return _new_token(conn, account_id, "link", hours)

    return db.write(tx)


def redeem_link(db: Database, token: str | None) -> tuple[Identity, str] | None:
    """Sign in with a link token: ``(identity, new session token)``, or None when the link
    is unknown, already used, revoked or expired.  The link is used up: a second opening
    (a shared or leaked URL, the browser's history) signs nobody in."""

    def tx(conn):
        who = _identity(conn, token, "link")
        if who is None:
            return None
        gone = conn.execute(text("DELETE FROM auth_tokens WHERE token_hash = :h AND kind ="
                                 " 'link'"), {"h": token_hash(token)}).rowcount
        if gone != 1:  # a concurrent opening of the same link took it
            return None
        return who, _new_token(conn, who.account_id, "session", SESSION_DAYS * 24)

    return db.write(tx)


# ----------------------------------------------------------------------------- sessions


def start_session(db: Database, account_id: int, days: float = SESSION_DAYS) -> str:
    """A new session token for an account (after a password, link or setup sign-in)."""

    def tx(conn):
        accounts.row(conn, account_id)
        conn.execute(text("DELETE FROM auth_tokens WHERE expires_at <= :now"), {"now": now()})
        return _new_token(conn, account_id, "session", days * 24)

    return db.write(tx)


def session_identity(db: Database, token: str | None) -> Identity | None:
    """The identity of a session token, or None (unknown, ended or expired)."""
    if not _plausible(token):
        return None
    return db.read(lambda conn: _identity(conn, token, "session"))


def end_session(db: Database, token: str | None) -> None:
    if _plausible(token):
        db.write(lambda conn: conn.execute(text(
            "DELETE FROM auth_tokens WHERE token_hash = :h AND kind = 'session'"),
            {"h": token_hash(token)}))


def end_sessions(db: Database, account_id: int) -> int:
    """Revoke every session of an account (it signs in again everywhere); how many."""

    def tx(conn):
        accounts.row(conn, account_id)
        return accounts.end_sessions(conn, account_id)

    return db.write(tx)


# ----------------------------------------------------------------------------- rate limit


def _keys(name, client) -> list[tuple[str, int]]:
    keys = [(f"name:{' '.join(str(name or '').split()).lower()[:120]}", MAX_FAILURES_PER_NAME)]
    if client:
        keys.append((f"client:{str(client)[:120]}", MAX_FAILURES_PER_CLIENT))
    return keys


def _refuse_if_limited(conn, keys: list[tuple[str, int]], what: str) -> None:
    since = _since(WINDOW_MINUTES)
    for key, most in keys:
        rows = conn.execute(text("SELECT at FROM sign_in_failures WHERE key = :k AND at > :s"
                                 " ORDER BY at"), {"k": key, "s": since}).fetchall()
        if len(rows) >= most:
            oldest = datetime.fromisoformat(rows[len(rows) - most][0])
            wait = oldest + timedelta(minutes=WINDOW_MINUTES) - datetime.now(UTC)
            minutes = max(1, int(wait.total_seconds() // 60) + 1)
            whose = "for this name" if key.startswith("name:") else "from here"
            raise TooManyAttempts(f"too many failed {what} {whose}: try again in {minutes} "
                                  f"minute{'s' if minutes > 1 else ''}")


def _record_failure(db: Database, keys: list[tuple[str, int]]) -> None:
    def tx(conn):
        at = now()
        conn.execute(text("DELETE FROM sign_in_failures WHERE at <= :s"),
                     {"s": _since(WINDOW_MINUTES)})
        conn.execute(text("INSERT INTO sign_in_failures (key, at) VALUES (:k, :at)"),
                     [{"k": key, "at": at} for key, _ in keys])

    db.write(tx)


def sign_in(db: Database, name: str, password: str,
            client: str | None = None) -> tuple[Identity, str] | None:
    """Sign in by name and password: ``(identity, session token)``, None for a wrong name
    or password (recorded against the name and the client), :class:`TooManyAttempts` when
    either has too many recent failures (the password is then not even checked)."""
    keys = _keys(name, client)
    db.read(lambda conn: _refuse_if_limited(conn, keys, "sign-ins"))
    who = accounts.check_password_of(db, name, password)
    if who is None:
        _record_failure(db, keys)
        return None
    db.write(lambda conn: conn.execute(text("DELETE FROM sign_in_failures WHERE key = :k"),
                                       {"k": keys[0][0]}))
    return who, start_session(db, who.account_id)


# ----------------------------------------------------------------------------- first lead


def issue_setup_token(db: Database, hours: float = SETUP_HOURS) -> str | None:
    """A one-time token that creates the first lead account (:func:`setup_lead`), valid
    ``hours``; older setup tokens stop working.  None once an account exists (setup is
    over)."""

    def tx(conn):
        if conn.execute(text("SELECT COUNT(*) FROM accounts")).scalar_one():
            return None
        conn.execute(text("DELETE FROM setup_tokens"))
        token = secrets.token_urlsafe(32)
        conn.execute(text("INSERT INTO setup_tokens (token_hash, created_at, expires_at)"
                          " VALUES (:h, :at, :exp)"),
                     {"h": token_hash(token), "at": now(), "exp": _expiry(hours)})
        return token

    return db.write(tx)


def setup_lead(db: Database, token: str, name: str, password: str,
               client: str | None = None) -> tuple[Identity, str]:
    """Create the first lead account with a setup token, and a session for it: the token
    is used up, the store leaves single-user mode.  A wrong or expired token is an
    :class:`InputError` (and counts for the rate limit); once an account exists no setup
    token works."""
    keys = [("setup", MAX_SETUP_FAILURES)] + ([(f"client:{str(client)[:120]}",
                                                MAX_FAILURES_PER_CLIENT)] if client else [])
    db.read(lambda conn: _refuse_if_limited(conn, keys, "setup attempts"))
    name = accounts.check_name(name)
    hashed = accounts.hash_password(password, name)

    def tx(conn):
        ok = _plausible(token) and conn.execute(text(
            "DELETE FROM setup_tokens WHERE token_hash = :h AND expires_at > :now"),
            {"h": token_hash(token), "now": now()}).rowcount == 1
        if not ok:
            return None
        if conn.execute(text("SELECT COUNT(*) FROM accounts")).scalar_one():
            raise InputError("the store has accounts already: sign in instead",
                             source="<setup>")
        aid = accounts.insert(conn, db, name, "lead", hashed)
        conn.execute(text("DELETE FROM setup_tokens"))
        return Identity(name, "lead", aid), _new_token(conn, aid, "session",
                                                       SESSION_DAYS * 24)

    got = db.write(tx)
    if got is None:
        _record_failure(db, keys)
        raise InputError("the setup token is not valid (wrong, used or expired): use the "
                         "newest one the server printed", source="<setup>")
    return got
