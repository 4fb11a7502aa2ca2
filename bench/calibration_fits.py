"""``bench.calibration``'s fits: GPSL's and CRFsuite's on all training sentences and on K-1 folds
(the inputs of every calibration variant), and their cache on disk (``.npz``, no pickle)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from bench.common import jsonable

#: the GPSL models calibrated (the paper's GPSL1, GPSL2, GPSL4)
GPSL_OFFSETS = {"GPSL1": (-1,), "GPSL2": (-1, 1), "GPSL4": (-2, -1, 1, 2)}


# --------------------------------------------------------------------------- fitting


def _gold_index(y, classes) -> np.ndarray:
    pos = {c: i for i, c in enumerate(classes)}
    return np.array([pos.get(v, -2) if v is not None else -1 for lab in y for v in lab],
                    dtype=np.int64)


def _latent(model, X) -> dict:
    mean, var, lengths = model._latent(X, with_variance=True)
    return {"mean": mean, "var": var, "lengths": np.asarray(lengths, dtype=np.int64)}


def fit_gpsl_parts(name, template, Xtr, ytr, Xte, folds: int, seed: int) -> dict:
    """The fit on all training sentences and the K fold fits: predictive moments of the test
    sentences and of each held-out fold, and the pair functions of each model."""
    from gpsl.calibration import fold_indices
    from gpsl.model import GPSL

    t0 = time.perf_counter()
    model = GPSL(offsets=GPSL_OFFSETS[name], kernel="linear", template=template, max_iter=100)
    model.fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    out = {"classes": list(model.classes_), "fit_s": fit_s,
           "rns": model.rns_settings(), "offsets": list(model.offsets_),
           "test": {**_latent(model, Xte), "m_S": model.state_.m_S, "v_S": model.state_.v_S}}
    parts = fold_indices(len(Xtr), folds, seed)
    out["folds"] = []
    t0 = time.perf_counter()
    for held in parts:
        held_set = set(held.tolist())
        tr = [i for i in range(len(Xtr)) if i not in held_set]
        fm = GPSL(offsets=GPSL_OFFSETS[name], kernel="linear", template=template, max_iter=100)
        fm.fit([Xtr[i] for i in tr], [ytr[i] for i in tr], classes=model.classes_)
        # the fold model's inputs of Algorithm 2 on its held-out fold (the calibration data)
        # and on the test sentences (for the cross-fitted ensemble of the fold models)
        on_test = _latent(fm, Xte)
        out["folds"].append({**_latent(fm, [Xtr[i] for i in held]), "m_S": fm.state_.m_S,
                             "v_S": fm.state_.v_S, "held": held,
                             "test_mean": on_test["mean"], "test_var": on_test["var"]})
    out["folds_s"] = time.perf_counter() - t0
    return out


def fit_crf_parts(template, Xtr, ytr, Xte, classes, folds: int, seed: int) -> dict:
    """CRFsuite (bench.paper's settings) on all training sentences and on K-1 folds."""
    from bench.peers import crfsuite_marginals, fit_crfsuite, template_features
    from gpsl.calibration import fold_indices

    Ftr = template_features(template, Xtr)
    Fte = template_features(template, Xte)
    crf = fit_crfsuite(Ftr, ytr).crf
    test = crfsuite_marginals(crf, Fte, classes)
    oof = [None] * len(Xtr)
    fold_test = []
    for held in fold_indices(len(Xtr), folds, seed):
        held_set = set(held.tolist())
        tr = [i for i in range(len(Xtr)) if i not in held_set]
        c = fit_crfsuite([Ftr[i] for i in tr], [ytr[i] for i in tr]).crf
        for i, p in zip(held, crfsuite_marginals(c, [Ftr[i] for i in held], classes)):
            oof[i] = p
        fold_test.append(np.concatenate(crfsuite_marginals(c, Fte, classes)))
    return {"test": np.concatenate(test), "oof": np.concatenate(oof),
            "fold_test": np.stack(fold_test)}


def _save(path: Path, parts: dict) -> None:
    arrays = {}
    meta = {k: v for k, v in parts.items() if k not in ("test", "folds", "crf")}
    for k, v in parts["test"].items():
        arrays[f"test_{k}"] = v
    for f, fold in enumerate(parts["folds"]):
        for k, v in fold.items():
            arrays[f"fold{f}_{k}"] = v
    arrays["crf_test"] = parts["crf"]["test"]
    arrays["crf_oof"] = parts["crf"]["oof"]
    arrays["crf_fold_test"] = parts["crf"]["fold_test"]
    meta["n_folds"] = len(parts["folds"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, meta=np.array(json.dumps(jsonable(meta))), **arrays)
    tmp.replace(path)


def _load(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        test = {k[5:]: z[k] for k in z.files if k.startswith("test_")}
        folds = [{k[len(f"fold{f}_"):]: z[k] for k in z.files if k.startswith(f"fold{f}_")}
                 for f in range(meta["n_folds"])]
        crf = {"test": z["crf_test"], "oof": z["crf_oof"], "fold_test": z["crf_fold_test"]}
    return {**meta, "test": test, "folds": folds, "crf": crf}
