"""``bench.paper``'s fits: GPSL and the peers on one partition, the decoding checks (Table 3,
exact pseudo-likelihood decoding), the calibration records and Figure 3's missing-label runs."""

from __future__ import annotations

import sys
import time
import traceback

import numpy as np

from bench.common import hide_labels, label_space, partition_seed
from bench.paper_setup import (
    CRF_COMPLETE,
    GPSL_OFFSETS,
    MARGINAL_METHODS,
    N_BINS,
    PAPER_RNS,
    Config,
)
from bench.peers import fit_peer
from gpsl.predict import pl_exact_decode, pl_log_score

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
