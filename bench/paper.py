"""Reproduce section 6 of the GPSL paper (Tables 1-3, Figure 3) and two checks beyond it.

    python -m bench.paper [--quick] [--datasets ...] [--partitions N] [--methods ...]
                          [--missing-fractions ...] [--out DIR] [--seed S] [--max-iter N]

The four CRF++ data sets are read from ``../shared/data/crfpp`` (relative to the repository; the
run stops with exit status 2 when they are absent). Each data set's ``train.data`` and
``test.data`` are pooled and ``--partitions`` random train/test partitions of the paper's sizes
(basenp 150/150, chunking 50/50, seg 20/16, JapaneseNE 50/50 sentences) are drawn from the
recorded ``--seed`` (partition ``p`` of data set ``d`` uses ``SeedSequence([seed, crc32(d), p])``,
see :func:`bench.common.partitions`). Every method runs on the same partitions, with features
from the data set's CRF++ template:

* ``GPSL1`` / ``GPSL2`` / ``GPSL4``: :class:`gpsl.model.GPSL` with offsets ``(-1,)``, ``(-1, 1)``,
  ``(-2, -1, 1, 2)`` and the linear kernel, decoded with Algorithm 2 (RNS);
* ``CRFsuite``: sklearn-crfsuite, L-BFGS with L2 only (the rule:
  :data:`bench.peers.CRF_PARAMS`);
* ``CRFsuite-PA``: sklearn-crfsuite passive-aggressive (PA-I, C=1): an online cost-sensitive
  max-margin trainer of the same linear-chain model, the closest installable stand-in for the
  paper's structural SVM;
* ``CRFsuite-AP``: sklearn-crfsuite averaged (structured) perceptron;
* ``LogReg``: scikit-learn multinomial logistic regression per token with the same template
  features (no label dependencies; C=1 = CRF++'s default C).

Results (``--out``, default ``bench/results``): ``paper.md``, ``paper.json``,
``missing_labels.html`` and ``calibration.html``. They are rewritten after every partition, so an
interrupted run leaves the partitions done so far (``"complete": false`` in the JSON).

JSON layout: ``results[dataset][method]`` -> ``loss_mean``, ``loss_std`` (Hamming loss, %),
``losses`` (per partition), ``fit_median_s``, ``predict_median_s``, ``fit_s``, ``predict_s``,
``t_vs_best``, ``p_vs_best``, ``significant_vs_best``, ``ratio_fit_to_crfsuite``, the paper's
numbers, and for GPSL ``n_iter`` / ``rns_iterations``; ``table3[dataset]`` (GPSL1, Algorithm 2
vs Viterbi), ``missing_labels[dataset]`` (Figure 3), ``calibration[dataset][method]`` (ECE,
reliability bins), ``exact_decoding[dataset]`` (GPSL2, exact pseudo-likelihood maximiser vs
Algorithm 2), ``partitions[dataset]`` (seeds and sentence indices), ``paper`` (reference data).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bench.common import (
    DATA_DIR,
    DATASETS,
    PAPER_SIZES,
    RESULTS_DIR,
    DataMissing,
    check_data,
    git_commit,
    header_lines,
    hide_labels,
    jsonable,
    label_space,
    load_pooled,
    machine_info,
    mean_std,
    median,
    now_iso,
    parse_sizes,
    partition_seed,
    partitions,
)
from bench.peers import PEER_PARAMS, fit_peer
from gpsl.predict import pl_exact_decode, pl_factors, pl_log_score  # noqa: F401

# --------------------------------------------------------------------------- methods

GPSL_OFFSETS = {"GPSL1": (-1,), "GPSL2": (-1, 1), "GPSL4": (-2, -1, 1, 2)}

METHODS = (*GPSL_OFFSETS, *PEER_PARAMS)
PAPER_RNS = "GPSL2 (m+v/2)"
"""GPSL2 predicted with the paper's RNS local score m + v/2 (the default uses the means m)."""
DEFAULT_METHODS = METHODS
#: Methods whose per-token marginals are probabilities trained for likelihood (calibration).
MARGINAL_METHODS = ("GPSL1", "GPSL2", "GPSL4", "CRFsuite", "LogReg")
CRF_COMPLETE = "CRFsuite (complete sentences)"

DEFAULT_FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5)
QUICK_DATASETS = ("seg", "chunking")
QUICK_FRACTIONS = (0.1, 0.3)
QUICK_PARTITIONS = 2
QUICK_SIZES = {"seg": (20, 16), "chunking": (25, 25)}
QUICK_MAX_ITER = 10
N_BINS = 10

# --------------------------------------------------------------------------- the paper
# Srijith, Balamurugan, Shevade, "Gaussian process pseudo-likelihood models for sequence
# labeling" (../shared/paper/gpsl-paper.tex), section 6. Hamming loss in %, mean +- std over 10
# partitions; marks: "*" significantly different from the best method, "+" from GPstruct
# (paired t-test, 5%); "best" = bold in the paper.
PAPER_TABLE1 = {
    "GPSL1": {"basenp": (5.73, 0.98, "*"), "chunking": (13.02, 1.87, "*"),
              "seg": (23.45, 2.96, "best"), "JapaneseNE": (8.26, 2.63, "*")},
    "GPSL2": {"basenp": (5.55, 0.92, "*"), "chunking": (12.69, 1.69, "*"),
              "seg": (23.51, 2.93, ""), "JapaneseNE": (7.86, 2.45, "*")},
    "GPSL4": {"basenp": (5.54, 0.94, "*"), "chunking": (12.70, 1.79, "*"),
              "seg": (23.53, 2.85, ""), "JapaneseNE": (7.82, 2.56, "*")},
    "CRF": {"basenp": (5.21, 0.84, "+"), "chunking": (11.76, 1.73, "*+"),
            "seg": (24.10, 3.49, "*+"), "JapaneseNE": (7.76, 2.80, "*")},
    "SSVM": {"basenp": (5.19, 0.91, "best+"), "chunking": (10.71, 1.49, "best+"),
             "seg": (23.46, 3.45, ""), "JapaneseNE": (6.17, 2.60, "best+")},
    "GPstruct": {"basenp": (5.66, 0.93, "*"), "chunking": (12.56, 1.82, "*"),
                 "seg": (23.55, 2.90, ""), "JapaneseNE": (7.79, 2.92, "*")},
}
#: Paper Table 1 header rows: number of labels and of features.
PAPER_DATA = {"basenp": (3, 6438), "chunking": (14, 29764), "seg": (2, 1386),
              "JapaneseNE": (17, 102799)}
#: Paper Table 2: average training time in seconds (Matlab, 3.2 GHz Intel, 4 GB).
PAPER_TABLE2 = {
    "seg": {"GPSL1": 17.13, "GPSL2": 19.64, "GPSL4": 22.83, "GPstruct": 3.82e3},
    "chunking": {"GPSL1": 1.09e3, "GPSL2": 1.35e3, "GPSL4": 1.71e3, "GPstruct": 4.56e4},
    "basenp": {"GPSL1": 6.01e3, "GPSL2": 6.69e3, "GPSL4": 7.25e3, "GPstruct": 7.54e4},
    "JapaneseNE": {"GPSL1": 1.24e3, "GPSL2": 1.56e3, "GPSL4": 1.93e3, "GPstruct": 4.92e4},
}
#: Paper Table 3: GPSL1 with Algorithm 2 vs Viterbi (UGM): loss %, paired t, runtime s, iterations.
PAPER_TABLE3 = {
    "seg": {"loss_rns": 23.45, "loss_viterbi": 24.26, "t": 3.8183, "time_rns": 0.1227,
            "time_viterbi": 0.0856, "iterations": 5},
    "chunking": {"loss_rns": 13.02, "loss_viterbi": 13.69, "t": 3.6421, "time_rns": 0.2491,
                 "time_viterbi": 0.2628, "iterations": 5},
    "basenp": {"loss_rns": 5.73, "loss_viterbi": 5.75, "t": 0.3162, "time_rns": 0.5207,
               "time_viterbi": 0.5338, "iterations": 4},
    "JapaneseNE": {"loss_rns": 8.26, "loss_viterbi": 8.84, "t": 2.475, "time_rns": 0.3661,
                   "time_viterbi": 0.5653, "iterations": 3},
}


# --------------------------------------------------------------------------- configuration


@dataclass
class Config:
    """Settings of one run (see ``--help``)."""

    datasets: list[str]
    methods: list[str]
    fractions: list[float]
    n_partitions: int = 10
    missing_partitions: int | None = None  # Figure 3 on the first N partitions (None = all)
    seed: int = 0
    max_iter: int = 100
    tol: float | None = None  # None = the GPSL default
    learn_hyper: bool | None = None  # None = the GPSL default
    inference: str = "full"  # Table 1 is the full GP's; "sparse" for the scalable mode
    sizes: dict = field(default_factory=lambda: dict(PAPER_SIZES))
    data_dir: str = str(DATA_DIR)
    out_dir: str = str(RESULTS_DIR)
    quick: bool = False
    verbose: bool = True


# --------------------------------------------------------------------------- runners


def _split(flat: np.ndarray, lengths) -> list[np.ndarray]:
    return np.split(flat, np.cumsum(lengths)[:-1])


def make_gpsl(name: str, template, cfg: Config):
    """The GPSL estimator of method ``name``; unset options keep the library's defaults."""
    from gpsl.model import GPSL

    kw = {} if cfg.learn_hyper is None else {"learn_hyper": cfg.learn_hyper}
    if cfg.tol is not None:
        kw["tol"] = cfg.tol
    # the full GP explicitly (cfg.inference, "full" unless --inference sparse): Table 1 is the
    # paper's model, and inference="auto" is the scalable mode since gpsl.auto
    return GPSL(offsets=GPSL_OFFSETS[name], kernel="linear", template=template,
                max_iter=cfg.max_iter, decoder="rns", inference=cfg.inference, **kw)


def gpsl_settings(cfg: Config) -> dict:
    """The effective GPSL parameters of a run (library defaults included)."""
    params = make_gpsl("GPSL2", None, cfg).get_params()
    params.pop("callback", None)
    params.pop("template", None)
    params["offsets"] = GPSL_OFFSETS
    return params


def fit_gpsl(name: str, template: str, Xtr, ytr, Xte, cfg: Config):
    """Fit one GPSL model and predict with Algorithm 2; ``(model, record, marginals, labels)``."""
    model = make_gpsl(name, template, cfg)
    t0 = time.perf_counter()
    model.fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    marg = model.predict_marginals(Xte)  # cold: also builds the predictor's Cholesky factors
    predict_s = time.perf_counter() - t0
    pred = [[model.classes_[i] for i in p.argmax(axis=1)] for p in marg]
    rec = {
        "fit_s": fit_s,
        "predict_s": predict_s,
        "n_iter": int(model.n_iter_),
        "rns_iterations": int(model.rns_iterations_),
        "n_features": int(model.extractor_.n_features_),
    }
    return model, rec, (marg, list(model.classes_)), pred


def calibration_record(marg, classes, y_true, all_labels) -> dict:
    """Per-token confidence/correctness of the marginals' argmax, ECE, NLL and Brier score."""
    from gpsl.metrics import (
        brier_score,
        expected_calibration_error,
        negative_log_likelihood,
    )

    P = np.concatenate(marg, axis=0) if marg else np.zeros((0, len(classes)))
    gold = [v for lab in y_true for v in lab]
    keep = np.array([v is not None for v in gold], dtype=bool)
    conf = np.clip(P.max(axis=1), 0.0, 1.0)
    arg = [classes[i] for i in P.argmax(axis=1)]
    correct = np.array([a == g for a, g in zip(arg, gold)], dtype=bool)
    conf, correct = conf[keep], correct[keep]
    # probabilities over every label of the pooled data (zero for labels unseen in training)
    full = label_space(P, classes, all_labels)
    pos = {c: i for i, c in enumerate(all_labels)}
    gold_idx = [pos[g] if g in pos else -1 for g in gold]
    return {
        "conf": conf,
        "correct": correct,
        "ece": expected_calibration_error(conf, correct, n_bins=N_BINS),
        "nll": negative_log_likelihood(full, gold_idx),
        "brier": brier_score(full, gold_idx),
        "mean_confidence": float(conf.mean()) if conf.size else None,
        "accuracy": float(correct.mean()) if correct.size else None,
    }


def _latent_scores(model, Xte):
    """``(b, g, lengths, seconds)``: the node scores Algorithm 2 uses (``model.local_scores``:
    the means ``m``, or ``m + v/2`` with ``rns_variance``) and pair scores ``m_S + v_S/2``,
    so every decoder compared with Algorithm 2 sees exactly the same scores."""
    t0 = time.perf_counter()
    b, lengths = model.local_scores(Xte)
    latent_s = time.perf_counter() - t0
    g = model.state_.m_S + 0.5 * model.state_.v_S
    return b, g, np.asarray(lengths, dtype=np.int64), latent_s


def table3_record(model, Xte, yte, pred_rns, rec) -> dict:
    """GPSL1: Algorithm 2 against Viterbi on the same latent scores (paper Table 3)."""
    from gpsl.metrics import hamming_loss
    from gpsl.predict import rns, viterbi

    b, g, lengths, latent_s = _latent_scores(model, Xte)
    t0 = time.perf_counter()
    P, _ = rns(b, g, lengths, model.offsets_, **model.rns_settings())
    rns_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    idx = viterbi(b, g, lengths, model.offsets_)
    viterbi_s = time.perf_counter() - t0
    pred_v = [[model.classes_[i] for i in s] for s in _split(idx, lengths)]
    same = [[model.classes_[i] for i in s] for s in _split(P.argmax(axis=1), lengths)] == pred_rns
    return {
        "loss_rns": hamming_loss(yte, pred_rns),
        "loss_viterbi": hamming_loss(yte, pred_v),
        "rns_iterations": rec["rns_iterations"],
        "decode_rns_s": rns_s,
        "decode_viterbi_s": viterbi_s,
        "latent_s": latent_s,
        "predict_rns_s": rec["predict_s"],
        "rns_matches_predict_marginals": bool(same),
    }


def exact_record(model, Xte, yte, pred_rns) -> dict:
    """GPSL2: the exact maximiser of the pseudo-likelihood product against Algorithm 2."""
    from gpsl.metrics import hamming_loss
    from gpsl.predict import rns

    b, g, lengths, latent_s = _latent_scores(model, Xte)
    offsets = model.offsets_
    t0 = time.perf_counter()
    rns(b, g, lengths, offsets, **model.rns_settings())
    rns_s = time.perf_counter() - t0
    index = {c: i for i, c in enumerate(model.classes_)}
    pred_exact, gains = [], []
    n_diff_sent = n_diff_tok = 0
    exact_s = 0.0
    for bs, ys in zip(_split(b, lengths), pred_rns):
        t0 = time.perf_counter()
        y_ex, score = pl_exact_decode(bs, g, offsets)
        exact_s += time.perf_counter() - t0
        y_r = [index[v] for v in ys]
        gains.append(score - pl_log_score(bs, g, offsets, y_r))
        diff = int(np.sum(np.asarray(y_r) != y_ex))
        n_diff_tok += diff
        n_diff_sent += diff > 0
        pred_exact.append([model.classes_[i] for i in y_ex])
    return {
        "loss_rns": hamming_loss(yte, pred_rns),
        "loss_exact": hamming_loss(yte, pred_exact),
        "frac_sentences_differ": n_diff_sent / max(len(pred_rns), 1),
        "frac_tokens_differ": n_diff_tok / max(int(lengths.sum()), 1),
        "mean_log_pl_gain": float(np.mean(gains)) if gains else None,
        "min_log_pl_gain": float(np.min(gains)) if gains else None,
        "decode_exact_s": exact_s,
        "decode_rns_s": rns_s,
        "latent_s": latent_s,
    }


# --------------------------------------------------------------------------- one data set


def run_partition(cfg: Config, data, p: int, train, test, log, errors: list) -> dict:
    """All methods, the decoding checks and the missing-label runs on one partition."""
    from gpsl.features import Template
    from gpsl.metrics import hamming_loss

    template = Template.parse(data.template, source=f"{data.name}/template")
    Xtr, ytr = [data.X[i] for i in train], [data.y[i] for i in train]
    Xte, yte = [data.X[i] for i in test], [data.y[i] for i in test]
    rec = {
        "index": p,
        "seed": partition_seed(cfg.seed, data.name, p),
        "train": [int(i) for i in train],
        "test": [int(i) for i in test],
        "n_train_tokens": sum(len(s) for s in Xtr),
        "n_test_tokens": sum(len(s) for s in Xte),
        "methods": {},
        "calibration": {},
        "table3": None,
        "exact": None,
        "missing": {},
    }
    tag = f"[{data.name} p{p}]"

    def fail(what, exc):
        msg = f"{data.name} partition {p} {what}: {type(exc).__name__}: {exc}"
        errors.append(msg)
        log(f"{tag} ERROR {what}: {exc}")
        if cfg.verbose:
            traceback.print_exc(file=sys.stderr)

    for name in cfg.methods:
        model = None
        try:
            if name in GPSL_OFFSETS:
                model, r, marg, pred = fit_gpsl(name, data.template, Xtr, ytr, Xte, cfg)
            else:
                r, marg, pred = fit_peer(name, template, Xtr, ytr, Xte,
                                         want_marginals=name in MARGINAL_METHODS)
            r["loss"] = hamming_loss(yte, pred)
            rec["methods"][name] = r
            extra = f" iters {r['n_iter']}" if "n_iter" in r else ""
            if "rns_iterations" in r:
                extra += f" rns {r['rns_iterations']}"
            log(f"{tag} {name:<12} loss {r['loss']:6.2f}%  fit {r['fit_s']:8.2f}s  "
                f"predict {r['predict_s']:7.3f}s{extra}")
            if marg is not None and name in MARGINAL_METHODS:
                rec["calibration"][name] = calibration_record(marg[0], marg[1], yte, data.labels)
            if name == "GPSL1":
                rec["table3"] = table3_record(model, Xte, yte, pred, r)
            if name == "GPSL2":
                # the paper's RNS exactly (local score m + v/2) from the same fitted model
                model.set_params(rns_variance=True)
                t0 = time.perf_counter()
                marg_v = model.predict_marginals(Xte)
                pred_v = [[model.classes_[i] for i in q.argmax(axis=1)] for q in marg_v]
                rec["methods"][PAPER_RNS] = {
                    **{k: r[k] for k in ("fit_s", "n_iter", "n_features")},
                    "predict_s": time.perf_counter() - t0,
                    "rns_iterations": int(model.rns_iterations_),
                    "loss": hamming_loss(yte, pred_v)}
                model.set_params(rns_variance=False)
                log(f"{tag} {PAPER_RNS:<12} loss {rec['methods'][PAPER_RNS]['loss']:6.2f}%")
                rec["exact"] = exact_record(model, Xte, yte, pred)
                e = rec["exact"]
                log(f"{tag} GPSL2 exact-PL decoding: loss {e['loss_exact']:.2f}% vs RNS "
                    f"{e['loss_rns']:.2f}%, sentences differing "
                    f"{100 * e['frac_sentences_differ']:.1f}%")
        except Exception as exc:  # noqa: BLE001 - one failure must not stop a long run
            fail(name, exc)
        del model

    # Figure 3: hide a fraction of the training labels (nested sets across fractions)
    gpsl_methods = [m for m in cfg.methods if m in GPSL_OFFSETS]
    run_missing = cfg.missing_partitions is None or p < cfg.missing_partitions
    if cfg.fractions and run_missing and (gpsl_methods or "CRFsuite" in cfg.methods):
        rng = np.random.default_rng(np.random.SeedSequence([*rec["seed"], 1]))
        order = rng.permutation(rec["n_train_tokens"])
        for f in cfg.fractions:
            y_h, k = hide_labels(ytr, f, rng, order=order)
            complete = [i for i, lab in enumerate(y_h) if all(v is not None for v in lab)]
            cell = {"n_hidden": k, "n_complete": len(complete), "methods": {}}
            for name in gpsl_methods:
                try:
                    model, r, _, pred = fit_gpsl(name, data.template, Xtr, y_h, Xte, cfg)
                    r["loss"] = hamming_loss(yte, pred)
                    cell["methods"][name] = r
                    log(f"{tag} missing {f:.2f} {name:<6} loss {r['loss']:6.2f}%  "
                        f"fit {r['fit_s']:8.2f}s")
                    del model
                except Exception as exc:  # noqa: BLE001
                    fail(f"{name} with {f} missing", exc)
            if "CRFsuite" in cfg.methods:
                if complete:
                    try:
                        r, _, pred = fit_peer("CRFsuite", template, [Xtr[i] for i in complete],
                                              [ytr[i] for i in complete], Xte,
                                              want_marginals=False)
                        r["loss"] = hamming_loss(yte, pred)
                        cell["methods"][CRF_COMPLETE] = r
                    except Exception as exc:  # noqa: BLE001
                        fail(f"CRFsuite with {f} missing", exc)
                else:
                    cell["methods"][CRF_COMPLETE] = {"loss": None, "fit_s": None}
                loss = cell["methods"].get(CRF_COMPLETE, {}).get("loss")
                log(f"{tag} missing {f:.2f} CRFsuite on {len(complete)} complete sentences: "
                    + ("not trainable" if loss is None else f"loss {loss:.2f}%"))
            rec["missing"][f] = cell
    return rec


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


# --------------------------------------------------------------------------- writers


def _f(v, digits=2, unit=""):
    return "–" if v is None else f"{v:.{digits}f}{unit}"


def _sec(v):
    if v is None:
        return "–"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def _ratio(v):
    if v is None:
        return "–"
    return f"{v:.1f}" if v >= 10 else f"{v:.2g}"


def write_markdown(report: dict, path: Path) -> None:
    cfg = report["config"]
    ds = list(report["results"])
    lines = header_lines("GPSL paper reproduction (section 6)", report["date"],
                         report["machine"], report["git"], report["command"])
    status = "complete" if report["complete"] else "INCOMPLETE (partial results so far)"
    lines += [
        f"Run {status}: {report.get('total_seconds', 0):.0f} s. "
        + (", ".join(f"{n} ({d})" for d, n in cfg["partitions_per_dataset"].items())
           if cfg.get("partitions_per_dataset") else str(cfg["n_partitions"]))
        + f" random partition(s) per data set from seed {cfg['seed']} (partition p of data "
        "set d is drawn from `SeedSequence([seed, crc32(d), p])`); train/test sentences: "
        + ", ".join(f"{d} {cfg['sizes'][d][0]}/{cfg['sizes'][d][1]}" for d in ds) + ".",
        "",
        "* GPSL: linear kernel, Algorithm 2 (RNS) decoding, features from each data set's CRF++ "
        "template; parameters: " + ", ".join(
            f"{k}={v}" for k, v in report["settings"]["gpsl"].items() if k != "offsets") + ".",
        "* CRFsuite (sklearn-crfsuite): L-BFGS, c1 = 0, c2 = 0.5, max 500 iterations, all "
        "possible states and transitions. Rule: CRF++'s default is L2 with C = 1 and CRF++ "
        "minimises -log-likelihood + ||w||²/(2C); CRFsuite minimises -log-likelihood + "
        "c2·||w||², so c2 = 1/(2C) = 0.5 gives the same objective. Features: the same template "
        "strings, `{string: 1.0}` per token.",
        "* CRFsuite-PA: passive-aggressive PA-I (C = 1, 100 epochs, averaged), an online "
        "cost-sensitive max-margin trainer of the same linear chain: the closest installable "
        "stand-in for the paper's SSVM. CRFsuite-AP: averaged structured perceptron (100 "
        "epochs). LogReg: scikit-learn multinomial logistic regression per token on the same "
        "features, C = 1 (no label dependencies).",
        "* Times are wall-clock seconds of one process; fit times include feature extraction; "
        "GPSL predict times are the first `predict_marginals` call after `fit` (it builds the "
        "predictive Cholesky factors).",
    ]
    if cfg.get("quick"):
        lines.append("* **--quick run**: fewer partitions, data sets, fractions, reduced sizes "
                     "and GPSL iterations; not comparable with the paper's numbers.")
    lines.append("")

    # Table 1
    lines += ["## Table 1: Hamming loss (%)", "",
              "Mean ± std over partitions; **bold** = best here; ★ = significantly different "
              "from the best (paired t-test, 5%). Paper columns: the paper's Table 1 (its CRF "
              "row is Bottou's SGD CRF, shown next to CRFsuite; its SSVM row next to "
              "CRFsuite-PA; ★ best-method marks, † GPstruct marks as printed).", ""]
    head = "| method |" + "".join(f" {d} | paper |" for d in ds)
    lines += [head, "|---|" + "---:|---:|" * len(ds)]
    paper_alias = {"CRFsuite": "CRF", "CRFsuite-PA": "SSVM"}
    methods = list(cfg["methods"])
    if any(PAPER_RNS in report["results"][d] for d in ds):  # derived from GPSL2's fits
        methods.insert(methods.index("GPSL2") + 1 if "GPSL2" in methods else 0, PAPER_RNS)
    shown = {paper_alias.get(m, m) for m in methods}
    extra_paper = [m for m in PAPER_TABLE1 if m not in shown]
    for m in methods + extra_paper:
        cells = []
        for d in ds:
            r = report["results"][d].get(m)
            if r and r["loss_mean"] is not None:
                s = f"{r['loss_mean']:.2f} ± {r['loss_std']:.2f}"
                s = f"**{s}**" if r["is_best"] else s
                s += " ★" if r["significant_vs_best"] else ""
            else:
                s = "–"
            pk = paper_alias.get(m, m)
            pv = PAPER_TABLE1.get(pk, {}).get(d)
            if pv:
                marks = pv[2].replace("best", "").replace("*", "★").replace("+", "†")
                ps = f"{pv[0]:.2f} ± {pv[1]:.2f}{(' ' + marks) if marks else ''}"
                ps = f"**{ps}**" if "best" in pv[2] else ps
                if pk != m and m in methods:
                    ps = f"{ps} ({pk})"
            else:
                ps = ""
            cells.append(f" {s} | {ps} |")
        label = m if m in methods else f"{m} (paper only)"
        lines.append(f"| {label} |" + "".join(cells))
    lab = []
    for d in ds:
        dd = report["data"][d]
        nf = _n_features(report["results"][d])
        lab.append(f" {dd['n_labels_pooled']} labels, "
                   f"{int(np.median(nf)) if nf else '–'} features | "
                   f"{dd['paper_n_labels']} labels, {dd['paper_n_features']} features |")
    lines += ["| *data* |" + "".join(lab), ""]

    # Table 2
    lines += ["## Table 2: training time", "",
              "Median seconds over partitions on this machine; × = ratio to CRFsuite's median "
              "in the same run. Paper: average seconds (Matlab, 3.2 GHz Intel).", "",
              "| data set | method | fit median (s) | × CRFsuite | predict median (s) | "
              "GPSL sweeps (median) | paper fit (s) |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for d in ds:
        for m, r in report["results"][d].items():
            ratio = r.get("ratio_fit_to_crfsuite")
            it = [v for v in (r.get("n_iter") or []) if v is not None]
            lines.append(f"| {d} | {m} | {_sec(r['fit_median_s'])} | "
                         f"{_ratio(ratio)} | "
                         f"{_sec(r['predict_median_s'])} | "
                         f"{int(np.median(it)) if it and m in GPSL_OFFSETS else '–'} | "
                         f"{_sec(r.get('paper_fit_s'))} |")
        if "GPstruct" in PAPER_TABLE2.get(d, {}):
            lines.append(f"| {d} | GPstruct (paper only) | | | | | "
                         f"{_sec(PAPER_TABLE2[d]['GPstruct'])} |")
    lines.append("")

    # Table 3
    lines += ["## Table 3: GPSL1, Algorithm 2 against Viterbi", ""]
    if report["table3"]:
        lines += ["Same fitted GPSL1 model and latent scores; t = paired t of Viterbi's loss "
                  "against Algorithm 2's (t > 0: Viterbi worse). Decode times: the decoder "
                  "alone on the test set's latent scores; latent = predictive means and "
                  "variances (shared by both). Iterations: `rns_iterations_` after "
                  "`predict_marginals`.", "",
                  "| data set | loss Alg. 2 | loss Viterbi | t | decode Alg. 2 (s) | decode "
                  "Viterbi (s) | latent (s) | mean iterations | paper: loss Alg.2 / Viterbi, t,"
                  " time Alg.2 / Viterbi, iterations |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for d, t in report["table3"].items():
            p = t.get("paper") or {}
            ps = (f"{p['loss_rns']} / {p['loss_viterbi']}, {p['t']}, {p['time_rns']} / "
                  f"{p['time_viterbi']}, {p['iterations']}" if p else "")
            lines.append(f"| {d} | {_f(t['loss_rns_mean'])} | {_f(t['loss_viterbi_mean'])} | "
                         f"{_f(t['t_viterbi_vs_rns'])} | {_sec(t['decode_rns_median_s'])} | "
                         f"{_sec(t['decode_viterbi_median_s'])} | {_sec(t['latent_median_s'])} "
                         f"| {_f(t['rns_iterations_mean'], 1)} | {ps} |")
    else:
        lines.append("GPSL1 was not run.")
    lines.append("")

    # Figure 3
    lines += ["## Figure 3: accuracy with missing training labels", ""]
    if report["missing_labels"]:
        lines += ["Token accuracy (%) on the test sentences, mean ± std over the partitions "
                  "named per data set (the first N partitions of Table 1), as a "
                  "fraction of the training labels is hidden (uniformly at random per token, "
                  "nested sets; hidden labels are `None` and marginalised by GPSL). Fraction 0 "
                  "= the Table 1 runs. CRFsuite is trained on the sentences left complete "
                  "(their mean number in brackets; – = none left). The paper's Figure 3 gives "
                  "no numbers (its plots are not in the source). Plot: `missing_labels.html`.",
                  ""]
        for d, ml in report["missing_labels"].items():
            names = list(ml["methods"])
            head = _figure3_title(f"**{d}**", ml)
            if ml.get("table1_max_abs_diff") is not None:
                head += (f"; run apart (`{ml['command']}`), its Table 1 losses differ from the "
                         f"main run's by at most {ml['table1_max_abs_diff']:.2f} points")
            lines += [head, "", "| missing | " + " | ".join(names) + " |",
                      "|---:|" + "---:|" * len(names)]
            for i, f in enumerate(ml["fractions"]):
                cells = []
                for m in names:
                    mm = ml["methods"][m]
                    v = mm["accuracy_mean"][i]
                    s = "–" if v is None else f"{v:.2f} ± {mm['accuracy_std'][i]:.2f}"
                    if m == CRF_COMPLETE and i > 0:
                        s += f" ({_f(ml['n_complete_mean'][i], 1)})"
                    cells.append(s)
                lines.append(f"| {f:.2f} | " + " | ".join(cells) + " |")
            lines.append("")
    else:
        lines += ["Not run.", ""]

    # calibration
    lines += ["## Calibration of the per-token marginals (beyond the paper)", ""]
    if report["calibration"]:
        lines += [f"Confidence = the largest marginal of a token, correct = its argmax is the "
                  f"gold label; ECE over {N_BINS} equal-width bins, per partition (mean ± std); "
                  "NLL and Brier over all labels of the data set. GPSL: RNS of Algorithm 2; "
                  "CRFsuite: forward-backward marginals; LogReg: predict_proba. Reliability "
                  "diagram: `calibration.html`.", "",
                  "| data set | method | ECE | NLL | Brier | mean confidence | accuracy |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for d, cal in report["calibration"].items():
            for m, c in cal.items():
                lines.append(f"| {d} | {m} | {_f(c['ece_mean'], 4)} ± {_f(c['ece_std'], 4)} | "
                             f"{_f(c['nll_mean'], 3)} | {_f(c['brier_mean'], 3)} | "
                             f"{_f(c['mean_confidence'], 3)} | {_f(c['accuracy'], 3)} |")
    else:
        lines.append("No method with marginals was run.")
    lines.append("")

    # exact decoding
    lines += ["## Exact pseudo-likelihood decoding for GPSL2 (beyond the paper)", ""]
    if report["exact_decoding"]:
        lines += ["The labelling maximising the product of GPSL2's pseudo-likelihood factors "
                  "prod_l softmax_q(b[l,q] + g₋₁[y_{l-1},q] + g₊₁[y_{l+1},q])[y_l], with b the "
                  "local score Algorithm 2 uses (the means m by default) and g = m_S + v_S/2, "
                  "found exactly by a Viterbi over label pairs "
                  "(O(L J³)), against Algorithm 2's per-token argmax. t > 0: the exact "
                  "maximiser's loss is higher. Log-PL gain: log PL(exact) − log PL(Algorithm 2) "
                  "per sentence (≥ 0 by construction).", "",
                  "| data set | loss Alg. 2 | loss exact | t | sentences differing | tokens "
                  "differing | mean log-PL gain | decode exact (s) | decode Alg. 2 (s) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for d, e in report["exact_decoding"].items():
            lines.append(f"| {d} | {_f(e['loss_rns_mean'])} | {_f(e['loss_exact_mean'])} | "
                         f"{_f(e['t_exact_vs_rns'])} | "
                         f"{_f(100 * e['frac_sentences_differ'], 1, '%')} | "
                         f"{_f(100 * e['frac_tokens_differ'], 2, '%')} | "
                         f"{_f(e['mean_log_pl_gain'], 3)} | {_sec(e['decode_exact_median_s'])} "
                         f"| {_sec(e['decode_rns_median_s'])} |")
    else:
        lines.append("GPSL2 was not run.")
    lines.append("")

    # notes
    notes = []
    for d in ds:
        for m, r in report["results"][d].items():
            if m not in GPSL_OFFSETS:
                continue
            it = [v for v in r.get("n_iter") or [] if v is not None]
            capped = sum(v >= cfg["max_iter"] for v in it)
            if capped:
                notes.append(f"{d} {m}: {capped}/{len(it)} fits stopped at max_iter "
                             f"{cfg['max_iter']} (not converged to tol "
                             f"{report['settings']['gpsl'].get('tol')}).")
            rit = [v for v in r.get("rns_iterations") or [] if v is not None]
            if rit and max(rit) >= 100:
                notes.append(f"{d} {m}: Algorithm 2 hit its iteration cap (100) on "
                             f"{sum(v >= 100 for v in rit)}/{len(rit)} test sets.")
    notes += above_paper_notes(report)
    for e in report["errors"]:
        notes.append(f"ERROR: {e}")
    if notes:
        lines += ["## Notes", ""] + [f"* {n}" for n in notes] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")


def _figure3_title(name: str, ml: dict) -> str:
    """``"basenp (2 partitions)"``: a data set's Figure 3 panel with its number of partitions
    (counted from the accuracy columns for reports written before ``n_partitions``)."""
    n = ml.get("n_partitions") or len(next(iter(ml["methods"].values()))["accuracy"][0])
    return f"{name} ({n} partition{'s' if n != 1 else ''})"


def above_paper_notes(report: dict) -> list[str]:
    """One note per GPSL model whose mean loss is above the paper's: by how much, and how
    that compares with the sampling error of the two means (different random partitions:
    standard error sd/sqrt(n) of ours, the paper's sd/sqrt(10)) and with the gap to the CRF
    peer in each source."""
    notes = []
    paper_crf = PAPER_TABLE1.get("CRF", {})
    for d, res in report["results"].items():
        crf = res.get("CRFsuite", {}).get("loss_mean")
        for m, r in res.items():
            if m not in GPSL_OFFSETS or r.get("loss_mean") is None:
                continue
            pub = PAPER_TABLE1.get(m, {}).get(d)
            if not pub or r["loss_mean"] <= pub[0]:
                continue
            losses = [v for v in r["losses"] if v is not None]
            se_ours = (r["loss_std"] or 0.0) / math.sqrt(len(losses))
            se_paper = pub[1] / math.sqrt(10)
            z = (r["loss_mean"] - pub[0]) / math.hypot(se_ours, se_paper)
            text = (f"{d} {m}: {r['loss_mean'] - pub[0]:+.2f} points above the paper "
                    f"({r['loss_mean']:.2f} against {pub[0]:.2f}); standard errors of the two "
                    f"means {se_ours:.2f} (ours, {len(losses)} partitions) and {se_paper:.2f} "
                    f"(the paper's sd {pub[1]:.2f} over 10 partitions), so the difference is "
                    f"{z:.1f} combined standard errors")
            if crf is not None and d in paper_crf:
                text += (f"; against the CRF peer ours is {r['loss_mean'] - crf:+.2f} "
                         f"(CRFsuite), the paper's {pub[0] - paper_crf[d][0]:+.2f} (its CRF)")
            notes.append(text + ".")
    return notes


def _n_features(results: dict) -> list:
    """GPSL's feature counts (template strings kept after ``min_freq``) per partition."""
    for m in GPSL_OFFSETS:
        if m in results:
            return [v for v in results[m].get("n_features") or [] if v is not None]
    return []


def _grid(n):
    cols = 1 if n == 1 else 2
    return math.ceil(n / cols), cols


def write_missing_html(report: dict, path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ml = report["missing_labels"]
    if not ml:
        return
    names = list(ml)
    rows, cols = _grid(len(names))
    fig = make_subplots(rows=rows, cols=cols,
                        subplot_titles=[_figure3_title(d, ml[d]) for d in names])
    colours = {"GPSL1": "#1f77b4", "GPSL2": "#ff7f0e", "GPSL4": "#2ca02c", CRF_COMPLETE: "#444"}
    for k, d in enumerate(names):
        r, c = divmod(k, cols)
        for m, mm in ml[d]["methods"].items():
            x = ml[d]["fractions"]
            fig.add_trace(go.Scatter(
                x=x, y=mm["accuracy_mean"],
                error_y={"type": "data", "array": [v or 0 for v in mm["accuracy_std"]]},
                mode="lines+markers", name=m, legendgroup=m, showlegend=k == 0,
                line={"color": colours.get(m), "dash": "dash" if m == CRF_COMPLETE else None}),
                row=r + 1, col=c + 1)
        fig.update_xaxes(title_text="fraction of training labels missing", row=r + 1, col=c + 1)
        fig.update_yaxes(title_text="test accuracy (%)", row=r + 1, col=c + 1)
    fig.update_layout(title="GPSL with missing training labels (paper Figure 3)",
                      template="plotly_white", height=420 * rows)
    fig.write_html(str(path), include_plotlyjs="cdn")


def write_calibration_html(report: dict, path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    cal = report["calibration"]
    if not cal:
        return
    names = list(cal)
    rows, cols = _grid(len(names))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names)
    for k, d in enumerate(names):
        r, c = divmod(k, cols)
        fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration",
                                 line={"color": "#aaa", "dash": "dot"}, showlegend=k == 0,
                                 legendgroup="diag"), row=r + 1, col=c + 1)
        for m, cm in cal[d].items():
            pts = [b for b in cm["reliability"] if b["count"]]
            fig.add_trace(go.Scatter(
                x=[b["mean_confidence"] for b in pts], y=[b["accuracy"] for b in pts],
                mode="lines+markers", name=m, legendgroup=m, showlegend=k == 0,
                text=[f"{b['count']} tokens" for b in pts],
                hovertemplate="confidence %{x:.3f}<br>accuracy %{y:.3f}<br>%{text}",
                visible=True if m in ("GPSL2", "CRFsuite") else "legendonly"),
                row=r + 1, col=c + 1)
        fig.update_xaxes(title_text="mean confidence", range=[0, 1], row=r + 1, col=c + 1)
        fig.update_yaxes(title_text="accuracy", range=[0, 1], row=r + 1, col=c + 1)
    fig.update_layout(title="Reliability of per-token marginals (test partitions pooled)",
                      template="plotly_white", height=420 * rows)
    fig.write_html(str(path), include_plotlyjs="cdn")


def write_outputs(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "paper.json").write_text(json.dumps(report, indent=1, allow_nan=False),
                                    encoding="utf-8")
    write_markdown(report, out / "paper.md")
    write_missing_html(report, out / "missing_labels.html")
    write_calibration_html(report, out / "calibration.html")


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


# --------------------------------------------------------------------------- driver


def run(cfg: Config, command: str = "") -> dict:
    """Run the benchmark, writing the outputs after every partition; returns the report."""
    def log(msg):
        if cfg.verbose:
            print(msg, file=sys.stderr, flush=True)

    unknown = [m for m in cfg.methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}")
    check_data(Path(cfg.data_dir), cfg.datasets)
    meta = {"command": command, "date": now_iso(), "machine": machine_info(),
            "git": git_commit()}
    out = Path(cfg.out_dir)
    t_start = time.perf_counter()
    errors: list[str] = []
    done: dict = {}
    for name in cfg.datasets:
        data = load_pooled(Path(cfg.data_dir), name)
        n_tr, n_te = cfg.sizes[name]
        parts = []
        for p, (tr, te) in enumerate(partitions(len(data), n_tr, n_te, cfg.n_partitions,
                                                cfg.seed, name)):
            log(f"[{name} p{p}] {n_tr}/{n_te} sentences, {len(data.labels)} labels pooled")
            parts.append(run_partition(cfg, data, p, tr, te, log, errors))
            done[name] = summarise_dataset(cfg, name, data, parts)
            meta["total_seconds"] = time.perf_counter() - t_start
            report = build_report(cfg, meta, done, complete=False, errors=errors)
            write_outputs(report, out)
    meta["total_seconds"] = time.perf_counter() - t_start
    report = build_report(cfg, meta, done, complete=True, errors=errors)
    write_outputs(report, out)
    return report


def _list(values) -> list[str]:
    return [v for item in values or [] for v in str(item).replace(",", " ").split() if v]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.paper",
        description="Reproduce the GPSL paper's section 6 (Tables 1-3, Figure 3) plus "
                    "calibration and exact-decoding checks on the CRF++ data sets.")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK_PARTITIONS} partitions of seg and chunking (25/25), fractions "
                        f"{' '.join(map(str, QUICK_FRACTIONS))}, GPSL max_iter {QUICK_MAX_ITER}")
    p.add_argument("--datasets", nargs="+", metavar="NAME",
                   help=f"data sets (default: {' '.join(DATASETS)})")
    p.add_argument("--partitions", type=int, metavar="N", help="random partitions (default 10)")
    p.add_argument("--methods", nargs="+", metavar="NAME",
                   help=f"methods (default: {' '.join(DEFAULT_METHODS)})")
    p.add_argument("--missing-fractions", nargs="*", type=float, metavar="F",
                   help="fractions of training labels hidden for Figure 3 (default "
                        f"{' '.join(map(str, DEFAULT_FRACTIONS))}; none = skip)")
    p.add_argument("--missing-partitions", type=int, metavar="N",
                   help="run Figure 3 on the first N partitions only (default: all)")
    p.add_argument("--out", default=str(RESULTS_DIR), help="output folder (bench/results)")
    p.add_argument("--merge", nargs="+", metavar="PAPER_JSON",
                   help="combine the paper.json of runs on different data sets into one "
                        "report in --out, then stop")
    p.add_argument("--figure3", nargs="+", metavar="PAPER_JSON",
                   help="with --merge: take Figure 3 from these runs (same seed, their "
                        "partitions the first of the main run's)")
    p.add_argument("--seed", type=int, default=0, help="partition seed (default 0)")
    p.add_argument("--max-iter", type=int, help="GPSL max_iter (default 100; quick "
                                                f"{QUICK_MAX_ITER})")
    p.add_argument("--learn-hyper", action="store_true",
                   help="learn GPSL's kernel hyper-parameters (Algorithm 1's EM step; default: "
                        "the library default, off)")
    p.add_argument("--inference", choices=("full", "sparse"), default="full",
                   help="GPSL's inference mode (default full: Table 1 is the full GP's; "
                        "sparse: the scalable mode, inference='auto''s choice)")
    p.add_argument("--data-dir", default=str(DATA_DIR), help=argparse.SUPPRESS)
    p.add_argument("--sizes", help=argparse.SUPPRESS)  # e.g. "4/3" or "seg=4/3"
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    quick = args.quick
    datasets = _list(args.datasets) or list(QUICK_DATASETS if quick else DATASETS)
    bad = [d for d in datasets if d not in DATASETS]
    if bad:
        raise ValueError(f"unknown data set {bad[0]!r}; choose from {', '.join(DATASETS)}")
    methods = _list(args.methods) or list(DEFAULT_METHODS)
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"unknown method {bad[0]!r}; choose from {', '.join(METHODS)}")
    if args.missing_fractions is None:
        fractions = list(QUICK_FRACTIONS if quick else DEFAULT_FRACTIONS)
    else:
        fractions = sorted(set(args.missing_fractions))
    if any(not 0.0 < f < 1.0 for f in fractions):
        raise ValueError("missing fractions must lie strictly between 0 and 1")
    sizes = dict(PAPER_SIZES)
    if quick:
        sizes.update(QUICK_SIZES)
    if args.sizes:
        sizes.update(parse_sizes(args.sizes, datasets))
    n_part = args.partitions if args.partitions is not None else (
        QUICK_PARTITIONS if quick else 10)
    if n_part < 1:
        raise ValueError("--partitions must be at least 1")
    max_iter = args.max_iter if args.max_iter is not None else (QUICK_MAX_ITER if quick else 100)
    if args.missing_partitions is not None and args.missing_partitions < 0:
        raise ValueError("--missing-partitions must be non-negative")
    return Config(datasets=datasets, methods=list(dict.fromkeys(methods)), fractions=fractions,
                  n_partitions=n_part, missing_partitions=args.missing_partitions,
                  seed=args.seed, max_iter=max_iter,
                  learn_hyper=True if args.learn_hyper else None, inference=args.inference,
                  sizes=sizes,
                  data_dir=args.data_dir, out_dir=args.out, quick=quick,
                  verbose=not args.quiet)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.figure3 and not args.merge:
        print("bench.paper: --figure3 needs --merge MAIN_JSON", file=sys.stderr)
        return 2
    if args.merge:
        try:
            report = merge_reports([json.loads(Path(f).read_text(encoding="utf-8"))
                                    for f in args.merge])
            if args.figure3:
                report = merge_figure3(report, [
                    json.loads(Path(f).read_text(encoding="utf-8")) for f in args.figure3])
        except (OSError, ValueError, KeyError) as exc:
            print(f"bench.paper: cannot merge: {exc}", file=sys.stderr)
            return 2
        write_outputs(report, Path(args.out))
        print(f"merged {len(args.merge)} runs into {Path(args.out) / 'paper.md'}")
        return 0
    try:
        cfg = config_from_args(args)
        report = run(cfg, command=shlex.join(["python", "-m", "bench.paper", *argv]))
    except DataMissing as exc:
        print(f"bench.paper: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"bench.paper: {exc}", file=sys.stderr)
        return 2
    out = Path(cfg.out_dir)
    for d, res in report["results"].items():
        row = ", ".join(f"{m} {r['loss_mean']:.2f}%" for m, r in res.items()
                        if r["loss_mean"] is not None)
        print(f"{d}: {row}")
    if report["errors"]:
        print(f"{len(report['errors'])} error(s); see the notes in paper.md", file=sys.stderr)
    print(f"wrote {out / 'paper.md'}, paper.json, missing_labels.html, calibration.html")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
