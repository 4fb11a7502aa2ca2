"""Teams in the store: accounts and sign-in tokens, routing with leases (k annotators per
sentence), blind views, per-project version numbers, adjudication history, the crowd model
deciding disputes, agreement and speed figures; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from gpsl.annotation import SCHEMA_VERSION, Store
from gpsl.annotation.people.accounts import Identity
from gpsl.errors import InputError

LABELS = ["B-PER", "I-PER", "B-LOC", "O"]



def project(store, n=6, name="t"):
    pid = store.create_project(name, LABELS)
    store.add_sentences(pid, [{"tokens": [f"w{i}_{t}" for t in range(4)]} for i in range(n)])
    return pid, store.sentence_ids(pid, "train")


# ----------------------------------------------------------------------------- accounts


def test_accounts_passwords_links_and_sessions(store):
    assert store.account_count() == 0
    with pytest.raises(InputError, match="first account must be a lead"):
        store.create_account("ann", "annotator")
    with pytest.raises(InputError, match="needs a password"):
        store.create_account("Lea", "lead")
    with pytest.raises(InputError, match="at least 10"):
        store.create_account("Lea", "lead", "short")
    for bad in ("import", "import:x.conll", "  ", "model", "Adjudicated"):
        with pytest.raises(InputError):
            store.create_account(bad, "lead", "sturdy wombat lantern")
    lead = store.create_account("Lea", "lead", "correct horse battery")
    with pytest.raises(InputError, match="already exists"):
        store.create_account("lea", "annotator")
    ann = store.create_account("Ann")  # an annotator by default, links only
    assert store.account_count() == 2
    assert {a["name"]: a["role"] for a in store.list_accounts()} == {"Lea": "lead",
                                                                      "Ann": "annotator"}
    row = store.db.read(lambda c: c.execute(text("SELECT password_hash FROM accounts WHERE"
                                                 " id = :i"), {"i": lead}).scalar_one())
    assert row.startswith("$argon2id$") and "correct horse" not in row

    assert store.verify_password("lea", "correct horse battery") == Identity("Lea", "lead",
                                                                             lead)
    assert store.verify_password("Lea", "wrong horse battery") is None
    assert store.verify_password("nobody", "correct horse battery") is None
    assert store.verify_password("Ann", "") is None  # no password: links only

    link = store.issue_sign_in_link(ann)
    stored = store.db.read(lambda c: [r[0] for r in c.execute(text(
        "SELECT token_hash FROM auth_tokens"))])
    assert link not in stored and len(link) >= 40  # only the hash is stored
    who, session = store.redeem_sign_in_link(link)
    assert who == Identity("Ann", "annotator", ann)
    assert store.session_identity(session) == who
    assert store.redeem_sign_in_link(link) is None  # one use: a second opening is no one
    older, newer = store.issue_sign_in_link(ann), store.issue_sign_in_link(ann)
    assert store.redeem_sign_in_link(older) is None  # replaced
    assert store.redeem_sign_in_link(newer)[0] == who
    assert store.session_identity(session) == who  # sessions survive a new link
    assert store.session_identity("not-a-token") is None
    assert store.session_identity(None) is None

    expired = store.issue_sign_in_link(ann)
    store.db.write(lambda c: c.execute(text("UPDATE auth_tokens SET expires_at = :t WHERE"
                                            " kind = 'link'"),
                                       {"t": (datetime.now(UTC) - timedelta(seconds=1))
                                        .isoformat()}))
    assert store.redeem_sign_in_link(expired) is None

    store.set_account_password(ann, "ann's own sturdy phrase")  # ends her sessions
    assert store.session_identity(session) is None
    assert store.verify_password("ann", "ann's own sturdy phrase").role == "annotator"
    s2 = store.start_session(ann)
    store.set_account_role(ann, "lead")  # ends them too
    assert store.session_identity(s2) is None
    store.set_account_role(ann, "annotator")
    with pytest.raises(InputError, match="last lead"):
        store.set_account_role(lead, "annotator")
    with pytest.raises(InputError, match="last lead"):
        store.delete_account(lead)
    s3 = store.start_session(ann)
    store.delete_account(ann)
    assert store.session_identity(s3) is None
    store.end_session(store.start_session(lead))
    store.delete_account(lead)
    assert store.account_count() == 0  # back to single-user local mode


# ----------------------------------------------------------------------------- routing


def test_routing_leases_with_one_annotator_per_sentence(store):
    pid, ids = project(store)
    a = store.next_sentence(pid, "alice")
    b = store.next_sentence(pid, "bob")
    assert a == ids[0] and b == ids[1]  # never one sentence to two people at once (k = 1)
    assert store.next_sentence(pid, "alice") == a  # a reload keeps the held sentence
    assert {(x["sentence_id"], x["annotator"]) for x in store.leases(pid)} == \
        {(a, "alice"), (b, "bob")}
    store.set_label(a, 0, "B-PER", "alice")
    nxt = store.next_sentence(pid, "alice", current=a, exclude={a})  # Next: lease ends
    assert nxt == ids[2]
    assert store.next_sentence(pid, "carol") == ids[3]  # alice voted on ids[0]: hers
    # alice's partly labeled sentence comes back to her (k = 1 as before: unlabeled tokens)
    assert store.next_sentence(pid, "alice", current=nxt) == a
    store.release_lease("bob")
    assert store.next_sentence(pid, "dave", exclude={ids[2]}) == b  # free again


def test_an_expired_lease_frees_the_sentence(store):
    pid, ids = project(store, n=2)
    from gpsl.annotation.labeling import queue

    assert queue.route(store.db, pid, "alice", lease_seconds=-1) == ids[0]  # expired at once
    assert store.next_sentence(pid, "bob") == ids[0]
    assert [x["annotator"] for x in store.leases(pid)] == ["bob"]


def test_routing_with_k_annotators_and_blind_views(store):
    pid, ids = project(store)
    store.add_sentences(pid, [{"tokens": ["done", "x"], "labels": ["O", "O"]}],
                        doc="f.conll", annotator="import:f.conll")
    store.set_team_settings(pid, overlap=2, blind=True)
    assert store.team_settings(pid)["overlap"] == 2
    a, b, c = (store.next_sentence(pid, who) for who in ("alice", "bob", "carol"))
    assert a == b == ids[0] and c == ids[1]  # two people on one sentence, the third elsewhere
    store.set_label(a, 0, "B-PER", "alice")
    store.set_label(a, 0, "B-LOC", "bob")
    store.set_label(a, 1, "O", "bob")
    # alice moves on: bob and she both voted on ids[0]; dave never gets it (k = 2 reached)
    assert store.next_sentence(pid, "alice", current=a) == ids[1]
    assert store.next_sentence(pid, "dave") == ids[2]  # ids[1]: carol and alice hold it
    # bob's and alice's views: own votes only; the imported sentence needs no second person
    va, vb = store.sentence_view(a, "alice"), store.sentence_view(a, "bob")
    assert va["labels"] == ["B-PER", None, None, None] and va["votes"][0] == {"alice": "B-PER"}
    assert vb["labels"] == ["B-LOC", "O", None, None] and vb["votes"][0] == {"bob": "B-LOC"}
    assert va["hidden"] == [0, 1] and vb["hidden"] == [0]  # the others' votes
    assert va["mine"] == {0: "B-PER"} and va["blind"]
    full = store.sentence_view(a, "alice", blind=False)
    assert full["votes"][0] == {"alice": "B-PER", "bob": "B-LOC"} and full["hidden"] == []
    assert full["labels"][0] is None and full["labels"][1] == "O"  # a tie; bob's vote
    imported = store.sentence_ids(pid, "train")[-1]
    vi = store.sentence_view(imported, "alice")
    assert vi["labels"] == ["O", "O"] and vi["annotators"] == ["import:f.conll"] * 2
    # bob's undo changes only his own vote; alice's view is unchanged
    store.undo(pid, "bob")
    assert store.sentence_view(a, "alice")["labels"] == va["labels"]
    assert store.get_sentence(a)["votes"][0] == {"alice": "B-PER", "bob": "B-LOC"}


def test_concurrent_routing_never_exceeds_k(store):
    pid, ids = project(store, n=3)
    store.set_team_settings(pid, overlap=2)
    got: dict[str, int | None] = {}
    barrier = threading.Barrier(6)

    def worker(name):
        barrier.wait()
        got[name] = store.next_sentence(pid, name)

    threads = [threading.Thread(target=worker, args=(f"p{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = Counter(got.values())
    assert counts == {ids[0]: 2, ids[1]: 2, ids[2]: 2}, got


# ----------------------------------------------------------------------------- project


def test_version_numbers_per_project_and_guidelines(store):
    p1, _ = project(store, name="one")
    p2, _ = project(store, name="two")
    v1 = store.start_model_version(p1)
    v2 = store.start_model_version(p1)
    w1 = store.start_model_version(p2)
    assert [store.get_model_version(v)["number"] for v in (v1, v2, w1)] == [1, 2, 1]
    assert w1 > v2  # ids stay global
    assert store.get_project(p1)["guidelines"] == ""
    store.update_project(p1, guidelines="# Persons\nTag *full* names.")
    assert store.get_project(p1)["guidelines"] == "# Persons\nTag *full* names."
    with pytest.raises(InputError):
        store.set_team_settings(p1, overlap=0)
    with pytest.raises(InputError, match="crowd model first"):
        store.set_team_settings(p1, resolve="crowd")


def test_adjudication_history_and_conflicts(store):
    pid, ids = project(store, n=2)
    s = ids[0]
    store.set_label(s, 0, "B-PER", "alice")
    store.set_label(s, 0, "B-LOC", "bob")
    store.set_label(s, 1, "O", "alice")
    store.set_label(s, 1, "O", "bob")
    store.set_label(s, 2, "O", "alice")
    store.set_label(s, 2, "B-PER", "bob")
    store.clear_label(s, 2, "bob")  # withdraws bob's vote: not a vote for "no label"
    assert store.get_sentence(s)["votes"][2] == {"alice": "O"}
    assert store.get_sentence(s)["labels"][2] == "O"
    conflicts = store.conflicts(pid)
    assert [(c["token_index"], c["status"]) for c in conflicts] == [(0, "open")]
    assert conflicts[0]["votes"] == {"alice": "B-PER", "bob": "B-LOC"}
    store.adjudicate(s, 0, "B-LOC", "lea")
    store.adjudicate(s, 0, "B-LOC", "lea")  # no change: no history row
    store.adjudicate(s, 0, "B-PER", "max")
    store.adjudicate(s, 0, None, "lea")
    hist = store.adjudication_history(project_id=pid)
    assert [(h["old_label"], h["new_label"], h["annotator"]) for h in hist] == \
        [("B-PER", None, "lea"), ("B-LOC", "B-PER", "max"), (None, "B-LOC", "lea")]
    assert store.get_sentence(s)["labels"][0] is None  # withdrawn: a tie again
    store.adjudicate(s, 0, "B-LOC", "lea")
    assert store.conflicts(pid)[0]["status"] == "adjudicated"
    assert store.get_sentence(s)["labels"][0] == "B-LOC"
    assert store.get_sentence(s)["votes"][0] == {"alice": "B-PER", "bob": "B-LOC"}


def test_the_crowd_model_decides_disputes_by_reliability(store):
    """good and fair agree on 40 tokens, noisy contradicts them on every one; a token where
    only good and noisy voted is a tie for the majority, good's label for the crowd model."""
    pid = store.create_project("crowd", LABELS)
    store.add_sentences(pid, [{"tokens": [f"t{i}_{j}" for j in range(4)]} for i in range(11)])
    ids = store.sentence_ids(pid)
    truth = ["B-PER", "I-PER", "B-LOC", "O"]
    for sid in ids[:10]:
        store.set_labels(sid, dict(enumerate(truth)), "good")
        store.set_labels(sid, dict(enumerate(truth)), "fair")
        store.set_labels(sid, dict(enumerate(truth[1:] + truth[:1])), "noisy")
    last = ids[10]
    store.set_label(last, 0, "B-LOC", "good")
    store.set_label(last, 0, "O", "noisy")
    assert store.get_sentence(last)["labels"][0] is None  # majority: a tie
    model = store.fit_crowd_model(pid)
    acc = {r["annotator"]: r["accuracy"] for r in model["report"]}
    assert acc["good"] > 0.95 and acc["fair"] > 0.95 and acc["noisy"] < 0.05
    assert store.get_sentence(last)["labels"][0] is None  # still the majority rule
    store.set_team_settings(pid, resolve="crowd")
    assert store.get_sentence(last)["labels"][0] == "B-LOC"
    assert store.get_sentence(last)["annotators"][0] == "good"
    store.set_label(last, 1, "O", "noisy")  # a new vote is derived with the crowd model too
    store.set_label(last, 1, "B-PER", "stranger")  # unseen: one-coin, accuracy 0.8
    assert store.get_sentence(last)["labels"][1] == "B-PER"
    store.set_team_settings(pid, resolve="majority")
    assert store.get_sentence(last)["labels"][0] is None


def test_agreement_and_speed_figures(store):
    pid, ids = project(store, n=2)
    s = ids[0]
    store.set_labels(s, {0: "B-PER", 1: "O", 2: "O", 3: "B-LOC"}, "alice")
    store.set_labels(s, {0: "B-PER", 1: "O", 2: "B-LOC", 3: "B-LOC"}, "bob")
    store.set_label(ids[1], 0, "O", "alice")
    store.set_label(ids[1], 1, "O", "alice")
    store.set_label(ids[1], 2, "O", "alice")
    figures = store.agreement(pid)
    assert figures["annotators"] == ["alice", "bob"] and figures["n_tokens"] == 4
    # 4 shared tokens, 3 agree: p_o = 3/4; alice B-PER O O B-LOC, bob B-PER O B-LOC B-LOC:
    # p_e = (1*1 + 2*1 + 1*2) / 16 = 5/16; kappa = (12/16 - 5/16) / (11/16) = 7/11
    assert figures["kappa"][0, 1] == pytest.approx(7 / 11)
    # alpha: o(B-PER,B-PER) = 2, o(O,O) = 2, o(B-LOC,B-LOC) = 2, o(O,B-LOC) = o(B-LOC,O) = 1;
    # n = 8, n_c = 2, 3, 3: alpha = 1 - 7 * 2 / (64 - 4 - 9 - 9) = 1 - 14/42 = 2/3
    assert figures["alpha"] == pytest.approx(2 / 3)
    # alice's 7 actions at t0 + 0, 10, 30, 1000, 1005, 1015, 2000 s: the pauses of 970 and
    # 985 s are not labeling time; gaps 10, 20, 5, 10: active 45 s, median 10 s
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    hist = store.db.read(lambda c: [r[0] for r in c.execute(text(
        "SELECT id FROM annotation_history WHERE annotator = 'alice' ORDER BY id"))])
    assert len(hist) == 7  # one history row per token
    stamps = [t0 + timedelta(seconds=x) for x in (0, 10, 30, 1000, 1005, 1015, 2000)]

    def tx(c):
        for hid, at in zip(hist, stamps):
            c.execute(text("UPDATE annotation_history SET at = :at WHERE id = :i"),
                      {"at": at.isoformat(timespec="milliseconds"), "i": hid})

    store.db.write(tx)
    row = next(r for r in store.annotator_stats(pid) if r["annotator"] == "alice")
    assert row["votes"] == 7 and row["sentences"] == 2
    assert row["changes"] == 7
    assert row["active_minutes"] == pytest.approx(45 / 60)
    assert row["labels_per_hour"] == pytest.approx(4 / 45 * 3600)
    assert row["median_seconds"] == pytest.approx(10.0)
    assert row["kappa"] == pytest.approx(7 / 11)


# ----------------------------------------------------------------------------- migration


def test_a_schema_2_store_gets_the_team_tables(store_target):
    store = Store(store_target)
    pid, _ = project(store, n=1)
    store.start_model_version(pid)
    store.start_model_version(pid)
    other, _ = project(store, n=1, name="other")
    store.start_model_version(other)

    def back_to_schema_2(conn):  # what the schema-2 code wrote
        for table in ("memberships", "sign_in_failures", "setup_tokens",  # schema 5's
                      "auth_tokens", "accounts", "leases", "adjudication_history"):
            conn.execute(text(f"DROP TABLE {table}"))
        conn.execute(text("ALTER TABLE projects DROP COLUMN guidelines"))
        conn.execute(text("ALTER TABLE model_versions DROP COLUMN number"))
        conn.execute(text("UPDATE schema_version SET version = 2"))
        if store.dialect == "sqlite":
            conn.exec_driver_sql("PRAGMA user_version = 2")

    store.db.write(back_to_schema_2)
    store.close()
    store = Store(store_target)
    assert [v["number"] for v in store.list_model_versions(pid)] == [1, 2]
    assert [v["number"] for v in store.list_model_versions(other)] == [1]
    assert store.start_model_version(other) and \
        [v["number"] for v in store.list_model_versions(other)] == [1, 2]
    assert store.get_project(pid)["guidelines"] == ""
    assert store.account_count() == 0
    assert store.next_sentence(pid, "alice") is not None
    assert store.db.read(lambda c: c.execute(text("SELECT MAX(version) FROM schema_version"))
                         .scalar_one()) == SCHEMA_VERSION
    store.close()
