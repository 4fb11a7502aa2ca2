"""The Team page's figures from vote columns (:mod:`gpsl.annotation.labeling.team_columns`,
``store.reports.team``) equal the reference over one dict per vote
(:func:`gpsl.annotation.labeling.team.agreement_figures`, ``annotator_stats``, ``conflicts``): by
hand on a small case, on random projects with cleared votes, imported labels and decisions (SQLite
and PostgreSQL), and by hypothesis for the coded kappa and alpha of :mod:`gpsl.agreement`;
and the kept figures follow every change of votes, decisions and settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from gpsl import agreement
from gpsl.annotation.labeling import votes as vote_rows
from gpsl.annotation.store.db import now

LABELS = ["B-PER", "I-PER", "B-LOC", "O"]


def project(store, n=6, length=4, name="t"):
    pid = store.create_project(name, LABELS)
    store.add_sentences(pid, [{"tokens": [f"w{i}_{t}" for t in range(length)]}
                              for i in range(n)])
    return pid, store.sentence_ids(pid, "train")


def reference(store, pid):
    """The figures as the reference computes them, from one dict per vote."""
    cast = store.team_votes(pid)
    figures = store.agreement(pid, cast)
    return figures, store.annotator_stats(pid, cast, figures), store.conflicts(pid, cast)


def nan_equal(a, b) -> bool:
    return (a != a and b != b) or a == b


def assert_same(store, pid):
    team = store.reports.team(pid)
    figures, people, conflicts = reference(store, pid)
    assert list(team.annotators) == figures["annotators"]
    np.testing.assert_array_equal(team.kappa, figures["kappa"])  # NaN where NaN
    np.testing.assert_array_equal(team.shared, figures["shared"])
    assert nan_equal(team.alpha, figures["alpha"])
    assert list(team.alpha_by_label) == list(figures["alpha_by_label"])
    assert all(nan_equal(team.alpha_by_label[k], v) for k, v in figures["alpha_by_label"].items())
    assert team.n_tokens == figures["n_tokens"]
    assert len(team.people) == len(people)
    for row, ref in zip(team.people, people):
        got = row.__dict__
        for key, value in ref.items():
            if isinstance(value, float):  # sums in another order
                assert got[key] == pytest.approx(value, rel=1e-12)
            else:
                assert got[key] == value, key
    assert [c.__dict__ for c in team.conflicts] == [
        {"sentence_id": c["sentence_id"], "position": c["position"],
         "token_index": c["token_index"], "token": c["token"], "votes": c["votes"],
         "labels": tuple(c["labels"]), "derived": c["derived"],
         "adjudicated": c["adjudicated"], "status": c["status"]} for c in conflicts]
    assert store.reports.conflicts(pid) == list(team.conflicts)  # the Conflicts tab's
    return team


def test_figures_by_hand(store):
    """Two people on one sentence (kappa 7/11, alpha 2/3 by hand), alice's speed."""
    pid, ids = project(store, n=2)
    assert store.reports.team(pid) is None  # nobody has voted
    s = ids[0]
    store.set_labels(s, {0: "B-PER", 1: "O", 2: "O", 3: "B-LOC"}, "alice")
    store.set_labels(s, {0: "B-PER", 1: "O", 2: "B-LOC", 3: "B-LOC"}, "bob")
    for t in range(3):
        store.set_label(ids[1], t, "O", "alice")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    hist = store.db.read(lambda c: [r[0] for r in c.execute(text(
        "SELECT id FROM annotation_history WHERE annotator = 'alice' ORDER BY id"))])
    stamps = [t0 + timedelta(seconds=x) for x in (0, 10, 30, 1000, 1005, 1015, 2000)]

    def tx(c):
        for hid, at in zip(hist, stamps):
            c.execute(text("UPDATE annotation_history SET at = :at WHERE id = :i"),
                      {"at": at.isoformat(timespec="milliseconds"), "i": hid})

    store.db.write(tx)
    team = assert_same(store, pid)
    assert team.annotators == ("alice", "bob") and team.n_tokens == 4
    # p_o = 3/4, p_e = (1*1 + 2*1 + 1*2) / 16 = 5/16: kappa = (12 - 5) / 11
    assert team.kappa[0, 1] == pytest.approx(7 / 11) and team.shared[0, 1] == 4
    assert team.shared[0, 0] == 7 and team.shared[1, 1] == 4
    # o(B-PER,B-PER) = o(O,O) = o(B-LOC,B-LOC) = 2, o(O,B-LOC) = o(B-LOC,O) = 1, n = 8
    assert team.alpha == pytest.approx(2 / 3)
    alice = next(r for r in team.people if r.annotator == "alice")
    assert (alice.votes, alice.sentences, alice.changes) == (7, 2, 7)
    # gaps 10, 20, 5, 10 s (the pauses of 970 and 985 s left out): 45 s, median 10 s
    assert alice.active_minutes == pytest.approx(45 / 60)
    assert alice.median_seconds == pytest.approx(10.0)
    assert alice.kappa == pytest.approx(7 / 11)
    assert [(c.token_index, c.labels) for c in team.conflicts] == [(2, ("B-LOC", "O"))]


def test_random_projects_equal_the_reference(store):
    """Five people (one voting only "no label" at times), imported labels, a vote file's
    credit and leads' decisions: every figure as the reference gives it."""
    rng = np.random.default_rng(7)
    pid, ids = project(store, n=40, length=6)
    people = ["ann", "bo", "cy", "dee", "eve"]
    at = now()
    rows = []
    for sid in ids:
        for t in range(6):
            for who in people:
                if rng.random() < 0.55:
                    lab = None if rng.random() < 0.08 else LABELS[int(rng.integers(3))]
                    rows.append({"p": pid, "s": sid, "t": t, "a": who, "l": lab,
                                 "src": "human", "at": at})
            if rng.random() < 0.2:  # labels that came with a file: in no figure
                rows.append({"p": pid, "s": sid, "t": t, "a": "import:x.conll", "l": "O",
                             "src": "human", "at": at})
    store.db.write(lambda c: vote_rows.add_imported(c, rows))
    for sid in ids[:8]:  # labels set in the app, with history rows that time them
        store.set_label(sid, 0, "O", "bo")
    store.adjudicate(ids[1], 0, "O", "lead")
    store.adjudicate(ids[2], 1, "B-PER", "lead")
    team = assert_same(store, pid)
    assert team.n_tokens > 50 and len(team.conflicts) > 50
    assert {c.status for c in team.conflicts} >= {"adjudicated", "resolved"}
    assert "import:x.conll" not in team.annotators


def test_the_kept_figures_follow_every_change(store):
    pid, ids = project(store, n=3)
    store.set_labels(ids[0], {0: "O", 1: "O"}, "alice")
    store.set_labels(ids[0], {0: "O", 1: "B-PER"}, "bob")
    first = store.reports.team(pid)
    again = store.reports.team(pid)
    assert again.people == first.people and again.conflicts == first.conflicts
    assert store.reports.team(pid) is store.reports.team(pid)  # kept, not computed again
    store.set_label(ids[0], 1, "O", "bob")  # a vote
    assert store.reports.team(pid).conflicts == ()
    assert_same(store, pid)
    store.set_label(ids[0], 2, "B-LOC", "carol")
    store.set_label(ids[0], 2, "O", "bob")
    assert [c.status for c in store.reports.team(pid).conflicts] == ["open"]
    store.adjudicate(ids[0], 2, "O", "lead")  # a decision
    assert [c.status for c in store.reports.team(pid).conflicts] == ["adjudicated"]
    assert [c.status for c in store.reports.conflicts(pid)] == ["adjudicated"]
    store.undo(pid, "bob")  # an undo
    assert_same(store, pid)


# ----------------------------------------------------------------------------- numerics

ITEMS = st.dictionaries(
    st.tuples(st.integers(0, 5), st.integers(0, 4)),
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]),
                    st.sampled_from([None, "X", "Y", "Z", "W"]), min_size=1),
    max_size=30)


@settings(max_examples=200, deadline=None)
@given(ITEMS)
def test_coded_kappa_and_alpha_equal_the_reference(items):
    items = dict(sorted(items.items()))
    names = sorted({a for v in items.values() for a in v})
    labels = sorted({lab for v in items.values() for lab in v.values() if lab is not None})
    it, an, lb = [], [], []
    for k, (_, v) in enumerate(items.items()):
        for a, lab in v.items():
            if lab is not None:
                it.append(k)
                an.append(names.index(a))
                lb.append(labels.index(lab))
    a, b, kappa, n = agreement.pair_kappas_coded(np.array(it), np.array(an), np.array(lb),
                                                 max(len(names), 1), max(len(labels), 1))
    counts, pairs = agreement.pair_kappas(items)
    got = {(names[i], names[j]): (k, int(m)) for i, j, k, m in zip(a, b, kappa, n)}
    assert set(got) == set(pairs)
    for key, (k, m) in pairs.items():
        assert got[key][1] == m and nan_equal(got[key][0], k)  # the same float
    # alpha from a count matrix built over the units with two or more values
    units = [list(v.values()) for v in items.values()]
    kept = [[x for x in u if x is not None] for u in units]
    kept = [u for u in kept if len(u) >= 2]
    values = sorted({x for u in kept for x in u}, key=repr)
    rows = [r for r, u in enumerate(kept) for _ in u]
    cols = [values.index(x) for u in kept for x in u]
    N, m = agreement.count_matrix(np.array(rows, dtype=int), np.array(cols, dtype=int),
                                  len(kept), len(values))
    assert nan_equal(agreement.alpha_of_counts(N, m), agreement.krippendorff_alpha(units))
    by_label = agreement.alpha_per_label_of_counts(values, N, m)
    ref = agreement.alpha_per_label(units)
    assert list(by_label) == list(ref)
    assert all(nan_equal(by_label[k], ref[k]) for k in ref)
