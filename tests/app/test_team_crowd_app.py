"""The Team page on a crowd of 14 workers (more than the 12 whose kappa matrix shows with its
values), with AppTest against a temporary store: one table of every worker with the crowd
model's accuracy, entity precision and recall and the mean kappa, the least reliable first;
no activity columns for votes that came in a crowd folder; the reliability scatter and the
kappa matrix in an expander."""

from __future__ import annotations

import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from streamlit.testing.v1 import AppTest  # noqa: E402

from gpsl.annotation import Store, read_crowd_upload  # noqa: E402
from tests.support.crowd_folder import upload_files, write_folder  # noqa: E402
from tests.support.helpers import app_store_env  # noqa: E402
from tests.support.limits import limit  # noqa: E402

SENTENCES = [
    [("Ada", "B-PER"), ("Lovelace", "I-PER"), ("met", "O"), ("Bob", "B-PER"), ("in", "O"),
     ("Paris", "B-LOC")],
    [("Grace", "B-PER"), ("visited", "O"), ("New", "B-LOC"), ("York", "I-LOC"), (".", "O")],
    [("The", "O"), ("rain", "O"), ("in", "O"), ("Spain", "B-LOC"), ("stays", "O")],
]


def crowd(root: Path, n_workers: int = 14, n_docs: int = 6) -> Path:
    """``n_docs`` documents, each labeled by about half the workers; worker ``k`` turns an
    entity label into ``O`` with probability ``k / (2 n_workers)``."""
    text = "\n".join("".join(f"{w} {lab}\n" for w, lab in s) for s in SENTENCES)
    gold = {f"doc{d}.txt": text for d in range(n_docs)}
    workers = {}
    for k in range(n_workers):
        rng = random.Random(k)
        docs = {}
        for d in range(n_docs):
            if (d + k) % 2:
                continue
            docs[f"doc{d}.txt"] = "\n".join("".join(
                f"{w} {'O' if lab != 'O' and rng.random() < k / (2 * n_workers) else lab}\n"
                for w, lab in s) for s in SENTENCES)
        workers[f"W{k:02d}"] = docs
    return write_folder(root, workers=workers, gold=gold)


def test_the_team_page_on_fourteen_workers(tmp_path, monkeypatch):
    db = app_store_env(tmp_path, monkeypatch)
    store = Store(db)
    folder = read_crowd_upload(upload_files(crowd(tmp_path / "crowd")))
    done = store.create_crowd_project("fourteen", folder, heldout=0.0)
    store.close()
    assert done.workers == 14 and "crowd model" in done.rule
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=limit(60))
    at.session_state["project_id"] = done.project_id
    at.run()
    at.switch_page("pages/team.py").run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert len(table) == 14 and set(table["annotator"]) == {f"W{k:02d}" for k in range(14)}
    assert list(table.columns[:5]) == ["annotator", "labels", "accuracy", "entity precision",
                                       "entity recall"]
    assert "mean κ" in table.columns and "changes" not in table.columns
    acc = list(table["accuracy"])
    assert acc == sorted(acc)  # the least reliable first
    assert table["entity recall"].between(0, 1).all()
    # the noisiest workers (high k) are estimated less reliable than the careful ones
    recall = dict(zip(table["annotator"], table["entity recall"]))
    assert recall["W00"] > recall["W13"]
    assert any(e.label == "Pairwise Cohen's κ of all 14 people" for e in at.expander)
    charts = at.get("plotly_chart")
    assert len(charts) >= 3  # the scatter, the kappa matrix, a confusion matrix
