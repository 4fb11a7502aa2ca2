"""The door in the back end, on SQLite and PostgreSQL: the first lead (setup command, setup
token), the password policy, reserved and spoofed names, one-use sign-in links, the sign-in
rate limit, the acting store (roles, project membership, own name, blind mode, deny by
default), the schema 4 -> 5 migration, NUL and surrogates refused on both back ends, and
the one-line error a database gives without its SQL."""

from __future__ import annotations

import inspect
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from gpsl.annotation import (
    SCHEMA_VERSION,
    AccessDenied,
    Identity,
    InputError,
    Store,
    TooManyAttempts,
    access,
    one_line,
)
from gpsl.annotation.people import auth
from gpsl.annotation.reports import Reports
from tests.support.limits import limit

ROOT = Path(__file__).resolve().parents[2]
LABELS = ["B-PER", "I-PER", "O"]
STRONG = "sturdy wombat lantern"


def team(store):
    """Two projects, a lead, Ann (member of the first) and Bob (member of the second)."""
    p1 = store.create_project("one", LABELS)
    p2 = store.create_project("two", LABELS)
    store.add_sentences(p1, [{"tokens": ["Anna", "ran"]}, {"tokens": ["Bob", "sat"]}])
    store.add_sentences(p2, [{"tokens": ["Carl", "hid"]}])
    lead = store.create_account("Lea", "lead", STRONG)
    ann, bob = store.create_account("Ann"), store.create_account("Bob")
    store.set_member(p1, ann)
    store.set_member(p2, bob)
    return p1, p2, lead, ann, bob


# ----------------------------------------------------------------------------- first lead


def test_the_setup_command_makes_the_first_lead(tmp_path):
    db = tmp_path / "s.sqlite3"

    def setup(*args, stdin=""):
        return subprocess.run([sys.executable, "-m", "gpsl.annotation.setup", "--db", str(db),
                               *args], input=stdin, capture_output=True, text=True,
                              timeout=limit(120), cwd=tmp_path)

    weak = setup("--name", "Lea", "--password-stdin", stdin="password123\n")
    assert weak.returncode == 2 and len(weak.stderr.splitlines()) == 1
    assert weak.stderr.startswith("gpsl setup: error: ") and "too easy to guess" in weak.stderr
    reserved = setup("--name", "adjudicated", "--password-stdin", stdin=STRONG + "\n")
    assert reserved.returncode == 2 and "reserved" in reserved.stderr
    ok = setup("--name", "Lea", "--password-stdin", stdin=STRONG + "\n")
    assert ok.returncode == 0, ok.stderr
    store = Store(db)
    assert [(a["name"], a["role"]) for a in store.list_accounts()] == [("Lea", "lead")]
    assert store.verify_password("Lea", STRONG) is not None
    again = setup("--name", "Mallory", "--password-stdin", stdin=STRONG + "\n")
    assert again.returncode == 2 and "accounts already" in again.stderr  # never a second
    token = setup("--token")
    assert token.returncode == 2 and "no setup needed" in token.stderr
    reset = setup("--reset", "lea", "--password-stdin", stdin="another sturdy phrase\n")
    assert reset.returncode == 0 and store.verify_password("Lea", "another sturdy phrase")
    assert [a["name"] for a in store.list_accounts()] == ["Lea"]


def test_a_setup_token_makes_the_first_lead_once(store):
    token = store.issue_setup_token()
    older = token
    token = store.issue_setup_token()  # a newer token replaces the older
    with pytest.raises(InputError, match="setup token is not valid"):
        store.setup_lead(older, "Lea", STRONG)
    with pytest.raises(InputError, match="too easy"):
        store.setup_lead(token, "Lea", "password1234")
    who, session = store.setup_lead(token, "Lea", STRONG)
    assert who.role == "lead" and store.session_identity(session) == who
    with pytest.raises(InputError, match="not valid"):  # used up
        store.setup_lead(token, "Mallory", STRONG)
    assert store.issue_setup_token() is None  # setup is over
    assert [a["name"] for a in store.list_accounts()] == ["Lea"]


def test_setup_tokens_are_rate_limited(store):
    store.issue_setup_token()
    for _ in range(auth.MAX_SETUP_FAILURES):
        with pytest.raises(InputError, match="not valid"):
            store.setup_lead("guess", "Mallory", STRONG)
    token = store.issue_setup_token()
    with pytest.raises(TooManyAttempts, match="too many failed setup attempts"):
        store.setup_lead(token, "Lea", STRONG)  # even the right token waits now
    assert store.account_count() == 0


# ----------------------------------------------------------------------------- passwords, names


@pytest.mark.parametrize("password, why", [
    ("short", "at least 10"), ("1234567890", "too easy"), ("password123", "too easy"),
    ("qwertyuiop", "too easy"), ("Lea Lea Lea", "too easy"), ("x" * 300, "longer than"),
    ("sturdy\x00wombat lantern", "NUL")])
def test_the_password_policy(store, password, why):
    with pytest.raises(InputError, match=why):
        store.create_account("Lea", "lead", password)
    assert store.account_count() == 0


@pytest.mark.parametrize("name", ["adjudicated", "Adjudicated", "model", "import",
                                  "import:x.conll", "IMPORT: y", " ", "a\nb", "a\x00b",
                                  "\ud800", "<script>", "x" * 61])
def test_reserved_and_unstorable_names_are_refused_everywhere(store, name):
    store.create_account("Lea", "lead", STRONG)
    with pytest.raises(InputError):
        store.create_account(name)
    pid = store.create_project("p", LABELS)
    store.add_sentences(pid, [{"tokens": ["a", "b"]}])
    sid = store.sentence_ids(pid)[0]
    with pytest.raises(InputError):  # a label in that name, from a script too
        store.set_labels(sid, {0: "O"}, name)
    with pytest.raises(InputError):
        store.next_sentence(pid, name)
    with pytest.raises(InputError):
        store.adjudicate(sid, 0, "O", name)
    assert store.votes(sid) == []


# ----------------------------------------------------------------------------- links, sign-in


def test_a_sign_in_link_works_once_even_when_opened_twice_at_once(store):
    store.create_account("Lea", "lead", STRONG)
    ann = store.create_account("Ann")
    for _ in range(3):
        link = store.issue_sign_in_link(ann)
        got, barrier = [], threading.Barrier(4)

        def open_link(link=link, barrier=barrier, got=got):
            barrier.wait()
            got.append(store.redeem_sign_in_link(link))

        threads = [threading.Thread(target=open_link) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(limit(60))
        assert sum(g is not None for g in got) == 1, got  # one session, never more
    assert store.issue_sign_in_link(ann) and store.list_accounts()[0]["link_expires"]
    with pytest.raises(InputError):
        store.issue_sign_in_link(ann, hours=0)
    with pytest.raises(InputError):
        store.issue_sign_in_link(ann, hours=24 * 365)


def test_sign_in_is_rate_limited_per_name_and_per_client(store):
    store.create_account("Lea", "lead", STRONG)
    store.create_account("Ann", "annotator", "ann's own sturdy phrase")
    for _ in range(auth.MAX_FAILURES_PER_NAME):
        assert store.sign_in("lea", "wrong guess", "10.0.0.1") is None
    with pytest.raises(TooManyAttempts, match=r"for this name: try again in [12] seconds?$"):
        store.sign_in("Lea", STRONG, "10.0.0.2")  # the right password, from elsewhere
    who, session = store.sign_in("Ann", "ann's own sturdy phrase", "10.0.0.1")
    assert who.name == "Ann" and store.session_identity(session) == who
    for k in range(auth.MAX_FAILURES_PER_CLIENT - auth.MAX_FAILURES_PER_NAME):
        assert store.sign_in(f"nobody{k}", "guess guess", "10.0.0.1") is None
    with pytest.raises(TooManyAttempts, match="from here"):
        store.sign_in("Ann", "ann's own sturdy phrase", "10.0.0.1")
    assert store.sign_in("Ann", "ann's own sturdy phrase", "10.0.0.3") is not None
    # the window passes: the name may try again
    store.db.write(lambda c: c.execute(text("UPDATE sign_in_failures SET at = '2000-01-01'")))
    assert store.sign_in("Lea", STRONG, "10.0.0.2")[0].name == "Lea"


def test_sessions_expire_and_can_be_revoked(store):
    store.create_account("Lea", "lead", STRONG)
    ann = store.create_account("Ann")
    s1, s2 = store.start_session(ann), store.start_session(ann)
    assert store.list_accounts()[0]["sessions"] == 2  # Ann sorts first
    assert store.end_sessions(ann) == 2
    assert store.session_identity(s1) is None and store.session_identity(s2) is None
    s3 = store.start_session(ann)
    store.db.write(lambda c: c.execute(text("UPDATE auth_tokens SET expires_at = '2000-01-01'"
                                            " WHERE kind = 'session'")))
    assert store.session_identity(s3) is None
    assert store.session_identity("x" * 1000) is None  # no look-up for what is no token


# ----------------------------------------------------------------------------- acting store


def test_every_store_and_report_method_has_a_rule():
    """Deny by default: a new Store or Reports method must carry a declaration of
    gpsl.annotation.permissions (or it stays refused to everyone)."""
    def public(cls):
        return {n for n, f in inspect.getmembers(cls) if not n.startswith("_")
                and (inspect.isfunction(f) or isinstance(inspect.getattr_static(cls, n),
                                                          staticmethod))}

    for cls in (Store, Reports):
        rules = access.declared(cls)
        assert set(rules) == public(cls)
        assert [n for n, rule in rules.items() if rule is None] == []
    # the door's own business is refused to everyone, leads included
    assert {n for n, rule in access.declared(Store).items() if rule.role is None} >= {
        "sign_in", "start_session", "session_identity", "setup_lead", "acting", "close"}


def test_the_acting_store_enforces_the_declarations_not_the_names(tmp_path):
    """A method under another name keeps its declaration (in your own name), and a method
    without one is refused to everyone, a lead too: the acting store reads declarations."""
    class Renamed(Store):
        write_votes = Store.set_labels

        def sneak(self, project_id: int) -> int:
            return project_id

    s = Renamed(str(tmp_path / "renamed.sqlite3"))
    p1, p2, lead, ann, bob = team(s)
    sid = s.sentence_ids(p1)[0]
    a = s.acting(Identity("Ann", "annotator", ann))
    with pytest.raises(AccessDenied, match="write votes: only in your own name"):
        a.write_votes(sid, {0: "O"}, "Bob")
    with pytest.raises(AccessDenied, match="not a member of project"):
        a.write_votes(s.sentence_ids(p2)[0], {0: "O"}, "Ann")
    a.write_votes(sid, {0: "O"}, None)  # None: the acting person
    assert [(v["annotator"], v["label"]) for v in s.votes(sid)] == [("Ann", "O")]
    with pytest.raises(AccessDenied, match="sneak is not available here"):
        s.acting(Identity("Lea", "lead", lead)).sneak(p1)
    s.close()


def test_an_annotator_cannot_reach_lead_actions_or_other_projects(store):
    p1, p2, lead, ann, bob = team(store)
    s1, s2 = store.sentence_ids(p1)[0], store.sentence_ids(p2)[0]
    a = store.acting(Identity("Ann", "lead", ann))  # claims lead: the store says annotator
    assert a.who == Identity("Ann", "annotator", ann, False)
    assert [p["id"] for p in a.list_projects()] == [p1]
    assert [p.id for p in a.reports.projects()] == [p1]
    a.set_labels(s1, {0: "B-PER"}, "Ann")
    assert a.reports.sentence(s1, None).tokens[0].label == "B-PER"
    assert a.next_to_annotate(p1, "Ann", team=True) is not None
    refused = {
        "another project's sentence": lambda: a.set_labels(s2, {0: "O"}, "Ann"),
        "another project's view": lambda: a.reports.sentence(s2, "Ann"),
        "another project's queue": lambda: a.next_to_annotate(p2, "Ann", team=True),
        "another project": lambda: a.get_project(p2),
        "another project's report": lambda: a.reports.project(p2),
        "in another's name": lambda: a.set_labels(s1, {1: "O"}, "Bob"),
        "as a reserved name": lambda: a.set_labels(s1, {1: "O"}, "adjudicated"),
        "another's undo": lambda: a.undo(p1, "Bob"),
        "a decision": lambda: a.adjudicate(s1, 0, "O", "Ann"),
        "training": lambda: a.start_training(p1, None),
        "exports": lambda: a.export_annotations(p1),
        "a model": lambda: a.model_zip(1),
        "every vote": lambda: a.votes(s1),
        "the team report": lambda: a.reports.team(p1),
        "the accounts": lambda: a.reports.accounts(),
        "a new account": lambda: a.create_account("Eve", "lead", STRONG),
        "membership": lambda: a.set_member(p2, ann),
        "another's session": lambda: a.start_session(lead),
        "the raw database": lambda: a.db,
        "settings": lambda: a.set_team_settings(p1, overlap=2),
        "imports": lambda: a.import_sentences(p1, []),
        "deleting": lambda: a.delete_project(p1),
    }
    for what, call in refused.items():
        with pytest.raises(AccessDenied):
            call()
        assert what
    assert store.votes(s1) == [v for v in store.votes(s1) if v["annotator"] == "Ann"]
    assert store.votes(s2) == [] and store.list_model_versions(p1) == []
    assert store.account_count() == 3
    # Bob in his project: the same rules
    b = store.acting(Identity("Bob", "annotator", bob))
    with pytest.raises(AccessDenied, match="not a member"):
        b.reports.sentence(s1, "Bob")
    # removed from the project, Ann loses it at once; deleted, she is no one
    store.set_member(p1, ann, False)
    a2 = store.acting(Identity("Ann", "annotator", ann))
    assert a2.list_projects() == []
    with pytest.raises(AccessDenied):
        a2.set_labels(s1, {1: "O"}, "Ann")
    store.delete_account(ann)
    with pytest.raises(AccessDenied, match="no longer exists"):
        store.acting(Identity("Ann", "annotator", ann))


def test_a_lead_acts_in_their_own_name_and_imports_as_the_import(store):
    p1, p2, lead, ann, bob = team(store)
    s1 = store.sentence_ids(p1)[0]
    le = store.acting(Identity("Lea", "lead", lead))
    le.set_labels(s1, {0: "O"}, None)  # None: the acting name
    le.adjudicate(s1, 0, "B-PER", "Lea")
    assert store.votes(s1)[0]["annotator"] == "Lea"
    with pytest.raises(AccessDenied, match="own name"):
        le.set_labels(s1, {1: "O"}, "Ann")
    with pytest.raises(AccessDenied, match="own name"):
        le.adjudicate(s1, 1, "O", "Ann")
    with pytest.raises(AccessDenied, match="credited to the import"):
        le.import_sentences(p1, [{"tokens": ["x"], "labels": ["O"]}], annotator="Ann")
    le.import_sentences(p1, [{"tokens": ["x"], "labels": ["O"]}], annotator="import:f.txt")
    assert {p["id"] for p in le.list_projects()} == {p1, p2}  # a lead sees every project
    with pytest.raises(AccessDenied):
        le.start_session(ann)  # never another person's session


def test_local_mode_ends_with_the_first_account(store):
    pid = store.create_project("p", LABELS)
    me = store.acting(Identity("Me", "lead", None, True))
    assert [p["id"] for p in me.list_projects()] == [pid]
    with pytest.raises(InputError):
        store.acting(Identity("adjudicated", "lead", None, True))
    me.create_account("Lea", "lead", STRONG)
    with pytest.raises(AccessDenied, match="has accounts"):
        store.acting(Identity("Me", "lead", None, True))


def test_blind_mode_is_kept_by_the_back_end(store):
    p1, p2, lead, ann, bob = team(store)
    store.set_member(p1, bob)
    s1 = store.sentence_ids(p1)[0]
    store.set_labels(s1, {0: "B-PER"}, "Ann")
    store.set_team_settings(p1, blind=True)
    b = store.acting(Identity("Bob", "annotator", bob))
    first = b.reports.sentence(s1, "Bob").tokens[0]
    assert first.label is None and "Ann" not in first.votes  # Ann's vote stays hidden
    assert b.reports.own_labels(s1, "Bob") == [None, None]
    assert b.reports.token_history(s1, 0) == []  # only his own changes
    with pytest.raises(AccessDenied, match="blind"):
        b.reports.search(p1, label="B-PER")
    with pytest.raises(AccessDenied, match="blind"):
        b.annotators(p1)
    with pytest.raises(AccessDenied, match="blind"):
        b.sentence_view(s1, "Bob", blind=False)
    assert b.reports.search(p1, text_query="Anna").total == 1


# ----------------------------------------------------------------------------- storage


def test_nul_and_surrogates_are_refused_before_any_back_end_sees_them(store):
    pid = store.create_project("p", LABELS)
    for tokens in (["a\x00b"], ["\ud800"], [""], [["a", None]]):
        with pytest.raises(InputError) as info:
            store.add_sentences(pid, [{"tokens": tokens}])
        assert "\n" not in str(info.value)
    for bad in ("p\x00", "\udfff"):
        with pytest.raises(InputError):
            store.create_project(bad, LABELS)
        with pytest.raises(InputError):
            store.update_project(pid, guidelines=bad)
    assert store.sentence_count(pid) == 0


def test_a_database_error_is_one_line_without_its_sql(store):
    from sqlalchemy.exc import IntegrityError

    exc = IntegrityError("INSERT INTO votes (a) VALUES (:secret)", {"secret": "token-123"},
                         Exception("duplicate key value violates unique constraint\nDETAIL"))
    line = one_line(exc, "Not saved")
    assert "INSERT" not in line and "token-123" not in line and "\n" not in line
    assert line.startswith("Not saved: the annotation store refused the change")
    if store.dialect == "postgresql":  # NUL behind validation's back: psycopg's DataError
        with pytest.raises(InputError, match="cannot keep a value") as info:
            store.db.write(lambda c: c.execute(text("SELECT CAST(:x AS text)"), {"x": "a\x00b"}))
        assert "SELECT" not in str(info.value)


# ----------------------------------------------------------------------------- migration


def test_a_schema_4_store_keeps_its_annotators_in_every_project(store_target):
    store = Store(store_target)
    p1 = store.create_project("one", LABELS)
    p2 = store.create_project("two", LABELS)
    store.create_account("Lea", "lead", STRONG)
    ann = store.create_account("Ann")

    def back_to_schema_4(conn):
        for table in ("memberships", "sign_in_failures", "setup_tokens"):
            conn.execute(text(f"DROP TABLE {table}"))
        conn.execute(text("UPDATE schema_version SET version = 4"))
        if store.dialect == "sqlite":
            conn.exec_driver_sql("PRAGMA user_version = 4")

    store.db.write(back_to_schema_4)
    store.close()
    store = Store(store_target)
    assert sorted(store.acting(Identity("Ann", "annotator", ann)).list_projects(),
                  key=lambda p: p["id"])[0]["id"] == p1
    assert {m["name"] for m in store.members(p2)} == {"Ann"}  # annotators only
    assert store.db.read(lambda c: c.execute(text("SELECT MAX(version) FROM schema_version"))
                         .scalar_one()) == SCHEMA_VERSION
    store.close()
