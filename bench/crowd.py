"""Simulated crowds on the pooled CRF++ data sets: aggregation peers vs. the joint GPSL model.

::

    nice python -m bench.crowd                      # default run (writes bench/results/crowd.*)
    python -m bench.crowd --datasets basenp --sizes basenp=40/40 --scenarios 5:0.5:0.3

A *scenario* ``VOTES:COVERAGE:SPAM`` draws, for one random train/test partition of a pooled
data set (fixed seeds), a pool of ``--annotators`` simulated annotators - a fraction ``SPAM``
spammers (uniform labels), one label-swapper (reports a fixed derangement of the labels built
from B-/I- swaps, 90% of the time), and the rest half experts (95% right, errors uniform) and
half novices (70% right, 80% of the errors on the similar label: B-X <-> I-X) - then covers
``round(COVERAGE * n)`` training tokens chosen at random with ``VOTES`` votes each from distinct
annotators (``VOTES`` may be a range ``1-5``: uniform per token). Uncovered tokens are missing.

Methods, all in the same run: majority vote, crowd-kit's DawidSkene, GLAD and MACE, and
gpsl's own Dawid-Skene alone (:class:`gpsl.crowd.DawidSkene`), each followed by GPSL2 (tokens
without votes missing) and by CRFsuite (trained on the maximal runs of voted tokens, features
from the full sentences); the joint model (:class:`gpsl.crowd.CrowdGPSL` with its defaults,
GPSL2: the tagger's prior variance learned in the joint bound, the tagger for the test loss refit
with GPSL's default settings on the inferred labels; the joint fit's own tagger's test loss and
its learned variances are reported too); and GPSL2
trained on the *true* labels of the same voted tokens (the reference of the acceptance test).

Reported: accuracy of the inferred labels on the voted training tokens (and, for the GPSL
models, on all training tokens), the tagger's test Hamming loss, and the mean absolute error of
the estimated annotator accuracies (posterior expected fraction of correct votes, gpsl.crowd
eq. A, for every method) against the realised accuracies of the simulation.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench.common import (
    DATA_DIR,
    DATASETS,
    RESULTS_DIR,
    DataMissing,
    check_data,
    dataset_key,
    git_commit,
    header_lines,
    jsonable,
    load_pooled,
    machine_info,
    now_iso,
    parse_sizes,
    partitions,
)
from bench.crowd_sim import parse_votes, simulate

#: train/test sentences of the default run (the full GP costs about n^2.5 in tokens).
DEFAULT_SIZES = {"basenp": (80, 80), "chunking": (40, 40), "seg": (20, 16),
                 "JapaneseNE": (30, 30)}
#: the acceptance scenario of issue 15: 5 votes per token, 50% coverage, 30% spammers
DEFAULT_SCENARIOS = ("5:0.5:0.3",)
ACCEPTANCE = "5:0.5:0.3"
#: extra scenarios of the default run (other votes per token and coverages), per data set
DEFAULT_GRID = {"chunking": ("3:1.0:0.3", "1-5:0.3:0.3")}
ACCEPTANCE_DATASETS = ("chunking", "basenp")
PEERS = ("MV", "crowdkit-DS", "crowdkit-GLAD", "crowdkit-MACE", "gpsl-DS")
CROWDKIT = ("crowdkit-DS", "crowdkit-GLAD", "crowdkit-MACE")
JOINT = "joint (GPSL2)"
ORACLE = "GPSL2 on true labels"


@dataclass
class Config:
    datasets: list = field(default_factory=lambda: list(DATASETS))
    scenarios: list = field(default_factory=lambda: list(DEFAULT_SCENARIOS))
    grid: dict = field(default_factory=dict)  # data set -> extra scenarios
    sizes: dict = field(default_factory=lambda: dict(DEFAULT_SIZES))
    n_annotators: int = 10
    seeds: list = field(default_factory=lambda: [0])  # one partition + crowd per seed
    max_iter: int = 100
    peers: list = field(default_factory=lambda: list(PEERS))
    taggers: bool = True  # GPSL2 / CRFsuite after every peer
    data_dir: str = str(DATA_DIR)
    out_dir: str = str(RESULTS_DIR)
    verbose: bool = True
    crossfit: int = 0  # the joint model's cross-fitted rounds (gpsl.crowd.crossfit)


# --------------------------------------------------------------------------- methods


def crowdkit_posteriors(name: str, sim: dict, n: int, J: int, seed: int) -> np.ndarray:
    """Per-token posteriors (n, J) of a crowd-kit aggregator (uniform on tokens w/o votes)."""
    from bench.peers import crowdkit_aggregator, votes_frame

    if name not in ("MV", *CROWDKIT):
        raise ValueError(name)
    agg = crowdkit_aggregator(name.removeprefix("crowdkit-"), seed)
    agg.fit(votes_frame(sim["token"], sim["annotator"], sim["label"]))
    P = np.full((n, J), 1.0 / J)
    probas = agg.probas_
    cols = [int(c) for c in probas.columns]
    vals = probas.to_numpy(dtype=float)
    vals = np.nan_to_num(vals, nan=0.0)
    rows = np.array([int(t) for t in probas.index], dtype=np.int64)
    Q = np.zeros((rows.size, J))
    Q[:, cols] = vals
    tot = Q.sum(axis=1, keepdims=True)
    Q = np.where(tot > 0, Q / np.where(tot > 0, tot, 1.0), 1.0 / J)
    P[rows] = Q
    return P


def estimated_accuracy(sim: dict, P: np.ndarray, n_annotators: int) -> np.ndarray:
    """gpsl.crowd eq. A: the posterior expected fraction of each annotator's correct votes."""
    c = np.bincount(sim["annotator"], weights=P[sim["token"], sim["label"]],
                    minlength=n_annotators)
    cnt = np.bincount(sim["annotator"], minlength=n_annotators)
    return np.where(cnt > 0, c / np.maximum(cnt, 1), np.nan)


def _hamming(pred, gold) -> float:
    p = np.array([v for s in pred for v in s], dtype=object)
    g = np.array([v for s in gold for v in s], dtype=object)
    return float(100.0 * np.mean(p != g))


def make_gpsl(template: str, cfg: Config):
    from gpsl.model import GPSL

    return GPSL(offsets=(-1, 1), kernel="linear", template=template, max_iter=cfg.max_iter)


def fit_gpsl(labels_flat, lengths, classes, Xtr, Xte, template, cfg):
    """GPSL2 on per-token label indices (-1 = missing); (test labels, training r, seconds)."""
    y = [[None if v < 0 else classes[v] for v in part]
         for part in np.split(labels_flat, np.cumsum(lengths)[:-1])]
    model = make_gpsl(template, cfg)
    t0 = time.perf_counter()
    model.fit(Xtr, y, classes=classes)
    sec = time.perf_counter() - t0
    return model.predict(Xte), np.array(model.state_.r), sec, int(model.n_iter_)


def crfsuite_on_runs(labels_flat, lengths, classes, Xtr, Xte, template):
    """CRFsuite (bench.paper's CRF++-equivalent settings) on the maximal runs of labeled tokens
    of every sentence (features computed on the full sentence)."""
    from bench.peers import fit_crfsuite, template_features
    from gpsl.features import Template

    tmpl = Template.parse(template)
    t0 = time.perf_counter()
    F = template_features(tmpl, Xtr)
    feats, labs = [], []
    for f, part in zip(F, np.split(labels_flat, np.cumsum(lengths)[:-1])):
        j = 0
        while j < len(part):
            if part[j] < 0:
                j += 1
                continue
            k = j
            while k < len(part) and part[k] >= 0:
                k += 1
            feats.append(f[j:k])
            labs.append([classes[v] for v in part[j:k]])
            j = k
    runs_s = time.perf_counter() - t0
    fit = fit_crfsuite(feats, labs)
    return [list(p) for p in fit.crf.predict(template_features(tmpl, Xte))], runs_s + fit.wall_s


# --------------------------------------------------------------------------- one cell


def run_cell(cfg: Config, data, name: str, scenario: str, log, seed: int = 0) -> dict:
    """One data set x one scenario x one seed (partition and crowd): every method on the same
    simulated crowd."""
    from gpsl.crowd import CrowdGPSL, DawidSkene, Votes

    votes_spec, coverage, spam = scenario.split(":")
    coverage, spam = float(coverage), float(spam)
    n_tr, n_te = cfg.sizes[name]
    tr, te = partitions(len(data), n_tr, n_te, 1, seed, name)[0]
    Xtr = [data.X[i] for i in tr]
    Xte = [data.X[i] for i in te]
    ytr = [data.y[i] for i in tr]
    yte = [data.y[i] for i in te]
    classes = list(data.labels)
    J = len(classes)
    index = {c: i for i, c in enumerate(classes)}
    lengths = np.array([len(x) for x in Xtr], dtype=np.int64)
    y_true = np.array([index[v] for lab in ytr for v in lab], dtype=np.int64)
    n = y_true.size
    rng = np.random.default_rng(np.random.SeedSequence(
        [seed, dataset_key(name), dataset_key(scenario), 15]))
    sim = simulate(y_true, classes, cfg.n_annotators, votes_spec, coverage, spam, rng)
    voted = np.zeros(n, dtype=bool)
    voted[sim["covered"]] = True
    realised = sim["realised"]
    log(f"[{name} {scenario} seed {seed}] {n_tr}/{n_te} sentences, {n} training tokens, "
        f"{int(voted.sum())} voted, {sim['token'].size} votes, {J} labels")
    cell = {"dataset": name, "scenario": scenario, "seed": seed, "n_train_tokens": n,
            "n_voted": int(voted.sum()), "n_votes": int(sim["token"].size),
            "annotators": [{"kind": k, "realised_accuracy": float(a), "votes": int(c)}
                           for k, a, c in zip(sim["kinds"], realised,
                                              np.bincount(sim["annotator"],
                                                          minlength=cfg.n_annotators))],
            "methods": {}}
    template = data.template

    def score(P, method, t_agg):
        rec = {"label_accuracy": float(100.0 * np.mean(P[voted].argmax(1) == y_true[voted])),
               "aggregation_s": t_agg}
        est = estimated_accuracy(sim, P, cfg.n_annotators)
        rec["annotator_accuracy"] = [float(v) for v in est]
        rec["annotator_mae"] = float(np.nanmean(np.abs(est - realised)))
        cell["methods"][method] = rec
        return rec

    for method in cfg.peers:
        t0 = time.perf_counter()
        if method == "gpsl-DS":
            votes = Votes(lengths=[n], token=sim["token"], annotator=sim["annotator"],
                          label=sim["label"], annotators=[str(a) for a in range(cfg.n_annotators)],
                          classes=classes)
            P = DawidSkene().fit_votes(votes).probas_
        else:
            P = crowdkit_posteriors(method, sim, n, J, seed)
        rec = score(P, method, time.perf_counter() - t0)
        agg = np.where(voted, P.argmax(axis=1), -1)
        msg = f"  {method}: label acc {rec['label_accuracy']:.2f}%, " \
              f"annotator MAE {rec['annotator_mae']:.3f}"
        if cfg.taggers:
            pred, r, sec, it = fit_gpsl(agg, lengths, classes, Xtr, Xte, template, cfg)
            rec["GPSL2_test_loss"] = _hamming(pred, yte)
            rec["GPSL2_fit_s"] = sec
            rec["GPSL2_label_accuracy_all"] = float(100.0 * np.mean(r.argmax(1) == y_true))
            pred_c, sec_c = crfsuite_on_runs(agg, lengths, classes, Xtr, Xte, template)
            rec["CRFsuite_test_loss"] = _hamming(pred_c, yte)
            rec["CRFsuite_fit_s"] = sec_c
            msg += f"; GPSL2 {rec['GPSL2_test_loss']:.2f}% ({sec:.0f} s), " \
                   f"CRFsuite {rec['CRFsuite_test_loss']:.2f}%"
        log(msg)

    # the joint model
    votes = Votes(lengths=lengths, token=sim["token"], annotator=sim["annotator"],
                  label=sim["label"], annotators=[str(a) for a in range(cfg.n_annotators)],
                  classes=classes)
    t0 = time.perf_counter()
    # the settings this bench was built with (the defaults before the real-crowd work; no
    # cross-fitted rounds unless --crossfit gives them)
    joint = CrowdGPSL(make_gpsl(template, cfg), annotator_model="confusion", tagger_prior="learn",
                      decode="argmax", crossfit=cfg.crossfit).fit(Xtr, votes)
    sec = time.perf_counter() - t0
    rec = score(joint.probas_, JOINT, sec)
    rec["label_accuracy_all"] = float(100.0 * np.mean(joint.probas_.argmax(1) == y_true))
    rec["test_loss"] = _hamming(joint.predict(Xte), yte)
    rec["fit_s"] = sec
    rec["n_iter"] = int(joint.joint_model_.n_iter_)
    theta = getattr(joint.joint_model_.state_, "theta", None)
    if theta is not None:
        rec["joint_prior_variance"] = [float(v) for v in np.exp(np.asarray(theta)[:, 0])]
    if joint.joint_model_ is not joint.model_:
        rec["joint_tagger_test_loss"] = _hamming(joint.joint_model_.predict(Xte), yte)
    jt = np.array(joint.joint_trace_)
    rec["joint_bound_monotone"] = bool(np.all(np.diff(jt) >= -1e-8 * np.abs(jt[:-1]).max()))
    log(f"  {JOINT}: label acc {rec['label_accuracy']:.2f}% (all tokens "
        f"{rec['label_accuracy_all']:.2f}%), annotator MAE {rec['annotator_mae']:.3f}, test "
        f"{rec['test_loss']:.2f}% ({sec:.0f} s, {rec['n_iter']} sweeps)"
        + (f"; joint fit's own tagger {rec['joint_tagger_test_loss']:.2f}%"
           if "joint_tagger_test_loss" in rec else ""))

    # reference: GPSL2 on the true labels of the voted tokens
    pred, r, sec, it = fit_gpsl(np.where(voted, y_true, -1), lengths, classes, Xtr, Xte,
                                template, cfg)
    cell["methods"][ORACLE] = {"test_loss": _hamming(pred, yte), "fit_s": sec,
                               "label_accuracy_all": float(100.0 * np.mean(r.argmax(1) == y_true))}
    log(f"  {ORACLE}: test {cell['methods'][ORACLE]['test_loss']:.2f}% ({sec:.0f} s)")
    cell["acceptance"] = acceptance(cell)
    return cell


def acceptance(cell: dict) -> dict:
    """The issue's three checks on one cell (figures in points / absolute accuracy)."""
    m = cell["methods"]
    ck = [k for k in CROWDKIT if k in m]
    out: dict = {}
    j = m.get(JOINT)
    if j is None:
        return out
    if ck:
        best = max(ck, key=lambda k: m[k]["label_accuracy"])
        out["best_crowdkit"] = best
        out["label_margin"] = j["label_accuracy"] - m[best]["label_accuracy"]
        out["label_ok"] = out["label_margin"] >= 1.0
    if ORACLE in m:
        out["loss_gap"] = j["test_loss"] - m[ORACLE]["test_loss"]
        out["loss_ok"] = out["loss_gap"] <= 1.0
    out["annotator_mae"] = j["annotator_mae"]
    out["mae_ok"] = j["annotator_mae"] <= 0.05
    return out


# --------------------------------------------------------------------------- report


def build_report(cfg: Config, meta: dict, cells: list, complete: bool) -> dict:
    settings = asdict(cfg)
    settings.pop("verbose", None)
    report = {"meta": meta, "settings": settings, "complete": complete, "cells": cells}
    report["summary"] = summary(report)
    return report


def _f(v, d=2):
    return "–" if v is None else f"{v:.{d}f}"


def summary(report: dict) -> list[dict]:
    """Per data set and scenario: the mean over seeds of the acceptance figures."""
    groups: dict = {}
    for cell in report["cells"]:
        groups.setdefault((cell["dataset"], cell["scenario"]), []).append(cell)
    rows = []
    for (name, scen), cells in groups.items():
        acc = [c.get("acceptance") or {} for c in cells]
        m = [c["methods"] for c in cells]

        def mean(values):
            v = [x for x in values if x is not None]
            return float(np.mean(v)) if v else None

        rows.append({
            "dataset": name, "scenario": scen, "seeds": [c.get("seed", 0) for c in cells],
            "joint_label_accuracy": mean([x.get(JOINT, {}).get("label_accuracy") for x in m]),
            "gpsl_ds_label_accuracy": mean([x.get("gpsl-DS", {}).get("label_accuracy")
                                            for x in m]),
            "best_crowdkit_label_accuracy": mean([
                max((x[k]["label_accuracy"] for k in CROWDKIT if k in x), default=None)
                for x in m]),
            "label_margin": mean([a.get("label_margin") for a in acc]),
            "joint_test_loss": mean([x.get(JOINT, {}).get("test_loss") for x in m]),
            "oracle_test_loss": mean([x.get(ORACLE, {}).get("test_loss") for x in m]),
            "loss_gap": mean([a.get("loss_gap") for a in acc]),
            "annotator_mae": mean([a.get("annotator_mae") for a in acc]),
        })
    return rows


def summary_lines(report: dict) -> list[str]:
    lines = ["## Summary (mean over seeds)", "",
             "| data set | scenario | seeds | joint label acc. % | gpsl-DS % | best crowd-kit % "
             "| joint − best crowd-kit | joint test loss % | GPSL2 on true labels % | gap "
             "| annotator MAE |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in summary(report):
        lines.append(
            f"| {r['dataset']} | {r['scenario']} | {len(r['seeds'])} | "
            f"{_f(r['joint_label_accuracy'])} | {_f(r['gpsl_ds_label_accuracy'])} | "
            f"{_f(r['best_crowdkit_label_accuracy'])} | {_f(r['label_margin'])} | "
            f"{_f(r['joint_test_loss'])} | {_f(r['oracle_test_loss'])} | {_f(r['loss_gap'])} | "
            f"{_f(r['annotator_mae'], 3)} |")
    lines += ["", f"Acceptance (issue 15, scenario {ACCEPTANCE} on "
              f"{' and '.join(ACCEPTANCE_DATASETS)}): joint − best crowd-kit ≥ +1 point, test "
              "loss gap ≤ 1 point, annotator MAE ≤ 0.05.", ""]
    return lines


def table_lines(report: dict) -> list[str]:
    lines = []
    for cell in report["cells"]:
        m = cell["methods"]
        lines.append(f"### {cell['dataset']}, scenario {cell['scenario']}, seed "
                     f"{cell.get('seed', 0)} "
                     f"({cell['n_train_tokens']} training tokens, {cell['n_voted']} voted, "
                     f"{cell['n_votes']} votes)")
        lines.append("")
        lines.append("| method | label acc. (voted) % | label acc. (all) % | annotator acc. MAE "
                     "| GPSL2 test loss % | CRFsuite test loss % |")
        lines.append("|---|---:|---:|---:|---:|---:|")
        for k, r in m.items():
            if k == ORACLE:
                lines.append(f"| {k} | – | {_f(r.get('label_accuracy_all'))} | – | "
                             f"{_f(r['test_loss'])} | – |")
            elif k == JOINT:
                lines.append(f"| **{k}** | {_f(r['label_accuracy'])} | "
                             f"{_f(r.get('label_accuracy_all'))} | {_f(r['annotator_mae'], 3)} |"
                             f" {_f(r['test_loss'])} | – |")
            else:
                lines.append(f"| {k} | {_f(r['label_accuracy'])} | "
                             f"{_f(r.get('GPSL2_label_accuracy_all'))} | "
                             f"{_f(r['annotator_mae'], 3)} | {_f(r.get('GPSL2_test_loss'))} | "
                             f"{_f(r.get('CRFsuite_test_loss'))} |")
        lines.append("")
        kinds = ", ".join(f"{a['kind']} {a['realised_accuracy']:.2f}"
                          for a in cell["annotators"])
        lines.append(f"Simulated annotators (realised accuracy): {kinds}.")
        if JOINT in m:
            est = ", ".join(_f(v) for v in m[JOINT]["annotator_accuracy"])
            lines.append(f"Joint model's estimates: {est}.")
            jm = m[JOINT]
            if "joint_prior_variance" in jm:
                var = ", ".join(f"{v:.3g}" for v in jm["joint_prior_variance"])
                extra = (f"; that tagger's own test loss {jm['joint_tagger_test_loss']:.2f}% "
                         "(the joint row's test loss is the refit with the default prior)"
                         if "joint_tagger_test_loss" in jm else "")
                lines.append(f"Joint fit's tagger prior variance per label: {var}{extra}.")
        a = cell.get("acceptance") or {}
        if a:
            parts = []
            if "label_margin" in a:
                parts.append(f"joint − best crowd-kit ({a['best_crowdkit']}) label accuracy "
                             f"{a['label_margin']:+.2f} points "
                             f"({'ok' if a['label_ok'] else 'NOT met'}, needs ≥ +1)")
            if "loss_gap" in a:
                parts.append(f"test loss joint − GPSL2 on true labels {a['loss_gap']:+.2f} "
                             f"points ({'ok' if a['loss_ok'] else 'NOT met'}, needs ≤ 1)")
            parts.append(f"annotator accuracy MAE {a['annotator_mae']:.3f} "
                         f"({'ok' if a['mae_ok'] else 'NOT met'}, needs ≤ 0.05)")
            lines.append("Acceptance: " + "; ".join(parts) + ".")
        lines.append("")
    return lines


def write_outputs(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = report["meta"]
    lines = header_lines("Crowd-sourced partial annotation (simulated crowds)", meta["date"],
                         meta["machine"], meta["git"], meta["command"])
    s = report["settings"]
    lines += [
        f"* settings: {s['n_annotators']} annotators per pool, seeds {s['seeds']}, sizes "
        + ", ".join(f"{d} {a}/{b}" for d, (a, b) in s["sizes"].items() if d in s["datasets"])
        + f" (train/test sentences, one partition per seed), GPSL max_iter {s['max_iter']}",
        f"* total time: {meta.get('total_seconds', 0):.0f} s"
        + ("" if report["complete"] else " (incomplete run: written after every cell)"),
        "",
        "Scenario `VOTES:COVERAGE:SPAM`: votes per covered token, fraction of training tokens "
        "covered, fraction of spammers in the pool (plus one label-swapper; the rest half "
        "experts at 95%, half novices at 70% confusing B-X/I-X). Label accuracy is measured on "
        "the voted training tokens (all tokens: GPSL's r_t on the unvoted ones). Annotator "
        "accuracy MAE: |estimated − realised| averaged over annotators, estimates = posterior "
        "expected fraction of correct votes. Joint model: gpsl.crowd.CrowdGPSL with its "
        "defaults - the joint bound also learns the tagger's prior variance (empirical Bayes), "
        "and the tagger whose test loss is reported is refit with GPSL's default settings on "
        "the inferred labels (the joint fit's own tagger is reported under each cell).",
        "",
    ]
    lines += summary_lines(report)
    lines += ["## Cells", ""] + table_lines(report)
    (out / "crowd.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "crowd.json").write_text(json.dumps(jsonable(report), indent=1) + "\n",
                                    encoding="utf-8")


def run(cfg: Config, command: str = "") -> dict:
    def log(msg):
        if cfg.verbose:
            print(msg, file=sys.stderr, flush=True)

    check_data(Path(cfg.data_dir), cfg.datasets)
    meta = {"command": command, "date": now_iso(), "machine": machine_info(),
            "git": git_commit()}
    t_start = time.perf_counter()
    cells = []
    out = Path(cfg.out_dir)
    for name in cfg.datasets:
        data = load_pooled(Path(cfg.data_dir), name)
        for scenario in list(cfg.scenarios) + [s for s in cfg.grid.get(name, ())
                                                if s not in cfg.scenarios]:
            for seed in cfg.seeds:
                cells.append(run_cell(cfg, data, name, scenario, log, seed))
                meta["total_seconds"] = time.perf_counter() - t_start
                write_outputs(build_report(cfg, meta, cells, complete=False), out)
    meta["total_seconds"] = time.perf_counter() - t_start
    report = build_report(cfg, meta, cells, complete=True)
    write_outputs(report, out)
    return report


def check_scenario(text: str) -> str:
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"bad scenario {text!r}: expected VOTES:COVERAGE:SPAM, e.g. 5:0.5:0.3")
    parse_votes(parts[0])
    cov, spam = float(parts[1]), float(parts[2])
    if not 0.0 < cov <= 1.0 or not 0.0 <= spam < 1.0:
        raise ValueError(f"bad scenario {text!r}: coverage in (0, 1], spam in [0, 1)")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.crowd", description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="+", metavar="NAME",
                   help=f"data sets (default: {' '.join(DATASETS)})")
    p.add_argument("--scenarios", nargs="+", metavar="V:C:S",
                   help="VOTES:COVERAGE:SPAM, VOTES an integer or a range like 1-5 (default "
                        f"{' '.join(DEFAULT_SCENARIOS)})")
    p.add_argument("--no-grid", action="store_true",
                   help="skip the extra scenarios of the default run ("
                        + "; ".join(f"{d}: {' '.join(v)}" for d, v in DEFAULT_GRID.items())
                        + "); they are skipped anyway when --scenarios is given")
    p.add_argument("--sizes", help="train/test sentences: '40/40' or 'basenp=80/80,seg=20/16' "
                                   "(default " + ", ".join(f"{d}={a}/{b}" for d, (a, b)
                                                           in DEFAULT_SIZES.items()) + ")")
    p.add_argument("--annotators", type=int, default=10, help="annotators in the pool (10)")
    p.add_argument("--peers", nargs="+", metavar="NAME",
                   help=f"aggregation peers (default: {' '.join(PEERS)})")
    p.add_argument("--no-taggers", action="store_true",
                   help="skip GPSL2/CRFsuite after the peers (aggregation only)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], metavar="SEED",
                   help="one partition and simulated crowd per seed (default 0)")
    p.add_argument("--max-iter", type=int, default=100, help="GPSL max_iter (100)")
    p.add_argument("--out", default=str(RESULTS_DIR), help="output folder (bench/results)")
    p.add_argument("--data-dir", default=str(DATA_DIR), help=argparse.SUPPRESS)
    p.add_argument("--crossfit", type=int, default=0, metavar="N",
                   help="the joint model's cross-fitted rounds, at most N (0: the settings "
                        "this bench was built with)")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def config_from_args(args) -> Config:
    datasets = list(args.datasets or DATASETS)
    bad = [d for d in datasets if d not in DATASETS]
    if bad:
        raise ValueError(f"unknown data set {bad[0]!r}; choose from {', '.join(DATASETS)}")
    peers = list(args.peers or PEERS)
    bad = [m for m in peers if m not in PEERS]
    if bad:
        raise ValueError(f"unknown peer {bad[0]!r}; choose from {', '.join(PEERS)}")
    sizes = dict(DEFAULT_SIZES)
    if args.sizes:
        sizes.update(parse_sizes(args.sizes, datasets))
    if args.annotators < 2:
        raise ValueError("--annotators must be at least 2")
    grid = {} if (args.no_grid or args.scenarios) else dict(DEFAULT_GRID)
    return Config(datasets=datasets, grid=grid,
                  scenarios=[check_scenario(s) for s in (args.scenarios or DEFAULT_SCENARIOS)],
                  sizes=sizes, n_annotators=args.annotators, seeds=list(dict.fromkeys(args.seeds)),
                  max_iter=args.max_iter, peers=peers, taggers=not args.no_taggers,
                  crossfit=args.crossfit,
                  data_dir=args.data_dir, out_dir=args.out, verbose=not args.quiet)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        report = run(cfg, command=shlex.join(["python", "-m", "bench.crowd", *argv]))
    except (DataMissing, ValueError) as exc:
        print(f"bench.crowd: {exc}", file=sys.stderr)
        return 2
    print("\n".join(table_lines(report) + summary_lines(report)))
    print(f"command: {report['meta']['command']}")
    print(f"wrote {Path(cfg.out_dir) / 'crowd.md'} and crowd.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
