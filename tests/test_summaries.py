"""What the Confidence page shows of a version, stored once at training time
(gpsl.annotation.summaries): equal to the figures computed from every token, unchanged by
a label, computed on first use for a version trained without one, deleted with its project."""

from __future__ import annotations

import numpy as np
import pytest
from _support import tiny_store
from sqlalchemy import text

from gpsl.annotation import jobs, pipeline, summaries

TINY = pipeline.TrainConfig(offsets=(-1, 1), max_iter=3, learn_hyper=False)


def _free_confidences(store, pid, version):
    """Every unlabeled training token's (confidence, predicted label), from every token."""
    preds = store.get_predictions(version["id"])
    out = []
    for s in store.get_sentences(pid, split="train"):
        p = preds[s["id"]]
        for t, lab in enumerate(s["labels"]):
            if lab is None:
                out.append((float(p[t].max()), version["classes"][int(p[t].argmax())]))
    return out


@pytest.mark.timeout(300)
def test_the_stored_summary_is_what_every_token_gives(tmp_path):
    store, pid = tiny_store(tmp_path / "s.sqlite3")
    v = jobs.train_now(store, pid, TINY)
    stored = summaries.load(store.db, v["id"])
    assert stored is not None  # written by the training run
    free = _free_confidences(store, pid, v)
    conf = np.array([c for c, _ in free])
    assert stored["unlabeled"] == len(free)
    assert stored["mean_confidence"] == pytest.approx(conf.mean())
    assert stored["histogram"]["counts"] == np.histogram(conf, 40, (0.0, 1.0))[0].tolist()
    for lab, box in stored["boxes"].items():
        mine = np.array([c for c, p in free if p == lab])
        assert box["n"] == mine.size
        assert [box["q1"], box["median"], box["q3"]] == pytest.approx(
            np.quantile(mine, [0.25, 0.5, 0.75]).tolist())
        assert mine.min() <= box["lower"] <= box["q1"] <= box["q3"] <= box["upper"] <= mine.max()
    least = [t["confidence"] for t in stored["least_confident"]]
    assert least == pytest.approx(sorted(conf)[:len(least)])
    assert stored["calibration"]["tokens"] == v["metrics"]["heldout_tokens"]

    # a label does not change the stored figures; the page's live list drops the token
    report = store.reports.summary(store.reports.version(v["id"]))
    first = report.least_confident[0]
    store.set_labels(first["sentence_id"], {first["token_index"]: "O"}, "ann")
    assert summaries.load(store.db, v["id"]) == stored
    still = store.reports.uncertain_tokens(store.reports.summary(store.reports.version(v["id"])),
                                           50)
    assert (first["position"] + 1, first["token_index"] + 1) not in set(
        zip(still["sentence"], still["token #"]))
    assert len(still) == len(least) - 1

    # a version without one (trained before schema 7) gets it when first asked: the labels
    # of now (one token fewer is unlabeled)
    store.db.write(lambda c: c.execute(text("DELETE FROM version_summaries")))
    again = summaries.get(store, v["id"])
    assert again["unlabeled"] == stored["unlabeled"] - 1
    assert sum(again["histogram"]["counts"]) == again["unlabeled"]
    assert again["least_confident"] == stored["least_confident"][1:]
    assert summaries.load(store.db, v["id"]) is not None
    assert store.delete_project(pid)
    assert summaries.load(store.db, v["id"]) is None
