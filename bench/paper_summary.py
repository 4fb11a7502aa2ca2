"""``bench.paper``'s summaries: per-data-set aggregates and tests, the report, and the merging
of separate runs into one report."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np

from bench.common import jsonable, mean_std, median
from bench.paper_fits import gpsl_settings
from bench.paper_setup import (
    CRF_COMPLETE,
    GPSL_OFFSETS,
    N_BINS,
    PAPER_DATA,
    PAPER_RNS,
    PAPER_TABLE1,
    PAPER_TABLE2,
    PAPER_TABLE3,
    Config,
)
from bench.peers import PEER_PARAMS

# --------------------------------------------------------------------------- summaries


def _paired(a, b):
    """Paired t-test over the partitions where both losses exist."""
    from gpsl.metrics import paired_t_test

    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    if len(pairs) < 2:
        return None, None
    t, pv = paired_t_test([x for x, _ in pairs], [y for _, y in pairs])
    return t, pv


def _against_rns(rows: list[dict], other: str) -> dict:
    """Losses of Algorithm 2 and of decoder ``other`` per partition, their means, and the
    paired t of ``other`` against Algorithm 2 (t > 0: ``other`` is worse)."""
    lr = [x["loss_rns"] for x in rows]
    lo = [x[f"loss_{other}"] for x in rows]
    t, pv = _paired(lo, lr)
    return {"loss_rns_mean": mean_std(lr)[0], f"loss_{other}_mean": mean_std(lo)[0],
            "loss_rns": lr, f"loss_{other}": lo, f"t_{other}_vs_rns": t,
            f"p_{other}_vs_rns": pv}


def summarise_dataset(cfg: Config, name: str, data, parts: list[dict]) -> dict:
    """Per-method aggregates and the table sections of one data set."""
    def per(method, key, source="methods"):
        return [pr[source].get(method, {}).get(key) if pr[source].get(method) else None
                for pr in parts]

    res = {}
    derived = [PAPER_RNS] if any(PAPER_RNS in pr["methods"] for pr in parts) else []
    for m in [*cfg.methods, *derived]:
        losses = per(m, "loss")
        mean, std = mean_std(losses)
        row = {
            "loss_mean": mean,
            "loss_std": std,
            "losses": losses,
            "fit_median_s": median(per(m, "fit_s")),
            "predict_median_s": median(per(m, "predict_s")),
            "fit_s": per(m, "fit_s"),
            "predict_s": per(m, "predict_s"),
        }
        if m in GPSL_OFFSETS or m == PAPER_RNS:
            row["n_iter"] = per(m, "n_iter")
            row["rns_iterations"] = per(m, "rns_iterations")
            row["n_features"] = per(m, "n_features")
        elif "CRFsuite" in m:
            row["n_iter"] = per(m, "n_iter")
        paper_key = {"CRFsuite": "CRF", PAPER_RNS: "GPSL2"}.get(m, m)
        if paper_key in PAPER_TABLE1 and name in PAPER_TABLE1[paper_key]:
            pm, ps, marks = PAPER_TABLE1[paper_key][name]
            row.update(paper_loss_mean=pm, paper_loss_std=ps, paper_marks=marks)
        if name in PAPER_TABLE2 and m in PAPER_TABLE2[name]:
            row["paper_fit_s"] = PAPER_TABLE2[name][m]
        res[m] = row
    scored = {m: r for m, r in res.items() if r["loss_mean"] is not None}
    best = min(scored, key=lambda m: scored[m]["loss_mean"]) if scored else None
    crf_fit = res.get("CRFsuite", {}).get("fit_median_s")
    for m, r in res.items():
        r["is_best"] = m == best
        t = pv = None
        if best is not None and m != best:
            t, pv = _paired(r["losses"], res[best]["losses"])
        r["t_vs_best"], r["p_vs_best"] = t, pv
        r["significant_vs_best"] = bool(pv is not None and pv < 0.05)
        r["ratio_fit_to_crfsuite"] = (r["fit_median_s"] / crf_fit
                                      if crf_fit and r["fit_median_s"] is not None else None)

    out = {"results": res, "best_method": best}

    # Table 3 (GPSL1)
    t3 = [pr["table3"] for pr in parts if pr.get("table3")]
    if t3:
        out["table3"] = {
            **_against_rns(t3, "viterbi"),
            "decode_rns_median_s": median([x["decode_rns_s"] for x in t3]),
            "decode_viterbi_median_s": median([x["decode_viterbi_s"] for x in t3]),
            "latent_median_s": median([x["latent_s"] for x in t3]),
            "predict_rns_median_s": median([x["predict_rns_s"] for x in t3]),
            "rns_iterations_mean": mean_std([x["rns_iterations"] for x in t3])[0],
            "rns_iterations": [x["rns_iterations"] for x in t3],
            "rns_matches_predict_marginals": all(x["rns_matches_predict_marginals"] for x in t3),
            "paper": PAPER_TABLE3.get(name),
        }

    # exact PL decoding (GPSL2)
    ex = [pr["exact"] for pr in parts if pr.get("exact")]
    if ex:
        out["exact_decoding"] = {
            **_against_rns(ex, "exact"),
            "frac_sentences_differ": mean_std([x["frac_sentences_differ"] for x in ex])[0],
            "frac_tokens_differ": mean_std([x["frac_tokens_differ"] for x in ex])[0],
            "mean_log_pl_gain": mean_std([x["mean_log_pl_gain"] for x in ex])[0],
            "min_log_pl_gain": min(x["min_log_pl_gain"] for x in ex),
            "decode_exact_median_s": median([x["decode_exact_s"] for x in ex]),
            "decode_rns_median_s": median([x["decode_rns_s"] for x in ex]),
        }

    # Figure 3: accuracy (%) against the fraction of missing training labels; fraction 0 is the
    # fully supervised run of Table 1 on the same partitions
    if cfg.fractions and any(pr["missing"] for pr in parts):
        fr = [0.0, *cfg.fractions]
        ml = {"fractions": fr, "methods": {}, "n_hidden_mean": [0.0], "n_complete_mean": [None],
              "n_partitions": sum(1 for pr in parts if pr["missing"])}
        for f in cfg.fractions:
            cells = [pr["missing"][f] for pr in parts if f in pr["missing"]]
            ml["n_hidden_mean"].append(mean_std([c["n_hidden"] for c in cells])[0])
            ml["n_complete_mean"].append(mean_std([c["n_complete"] for c in cells])[0])
        names = [m for m in cfg.methods if m in GPSL_OFFSETS]
        if "CRFsuite" in cfg.methods:
            names.append(CRF_COMPLETE)
        for m in names:
            base = "CRFsuite" if m == CRF_COMPLETE else m
            acc = [[None if v is None else 100.0 - v
                    for v, pr in zip(res[base]["losses"], parts) if pr["missing"]]]
            fits = [res[base]["fit_median_s"]]
            for f in cfg.fractions:
                vals, fs = [], []
                for pr in parts:
                    if not pr["missing"]:
                        continue
                    r = pr["missing"].get(f, {}).get("methods", {}).get(m)
                    vals.append(None if not r or r.get("loss") is None else 100.0 - r["loss"])
                    fs.append(r.get("fit_s") if r else None)
                acc.append(vals)
                fits.append(median(fs))
            ms = [mean_std(a) for a in acc]
            ml["methods"][m] = {
                "accuracy_mean": [x[0] for x in ms],
                "accuracy_std": [x[1] for x in ms],
                "accuracy": acc,
                "fit_median_s": fits,
            }
        out["missing_labels"] = ml

    # calibration
    cal = {}
    from gpsl.metrics import reliability_table

    for m in cfg.methods:
        recs = [pr["calibration"][m] for pr in parts if m in pr["calibration"]]
        if not recs:
            continue
        conf = np.concatenate([r["conf"] for r in recs])
        corr = np.concatenate([r["correct"] for r in recs])
        ece_mean, ece_std = mean_std([r["ece"] for r in recs])
        cal[m] = {
            "ece_mean": ece_mean,
            "ece_std": ece_std,
            "ece": [r["ece"] for r in recs],
            "nll_mean": mean_std([r["nll"] for r in recs])[0],
            "brier_mean": mean_std([r["brier"] for r in recs])[0],
            "mean_confidence": float(conf.mean()) if conf.size else None,
            "accuracy": float(corr.mean()) if corr.size else None,
            "n_tokens": int(conf.size),
            "reliability": reliability_table(conf, corr, n_bins=N_BINS),
        }
    if cal:
        out["calibration"] = cal
    out["data"] = {
        "n_sentences_pooled": len(data),
        "n_labels_pooled": len(data.labels),
        "labels": data.labels,
        "sizes": list(cfg.sizes[name]),
        "paper_n_labels": PAPER_DATA.get(name, (None, None))[0],
        "paper_n_features": PAPER_DATA.get(name, (None, None))[1],
    }
    out["partitions"] = [{k: pr[k] for k in ("index", "seed", "train", "test", "n_train_tokens",
                                               "n_test_tokens")} for pr in parts]
    return out


def build_report(cfg: Config, meta: dict, done: dict, complete: bool, errors: list) -> dict:
    report = {
        **meta,
        "complete": complete,
        "config": asdict(cfg),
        "settings": {
            "gpsl": gpsl_settings(cfg),
            "peers": PEER_PARAMS,
            "crf_rule": "c2 = 1/(2C) with CRF++'s default C = 1 (CRF++ adds ||w||^2/(2C) to the "
                        "negative log-likelihood, CRFsuite adds c2 ||w||^2), c1 = 0",
            "calibration_bins": N_BINS,
        },
        "paper": {"table1": PAPER_TABLE1, "table2": PAPER_TABLE2, "table3": PAPER_TABLE3,
                  "data": PAPER_DATA},
        "errors": list(errors),
        "results": {},
        "table3": {},
        "exact_decoding": {},
        "missing_labels": {},
        "calibration": {},
        "data": {},
        "partitions": {},
    }
    for name, s in done.items():
        report["results"][name] = s["results"]
        report["data"][name] = s["data"]
        report["partitions"][name] = s["partitions"]
        for key in ("table3", "exact_decoding", "missing_labels", "calibration"):
            if key in s:
                report[key][name] = s[key]
    return jsonable(report)




# --------------------------------------------------------------------------- merging runs


def merge_reports(reports: list[dict]) -> dict:
    """One report from several runs on disjoint data sets (e.g. a long data set run apart).

    Per-data-set sections are combined; the header lists every command, and the number of
    partitions is given per data set.
    """
    sections = ("results", "table3", "exact_decoding", "missing_labels", "calibration", "data",
                "partitions")
    out = json.loads(json.dumps(reports[0]))
    for r in reports[1:]:
        for key in sections:
            overlap = set(out.get(key, {})) & set(r.get(key, {}))
            if overlap:
                raise ValueError(f"runs overlap on data sets {sorted(overlap)} ({key})")
            out.setdefault(key, {}).update(r.get(key, {}))
        out["errors"] = list(out.get("errors", [])) + list(r.get("errors", []))
        out["config"]["sizes"].update(r["config"]["sizes"])
        out["complete"] = bool(out["complete"] and r["complete"])
        out["total_seconds"] = out.get("total_seconds", 0) + r.get("total_seconds", 0)
    out["command"] = " ; ".join(r["command"] for r in reports)
    counts = {d: len(parts) for d, parts in out["partitions"].items()}
    out["config"]["n_partitions"] = max(counts.values(), default=0)
    out["config"]["partitions_per_dataset"] = counts
    return out


def merge_figure3(main: dict, figs: list[dict]) -> dict:
    """``main`` with its Figure 3 taken from separate missing-label runs ``figs``.

    Figure 3 costs seven fits per GPSL model and partition (fraction 0 and six fractions),
    so on a small machine it is run apart, on fewer partitions than Table 1 (``--partitions
    N --missing-fractions ...`` with the same seed). A run is used for a data set only if its
    partitions are the main run's first ones (same train and test sentences, else
    ``ValueError``). Its own fraction-0 row (its Table 1 fits on those partitions) stays, so
    every row of the figure comes from one code version; the largest difference between its
    and the main run's Table 1 losses on the shared partitions is kept as
    ``table1_max_abs_diff`` (0 when both runs used the same engine).
    """
    out = json.loads(json.dumps(main))
    out.setdefault("missing_labels", {})
    commands = []
    for fig in figs:
        used = []
        for d, ml in fig.get("missing_labels", {}).items():
            if d not in out.get("partitions", {}):
                raise ValueError(f"data set {d!r} of the Figure 3 run is not in the main run")
            mine, theirs = out["partitions"][d], fig["partitions"][d]
            if len(theirs) > len(mine):
                raise ValueError(f"{d}: the Figure 3 run has {len(theirs)} partitions, the main "
                                 f"run {len(mine)}")
            for a, b in zip(mine, theirs, strict=False):
                if a["train"] != b["train"] or a["test"] != b["test"]:
                    raise ValueError(f"{d}: partition {b['index']} differs from the main run's "
                                     "(different seed or sizes)")
            diffs = [abs(x - y)
                     for m, r in fig["results"][d].items() if m in out["results"][d]
                     for x, y in zip(out["results"][d][m]["losses"], r["losses"], strict=False)
                     if x is not None and y is not None]
            ml = dict(ml)
            ml["n_partitions"] = ml.get("n_partitions", len(theirs))
            ml["table1_max_abs_diff"] = max(diffs, default=None)
            ml["command"] = fig["command"]
            out["missing_labels"][d] = ml
            used.append(d)
        if used:
            stopped = "" if fig.get("complete", True) else \
                " (stopped early: partitions as listed per data set)"
            commands.append(fig["command"] + stopped)
            out["total_seconds"] = out.get("total_seconds", 0) + fig.get("total_seconds", 0)
            out["errors"] = list(out.get("errors", [])) + list(fig.get("errors", []))
            out["config"]["fractions"] = fig["config"]["fractions"]
    if commands:
        out["command"] = out["command"] + " ; Figure 3: " + " ; ".join(commands)
    out["config"]["missing_partitions"] = None
    return out
