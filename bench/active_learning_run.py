"""One run of ``bench.active_learning``: the model, the query strategies' choice of tokens, the
revealed labels and the calibration folds, from the first labels to the last query."""

from __future__ import annotations

import time

import numpy as np

from gpsl import calibration
from gpsl.active import STRATEGIES, query
from gpsl.metrics import token_accuracy


def parse_strategy(spec: str) -> tuple[str, str]:
    """``"name[:aggregate]"`` -> ``(name, aggregate)``; the aggregate defaults to ``max``."""
    name, _, agg = spec.partition(":")
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    return name, agg or "max"


# --------------------------------------------------------------------------- one run


def _make_model(template: str, max_iter: int, warm_start: bool, learn_hyper: bool = False):
    from gpsl.model import GPSL

    return GPSL(
        template=template, max_iter=max_iter, warm_start=warm_start, learn_hyper=learn_hyper
    )


def _revealed(labels, mask) -> list:
    """The gold labels where ``mask`` is True, ``None`` elsewhere."""
    return [lab if m else None for lab, m in zip(labels, mask)]


#: ``--calibrate auto``: the folds :func:`gpsl.calibration.calibration_folds` gives
AUTO_FOLDS = -1


def _folds(calibrate: int, n_sentences: int) -> int | None:
    """Folds to calibrate ``n_sentences`` on (``calibrate``: K, :data:`AUTO_FOLDS` or 0 =
    none); ``None`` when there are too few sentences."""
    from gpsl.calibration import calibration_folds

    if not calibrate:
        return None
    if calibrate == AUTO_FOLDS:
        return calibration_folds(n_sentences)
    return calibrate if n_sentences >= 2 * calibrate else None


def _folds_text(calibrate) -> str:
    return ("the app's folds (5, or 3 under 10 sentences)" if calibrate == AUTO_FOLDS
            else f"{calibrate} folds")


def run_strategy(
    spec: str,
    pool_X,
    pool_y,
    test_X,
    test_y,
    template: str,
    init: np.ndarray,
    token_batch: int,
    sentence_batch: int,
    rounds: int,
    max_iter: int,
    seed: int,
    log=None,
    learn_hyper: bool = False,
    cold_check: bool = False,
    calibrate: int = 0,
) -> dict:
    """Simulate one strategy for one seed; returns the curve of that run.

    With ``cold_check`` every round's data is also fitted from scratch (``warm_start=False``)
    and the curve gets ``cold_fit_seconds`` and ``cold_accuracy`` beside the warm ones. With
    ``calibrate = K`` every round's model is calibrated by K folds of the sentences with
    revealed labels (:func:`gpsl.calibration.calibrate`, as the app does without held-out gold)
    before it is scored and queried: the queries and the test labels then use the calibrated
    marginals.
    """
    name, aggregate = parse_strategy(spec)
    level = STRATEGIES[name].level
    model = _make_model(template, max_iter, warm_start=True, learn_hyper=learn_hyper)
    labeled = [np.zeros(len(s), dtype=bool) for s in pool_X]
    for i in init:
        labeled[i][:] = True
    pool_tokens = sum(len(s) for s in pool_X)
    curve: dict[str, list] = {
        k: [] for k in ("labeled_tokens", "fraction", "accuracy", "fit_seconds", "n_iter")
    }
    curve["query_seconds"] = []
    if cold_check:
        curve["cold_fit_seconds"], curve["cold_accuracy"] = [], []
    for r in range(rounds + 1):
        train = [i for i, m in enumerate(labeled) if m.any()]
        X = [pool_X[i] for i in train]
        y = [_revealed(pool_y[i], labeled[i]) for i in train]
        t0 = time.perf_counter()
        model.fit(X, y)
        folds = _folds(calibrate, len(X))
        if folds:
            calibration.calibrate(model, X, y, folds=folds)
        fit_s = time.perf_counter() - t0
        acc = token_accuracy(test_y, model.predict(test_X))
        if cold_check:
            cold = _make_model(template, max_iter, warm_start=False, learn_hyper=learn_hyper)
            t0 = time.perf_counter()
            cold.fit(X, y)
            curve["cold_fit_seconds"].append(time.perf_counter() - t0)
            curve["cold_accuracy"].append(float(token_accuracy(test_y, cold.predict(test_X))))
        n_lab = int(sum(m.sum() for m in labeled))
        curve["labeled_tokens"].append(n_lab)
        curve["fraction"].append(n_lab / pool_tokens)
        curve["accuracy"].append(float(acc))
        curve["fit_seconds"].append(fit_s)
        curve["n_iter"].append(int(getattr(model, "n_iter_", 0)))
        if log:
            log(
                f"  {spec:<32} seed {seed} round {r:2d}: {n_lab:5d} tokens "
                f"({100 * n_lab / pool_tokens:5.1f}%) acc {acc:.4f} fit {fit_s:6.2f}s"
            )
        if r == rounds or all(m.all() for m in labeled):
            break
        t0 = time.perf_counter()
        n_items = query_and_reveal(model, name, aggregate, pool_X, pool_y, labeled,
                                   token_batch if level == "token" else sentence_batch,
                                   seed=seed * 1000 + r)
        curve["query_seconds"].append(time.perf_counter() - t0)
        if not n_items:
            break
    return curve


def query_and_reveal(model, strategy: str, aggregate: str, pool_X, pool_y, labeled,
                     batch_size: int, seed: int) -> int:
    """One query round: ``strategy`` picks ``batch_size`` items from ``model``'s marginals on
    the pool (revealed tokens clamped), and their gold labels are revealed in ``labeled``
    (in place; a sentence item reveals the whole sentence). Returns the number of items."""
    if STRATEGIES[strategy].score == "random":
        marg = [np.ones((len(s), 1)) for s in pool_X]  # scores are not used
    else:
        known = [_revealed(ys, ms) for ys, ms in zip(pool_y, labeled, strict=True)]
        marg = model.predict_marginals(pool_X, y=known)
    items = query(marg, labeled, strategy=strategy, batch_size=batch_size,
                  aggregate=aggregate, seed=seed)
    for it in items:
        if it.token is None:
            labeled[it.sentence][:] = True
        else:
            labeled[it.sentence][it.token] = True
    return len(items)
