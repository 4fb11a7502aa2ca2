"""Teams that overlap (k annotators on one sentence), in the store and in the Annotate page
(AppTest; the browser version is in test_browser_overlap.py): each annotator's own copy of a
sentence (cursor, counts and Clear see only their own votes; with k >= 2 other people's
labels are hidden until review), two people's interleaved keys landing where each one's
cursor was, the queue's order under overlap, one undo step per key press, the speed figure,
the training-label rule and soft labels."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[2]

from streamlit.testing.v1 import AppTest  # noqa: E402

from gpsl.annotation import Store  # noqa: E402
from gpsl.annotation.labeling import rules  # noqa: E402
from gpsl.annotation.store.records import Vote  # noqa: E402
from gpsl.annotation.training.jobs import train_now  # noqa: E402
from gpsl.annotation.training.pipeline import TrainConfig  # noqa: E402
from gpsl.errors import InputError  # noqa: E402
from pages import _keys  # noqa: E402
from tests.support.helpers import app_store_env  # noqa: E402
from tests.support.limits import limit  # noqa: E402

LABELS = ["B-PER", "I-PER", "B-LOC", "I-LOC", "O"]
WORDS = "Ada Lovelace met Charles Babbage in London on a rainy day".split()


def team_project(store, k=2, blind=False, n=3):
    pid = store.create_project("overlap", LABELS, sentences=[
        {"tokens": [f"{w}{i}" if i else w for w in WORDS]} for i in range(n)])
    store.set_team_settings(pid, overlap=k, blind=blind)
    return pid, store.sentence_ids(pid)


# ----------------------------------------------------------------------------- views


def test_with_overlap_the_second_annotator_cannot_see_the_first(store):
    """k = 2 with blind mode off (the default): Bob's view of Ann's sentence holds none of
    her labels, nor a suggestion on a token she labeled, until a lead reviews the votes."""
    pid, ids = team_project(store, k=2, blind=False)
    sid = ids[0]
    store.set_labels(sid, {0: "B-PER", 1: "I-PER", 6: "B-LOC"}, "Ann")
    bob = store.sentence_view(sid, "Bob")
    assert bob["blind"] and bob["overlap"] == 2
    assert bob["labels"] == [None] * len(WORDS) and bob["own"] == [None] * len(WORDS)
    assert all(v == {} for v in bob["votes"]) and bob["hidden"] == [0, 1, 6]
    view = store.reports.sentence(sid, "Bob")
    assert view.blind and view.n_labeled == 0 and view.n_others == 0
    assert "Ann" not in repr(view.tokens)
    ann = store.reports.sentence(sid, "Ann")
    assert ann.n_labeled == 3 and ann.own[:2] == ["B-PER", "I-PER"] and ann.opening == 2
    # the lead's review (Team page) sees both once Bob has voted
    store.set_labels(sid, {0: "B-LOC"}, "Bob")
    assert store.conflicts(pid)[0]["votes"] == {"Ann": "B-PER", "Bob": "B-LOC"}
    # k = 1 and not blind: the training labels, whoever gave them, but the cursor's copy
    # is one's own
    store.set_team_settings(pid, overlap=1)
    view = store.reports.sentence(sid, "Cy")
    assert view.labels[1] == "I-PER" and view.own == [None] * len(WORDS)
    assert view.n_labeled == 0 and view.n_others == 2 and not view.blind


def test_a_suggestion_hides_only_where_it_knew_another_vote(store):
    """A stored suggestion is hidden from Bob where it was computed with Ann's label known
    (her vote older than the model's predictions), and shown where it could not know it:
    hiding it would tell Bob where Ann labeled."""
    pid, ids = team_project(store, k=2, n=1)
    sid = ids[0]
    store.set_labels(sid, {0: "B-PER"}, "Ann")
    time.sleep(0.01)  # the store's times have millisecond steps
    _scores(store, pid, ids, [1.0])  # finished after Ann's first vote
    time.sleep(0.01)
    store.set_labels(sid, {1: "I-PER"}, "Ann")  # after the model finished
    view = store.reports.sentence(sid, "Bob")
    assert view.tokens[0].suggestion is None and view.tokens[0].score is None
    assert view.tokens[1].suggestion is not None and view.tokens[1].score is not None
    assert view.opening == 1  # the highest score Bob may see (token 0's is hidden)
    assert view.tokens[1].label is None and view.hidden == 1


def test_clear_withdraws_ones_own_vote_only(store):
    """Clear is not a vote for "no label": Bob's Clear of a token he never voted on changes
    nothing; of his own vote, it removes that vote and Ann's label decides again."""
    pid, ids = team_project(store, k=2)
    sid = ids[0]
    store.add_sentences(pid, [{"tokens": ["Rome", "fell"], "labels": ["B-LOC", "O"]}],
                        annotator="import:f.conll")
    imported = store.sentence_ids(pid)[-1]
    store.set_labels(sid, {0: "B-PER"}, "Ann")
    assert store.clear_label(sid, 0, "Bob") is None
    assert store.get_sentence(sid)["votes"][0] == {"Ann": "B-PER"}
    assert store.get_sentence(sid)["labels"][0] == "B-PER"
    store.set_labels(sid, {0: "B-LOC"}, "Bob")
    assert store.get_sentence(sid)["labels"][0] is None  # a tie
    store.clear_label(sid, 0, "Bob")
    assert store.get_sentence(sid)["votes"][0] == {"Ann": "B-PER"}
    assert store.get_sentence(sid)["labels"][0] == "B-PER"
    assert store.clear_label(imported, 0, "Bob") is None  # an imported label stays
    assert store.get_sentence(imported)["labels"] == ["B-LOC", "O"]
    # a "no label" vote written by an older store still counts as one (kept, not rewritten)
    store.db.write(lambda c: c.execute(text(
        "INSERT INTO votes (sentence_id, token_index, annotator, label, source, updated_at)"
        " VALUES (:s, 1, 'Old', NULL, 'human', '2025-01-01T00:00:00')"), {"s": imported}))
    store.set_labels(imported, {1: "O"}, "Ann")
    assert store.get_sentence(imported)["labels"][1] is None  # O against "no label": a tie
    assert store.clear_label(imported, 1, "Old") is not None  # Clear removes that vote
    assert store.get_sentence(imported)["labels"][1] == "O"


def test_one_undo_step_per_key_press(store):
    pid, ids = team_project(store, k=1)
    sid = ids[0]
    steps = [{0: "B-PER"}, {1: "I-PER"}, {2: "O"}, {3: "B-PER", 4: "I-PER"}]
    hist = store.set_label_steps(sid, steps, "Ann")
    assert len(hist) == 5
    at = {h["at"] for h in store.history(sid)}
    assert len(at) == 1  # one transaction
    assert sorted(store.undo(pid, "Ann")["changes"], key=lambda c: c["token_index"]) == [
        {"token_index": 3, "label": None, "previous": "B-PER"},  # the span: one step
        {"token_index": 4, "label": None, "previous": "I-PER"}]
    assert [c["token_index"] for c in store.undo(pid, "Ann")["changes"]] == [2]
    assert store.get_sentence(sid)["labels"][:3] == ["B-PER", "I-PER", None]
    with pytest.raises(InputError, match="not in the project's label set"):
        store.set_label_steps(sid, [{5: "O"}, {6: "NOPE"}], "Ann")
    assert store.get_sentence(sid)["labels"][5] is None  # nothing of it written


# ----------------------------------------------------------------------------- the queue


def _scores(store, pid, ids, per_sentence):
    """An active version whose query scores give sentence i the largest token score
    ``per_sentence[i]``."""
    vid = store.start_model_version(pid, {"offsets": [-1, 1], "kernel": "linear"})
    n = len(WORDS)
    marg = {sid: np.full((n, len(LABELS)), 1.0 / len(LABELS), dtype=np.float32) for sid in ids}
    query = {sid: np.linspace(0.0, s, n)[::-1].copy() for sid, s in zip(ids, per_sentence)}
    store.save_predictions(vid, marg, query)
    store.finish_model_version(vid, None, [0.0], {}, 0, classes=LABELS, query_strategy="bald")
    store.set_active_model(pid, vid)


def test_overlap_never_pushes_low_value_sentences_first(store):
    """k = 2: Ann took the sentences of BALD 0.33 and 0.14; Bob is given the project's top
    sentence (1.16) first, then the most informative one that still needs his vote, an
    overlap or not; among equal scores an overlap already started comes first."""
    pid, ids = team_project(store, k=2, n=5)
    _scores(store, pid, ids, [0.33, 0.14, 1.16, 0.5, 0.14])
    last = len(WORDS) - 1  # a token of score 0: a vote there leaves the sentence's score
    for sid in (ids[0], ids[1], ids[3]):
        store.set_labels(sid, {last: "O"}, "Ann")
    order: list[int] = []
    current = None
    for _ in range(5):
        current = store.next_sentence(pid, "Bob", current=current, exclude=order)
        assert current is not None and current not in order
        order.append(current)
        store.set_labels(current, {last: "O"}, "Bob")  # Bob votes and moves on
    # the top sentence before every overlap; then by score, whoever holds the sentence;
    # 0.14 twice: the overlap Ann started comes first (it used to be every overlap first)
    assert order == [ids[2], ids[3], ids[0], ids[1], ids[4]]
    assert store.next_sentence(pid, "Bob", current=current, exclude=order) in (None, *order)


# ----------------------------------------------------------------------------- speed


def test_median_seconds_per_label_counts_the_labels_of_one_write(store):
    """Keys that reach the server together are written in one transaction with one time:
    the time since the previous write is shared by its labels (it used to give gaps of 0
    and a median of 0 s)."""
    pid, ids = team_project(store, k=1)
    sid = ids[0]
    store.set_label_steps(sid, [{0: "B-PER"}], "Ann")
    store.set_label_steps(sid, [{1: "I-PER"}, {2: "O"}, {3: "O"}, {4: "O"}], "Ann")
    store.set_label_steps(sid, [{5: "O"}, {6: "B-LOC"}], "Ann")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    times = [0, 2, 2, 2, 2, 4, 4]

    def tx(c):
        rows = [r[0] for r in c.execute(text("SELECT id FROM annotation_history ORDER BY id"))]
        for hid, dt in zip(rows, times):
            c.execute(text("UPDATE annotation_history SET at = :at WHERE id = :i"),
                      {"at": (t0 + timedelta(seconds=dt)).isoformat(timespec="milliseconds"),
                       "i": hid})

    store.db.write(tx)
    row = store.annotator_stats(pid)[0]
    assert row["changes"] == 7
    assert row["median_seconds"] == pytest.approx(0.5)  # 2 s / 4 labels, 2 s / 2 labels
    assert row["labels_per_hour"] == pytest.approx(6 / 4 * 3600)
    assert row["active_minutes"] == pytest.approx(4 / 60)
    # keys the browser queued carry their own times: one write, the presses' intervals
    store.set_label_steps(ids[1], [{0: "O"}, {1: "O"}, {2: "O"}, {3: "O"}], "Bob",
                          ages=[0.3, 0.2, 0.1, 0.0])
    times = sorted(datetime.fromisoformat(h["at"]) for h in store.history(ids[1]))
    assert [(b - a).total_seconds() for a, b in zip(times, times[1:])] == \
        pytest.approx([0.1, 0.1, 0.1], abs=2e-3)
    bob = next(r for r in store.annotator_stats(pid) if r["annotator"] == "Bob")
    assert bob["median_seconds"] == pytest.approx(0.1, abs=2e-3)
    with pytest.raises(ValueError, match="2 ages for 1 steps"):
        store.set_label_steps(ids[1], [{4: "O"}], "Bob", ages=[0, 0])


# ----------------------------------------------------------------------------- the rule


def test_the_training_rule_is_one_setting(store):
    pid, ids = team_project(store, k=2)
    assert "majority" in store.team_settings(pid)["rule"]
    with pytest.raises(InputError, match="soft labels need the crowd model"):
        store.set_team_settings(pid, soft=True)
    store.set_labels(ids[0], {0: "B-PER", 1: "I-PER"}, "Ann")
    store.set_labels(ids[0], {0: "B-PER", 1: "O"}, "Bob")
    store.fit_crowd_model(pid)
    store.set_team_settings(pid, **rules.rule_settings("soft"))
    s = store.team_settings(pid)
    assert (s["resolve"], s["soft"]) == ("crowd", True) and "soft label" in s["rule"]
    assert rules.rule_key(s["resolve"], s["soft"]) == "soft"
    assert store.reports.team_settings(pid).rule == s["rule"]
    store.set_team_settings(pid, resolve="majority")  # soft labels need the crowd model
    assert store.team_settings(pid)["soft"] is False


def test_crowd_evidence_is_the_votes_log_likelihood():
    """e(y) = sum_v log pi_{a_v}[y, l_v] under the stored model; an annotator it has not seen
    is the one-coin of accuracy 0.8; a vote without a label is no evidence."""
    classes = ["B-PER", "O"]
    pi = np.array([[[0.9, 0.1], [0.2, 0.8]]])
    model = {"classes": classes, "annotators": ["good"], "log_pi": np.log(pi).tolist(),
             "log_prior": np.log([0.5, 0.5]).tolist()}
    votes = [Vote("good", "B-PER", "human", ""), Vote("new", "O", "human", ""),
             Vote("gone", None, "human", "")]
    e = rules.crowd_evidence(model, votes, classes)
    want = np.log([0.9, 0.2]) + np.log([0.2, 0.8])
    assert e == pytest.approx(want)
    # a class the model does not know: the one-coin over the fit's classes
    e3 = rules.crowd_evidence(model, votes[:1], ["B-LOC", "B-PER", "O"])
    assert e3 == pytest.approx([np.log(0.1), np.log(0.9), np.log(0.2)])
    # with the model's class prior, the evidence gives the crowd posterior (eq. E)
    post = np.exp(want + model["log_prior"])
    assert rules.crowd_posterior(model)(0, votes) == classes[int(np.argmax(post))]


def test_soft_labels_train_through_the_missing_label_machinery(store, tmp_path):
    """A reliable and an unreliable annotator disagree on every token of one sentence:
    with soft labels (the crowd model) each voted token is a missing label with the votes'
    evidence; the fit leans to the reliable one, and the version records the rule."""
    pid = store.create_project("soft", ["B-PER", "O"])
    names = ["Ada", "Bob", "Cy", "Dee"]
    rows = [{"tokens": [names[i % 4], "ran", "home", names[(i + 1) % 4], "slept"]}
            for i in range(12)]
    store.add_sentences(pid, rows)
    ids = store.sentence_ids(pid)
    truth = ["B-PER", "O", "O", "B-PER", "O"]
    for sid in ids[:11]:
        store.set_labels(sid, dict(enumerate(truth)), "good")
        store.set_labels(sid, dict(enumerate(truth)), "also")
        store.set_labels(sid, {t: ("O" if lab == "B-PER" else "B-PER")
                               for t, lab in enumerate(truth)}, "flip")
    last = ids[11]
    store.set_labels(last, {0: "B-PER", 1: "O"}, "good")
    store.set_labels(last, {0: "O", 1: "B-PER"}, "flip")
    store.fit_crowd_model(pid)
    store.set_team_settings(pid, **rules.rule_settings("soft"))
    data = store.training_set(pid)
    assert data["soft"] and data["classes"] == ["B-PER", "O"]
    k = data["ids"].index(last)
    assert data["y"][k][:2] == [None, None]  # soft: missing, with evidence
    model = store.team_settings(pid)["crowd"]
    cast = [Vote("flip", "O", "human", ""), Vote("good", "B-PER", "human", "")]
    assert data["evidence"][k][0] == pytest.approx(
        rules.crowd_evidence(model, cast, data["classes"]))
    assert np.all(data["evidence"][k][2:] == 0)  # no votes: no evidence
    assert data["evidence"][k][0].argmax() == 0 and data["evidence"][k][1].argmax() == 1
    version = train_now(store.home, pid, TrainConfig(max_iter=10), tmp_path / "models")
    assert version["status"] == "done", version.get("error")
    used = version["metrics"]["training_labels"]
    assert used["soft"] and used["resolve"] == "crowd" and used["soft_tokens"] == 2 + 11 * 5
    marg = store.get_predictions(version["id"], [last])[last]
    assert marg[0].argmax() == 0 and marg[1].argmax() == 1  # the reliable annotator's labels


# ----------------------------------------------------------------------------- the page


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    return app_store_env(tmp_path, monkeypatch)


def annotate_as(name: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30))
    at.session_state["annotator"] = name
    at.run()
    at.switch_page("pages/annotate.py").run()
    assert not at.exception, at.exception
    return at


def keys(at: AppTest, *pressed: str) -> None:
    n0 = getattr(at, "_n", 0) + 1
    at._n = n0 + len(pressed) - 1
    at.session_state[_keys.KEY] = {"epoch": "e", "events": [
        {"n": n0 + i, "k": "key", "key": k, "shift": False} for i, k in enumerate(pressed)]}
    at.run()
    assert not at.exception, at.exception


def test_interleaved_keys_of_two_people_land_on_their_own_cursors(db):
    """Ann and Bob on the same sentence (k = 2), their keys arriving in turns: each one's
    keys label the next token of their own copy, never one the other labeled meanwhile; the
    identical sequences make no conflict; each sees only their own labels."""
    store = Store(db)
    pid, ids = team_project(store, k=2, n=1)
    sid = ids[0]
    ann, bob = annotate_as("Ann"), annotate_as("Bob")
    assert ann.session_state[f"annotate_{pid}"]["current"] == sid
    assert bob.session_state[f"annotate_{pid}"]["current"] == sid
    seq = ["1", "1", "0", "1", "1", "0", "2", "0", "0", "0"]  # PER PER O PER PER O LOC O O O
    for i in range(0, 10, 3):
        keys(ann, *seq[i:i + 3])
        keys(bob, *seq[i:i + 3])
    want = ["B-PER", "B-PER", "O", "B-PER", "B-PER", "O", "B-LOC", "O", "O", "O"]
    votes = store.get_sentence(sid)["votes"]
    for t in range(10):
        assert votes[t] == {"Ann": want[t], "Bob": want[t]}, t
    assert votes[10] == {}
    assert store.conflicts(pid) == []
    for at in (ann, bob):
        assert any("10 of 11 tokens labeled by you" in m.value for m in at.markdown)
        assert any("stay hidden until a lead reviews" in c.value for c in at.caption)
    # Bob's undo is one key press of his: Ann's copy and votes stay
    keys(bob, "u")
    votes = store.get_sentence(sid)["votes"]
    assert votes[9] == {"Ann": "O"} and votes[8] == {"Ann": "O", "Bob": "O"}


def test_the_keys_are_shown_once(db):
    """With a span scheme the digits are the entity types, shown on the type buttons only;
    the label buttons have none (type-ahead); without one every label's key is its own."""
    store = Store(db)
    labels = [f"{p}-{t}" for t in ("DATE", "LOC", "MONEY", "ORG", "PER") for p in "BI"] + ["O"]
    store.create_project("sample-like", labels, sentences=[{"tokens": list("abc")}])
    at = annotate_as("Ann")
    shown = [b.label for b in at.button if (b.key or "").startswith(("span_", "lab_"))]
    keyed = [lab for lab in shown if ":gray[" in lab]
    assert keyed == ["DATE :gray[1]", "LOC :gray[2]", "MONEY :gray[3]", "ORG :gray[4]",
                     "PER :gray[5]", "O (outside) :gray[0]"]
    assert all(at.button(key=f"lab_{i}").help.startswith("Type /") for i in range(10))
    keys(at, "4")  # one token: an ORG entity
    sid = store.sentence_ids(store.list_projects()[0]["id"])[0]
    assert store.get_sentence(sid)["labels"][0] == "B-ORG"
    from pages._chips import key_hints

    hints = key_hints(["NN", "O", "VB", "JJ"])
    assert hints == {"NN": "1", "VB": "2", "JJ": "3", "O": "0"}
    assert len(set(hints.values())) == len(hints)


def lead_page(page: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(30)).run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, at.exception
    return at


def test_adjudication_never_prefills_a_decision(db):
    """A selected conflict offers no decision until the lead picks one; after a decision
    the selection is cleared, so the next conflict is never decided by a second click."""
    store = Store(db)
    pid, ids = team_project(store, k=2, n=1)
    sid = ids[0]
    store.set_labels(sid, {0: "B-PER", 1: "I-PER"}, "Ann")
    store.set_labels(sid, {0: "B-LOC", 1: "O"}, "Bob")
    at = lead_page("team")
    at.session_state["conf_table_0"] = {"selection": {"rows": [0], "columns": []}}
    at.run()
    decision = at.selectbox(key=f"adj_{sid}_0")
    assert decision.value is None and at.button(key="adj_go").disabled
    decision.set_value("B-PER").run()
    at.button(key="adj_go").click().run()
    assert not at.exception, at.exception
    assert store.get_sentence(sid)["labels"][0] == "B-PER"
    assert not [s for s in at.selectbox if (s.key or "").startswith("adj_")]  # none selected
    at.session_state["conf_table_1"] = {"selection": {"rows": [0], "columns": []}}
    at.run()  # the next open conflict: token 2, again without a decision
    assert at.selectbox(key=f"adj_{sid}_1").value is None
    assert at.button(key="adj_go").disabled
    assert store.get_sentence(sid)["labels"][1] is None  # still a tie


def test_the_rule_is_set_on_the_team_page_and_named_on_the_train_page(db):
    store = Store(db)
    pid, ids = team_project(store, k=2, n=1)
    store.set_labels(ids[0], {0: "B-PER"}, "Ann")
    store.set_labels(ids[0], {0: "B-LOC"}, "Bob")
    train = lead_page("train")
    assert any(c.value.startswith("**Training labels:** a lead's decision; else one vote's "
                                  "label; else the majority") for c in train.caption)
    store.fit_crowd_model(pid)
    team = lead_page("team")
    team.radio(key="resolve").set_value("soft")
    team.button(key="team_save").click().run()
    assert not team.exception and not team.error
    assert store.team_settings(pid)["soft"]
    train = lead_page("train")
    assert any("soft label" in c.value and c.value.startswith("**Training labels:**")
               for c in train.caption)
