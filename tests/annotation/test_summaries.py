"""What the Confidence page shows of a version, stored once at training time
(gpsl.annotation.training.summaries): equal to the figures computed from every token, unchanged by
a label, computed on first use for a version trained without one, deleted with its project."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import text

from gpsl.annotation.training import jobs, pipeline, summaries
from tests.support.helpers import tiny_store

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
    v = jobs.train_now(store.home, pid, TINY)
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
    preds = store.get_predictions(v["id"])
    for t in stored["least_confident"]:  # each names its token, word and label rightly
        s = store.get_sentence(t["sentence_id"])
        p = preds[s["id"]][t["token_index"]]
        assert s["labels"][t["token_index"]] is None and s["position"] == t["position"]
        assert t["token"] == s["tokens"][t["token_index"]][0]
        assert (t["confidence"], t["predicted"]) == (float(p.max()),
                                                     v["classes"][int(p.argmax())])
    order = [(-t["confidence"], -t["position"], -t["token_index"])
             for t in stored["least_confident"]]
    assert order == sorted(order, reverse=True)
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
    again = summaries.get(store.db, v["id"])
    assert again["unlabeled"] == stored["unlabeled"] - 1
    assert sum(again["histogram"]["counts"]) == again["unlabeled"]
    assert again["least_confident"] == stored["least_confident"][1:]
    assert summaries.load(store.db, v["id"]) is not None
    assert store.delete_project(pid)
    assert summaries.load(store.db, v["id"]) is None


def _pandas_calibration_dict(result, train_labels, n_bins=10):
    """The stored reliability data as gpsl built it with pandas before (the reference of
    summaries._calibration_tables, which the worker computes without pandas)."""
    import pandas as pd

    from gpsl import metrics

    conf, correct = result.confidence, result.correct
    band_of = metrics.frequency_bands(result.gold_label, train_labels)
    bands = [{"labels": r["band"], "tokens": r["tokens"], "accuracy": r["accuracy"],
              "mean confidence": r["mean_confidence"], "ECE (15 equal-mass bins)": r["ece_mass"],
              "which": ", ".join(r["labels"])}
             for r in metrics.calibration_by_band(conf, correct, result.gold_label, band_of)]
    table = pd.DataFrame(metrics.reliability_table(conf, correct, n_bins, consistency=True))
    table = table.dropna(subset=["accuracy"])
    table["bin_mid"] = (table["bin_lo"] + table["bin_hi"]) / 2
    table["band_up"] = table["band_hi"] - table["mean_confidence"]
    table["band_down"] = table["mean_confidence"] - table["band_lo"]
    frames = {"table": table, "selective": pd.DataFrame(metrics.selective_accuracy(conf, correct)),
              "thresholds": pd.DataFrame(metrics.threshold_table(conf, correct)),
              "bands": pd.DataFrame(bands)}
    out = {"accuracy": result.accuracy, "ece": result.ece,
           "ece_floor": metrics.ece_noise_floor(conf, n_bins, binning="width"),
           "ece_mass": result.ece_mass,
           "ece_mass_floor": metrics.ece_noise_floor(conf, 15, binning="mass"),
           "mean_confidence": result.mean_confidence, "nll": result.nll}
    out = {k: (None if v is None else float(v)) for k, v in out.items()}
    out["tokens"] = int(result.tokens)
    for k, df in frames.items():
        out[k] = {"columns": list(df.columns),
                  "rows": df.astype(object).where(df.notna(), None).values.tolist()}
    return out


@pytest.mark.timeout(300)
def test_the_stored_reliability_tables_are_the_pandas_ones(tmp_path):
    """The calibration data the worker stores (built without pandas) is, to the JSON text,
    what pandas gave before, on a trained version and on cut-down held-out sets (empty bins,
    a threshold no token reaches, one band), and reads back as tables."""
    import dataclasses
    import json

    from gpsl.annotation.training.evaluation import heldout

    store, pid = tiny_store(tmp_path / "s.sqlite3")
    v = jobs.train_now(store.home, pid, TINY)
    ids, _, gold = store.gold_data(pid)
    preds = store.get_predictions(v["id"], ids)
    _, train_y = store.training_data(pid, "train", only_labeled=True)
    full = heldout(v["classes"], [preds.get(sid) for sid in ids], gold)
    assert full is not None
    rng = np.random.default_rng(3)
    conf = rng.uniform(0.3, 1.0, 400)  # many tokens: every kind of bin, both bands
    big = dataclasses.replace(full, confidence=conf, correct=rng.random(400) < conf,
                              gold_label=tuple(rng.choice(["O", "B-PER", "I-PER", "B-LOC"],
                                                          400, p=[0.7, 0.15, 0.13, 0.02])),
                              tokens=400)
    cases = [full, big]
    for keep in (1, 3):  # a few tokens: empty bins, a threshold no token reaches
        sel = slice(0, keep)
        cases.append(dataclasses.replace(full, confidence=full.confidence[sel],
                                         correct=full.correct[sel],
                                         gold_label=full.gold_label[sel], tokens=keep))
    for res in cases:
        mine = summaries._calibration_tables(res, train_y)
        ref = _pandas_calibration_dict(res, train_y)
        assert json.dumps(mine, allow_nan=False) == json.dumps(ref, allow_nan=False)
    stored = summaries.load(store.db, v["id"])["calibration"]
    assert json.dumps(stored) == json.dumps(_pandas_calibration_dict(full, train_y))
    report = summaries.calibration_report(stored)
    assert list(report.table.columns)[-3:] == ["bin_mid", "band_up", "band_down"]
    assert len(report.table) == sum(r is not None for r in stored["table"]["rows"])
