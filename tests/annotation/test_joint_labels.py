"""A crowd project trains on the joint model's posterior (``gpsl.annotation.training.joint_labels``,
the ``joint`` training rule; SQLite and PostgreSQL): three workers of unequal skill on a few
hand-made sentences, one token adjudicated by a lead. The app's training run (the pipeline,
in the caller) learns from the same ``q(y)`` as the library's :class:`gpsl.crowd.CrowdGPSL`
fitted directly on the folder's votes, the adjudicated token stays one-hot, and the tagger the
run saved is the library's soft-label fit (:func:`gpsl.crowd.joint.fit_soft`) on that
posterior; the Train page names the joint model."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

from gpsl import params  # noqa: E402
from gpsl.annotation import Store, TrainConfig, read_crowd_upload  # noqa: E402
from gpsl.annotation.training import joint_labels  # noqa: E402
from gpsl.annotation.training.jobs import train_now  # noqa: E402
from gpsl.cli.crowd import CROWD_PARAMS, JOINT_PARAMS  # noqa: E402
from gpsl.crowd import CrowdGPSL, Votes  # noqa: E402
from gpsl.crowd.joint import fit_soft  # noqa: E402
from gpsl.io import CrowdSentence  # noqa: E402
from gpsl.model import GPSL  # noqa: E402
from tests.support.crowd_folder import upload_files, write_folder  # noqa: E402
from tests.support.helpers import app_store_env  # noqa: E402
from tests.support.limits import limit  # noqa: E402

SENTENCES = [
    [("Ada", "B-PER"), ("Lovelace", "I-PER"), ("met", "O"), ("Bob", "B-PER"), ("in", "O"),
     ("Paris", "B-LOC")],
    [("Grace", "B-PER"), ("visited", "O"), ("New", "B-LOC"), ("York", "I-LOC"), (".", "O")],
    [("The", "O"), ("rain", "O"), ("in", "O"), ("Spain", "B-LOC"), ("stays", "O")],
]
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
#: each worker's chance of giving the gold label (else a label drawn at random)
SKILLS = (0.95, 0.7, 0.5)
CONFIG = TrainConfig(max_iter=20)


def crowd(root: Path, n_docs: int = 6) -> Path:
    text = "\n".join("".join(f"{w} {lab}\n" for w, lab in s) for s in SENTENCES)
    workers = {}
    for k, skill in enumerate(SKILLS):
        rng = random.Random(k)
        workers[f"W{k}"] = {f"doc{d}.txt": "\n".join("".join(
            f"{w} {lab if rng.random() < skill else rng.choice(LABELS)}\n" for w, lab in s)
            for s in SENTENCES) for d in range(n_docs)}
    return write_folder(root, workers=workers,
                        gold={f"doc{d}.txt": text for d in range(n_docs)})


def tagger() -> GPSL:
    """The run's tagger settings (CONFIG and the crowd project's ``ner`` feature set)."""
    return GPSL(offsets=CONFIG.offsets, kernel=CONFIG.kernel, template="ner",
                max_iter=CONFIG.max_iter, tol=CONFIG.tol, learn_hyper=CONFIG.learn_hyper,
                inference=CONFIG.inference)


def test_a_crowd_project_trains_on_the_joint_posterior(store_target, tmp_path):
    store = Store(store_target, models_root=tmp_path / "models")
    try:
        _joint_run(store, tmp_path)
    finally:
        store.close()


def _joint_run(store, tmp_path):
    folder = read_crowd_upload(upload_files(crowd(tmp_path / "crowd")))
    done = store.create_crowd_project("joint", folder, heldout=0.0)
    pid = done.project_id
    assert "joint crowd model" in done.rule
    trains_on = store.training_labels(pid)
    assert trains_on.key == "joint" and "joint model's posterior" in trains_on.posterior
    # a lead decides "Bob" of the first sentence (B-PER in the gold) as B-LOC
    first = store.sentence_ids(pid, "train")[0]
    assert "B-PER" in {v["label"] for v in store.votes(first) if v["token_index"] == 3}
    store.adjudicate(first, 3, "B-LOC", "lead")

    # the library alone on the folder's votes, the lead's decision observed
    sents = [CrowdSentence(tokens=list(s.tokens), annotations=dict(s.annotations))
             for s in folder.sentences]
    sents[0].annotations["lead"] = [None, None, None, "B-LOC", None, None]
    classes = sorted({lab for s in sents for labs in s.annotations.values() for lab in labs
                      if lab is not None})
    votes = Votes.from_sentences(sents, classes=classes, trusted=["lead"])
    X = [s.tokens for s in sents]
    settings = {k: params.param(k).default for k in CROWD_PARAMS + JOINT_PARAMS}
    direct = CrowdGPSL(tagger(), refit=False, **settings).fit(X, votes)
    q = direct.probas_
    assert q[3] == pytest.approx(np.eye(len(classes))[classes.index("B-LOC")])
    assert (q.max(axis=1) < 0.99).any()  # some token's posterior is really soft

    # the app's training set: the same votes, and their soft labels are that q(y)
    data = store.training_set(pid)
    assert data["joint"] and data["classes"] == classes
    assert [[t[0] for t in x] for x in data["X"]] == [[t[0] for t in x] for x in X]
    app_votes = joint_labels.votes_of(data["X"], data["y"], data["annotations"],
                                      data["classes"])
    assert app_votes.token.size == votes.token.size and app_votes.n == votes.n
    assert np.array_equal(app_votes.observed, votes.observed)
    app = joint_labels.fit_joint(data["X"], app_votes, tagger().get_params())
    assert app.probas_ == pytest.approx(q, abs=1e-9)
    y, evidence, inferred = joint_labels.soft_labels(app, app_votes)
    E = np.concatenate(evidence)
    soft = q.max(axis=1) < 1.0
    with np.errstate(divide="ignore"):
        assert np.exp(E[soft]) == pytest.approx(q[soft], abs=1e-9)
    flat_y = [lab for labs in y for lab in labs]
    assert flat_y[3] == "B-LOC" and not E[3].any()  # adjudicated: one-hot, a plain label
    assert all(flat_y[t] is None for t in np.flatnonzero(soft))
    assert inferred[0][3] == "B-LOC"

    # the training run through the app's pipeline: the tagger it saved is the library's
    # soft-label fit on the directly computed q(y)
    version = train_now(store.home, pid, CONFIG)
    assert version["status"] == "done", version["error"]
    rule = version["metrics"]["training_labels"]
    assert rule["joint"] and rule["soft_tokens"] == int(soft.sum()) > 0
    assert rule["joint_sweeps"] >= 1
    saved = GPSL.load(store.model_path(version["id"]))
    keep = votes.voted() | (votes.observed >= 0)
    want = fit_soft(tagger(), X, q, keep, classes, votes.split)
    got = saved.predict_marginals(X, calibrated=False)
    expected = want.predict_marginals(X, calibrated=False)
    for a, b in zip(got, expected):
        assert a == pytest.approx(b, abs=1e-6)


def test_the_train_page_names_the_joint_model(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    db = app_store_env(tmp_path, monkeypatch)
    store = Store(db)
    folder = read_crowd_upload(upload_files(crowd(tmp_path / "crowd", n_docs=2)))
    done = store.create_crowd_project("joint", folder, heldout=0.0)
    store.set_team_settings(done.project_id, **{"soft": True, "joint": False})
    dawid_skene = store.training_labels(done.project_id).posterior
    store.set_team_settings(done.project_id, joint=True)
    store.close()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(60))
    at.session_state["project_id"] = done.project_id
    at.run()
    at.switch_page("pages/train.py").run()
    assert not at.exception, at.exception
    text = " ".join(c.value for c in at.caption)
    assert "Trains on:** the joint model's posterior q(y)" in text
    assert "Dawid–Skene" in dawid_skene and dawid_skene not in text


def test_the_joint_rule_without_votes_trains_on_the_files_labels(tmp_path):
    """Nobody has voted: the joint rule has no votes to model, the run trains on the
    imported file's labels (hard) and says so."""
    store = Store(tmp_path / "s.sqlite3", models_root=tmp_path / "models")
    words = [["Ada"], ["met"], ["Bob"]]
    pid = store.create_project_from_sentences(
        "file", [{"tokens": words, "labels": ["B-PER", "O", "B-PER"]}] * 3, ["B-PER", "O"],
        None, (-1, 1))
    store.set_team_settings(pid, joint=True)
    assert store.training_labels(pid).key == "joint"
    data = store.training_set(pid)
    assert not data["joint"] and data["y"] == [["B-PER", "O", "B-PER"]] * 3
    version = train_now(store.home, pid, TrainConfig(max_iter=3))
    assert version["status"] == "done", version["error"]
    assert version["metrics"]["training_labels"]["joint"] is False
    store.close()
