"""Accounts, roles, passwords and project memberships of an annotation team.

* An **account** has a unique name (the name every vote of that person is credited to, a
  person's name by :func:`gpsl.annotation.store.validate.person`: never a reserved name such as
  ``adjudicated`` or ``import:<file>``), a role (``lead``: settings, training, import/export,
  adjudication, deleting, every project; ``annotator``: labels, in the projects they are a
  member of; the default of every account but the first) and optionally a password, stored as
  an argon2id hash (argon2-cffi's :class:`~argon2.PasswordHasher` with its default, RFC 9106
  low-memory parameters).
* A **password** has at least :data:`MIN_PASSWORD` characters and must not be easy to guess:
  zxcvbn (Dropbox's estimator, with its lists of common and leaked passwords, names and
  words) must rate it at least :data:`MIN_SCORE` of 4, the account's name counting as known
  to an attacker.
* A **membership** lets an annotator see and label one project (:func:`set_member`); leads
  need none.
* With **no account at all** the store is in single-user local mode (the app's user is the
  lead; the app allows it on a loopback address only); the first account, which must be a
  lead with a password, turns sign-in on (:mod:`gpsl.annotation.setup`, or the setup token of
  :mod:`gpsl.annotation.people.auth`).

Sign-in links, sessions, setup tokens and the sign-in rate limit are in
:mod:`gpsl.annotation.people.auth`.
"""

from __future__ import annotations

import functools
import secrets
from typing import NamedTuple

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import text
from zxcvbn import zxcvbn

from gpsl.annotation.store import validate
from gpsl.annotation.store.db import Database, now
from gpsl.annotation.store.store_errors import NotFoundError
from gpsl.errors import InputError

ROLES = ("lead", "annotator")
MIN_PASSWORD = 10
MAX_PASSWORD = 256  # longer is refused unread (an argon2 hash of megabytes is a denial of service)
MIN_SCORE = 3  # zxcvbn's "safely unguessable: moderate protection from an offline attack"
MAX_NAME = validate.MAX_NAME
RESERVED = validate.RESERVED  # names the store uses for non-people

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


def check_name(name) -> str:
    """An account's name: a person's name (:func:`gpsl.annotation.store.validate.person`)."""
    try:
        return validate.person(name, "account name")
    except InputError as exc:
        raise InputError(exc.message, source="<account>") from None


def check_role(role) -> str:
    if role not in ROLES:
        raise InputError(f"role must be 'lead' or 'annotator', got {role!r}",
                         source="<account>")
    return role


def check_password(password, name: str | None = None) -> str:
    """A password good enough for an account named ``name``: :data:`MIN_PASSWORD` to
    :data:`MAX_PASSWORD` characters, rated at least :data:`MIN_SCORE` by zxcvbn (which
    knows the common and leaked passwords, and is told the account's name)."""
    password = "" if password is None else password
    if not isinstance(password, str):
        raise InputError("the password must be text", source="<account>")
    if len(password) < MIN_PASSWORD:
        raise InputError(f"the password needs at least {MIN_PASSWORD} characters (several "
                         "uncommon words are easy to remember)", source="<account>")
    if len(password) > MAX_PASSWORD:
        raise InputError(f"the password is longer than {MAX_PASSWORD} characters",
                         source="<account>")
    validate.text(password, "the password", "<account>")
    known = [n for n in (name or "", "gpsl", "annotation", "annotator", "lead") if n]
    rated = zxcvbn(password[:100], user_inputs=known)
    if rated["score"] < MIN_SCORE:
        hint = rated["feedback"].get("warning") or "it is too easy to guess"
        raise InputError(f"the password is too easy to guess ({hint.rstrip('.')}): use "
                         "several uncommon words, or a longer phrase", source="<account>")
    return password


def _as_dict(m) -> dict:
    return {"id": m["id"], "name": m["name"], "role": m["role"],
            "has_password": m["password_hash"] is not None, "created_at": m["created_at"]}


def count(db: Database) -> int:
    """How many accounts there are (0: single-user local mode)."""
    return db.read(lambda conn: conn.execute(text("SELECT COUNT(*) FROM accounts"))
                   .scalar_one(), single=True)


def list_all(db: Database) -> list[dict]:
    """``dict(id, name, role, has_password, created_at, link_expires, sessions,
    projects)`` by name (``projects``: the ids of the projects the account is a member of)."""

    def tx(conn):
        at = now()
        links = dict(conn.execute(text(
            "SELECT account_id, MAX(expires_at) FROM auth_tokens WHERE kind = 'link'"
            " AND expires_at > :now GROUP BY account_id"), {"now": at}).fetchall())
        sessions = dict(conn.execute(text(
            "SELECT account_id, COUNT(*) FROM auth_tokens WHERE kind = 'session'"
            " AND expires_at > :now GROUP BY account_id"), {"now": at}).fetchall())
        member: dict[int, list[int]] = {}
        for aid, pid in conn.execute(text(
                "SELECT account_id, project_id FROM memberships ORDER BY project_id")):
            member.setdefault(aid, []).append(pid)
        rows = conn.execute(text("SELECT * FROM accounts ORDER BY name")).fetchall()
        return [{**_as_dict(r._mapping), "link_expires": links.get(r._mapping["id"]),
                 "sessions": int(sessions.get(r._mapping["id"], 0)),
                 "projects": member.get(r._mapping["id"], [])} for r in rows]

    return db.read(tx)


def get(db: Database, account_id: int) -> dict | None:
    def tx(conn):
        r = conn.execute(text("SELECT * FROM accounts WHERE id = :i"),
                         {"i": account_id}).first()
        return None if r is None else _as_dict(r._mapping)

    return db.read(tx)


def hash_password(password: str, name: str | None = None) -> str:
    return _HASHER.hash(check_password(password, name))


def insert(conn, db: Database, name: str, role: str, hashed: str | None) -> int:
    """Insert a checked account (inside a write transaction): the first must be a lead with
    a password; names are unique whatever their case."""
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


def create(db: Database, name: str, role: str = "annotator",
           password: str | None = None) -> int:
    """A new account (an annotator unless said otherwise); the first one must be a lead
    with a password (it turns sign-in on).  ``password`` None: the account signs in by
    links only."""
    name, role = check_name(name), check_role(role)
    hashed = None if password is None else hash_password(password, name)
    return db.write(lambda conn: insert(conn, db, name, role, hashed))


def row(conn, account_id: int):
    r = conn.execute(text("SELECT * FROM accounts WHERE id = :i"), {"i": account_id}).first()
    if r is None:
        raise NotFoundError(f"no account with id {account_id}")
    return r._mapping


def _leads_left(conn, without: int) -> int:
    return conn.execute(text("SELECT COUNT(*) FROM accounts WHERE role = 'lead' AND id <> :i"),
                        {"i": without}).scalar_one()


def end_sessions(conn, account_id: int) -> int:
    """End every session of an account (inside a transaction); how many."""
    return conn.execute(text("DELETE FROM auth_tokens WHERE account_id = :i"
                             " AND kind = 'session'"), {"i": account_id}).rowcount


def set_password(db: Database, account_id: int, password: str | None) -> None:
    """Set (or with None remove) an account's password; its sessions end."""
    name = (get(db, account_id) or {}).get("name")
    hashed = None if password is None else hash_password(password, name)

    def tx(conn):
        m = row(conn, account_id)
        if hashed is None and m["role"] == "lead":
            raise InputError("a lead needs a password", source="<account>")
        conn.execute(text("UPDATE accounts SET password_hash = :h WHERE id = :i"),
                     {"h": hashed, "i": account_id})
        end_sessions(conn, account_id)

    db.write(tx)


def set_role(db: Database, account_id: int, role: str) -> None:
    """Change an account's role (the last lead stays a lead); its sessions end."""
    role = check_role(role)

    def tx(conn):
        m = row(conn, account_id)
        if m["role"] == role:
            return
        if role == "annotator" and _leads_left(conn, account_id) == 0:
            raise InputError("the last lead cannot become an annotator", source="<account>")
        if role == "lead" and m["password_hash"] is None:
            raise InputError("give the account a password before making it a lead",
                             source="<account>")
        conn.execute(text("UPDATE accounts SET role = :r WHERE id = :i"),
                     {"r": role, "i": account_id})
        end_sessions(conn, account_id)

    db.write(tx)


def delete(db: Database, account_id: int) -> None:
    """Delete an account with its links, sessions and memberships (its votes stay,
    credited to its name); the last lead cannot be deleted while other accounts exist."""

    def tx(conn):
        m = row(conn, account_id)
        others = conn.execute(text("SELECT COUNT(*) FROM accounts WHERE id <> :i"),
                              {"i": account_id}).scalar_one()
        if m["role"] == "lead" and others and _leads_left(conn, account_id) == 0:
            raise InputError("the last lead cannot be deleted while other accounts exist",
                             source="<account>")
        conn.execute(text("DELETE FROM auth_tokens WHERE account_id = :i"), {"i": account_id})
        conn.execute(text("DELETE FROM memberships WHERE account_id = :i"), {"i": account_id})
        conn.execute(text("DELETE FROM accounts WHERE id = :i"), {"i": account_id})

    db.write(tx)


def check_password_of(db: Database, name: str, password: str) -> Identity | None:
    """The account's identity when ``password`` is right, else None (also for an unknown
    name or an account without a password; the hash is checked either way, so both take
    the same time).  No rate limit here: :func:`gpsl.annotation.people.auth.sign_in` is the door."""
    if not isinstance(password, str) or len(password) > MAX_PASSWORD:
        return None
    r = db.read(lambda conn: conn.execute(text(
        "SELECT * FROM accounts WHERE lower(name) = lower(:n)"),
        {"n": " ".join(str(name or "").split())[:MAX_NAME * 2]}).first())
    stored = r._mapping["password_hash"] if r is not None else None
    try:
        _HASHER.verify(stored or _dummy_hash(), password)
    except (VerificationError, InvalidHashError):
        return None
    if stored is None:
        return None
    m = r._mapping
    if _HASHER.check_needs_rehash(stored):
        new = _HASHER.hash(password)
        db.write(lambda conn: conn.execute(text(
            "UPDATE accounts SET password_hash = :h WHERE id = :i"), {"h": new, "i": m["id"]}))
    return Identity(m["name"], m["role"], m["id"])


verify_password = check_password_of


@functools.cache
def _dummy_hash() -> str:
    """A hash to verify against for unknown names (the same cost as a real check)."""
    return _HASHER.hash(secrets.token_urlsafe(16))


# ----------------------------------------------------------------------------- memberships


def is_member(conn, project_id: int, account_id: int) -> bool:
    return conn.execute(text("SELECT 1 FROM memberships WHERE project_id = :p"
                             " AND account_id = :a"),
                        {"p": project_id, "a": account_id}).first() is not None


def projects_of(db: Database, account_id: int) -> list[int]:
    """The ids of the projects an account is a member of."""
    return [r[0] for r in db.read(lambda conn: conn.execute(text(
        "SELECT project_id FROM memberships WHERE account_id = :a ORDER BY project_id"),
        {"a": account_id}).fetchall())]


def members(db: Database, project_id: int) -> list[dict]:
    """The accounts that are members of a project (``id``, ``name``, ``role``), by name."""
    return [dict(r._mapping) for r in db.read(lambda conn: conn.execute(text(
        "SELECT a.id, a.name, a.role FROM memberships m JOIN accounts a ON a.id = m.account_id"
        " WHERE m.project_id = :p ORDER BY a.name"), {"p": project_id}).fetchall())]


def set_member(db: Database, project_id: int, account_id: int, member: bool = True) -> bool:
    """Add (``member``) or remove an account's membership of a project; whether anything
    changed.  An annotator removed from a project can no longer open or label it (their
    votes stay)."""

    def tx(conn):
        row(conn, account_id)
        if conn.execute(text("SELECT 1 FROM projects WHERE id = :p"),
                        {"p": project_id}).first() is None:
            raise NotFoundError(f"no project with id {project_id}")
        had = is_member(conn, project_id, account_id)
        if member and not had:
            conn.execute(text("INSERT INTO memberships (project_id, account_id, added_at)"
                              " VALUES (:p, :a, :at)"),
                         {"p": project_id, "a": account_id, "at": now()})
        elif had and not member:
            conn.execute(text("DELETE FROM memberships WHERE project_id = :p"
                              " AND account_id = :a"), {"p": project_id, "a": account_id})
            conn.execute(text("DELETE FROM leases WHERE annotator = :n AND sentence_id IN"
                              " (SELECT id FROM sentences WHERE project_id = :p)"),
                         {"n": row(conn, account_id)["name"], "p": project_id})
        return member != had

    return db.write(tx)
