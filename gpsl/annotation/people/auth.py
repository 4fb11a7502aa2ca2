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
* **Rate limit**: every try counts as a failure *before* the password is checked, in the
  same write transaction as the check of the limit (:func:`_take_attempt`: one lock, so
  simultaneous tries are counted one after another), and a right password takes its count
  back.  A name may fail :data:`MAX_FAILURES_PER_NAME` times in :data:`WINDOW_MINUTES`
  minutes, then waits 2, 4, 8, ... seconds after each failure, at most
  :data:`MAX_BACKOFF_SECONDS` (:func:`backoff_seconds`): a stranger slows an account down,
  never locks it out.  One client address may fail :data:`MAX_FAILURES_PER_CLIENT` times in
  the window, then waits until the oldest failure leaves it; the same for setup tokens
  (:data:`MAX_SETUP_FAILURES` in the window, whoever tries).  The password (an argon2 hash)
  is not checked while a key waits.
* **Client address**: the peer of the connection, unless it is one of the trusted proxies
  (``GPSL_TRUSTED_PROXIES``: addresses or networks, comma-separated) and the request carries
  the proxy's header (``GPSL_PROXY_HEADER``, e.g. ``X-Forwarded-For`` or ``X-Real-IP``): then
  the nearest address in that header that is not a trusted proxy (:func:`client_address`).
  Without both settings every header is ignored (a client cannot choose its address).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from gpsl.annotation.people import accounts
from gpsl.annotation.people.accounts import Identity
from gpsl.annotation.store.db import Database, now
from gpsl.annotation.store.store_errors import TooManyAttempts
from gpsl.errors import InputError

LINK_HOURS = 24
SESSION_DAYS = 14
SETUP_HOURS = 24
WINDOW_MINUTES = 15
MAX_FAILURES_PER_NAME = 5
MAX_FAILURES_PER_CLIENT = 20
BACKOFF_BASE_SECONDS = 2.0  # the first wait of a name past its free failures
MAX_BACKOFF_SECONDS = 60
_LIMIT_LOCK = 0x7369676E  # the advisory lock of the rate limit (PostgreSQL)
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

PROXY_HEADER_ENV = "GPSL_PROXY_HEADER"
TRUSTED_PROXIES_ENV = "GPSL_TRUSTED_PROXIES"


def _networks(spec: str) -> list:
    nets = []
    for part in spec.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            nets.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise InputError(f"{TRUSTED_PROXIES_ENV}: {part[:60]!r} is no address or network",
                             source="<settings>") from None
    return nets


def _address(text_) -> ipaddress._BaseAddress | None:
    text_ = str(text_ or "").strip().strip('"')
    if text_.lower().startswith("for="):  # RFC 7239 Forwarded: for="[::1]:80"
        text_ = text_[4:].strip('"')
    if text_.startswith("["):
        text_ = text_[1:].split("]", 1)[0]
    elif text_.count(":") == 1:  # 1.2.3.4:5678
        text_ = text_.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text_)
    except ValueError:
        return None


def client_address(peer: str | None, headers=None, header: str | None = None,
                   trusted: str | None = None) -> str:
    """The address the sign-in limit counts for a request from ``peer`` with ``headers``:
    ``peer`` itself unless it is a trusted proxy (``trusted``, else ``GPSL_TRUSTED_PROXIES``)
    and ``header`` (else ``GPSL_PROXY_HEADER``) is present, then the right-most address of
    that header that is not a trusted proxy (each proxy appends the address it saw, so the
    addresses left of it are the client's to choose)."""
    header = (os.environ.get(PROXY_HEADER_ENV, "") if header is None else header).strip()
    nets = _networks(os.environ.get(TRUSTED_PROXIES_ENV, "") if trusted is None else trusted)
    peer_s = str(peer) if isinstance(peer, str) and peer else "loopback"
    near = _address(peer_s)
    if not header or not nets or near is None or not any(near in n for n in nets):
        return peer_s
    value = (headers or {}).get(header) if hasattr(headers, "get") else None
    if not value:
        return peer_s
    for part in reversed(str(value)[:4000].split(",")):
        if header.lower() == "forwarded":  # for=...;proto=... (RFC 7239)
            part = next((p for p in part.split(";") if p.strip().lower().startswith("for=")),
                        "")
        addr = _address(part)
        if addr is None:
            break  # garbage in the header: count the proxy's last trusted hop
        if not any(addr in n for n in nets):
            return str(addr)
        near = addr
    return str(near)


def _name_key(name) -> str:
    return f"name:{' '.join(str(name or '').split()).lower()[:120]}"


def _client_key(client) -> str:
    return f"client:{str(client)[:120]}"


def _keys(name, client) -> list[tuple[str, int]]:
    keys = [(_name_key(name), MAX_FAILURES_PER_NAME)]
    if client:
        keys.append((_client_key(client), MAX_FAILURES_PER_CLIENT))
    return keys


def backoff_seconds(failures: int) -> float:
    """How long a name waits after its last failure, with ``failures`` failures in the
    window: nothing for the first :data:`MAX_FAILURES_PER_NAME`, then 2, 4, 8, ... seconds,
    at most :data:`MAX_BACKOFF_SECONDS` (a stranger can make an account wait that long, never
    lock it out)."""
    extra = failures - MAX_FAILURES_PER_NAME
    return 0.0 if extra < 0 else float(min(MAX_BACKOFF_SECONDS,
                                           BACKOFF_BASE_SECONDS * 2.0 ** min(extra, 30)))


def _wait_line(seconds: float) -> str:
    if seconds < 90:
        n = max(1, int(seconds + 0.999))
        return f"{n} second{'s' if n > 1 else ''}"
    n = max(1, int(seconds // 60) + 1)
    return f"{n} minute{'s' if n > 1 else ''}"


def _limit_wait(conn, key: str, most: int) -> float:
    """Seconds this key must still wait (0: it may try now): a name backs off
    exponentially after its last failure (:func:`backoff_seconds`), a client (or the setup
    door) waits until the oldest of its ``most`` failures in the window leaves it."""
    rows = conn.execute(text("SELECT at FROM sign_in_failures WHERE key = :k AND at > :s"
                             " ORDER BY at"), {"k": key, "s": _since(WINDOW_MINUTES)}).fetchall()
    now_ = datetime.now(UTC)
    if key.startswith("name:"):
        if not rows:
            return 0.0
        last = datetime.fromisoformat(rows[-1][0])
        return max(0.0, (last + timedelta(seconds=backoff_seconds(len(rows))) - now_)
                   .total_seconds())
    if len(rows) < most:
        return 0.0
    oldest = datetime.fromisoformat(rows[len(rows) - most][0])
    return max(1.0, (oldest + timedelta(minutes=WINDOW_MINUTES) - now_).total_seconds())


def _take_attempt(db: Database, keys: list[tuple[str, int]], what: str) -> list[int]:
    """Check the limit and count this attempt as a failure in one write transaction (under
    one lock: PostgreSQL's advisory lock, SQLite's ``BEGIN IMMEDIATE``), so simultaneous
    attempts are counted one after the other and never all pass the check; the ids of the
    rows written (deleted again when the attempt succeeds).  :class:`TooManyAttempts` when
    a key must wait, and then nothing is written."""

    def tx(conn):
        db.lock(conn, _LIMIT_LOCK)
        for key, most in keys:
            wait = _limit_wait(conn, key, most)
            if wait > 0:
                whose = {"name": "for this name", "client": "from here"}.get(
                    key.split(":", 1)[0], "")
                raise TooManyAttempts(" ".join(f"too many failed {what} {whose}: try again "
                                               f"in {_wait_line(wait)}".split()))
        conn.execute(text("DELETE FROM sign_in_failures WHERE at <= :s"),
                     {"s": _since(WINDOW_MINUTES)})
        at = now()
        return [conn.execute(text("INSERT INTO sign_in_failures (key, at) VALUES (:k, :at)"
                                  " RETURNING id"), {"k": key, "at": at}).scalar_one()
                for key, _ in keys]

    return db.write(tx)


def _forget_attempt(db: Database, ids: list[int], clear_key: str | None = None) -> None:
    """An attempt that succeeded: its rows go, and ``clear_key``'s earlier failures too."""

    def tx(conn):
        conn.execute(text("DELETE FROM sign_in_failures WHERE id = :i"),
                     [{"i": i} for i in ids])
        if clear_key is not None:
            conn.execute(text("DELETE FROM sign_in_failures WHERE key = :k"), {"k": clear_key})

    db.write(tx)


def sign_in(db: Database, name: str, password: str,
            client: str | None = None) -> tuple[Identity, str] | None:
    """Sign in by name and password: ``(identity, session token)``, None for a wrong name
    or password (recorded against the name and the client), :class:`TooManyAttempts` when
    the name must still back off or the client has too many recent failures (the password
    is then not even checked).  The check and the count are one atomic step
    (:func:`_take_attempt`): of simultaneous tries, at most :data:`MAX_FAILURES_PER_NAME`
    have their password checked."""
    keys = _keys(name, client)
    ids = _take_attempt(db, keys, "sign-ins")
    who = accounts.check_password_of(db, name, password)
    if who is None:  # the failure dates from now, after the (slow) check of the password
        db.write(lambda conn: conn.execute(text(
            "UPDATE sign_in_failures SET at = :at WHERE id = :i"),
            [{"at": now(), "i": i} for i in ids]))
        return None
    _forget_attempt(db, ids, keys[0][0])
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
    keys = [("setup", MAX_SETUP_FAILURES)] + ([(_client_key(client),
                                                MAX_FAILURES_PER_CLIENT)] if client else [])
    name = accounts.check_name(name)
    hashed = accounts.hash_password(password, name)
    ids = _take_attempt(db, keys, "setup attempts")

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

    try:
        got = db.write(tx)
    except BaseException:
        _forget_attempt(db, ids)  # not a wrong token: the store has accounts, or it failed
        raise
    if got is None:
        raise InputError("the setup token is not valid (wrong, used or expired): use the "
                         "newest one the server printed", source="<setup>")
    return got
