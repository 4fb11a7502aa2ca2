"""Blind mode keeps other people's work hidden from an annotator, on SQLite and PostgreSQL:
a walk of every method (store and reports) an annotator may call, each result searched for
the other annotator's name and for a label only the other annotator used; the acting store
hands out no private part; and the facade's arguments are typed strictly (one-line errors
on both back ends, nothing written to another token)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from gpsl.annotation import AccessDenied, Identity, InputError, Store, access
from gpsl.annotation.reports import Reports

LABELS = ["B-PER", "I-PER", "B-LOC", "I-LOC", "O"]
OTHER = "Quentin"  # the other annotator: his name must never reach Ann


@pytest.fixture
def blind(store):
    pid = store.create_project("blind one", LABELS)
    store.add_sentences(pid, [{"tokens": ["Anna", "ran", "home"]},
                              {"tokens": ["Carl", "sat", "down"]}])
    store.create_account("Lea", "lead", "sturdy wombat lantern")
    ann, other = store.create_account("Ann"), store.create_account(OTHER)
    store.set_member(pid, ann)
    store.set_member(pid, other)
    s1, s2 = store.sentence_ids(pid)
    store.set_labels(s1, {0: "B-PER", 2: "O"}, "Ann")
    store.set_labels(s1, {0: "B-LOC", 1: "O", 2: "B-LOC"}, OTHER)  # B-LOC: only his
    store.set_labels(s2, {0: "B-LOC", 1: "O"}, OTHER)
    store.fit_crowd_model(pid)
    store.set_team_settings(pid, blind=True, resolve="crowd")
    assert OTHER in repr(store.team_settings(pid))  # the lead's view holds him
    return store, pid, s1, s2, store.acting(Identity("Ann", "annotator", ann))


def _args(fn, pid, s1):
    """Arguments for a walk call, by parameter name."""
    values = {"project_id": pid, "sentence_id": s1, "token_index": 0, "annotator": "Ann",
              "labels": None, "split": None, "number": 1, "order": "sequential",
              "label": "B-PER", "steps": [{1: "I-PER"}], "limit": 50, "n": 5}
    out = {}
    for name, prm in inspect.signature(fn).parameters.items():
        if prm.kind in (prm.VAR_KEYWORD, prm.VAR_POSITIONAL) or name == "self":
            continue
        if name in values:
            out[name] = values[name]
        elif prm.default is prm.empty:
            return None
    if "labels" in out:
        out["labels"] = {1: "I-PER"} if fn.__name__ == "set_labels" else LABELS
    return out


def test_a_walk_of_every_member_method_shows_nothing_of_another_person(blind):
    store, pid, s1, s2, ann = blind
    called = []
    def member(cls):
        return {n for n, rule in access.declared(cls).items()
                if rule and rule.role is access.Role.ANNOTATOR}

    for names, target, acting in ((member(Store), store, ann),
                                  (member(Reports), Reports(store.home), ann.reports)):
        for name in sorted(names):
            kwargs = _args(getattr(target, name), pid, s1)
            if kwargs is None:
                continue
            try:
                got = getattr(acting, name)(**kwargs)
            except AccessDenied:
                continue  # refused outright: nothing shown
            except InputError as exc:  # one line, naming nobody
                assert OTHER not in str(exc)
                continue
            called.append(name)
            text = repr(got)
            assert OTHER not in text, f"{name} shows {OTHER}: {text[:300]}"
            if name not in ("get_project", "project", "projects", "list_projects", "scheme"):
                assert "B-LOC" not in text, f"{name} shows his label: {text[:300]}"
    for must in ("token_history", "team_settings", "get_project", "project", "sentence",
                 "sentence_view", "progress", "projects", "list_projects"):
        assert must in called
    # his history on a token he labeled: nothing of it, whatever Ann asks for
    assert ann.reports.token_history(s1, 0, only=OTHER) == [] or all(
        h.annotator != OTHER for h in ann.reports.token_history(s1, 0, only=OTHER))
    assert "crowd" not in (ann.get_project(pid)["settings"] or {})
    assert ann.reports.project(pid).settings.get("crowd") is None


def test_the_acting_store_hands_out_no_private_part(blind):
    store, pid, s1, s2, ann = blind
    for name in ("_store", "_members", "_blinds", "_acting", "_reports", "__dict__"):
        for obj in (ann, ann.reports):
            with pytest.raises((AccessDenied, AttributeError)):
                getattr(obj, name)
    with pytest.raises((AccessDenied, AttributeError, TypeError)):
        vars(ann)
    assert ann.who.name == "Ann"


@pytest.mark.parametrize("index", [1.9, True, "-0", "1", None, 2 ** 70, -1, 3])
def test_a_token_index_is_a_whole_number_in_range(blind, index):
    store, pid, s1, s2, ann = blind
    before = ann.reports.own_labels(s1, "Ann")
    with pytest.raises(InputError) as info:
        ann.set_label(s1, index, "I-PER", "Ann")
    assert "\n" not in str(info.value) and "token" in str(info.value)
    assert ann.reports.own_labels(s1, "Ann") == before


@pytest.mark.parametrize("age", [-1e9, math.nan, math.inf, "5", True])
def test_step_ages_are_bounded_numbers(blind, age):
    store, pid, s1, s2, ann = blind
    with pytest.raises(InputError) as info:
        ann.set_label_steps(s1, [{1: "I-PER"}], "Ann", ages=[age])
    assert "\n" not in str(info.value) and "age" in str(info.value)


def test_an_accepted_label_is_the_model_suggestion_only(blind):
    store, pid, s1, s2, ann = blind
    with pytest.raises(InputError) as info:  # no model: nothing to accept
        ann.set_labels(s1, {1: "I-PER"}, "Ann", source="accepted")
    assert "\n" not in str(info.value)
    vid = store.start_model_version(pid, {"iters": 5})
    store.finish_model_version(vid, "/models/x", [1.0], {"acc": 0.5}, 3, classes=LABELS)
    sure = np.full((3, len(LABELS)), 0.01, dtype=np.float32)
    sure[:, LABELS.index("O")] = 0.96  # the model says O for every token
    store.save_predictions(vid, {s2: sure})
    store.set_active_model(pid, vid)
    # tokens 0 and 1 are Quentin's: hidden from Ann, so no suggestion; token 2: O
    with pytest.raises(InputError, match="not the model's suggestion") as info:
        ann.set_labels(s2, {2: "B-PER"}, "Ann", source="accepted")
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="not the model's suggestion"):
        ann.set_label(s2, 0, "O", "Ann", source="accepted")  # hidden: nothing to accept
    with pytest.raises(InputError, match="not the model's suggestion"):
        ann.set_label_steps(s2, [{2: "O"}, {2: "I-PER"}], "Ann", source="accepted")
    assert ann.reports.own_labels(s2, "Ann") == [None, None, None]  # nothing written
    ann.set_labels(s2, {2: "O"}, "Ann", source="accepted")
    view = ann.reports.sentence(s2, "Ann")
    assert view.tokens[2].own == "O" and view.tokens[2].source == "accepted"
    ann.set_labels(s2, {0: "B-PER"}, "Ann")  # her own label: source human, always fine


@pytest.mark.parametrize("bad", [True, 1.0, "1", -1, 2 ** 70])
def test_a_project_id_is_a_whole_number(store, bad):
    pid = store.create_project("p", LABELS)
    assert pid == 1 or pid > 0
    with pytest.raises(InputError) as info:
        store.get_project(bad)
    assert "\n" not in str(info.value) and "SELECT" not in str(info.value)


def test_a_training_run_records_who_started_it(store):
    from gpsl.annotation import TrainConfig

    store.create_project("p", LABELS)
    lead = store.create_account("Lea", "lead", "sturdy wombat lantern")
    acting = store.acting(Identity("Lea", "lead", lead))
    for given in ({}, {"started_by": "click"}, {"started_by": "someone else"}):
        bound = acting.check("start_training", store.start_training,
                             (1, TrainConfig()), given)
        assert bound.arguments["started_by"] == "Lea"
