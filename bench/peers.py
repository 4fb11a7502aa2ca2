"""The peers every benchmark runs beside GPSL, written once: CRFsuite and crowd-kit.

* CRFsuite (sklearn-crfsuite over python-crfsuite) on a CRF++ template's feature strings
  (:func:`template_features`), with one of three settings: :data:`CRF_PARAMS` (CRF++'s
  objective, ``bench.paper`` and the modules that quote it), :data:`CRF_SCALE_PARAMS`
  (``bench.scale``'s, those of issue 36's figures) and :data:`CRF_NER_PARAMS`
  (sklearn-crfsuite's NER tutorial, ``bench.crowd_real``). :func:`fit_crfsuite` is its fit,
  :func:`crfsuite_marginals` its marginals, :func:`crfsuite_model` a saved model's tagger;
  :func:`fit_peer` runs ``bench.paper``'s peers (the CRFsuite trainers and a per-token
  logistic regression) and predicts.
* crowd-kit's aggregators (:func:`crowdkit_aggregator`) on a table of votes
  (:func:`votes_frame`).

The peers' packages are imported inside the functions, before any clock starts (importing
sklearn-crfsuite takes about a second): ``python -m bench.tagging --crf-tag`` and the tests of
``bench.paper`` import this module without them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

#: CRF++'s default regularisation (``crf_learn -a CRF-L2 -c 1.0``).
CRFPP_C = 1.0
#: CRF++ minimises  -sum log p(y|x) + ||w||^2 / (2C)  (encoder.cpp: obj += w^2 / (2.0 * C));
#: CRFsuite's L-BFGS minimises  -sum log p(y|x) + c2 ||w||^2  (train_lbfgs.c: f += c2 * norm).
#: The two objectives coincide for c2 = 1 / (2C) = 0.5 and c1 = 0. CRF++ also makes a weight for
#: every (feature string, label) and every label pair, which is CRFsuite's all_possible_states
#: and all_possible_transitions. CRF++ iterates to a relative objective change of 1e-4 (its
#: 10000-iteration cap is never the binding one on these data); we cap L-BFGS at 500 iterations
#: with CRFsuite's own stopping rule (delta 1e-5 over 10 iterations).
CRF_PARAMS = {
    "algorithm": "lbfgs",
    "c1": 0.0,
    "c2": 1.0 / (2.0 * CRFPP_C),
    "max_iterations": 500,
    "all_possible_states": True,
    "all_possible_transitions": True,
}
#: ``bench.scale``'s settings (issue 36's figures; also ``bench.partial``, ``bench.cli_cost``,
#: ``bench.tagging``): :data:`CRF_PARAMS` with weights only for the (feature, label) pairs seen.
CRF_SCALE_PARAMS = {"algorithm": "lbfgs", "c1": 0.0, "c2": 0.5, "max_iterations": 500,
                    "all_possible_transitions": True}
#: sklearn-crfsuite's NER tutorial (``bench.crowd_real``, ``bench.crowd_lexicon``).
CRF_NER_PARAMS = {"algorithm": "lbfgs", "c1": 0.1, "c2": 0.1, "max_iterations": 100,
                  "all_possible_transitions": True}
#: ``bench.paper``'s peers: the CRFsuite trainers and a per-token logistic regression.
PEER_PARAMS = {
    "CRFsuite": CRF_PARAMS,
    "CRFsuite-PA": {
        "algorithm": "pa",
        "pa_type": 1,
        "c": 1.0,
        "max_iterations": 100,
        "all_possible_states": True,
        "all_possible_transitions": True,
    },
    "CRFsuite-AP": {
        "algorithm": "ap",
        "max_iterations": 100,
        "all_possible_states": True,
        "all_possible_transitions": True,
    },
    # scikit-learn minimises C * sum(log loss) + ||w||^2 / 2, i.e. CRF++'s objective per token
    "LogReg": {"C": CRFPP_C, "max_iter": 2000},
}


# --------------------------------------------------------------------------- CRFsuite


def template_features(template, X) -> list[list[dict]]:
    """The CRF++ template expanded per token as ``{feature string: 1.0}`` dicts.

    Same strings as :meth:`gpsl.features.Template.expand` (computed sentence-wise with
    :meth:`~gpsl.features.Template.expand_sentence`, which is the same expansion, faster).
    """
    out = []
    for s in X:
        cols = template.expand_sentence(s)
        out.append([{c[i]: 1.0 for c in cols} for i in range(len(s))])
    return out


@dataclass
class CrfFit:
    """A fitted CRFsuite model and the wall and CPU seconds of its fit."""

    crf: object
    wall_s: float
    cpu_s: float


def fit_crfsuite(X, y, template=None, params: dict = CRF_PARAMS, **kw) -> CrfFit:
    """CRFsuite (sklearn-crfsuite's ``CRF(**params, **kw)``) fitted on labels ``y``.

    ``X``: token lists whose features are ``template``'s (:func:`template_features`), or,
    with ``template=None``, the feature dicts themselves. The seconds are those of the feature
    expansion and the fit; the import and the trainer's set-up stay out.
    """
    import sklearn_crfsuite

    crf = sklearn_crfsuite.CRF(**params, **kw)
    t0, c0 = time.perf_counter(), time.process_time()
    F = X if template is None else template_features(template, X)
    crf.fit(F, [list(lab) for lab in y])
    return CrfFit(crf, time.perf_counter() - t0, time.process_time() - c0)


def crfsuite_model(model_file: str):
    """A CRFsuite model saved by a fit (``model_filename=``), opened with python-crfsuite's
    ``Tagger`` (``tag(feature dicts)`` -> labels) without sklearn-crfsuite."""
    import pycrfsuite

    tagger = pycrfsuite.Tagger()
    tagger.open(model_file)
    return tagger


def crfsuite_marginals(crf, F, classes) -> list[np.ndarray]:
    """CRFsuite's forward-backward marginals of feature dicts ``F``, one ``(n, len(classes))``
    array per sentence, columns in the order of ``classes`` (0 for a label it never saw)."""
    rows = crf.predict_marginals(F)
    return [np.array([[tok.get(c, 0.0) for c in classes] for tok in s], dtype=float).reshape(
        len(s), len(classes)) for s in rows]


def _split(flat: np.ndarray, lengths) -> list[np.ndarray]:
    return np.split(flat, np.cumsum(lengths)[:-1])


def fit_peer(name: str, template, Xtr, ytr, Xte, want_marginals: bool = True):
    """Fit a peer of :data:`PEER_PARAMS` on complete labels and predict ``Xte``;
    ``(record, (marginals, classes) or None, labels)``.

    Times include the template expansion (GPSL's ``fit`` does its own feature extraction too).
    """
    params = PEER_PARAMS[name]
    if name == "LogReg":
        from sklearn.feature_extraction import DictVectorizer
        from sklearn.linear_model import LogisticRegression

        t0 = time.perf_counter()  # imports above stay out of the timing
        Ftr = template_features(template, Xtr)
        vec = DictVectorizer()
        A = vec.fit_transform([f for s in Ftr for f in s])
        clf = LogisticRegression(**params)
        clf.fit(A, [v for lab in ytr for v in lab])
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        Fte = template_features(template, Xte)
        P = clf.predict_proba(vec.transform([f for s in Fte for f in s]))
        classes = [str(c) for c in clf.classes_]
        lengths = [len(s) for s in Xte]
        marg = _split(P, lengths)
        pred = [[classes[i] for i in p.argmax(axis=1)] for p in marg]
        predict_s = time.perf_counter() - t0
        return {"fit_s": fit_s, "predict_s": predict_s}, (marg, classes), pred
    fit = fit_crfsuite(Xtr, ytr, template, params)
    crf = fit.crf
    t0 = time.perf_counter()
    Fte = template_features(template, Xte)
    pred = [list(p) for p in crf.predict(Fte)]
    predict_s = time.perf_counter() - t0
    rec = {"fit_s": fit.wall_s, "predict_s": predict_s}
    try:
        rec["n_iter"] = len(crf.training_log_.iterations)
    except Exception:  # noqa: BLE001 - the training log is optional
        pass
    marg = None
    if want_marginals:
        classes = [str(c) for c in crf.classes_]
        marg = (crfsuite_marginals(crf, Fte, classes), classes)
    return rec, marg, pred


# --------------------------------------------------------------------------- crowd-kit

def crowdkit_aggregator(kind: str, seed: int = 0):
    """An unfitted crowd-kit aggregator: majority vote, Dawid-Skene (100 iterations), GLAD
    (100), MACE (50, ``random_state=seed``) or one-coin Dawid-Skene (100)."""
    from crowdkit.aggregation import GLAD, MACE, DawidSkene, MajorityVote, OneCoinDawidSkene

    makers = {"MV": MajorityVote,
              "DS": lambda: DawidSkene(n_iter=100),
              "GLAD": lambda: GLAD(n_iter=100, silent=True),
              "MACE": lambda: MACE(n_iter=50, random_state=seed),
              "one-coin": lambda: OneCoinDawidSkene(n_iter=100)}
    if kind not in makers:
        raise ValueError(kind)
    return makers[kind]()


def votes_frame(task, worker, label):
    """crowd-kit's input: one row per vote (``task``, ``worker``, ``label``)."""
    import pandas as pd

    return pd.DataFrame({"task": task, "worker": worker, "label": label})
