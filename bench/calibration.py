"""Calibration of the per-token marginals on the paper's partitions, beside CRFsuite.

::

    python -m bench.calibration --jobs 2                # all four data sets (about 80 min
                                                        # on 2 cores, then the report)
    python -m bench.calibration --datasets seg --partitions 2 --other-partitions 1

For every data set and random partition (the paper's sizes, the same partitions as
``bench.paper``) each model is fitted once on the training sentences, and K more times on K-1
folds of them (``--folds``, 5: what :func:`gpsl.calibration.calibration_folds` gives the
paper's training sets, 20-150 sentences) to give out-of-fold marginals of every training token: the
calibration data, the same for every method. Then, from the same fits:

* ``raw`` - GPSL's Algorithm 2 on the predictive means (the paper's RNS, today's default);
* ``probit`` - the uncertainty-aware RNS (:func:`gpsl.predict.rns`, variances of f^U and f^S);
* ``raw+T`` / ``probit+T`` - each with a temperature fitted on the out-of-fold marginals;
* ``structured`` - the two temperatures of Algorithm 2's own and pair scores
  (:mod:`gpsl.calibration`), fitted on the same out-of-fold inputs;
* ``structured+V`` - the structured temperatures followed by a per-label vector scaling of
  their marginals (:mod:`gpsl.calibration`), on the same inputs;
* ``stack ensemble`` / ``uniform ensemble`` - the mixture of those four calibrated marginals,
  weighted by stacking (the cross-validated log score) or equally;
* ``best single`` - the one of the four with the lowest cross-validated NLL (leave one fold
  model's held-out fold out), the default before the ensemble;
* ``default`` - what ``calibrate(model, X, y, folds=K)`` keeps: the lowest cross-validated NLL
  among the four and the ensemble of :data:`gpsl.calibration.ENSEMBLE` (the app does the same
  on its held-out gold or labeled sentences); ``default/brier``, ``default/ece`` the same
  choice by the cross-validated Brier score or ECE15;
* ``CRFsuite`` and ``CRFsuite+T`` (temperature fitted on CRFsuite's own out-of-fold marginals).

Metrics per token of the test sentences: ECE over 15 equal-mass bins and over 10 equal-width
bins, NLL and Brier over every label of the data set, mean confidence, accuracy, Hamming loss,
and ECE/NLL separately for frequent and rare gold labels (rare: under 5% of the training
tokens). Means over partitions (± std) are reported; GPSL2 runs on ``--partitions``
partitions, GPSL1 and GPSL4 on the first ``--other-partitions``.

The fits are cached as NPZ (``--cache``) so that the report can be rebuilt (``--report-only``)
without fitting again.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from bench.calibration_fits import (
    GPSL_OFFSETS,
    _gold_index,
    _load,
    _save,
    fit_crf_parts,
    fit_gpsl_parts,
)
from bench.common import (
    DATA_DIR,
    DATASETS,
    PAPER_SIZES,
    RESULTS_DIR,
    DataMissing,
    check_data,
    git_commit,
    header_lines,
    jsonable,
    label_space,
    load_pooled,
    machine_info,
    mean_std,
    now_iso,
    partitions,
)

VARIANTS = ("raw", "probit", "raw+T", "probit+T", "structured", "structured+V",
            "stack ensemble", "uniform ensemble", "best single", "default", "default/brier",
            "default/ece", "cross-fit")
#: the choice of ``calibrate`` by each cross-validated criterion (the first is the default)
CHOICES = {"default": "nll", "default/brier": "brier", "default/ece": "ece"}
#: the variants that report which candidate was chosen
CHOSEN = ("best single", *CHOICES)
PEER_VARIANTS = ("CRFsuite", "CRFsuite+T")
#: reported beside the peers, not part of the acceptance
EXTRA_PEERS = ("CRFsuite+T cross-fit",)
METRICS = ("ece_mass", "ece_width", "nll", "brier", "mean_confidence", "accuracy", "loss",
           "ece_mass_floor", "ece_width_floor")
CACHE = Path.home() / ".cache" / "gpsl-bench" / "calibration"
#: the cache files' layout (v2: the fold models' inputs on the test sentences too)
CACHE_VERSION = "v2"
RARE_SHARE = 0.05


# --------------------------------------------------------------------------- evaluation


def _scores(part: dict, offsets, rns_kw: dict):
    from gpsl.calibration import Scores

    return Scores(part["mean"], part["var"], part["m_S"], part["v_S"],
                  np.asarray(part["lengths"], dtype=np.int64), tuple(offsets), dict(rns_kw))


def _figures(P_full: np.ndarray, gold_all: np.ndarray, bands: dict, all_labels) -> dict:
    from gpsl.metrics import (
        calibration_summary,
        ece_equal_mass,
        ece_noise_floor,
        negative_log_likelihood,
    )

    s = calibration_summary(P_full, gold_all)
    rec = {k: s[k] for k in ("ece_mass", "ece_width", "nll", "brier", "mean_confidence",
                             "accuracy")}
    # what a perfectly calibrated tagger with these confidences would show (chance alone)
    rec["ece_mass_floor"] = ece_noise_floor(s["conf"], 15, "mass")
    rec["ece_width_floor"] = ece_noise_floor(s["conf"], 10, "width")
    rec["loss"] = 100.0 * (1.0 - s["accuracy"])
    keep = gold_all >= 0
    for band in ("frequent", "rare"):
        sel = np.array([bands.get(all_labels[g]) == band if g >= 0 else False
                        for g in gold_all], dtype=bool)
        if sel.sum() >= 15:
            conf = P_full[sel].max(axis=1)
            corr = P_full[sel].argmax(axis=1) == gold_all[sel]
            rec[f"{band}_ece_mass"] = ece_equal_mass(conf, corr, 15)
            rec[f"{band}_nll"] = negative_log_likelihood(P_full[sel], gold_all[sel])
            rec[f"{band}_n"] = int(sel.sum())
    rec["n"] = int(keep.sum())
    rec["conf"] = s["conf"]
    rec["correct"] = s["correct"]
    return rec


def _oof_gold(ytr, all_labels, held_sets) -> np.ndarray:
    """Gold indices of the training tokens in sentence order, -1 where the token's label does
    not occur in the other folds (the fold model that predicted it never saw that label)."""
    pos = {c: i for i, c in enumerate(all_labels)}
    out = [None] * len(ytr)
    for held in held_sets:
        held_set = {int(i) for i in held}
        seen = {v for i, lab in enumerate(ytr) if i not in held_set for v in lab}
        for i in held_set:
            out[i] = [pos[v] if v in seen else -1 for v in ytr[i]]
    return np.array([v for lab in out for v in lab], dtype=np.int64)


def evaluate(parts: dict, yte, ytr, all_labels) -> dict:
    """Every variant's scores on one partition from the cached fits."""
    from gpsl.calibration import ENSEMBLE, ENSEMBLES, Calibrator
    from gpsl.metrics import frequency_bands

    classes = parts["classes"]
    offsets = parts["offsets"]
    rns_kw = parts["rns"]
    gold_all = _gold_index(yte, all_labels)
    bands = frequency_bands([v for lab in yte for v in lab], ytr, RARE_SHARE)
    # out-of-fold inputs of Algorithm 2 (one Scores per fold model) and their gold indices
    fold_scores = [_scores(f, offsets, rns_kw) for f in parts["folds"]]
    pos = {c: i for i, c in enumerate(classes)}
    fold_gold = [np.array([pos.get(v, -1) if v is not None else -1 for i in f["held"]
                           for v in ytr[int(i)]], dtype=np.int64) for f in parts["folds"]]
    src = f"{len(fold_scores)}-fold"
    # every candidate fitted on all the out-of-fold data, and its cross-validated figures
    # (the fits are the same as fitting each kind alone)
    fits, cv = Calibrator.select_all(fold_scores, fold_gold, source=src,
                                     ensemble=ENSEMBLES)
    ens = {mode: next(k for k in fits if k.endswith(f"/{mode} ensemble")) for mode in ENSEMBLES}
    # the structured temperature (the default before issue 36's step), for comparison only
    structured, _ = Calibrator.select_all(fold_scores, fold_gold, source=src, methods=("mean",),
                                          kinds=("structured", "structured+vector"),
                                          ensemble=None)
    cands = {"raw+T": fits["mean/temperature"], "probit+T": fits["probit/temperature"],
             "structured": structured["mean/structured"],
             "structured+V": structured["mean/structured+vector"],
             "stack ensemble": fits[ens["stack"]], "uniform ensemble": fits[ens["uniform"]]}
    singles = {k: v for k, v in fits.items() if v.kind != "ensemble"}
    cands["best single"] = Calibrator.choose(singles, cv, "nll")
    # what calibrate keeps: the single candidates and its ensemble (ENSEMBLE)
    offered = {**singles, ens[ENSEMBLE]: fits[ens[ENSEMBLE]]}
    for variant, criterion in CHOICES.items():
        cands[variant] = Calibrator.choose(offered, cv, criterion)
    test_scores = _scores(parts["test"], offsets, rns_kw)
    test = {"raw": test_scores.marginals("mean"), "probit": test_scores.marginals("probit")}
    for name, cal in cands.items():
        test[name] = cal.apply(test_scores)
    # cross-fit (CalibratedClassifierCV(ensemble=True) with one calibrator): the default
    # calibrator was fitted on the fold models' held-out marginals, so it is applied to the
    # fold models themselves on the test sentences and their calibrated marginals averaged
    test["cross-fit"] = np.mean([cands["default"].apply(_scores(
        {"mean": f["test_mean"], "var": f["test_var"], "m_S": f["m_S"], "v_S": f["v_S"],
         "lengths": parts["test"]["lengths"]}, offsets, rns_kw)) for f in parts["folds"]],
        axis=0)
    out = {v: _figures(label_space(P, classes, all_labels), gold_all, bands, all_labels)
           for v, P in test.items()}
    for name, cal in cands.items():
        out[name].update(method=cal.method, kind=cal.kind, temperature=cal.temperature,
                         t_unary=cal.t_unary, t_pair=cal.t_pair)
    # CRFsuite: marginals over all labels; its temperature from its own out-of-fold marginals.
    # A fold model of CRFsuite gives probability 0 to a label absent from its training folds
    # (GPSL's fold models keep the label set and give it a little): such held-out tokens say
    # nothing a temperature could fix and are left out of CRFsuite's calibration data.
    crf_gold_tr = _oof_gold(ytr, all_labels, [f["held"] for f in parts["folds"]])
    crf_cal = Calibrator.fit(parts["crf"]["oof"], crf_gold_tr, method="mean", source=src)
    out["CRFsuite"] = _figures(parts["crf"]["test"], gold_all, bands, all_labels)
    out["CRFsuite+T"] = _figures(crf_cal.transform(parts["crf"]["test"]), gold_all, bands,
                                 all_labels)
    out["CRFsuite+T"]["temperature"] = crf_cal.temperature
    out["CRFsuite+T cross-fit"] = _figures(
        np.mean([crf_cal.transform(P) for P in parts["crf"]["fold_test"]], axis=0), gold_all,
        bands, all_labels)
    return out


# --------------------------------------------------------------------------- run


def _cache_path(cache: Path, name: str, p: int, method: str, args) -> Path:
    return cache / f"{name}_p{p}_{method}_k{args.folds}_s{args.seed}_{CACHE_VERSION}.npz"


def _fit_one(task: tuple) -> tuple[str, float]:
    """Fit one (data set, partition, method) and write its cache file (a worker's job)."""
    data_dir, name, p, method, folds, seed, path = task
    from gpsl.features import Template

    data = load_pooled(Path(data_dir), name)
    ntr, nte = PAPER_SIZES[name]
    template = Template.parse(data.template, source=f"{name}/template")
    train, test = partitions(len(data), ntr, nte, p + 1, seed, name)[p]
    Xtr, ytr = [data.X[i] for i in train], [data.y[i] for i in train]
    Xte = [data.X[i] for i in test]
    t0 = time.perf_counter()
    parts = fit_gpsl_parts(method, template, Xtr, ytr, Xte, folds, seed + p)
    parts["crf"] = fit_crf_parts(template, Xtr, ytr, Xte, data.labels, folds, seed + p)
    _save(Path(path), parts)
    return f"{name} p{p} {method}", time.perf_counter() - t0


def fit_missing(args) -> None:
    """Fit every (data set, partition, method) whose cache file is missing, ``--jobs`` at a
    time (one process each; the fits are single-threaded)."""
    cache = Path(args.cache)
    tasks = []
    for name in args.datasets:
        for p in range(args.partitions):
            for method in GPSL_OFFSETS:
                if method not in args.methods or (method != "GPSL2"
                                                  and p >= args.other_partitions):
                    continue
                path = _cache_path(cache, name, p, method, args)
                if not path.exists():
                    tasks.append((args.data_dir, name, p, method, args.folds, args.seed,
                                  str(path)))
    if not tasks:
        return
    if args.jobs <= 1:
        for what, seconds in map(_fit_one, tasks):
            print(f"{what}: fitted in {seconds:.0f} s", flush=True)
        return
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for what, seconds in pool.map(_fit_one, tasks):
            print(f"{what}: fitted in {seconds:.0f} s", flush=True)


def run(args, command: str) -> dict:
    t_start = time.perf_counter()

    cache = Path(args.cache)
    if not args.report_only:
        fit_missing(args)
    results: dict = {}
    for name in args.datasets:
        data = load_pooled(Path(args.data_dir), name)
        ntr, nte = PAPER_SIZES[name]
        n_parts = args.partitions
        results[name] = {m: [] for m in GPSL_OFFSETS}
        for p, (train, test) in enumerate(partitions(len(data), ntr, nte, n_parts, args.seed,
                                                     name)):
            ytr, yte = [data.y[i] for i in train], [data.y[i] for i in test]
            for method in GPSL_OFFSETS:
                if method not in args.methods:
                    continue
                if method != "GPSL2" and p >= args.other_partitions:
                    continue
                path = _cache_path(cache, name, p, method, args)
                if not path.exists():
                    continue
                rec = evaluate(_load(path), yte, ytr, data.labels)
                rec["partition"] = p
                results[name][method].append(rec)
                d = rec["default"]
                c = rec["CRFsuite+T"]
                print(f"{name} p{p} {method}: default ECE15 {d['ece_mass']:.4f} NLL "
                      f"{d['nll']:.3f} loss {d['loss']:.2f} ({d['method']}/{d['kind']}) | "
                      f"CRFsuite+T ECE15 {c['ece_mass']:.4f} NLL {c['nll']:.3f} loss "
                      f"{c['loss']:.2f}", flush=True)
    return {"results": results, "seconds": time.perf_counter() - t_start}


def summarise(results: dict) -> dict:
    summary: dict = {}
    for name, by_method in results.items():
        for method, recs in by_method.items():
            if not recs:
                continue
            for variant in (*VARIANTS, *PEER_VARIANTS, *EXTRA_PEERS):
                row = {"partitions": len(recs)}
                for k in METRICS + ("frequent_ece_mass", "rare_ece_mass", "frequent_nll",
                                    "rare_nll", "temperature"):
                    vals = [r[variant][k] for r in recs if k in r[variant]]
                    if vals:
                        row[k] = mean_std(vals)
                if variant in CHOSEN:
                    chosen = [f"{r[variant]['method']}/{r[variant]['kind']}" for r in recs]
                    row["chosen"] = {c: chosen.count(c) for c in sorted(set(chosen))}
                if variant in ("structured", "structured+V"):
                    for k in ("t_unary", "t_pair"):
                        row[k] = mean_std([r[variant][k] for r in recs])
                # selective accuracy over the pooled test tokens of every partition
                conf = np.concatenate([r[variant]["conf"] for r in recs])
                corr = np.concatenate([r[variant]["correct"] for r in recs])
                from gpsl.metrics import selective_accuracy, threshold_table

                row["selective"] = selective_accuracy(conf, corr, [0.5, 0.7, 0.8, 0.9, 0.95,
                                                                   1.0])
                row["thresholds"] = threshold_table(conf, corr)
                if variant == "default":
                    row["paired"] = {peer: _paired([r["default"]["ece_mass"] for r in recs],
                                                   [r[peer]["ece_mass"] for r in recs])
                                     for peer in PEER_VARIANTS}
                    # the same on the ECE above each one's noise floor (calibration apart
                    # from sharpness)
                    row["paired_excess"] = {
                        peer: _paired([r["default"]["ece_mass"] - r["default"]["ece_mass_floor"]
                                       for r in recs],
                                      [r[peer]["ece_mass"] - r[peer]["ece_mass_floor"]
                                       for r in recs])
                        for peer in PEER_VARIANTS}
                summary.setdefault(name, {}).setdefault(method, {})[variant] = row
    return summary


def _paired(a, b) -> dict:
    """Per-partition differences ``a - b``: mean, standard error, the paired t-test's p and the
    partitions where ``a`` is at or below ``b``."""
    from gpsl.metrics import paired_t_test

    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else None
    return {"diff": float(d.mean()), "se": se, "p": paired_t_test(a, b)[1],
            "at_or_below": int((d <= 0).sum()), "n": int(d.size)}


def acceptance(summary: dict, paper_losses: dict) -> dict:
    """Issue 14's acceptance on GPSL2: default ECE (both binnings) <= CRFsuite's and
    CRFsuite+T's on every data set; NLL <= on at least three; Hamming loss of the default
    marginals' argmax within 0.1 of the mean-RNS loss (Table 1)."""
    out = {"datasets": {}}
    nll_wins = 0
    for name, by in summary.items():
        if "GPSL2" not in by:
            continue
        s = by["GPSL2"]
        d = s["default"]
        row = {}
        for peer in PEER_VARIANTS:
            row[f"ece_mass_vs_{peer}"] = d["ece_mass"][0] <= s[peer]["ece_mass"][0]
            row[f"ece_width_vs_{peer}"] = d["ece_width"][0] <= s[peer]["ece_width"][0]
            row[f"nll_vs_{peer}"] = d["nll"][0] <= s[peer]["nll"][0]
        row["loss_change"] = d["loss"][0] - s["raw"]["loss"][0]
        row["loss_ok"] = row["loss_change"] <= 0.1
        if row["nll_vs_CRFsuite+T"] and row["nll_vs_CRFsuite"]:
            nll_wins += 1
        out["datasets"][name] = row
    out["nll_wins"] = nll_wins
    out["ece_ok"] = all(r["ece_mass_vs_CRFsuite"] and r["ece_mass_vs_CRFsuite+T"]
                        and r["ece_width_vs_CRFsuite"] and r["ece_width_vs_CRFsuite+T"]
                        for r in out["datasets"].values())
    out["nll_ok"] = nll_wins >= min(3, len(out["datasets"]))
    out["loss_ok"] = all(r["loss_ok"] for r in out["datasets"].values())
    del paper_losses
    return out


def _ms(v, digits=4):
    if v is None:
        return "–"
    m, s = v
    if m is None:
        return "–"
    return f"{m:.{digits}f}" + (f" ± {s:.{digits}f}" if s is not None else "")


def write_markdown(report: dict, path: Path) -> None:
    s = report["summary"]
    lines = header_lines("Calibration of the per-token marginals", report["date"],
                         report["machine"], report["git"], report["command"])
    lines += [
        f"Run time {report['seconds']:.0f} s. Paper partitions (bench.paper's seeds and sizes); "
        f"GPSL2 on {report['args']['partitions']} partitions per data set, GPSL1 and GPSL4 on "
        f"the first {report['args']['other_partitions']}; calibration data for every method: "
        f"out-of-fold marginals of the training sentences ({report['args']['folds']} folds).",
        "",
        "Variants: `raw` Algorithm 2 on the means (the paper's RNS); `probit` the "
        "uncertainty-aware RNS; `+T` a temperature fitted by NLL on the out-of-fold marginals; "
        "`structured` the two temperatures of Algorithm 2's own and pair scores (means in "
        "brackets); `structured+V` the same followed by a per-label vector scaling; "
        "`stack ensemble` the mixture of the four calibrated marginals with stacking weights "
        "(the cross-validated log score on the out-of-fold data); `uniform ensemble` the same "
        "mixture with equal weights; `best single` the one of the four with the lowest "
        "cross-validated NLL (the default before the ensemble; chosen counts in brackets); "
        f"`default` what `calibrate(model, X, y, folds={report['args']['folds']})` keeps (the "
        "lowest cross-validated NLL among the four and the default ensemble, "
        f"`gpsl.calibration.ENSEMBLE` = {report.get('ensemble')!r}); `default/brier` and "
        "`default/ece` the same choice by the cross-validated Brier score or ECE15 instead "
        "of NLL; `cross-fit` the default calibrator applied to each fold model on the test "
        "sentences and the K calibrated marginals averaged (scikit-learn's "
        "`CalibratedClassifierCV(ensemble=True)` with one calibrator: no shift between the "
        "models the calibrator was fitted on and the ones it is applied to, at K times the "
        "prediction cost), and `CRFsuite+T cross-fit` the same for CRFsuite. "
        "ECE15 floor = the ECE15 a perfectly calibrated tagger with the same confidences is "
        "expected to show on the test tokens (`gpsl.metrics.ece_noise_floor`). "
        "ECE15 = 15 equal-mass bins, ECE10 = 10 equal-width bins; NLL and Brier over all "
        "labels of the data set; loss = Hamming loss (%) of the variant's argmax.",
        "",
    ]
    acc = report["acceptance"]
    lines += ["## Acceptance (issue 14, GPSL2)", "",
              "| data set | ECE15 ≤ CRFsuite | ECE15 ≤ CRFsuite+T | ECE10 ≤ CRFsuite | "
              "ECE10 ≤ CRFsuite+T | NLL ≤ both | loss change (points) |",
              "|---|---|---|---|---|---|---:|"]
    yes = {True: "yes", False: "**no**"}
    for name, r in acc["datasets"].items():
        lines.append(f"| {name} | {yes[r['ece_mass_vs_CRFsuite']]} | "
                     f"{yes[r['ece_mass_vs_CRFsuite+T']]} | {yes[r['ece_width_vs_CRFsuite']]} | "
                     f"{yes[r['ece_width_vs_CRFsuite+T']]} | "
                     f"{yes[r['nll_vs_CRFsuite'] and r['nll_vs_CRFsuite+T']]} | "
                     f"{r['loss_change']:+.2f} |")
    lines += ["", f"ECE on every data set: {yes[acc['ece_ok']]}; NLL on at least three: "
              f"{yes[acc['nll_ok']]} ({acc['nll_wins']}); loss within 0.1: "
              f"{yes[acc['loss_ok']]}.", "",
              "Paired per-partition differences of GPSL2 default's ECE15 (mean ± standard "
              "error; paired t-test p; partitions where GPSL2 is at or below the peer):", "",
              "| data set | − CRFsuite | − CRFsuite+T |", "|---|---:|---:|"]
    for name, by in s.items():
        pr = by.get("GPSL2", {}).get("default", {}).get("paired")
        if not pr:
            continue
        cells = []
        for peer in PEER_VARIANTS:
            q = pr[peer]
            se = "–" if q["se"] is None else f"{q['se']:.4f}"
            cells.append(f"{q['diff']:+.4f} ± {se} (p {q['p']:.2f}; {q['at_or_below']} of "
                         f"{q['n']})")
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    lines += ["", "Noise floor: the ECE15 a perfectly calibrated tagger with the same confidences "
              "is expected to show on these test tokens (`gpsl.metrics.ece_noise_floor`; it is "
              "lower for a sharper tagger), and the ECE15 above it (mean over partitions; paired "
              "difference of the excess as above):", "",
              "| data set | GPSL2 default ECE15 / floor / excess | CRFsuite | CRFsuite+T | "
              "excess − CRFsuite | excess − CRFsuite+T |", "|---|---:|---:|---:|---:|---:|"]
    for name, by in s.items():
        g = by.get("GPSL2", {})
        if "default" not in g:
            continue

        def fl(row):
            m, f = row["ece_mass"][0], row["ece_mass_floor"][0]
            return f"{m:.4f} / {f:.4f} / {m - f:+.4f}"

        cells = []
        for peer in PEER_VARIANTS:
            q = g["default"]["paired_excess"][peer]
            se = "–" if q["se"] is None else f"{q['se']:.4f}"
            cells.append(f"{q['diff']:+.4f} ± {se} ({q['at_or_below']} of {q['n']})")
        lines.append(f"| {name} | {fl(g['default'])} | {fl(g['CRFsuite'])} | "
                     f"{fl(g['CRFsuite+T'])} | {cells[0]} | {cells[1]} |")
    lines.append("")
    for name, by in s.items():
        lines += [f"## {name}", "",
                  "| method | variant | ECE15 | ECE15 floor | ECE10 | NLL | Brier | mean conf. | "
                  "accuracy | loss % | T | ECE15 frequent / rare | NLL frequent / rare |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for method, variants in by.items():
            for variant, row in variants.items():
                label = variant
                if variant in CHOSEN:
                    label += " (" + ", ".join(f"{k} {v}" for k, v in row["chosen"].items()) + ")"
                if variant in ("structured", "structured+V"):
                    label += (f" (T_U {row['t_unary'][0]:.2f}, T_S {row['t_pair'][0]:.2f})")
                fr = (f"{_ms(row.get('frequent_ece_mass'), 3)} / "
                      f"{_ms(row.get('rare_ece_mass'), 3)}")
                fn = f"{_ms(row.get('frequent_nll'), 3)} / {_ms(row.get('rare_nll'), 3)}"
                t = row.get("temperature")
                lines.append(
                    f"| {method if variant not in (*PEER_VARIANTS, *EXTRA_PEERS) else f'– ({method} partitions)'} | "  # noqa: E501
                    f"{label} | "
                    f"{_ms(row['ece_mass'])} | {_ms(row.get('ece_mass_floor'))} | "
                    f"{_ms(row['ece_width'])} | "
                    f"{_ms(row['nll'], 3)} | {_ms(row['brier'], 3)} | "
                    f"{row['mean_confidence'][0]:.3f} | {row['accuracy'][0]:.3f} | "
                    f"{_ms(row['loss'], 2)} | {'–' if t is None else f'{t[0]:.2f}'} | "
                    f"{fr} | {fn} |")
        g = by.get("GPSL2")
        if g:
            lines += ["", "Selective accuracy, GPSL2 default vs CRFsuite+T (pooled test "
                      "tokens): accuracy of the k% most confident tokens.", "",
                      "| k | GPSL2 default | CRFsuite+T |", "|---:|---:|---:|"]
            for a, b in zip(g["default"]["selective"], g["CRFsuite+T"]["selective"]):
                lines.append(f"| {100 * a['coverage']:.0f}% | {a['accuracy']:.4f} | "
                             f"{b['accuracy']:.4f} |")
            lines += ["", "Accept threshold: share of tokens at or above it (their accuracy).",
                      "", "| threshold | GPSL2 default | CRFsuite+T |", "|---:|---:|---:|"]
            for a, b in zip(g["default"]["thresholds"], g["CRFsuite+T"]["thresholds"]):
                fa = "–" if a["accuracy"] is None else f"{a['accuracy']:.4f}"
                fb = "–" if b["accuracy"] is None else f"{b['accuracy']:.4f}"
                lines.append(f"| {a['threshold']:.2f} | {100 * a['share']:.1f}% ({fa}) | "
                             f"{100 * b['share']:.1f}% ({fb}) |")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.calibration", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--methods", nargs="+", default=list(GPSL_OFFSETS), choices=GPSL_OFFSETS)
    ap.add_argument("--partitions", type=int, default=10, help="GPSL2 partitions per data set")
    ap.add_argument("--other-partitions", type=int, default=3,
                    help="GPSL1/GPSL4 on the first N partitions")
    ap.add_argument("--folds", type=int, default=5,
                    help="folds of the training sentences for the calibration data (5: the "
                         "app's choice for up to 1,000 sentences)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=str(DATA_DIR))
    ap.add_argument("--cache", default=str(CACHE))
    ap.add_argument("--jobs", type=int, default=1,
                    help="fit this many (data set, partition, method) at a time, one process "
                         "each")
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild the report from the cached fits only")
    ap.add_argument("--out", default=str(RESULTS_DIR))
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_data(Path(args.data_dir), args.datasets)
    except DataMissing as e:
        print(f"bench.calibration: {e}", file=sys.stderr)
        return 2
    command = "python -m bench.calibration " + " ".join(shlex.quote(a) for a in (
        sys.argv[1:] if argv is None else argv))
    machine = machine_info()
    out = run(args, command)
    summary = summarise(out["results"])
    from gpsl.calibration import ENSEMBLE

    report = {"date": now_iso(), "machine": machine, "git": git_commit(), "command": command,
              "args": vars(args), "seconds": out["seconds"], "summary": summary,
              "ensemble": ENSEMBLE,
              "acceptance": acceptance(summary, {})}
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    write_markdown(report, dest / "calibration.md")
    slim = {k: v for k, v in report.items()}
    (dest / "calibration.json").write_text(json.dumps(jsonable(slim), indent=1) + "\n",
                                           encoding="utf-8")
    print(f"wrote {dest / 'calibration.md'} and calibration.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
