r"""Which calibrators may change the model's decisions: the Hamming loss of the left-out
predictions (:meth:`gpsl.calibration.Calibrator.select_all`) beside the uncalibrated model's.

**Why calibration can change decisions at all.** A temperature divides the logits and never
moves a token's argmax (scikit-learn's ``CalibratedClassifierCV`` with one sigmoid for two
classes, Guo et al.'s temperature scaling). The other candidates can: a vector scaling shifts
each label's logit, the structured temperature re-weighs the pair scores inside Algorithm 2's
fixed point, and a stacked ensemble mixes candidates. The model labels a token with the argmax
of the marginals it reports (:meth:`gpsl.model.GPSL.predict`, ``decoder="rns"``), so a
calibrated model's labels are the calibrated marginals' argmax. That coherence is kept: a
label is never printed with a probability below another label's (``gpsl test --marginals``).

**Why that needs a check.** The candidates are fitted and chosen by the cross-validated NLL
(:meth:`~gpsl.calibration.Calibrator.select`), a proper score of the whole distribution. A
lower NLL does not imply a lower Hamming loss: a candidate can spread probability better over
the tokens the model gets right and still move some argmaxes the wrong way. On basenp
(150 training sentences, ``python -m bench.cli_calibration``, commit 88cfd67) the chosen
ensemble/structured calibrators lowered the test ECE from 0.029 to 0.006 but raised the Hamming
loss from 4.78% to 4.91%; on seg and JapaneseNE the same kinds lowered both.

**The rule** (:func:`admissible`). Bayes' decision for the Hamming loss is the argmax of the
true marginals; which of two sets of marginals is closer to them *in that respect* is what
their errors on held-out labels tell. The left-out predictions the selection already makes
(each candidate fitted without the group it predicts) give them for every candidate, and
Algorithm 2's mean-only marginals of the same tokens give the uncalibrated model's (the
model's default marginals). A candidate changes some decisions: it ``fixed`` the tokens where
the uncalibrated argmax was wrong and its own is right, and ``broke`` the opposite ones
(:func:`changed`). Under the hypothesis that the change does not lower the error rate, a
changed token is as likely fixed as broken, so ``fixed - broken`` has standard deviation
``sqrt(fixed + broken)`` (McNemar's test of paired decisions). A candidate may change the
decisions only when

.. math::

   \text{fixed} - \text{broken} \ge z\,\sqrt{\text{fixed} + \text{broken}},
   \qquad z = 1.645 \ (\text{one-sided } 5\%,\ :data:`DECISION_Z`),

i.e. when the held-out labels show, beyond chance, that it fixes more decisions than it breaks.
A candidate that changes no decision (the mean-only temperature: it has the uncalibrated
argmax) is always admissible, so calibration can always improve the probabilities. The NLL
(or the chosen criterion) then picks among the admissible candidates; the stacked ensemble
mixes only admissible ones and is checked like the others (a mixture may still move an argmax).
When the candidate with the lowest cross-validated NLL is not admissible, it competes once more
with the decisions kept (:func:`keep_decisions`): its marginals where its argmax agrees with
the uncalibrated one, the mean-only temperature's elsewhere; the probabilities it is best at,
without the decisions it was not shown to improve.

Why a test and not "no more errors than the uncalibrated model": on basenp the structured and
ensemble calibrators fixed and broke about as many left-out decisions as each other (e.g.
16 against 16, 21 against 20 of about 3,600 tokens: ``python -m bench.cli_calibration``'s
partitions), so "no more errors" admitted them, and on the test split the same coin-flip
changes cost 2-13 tokens per partition. On JapaneseNE they fixed 3-21 and broke 0-3 and
lowered the test loss on every partition; those pass. The level is the conventional one,
fixed before looking at any test split; it is a choice among a handful of candidates by one
more held-out figure, not a fit of anything to test data.

It follows ``CalibratedClassifierCV`` in labelling with the calibrated probabilities' argmax
(so a printed label never has a lower probability than another label), and temperature
scaling in never letting calibration cost accuracy it was not shown to buy.
"""

from __future__ import annotations

import numpy as np

#: the uncalibrated model's left-out figures in ``cv`` (:meth:`Calibrator.select_all`)
UNCALIBRATED = "uncalibrated"
#: one-sided 5% normal quantile: how far ``fixed - broken`` must exceed chance (module
#: docstring) for a calibrator to change the decisions
DECISION_Z = 1.645


def errors(P: np.ndarray, y: np.ndarray) -> int:
    """Tokens whose argmax of ``P`` (``(N, J)``) is not the gold index ``y`` (``(N,)``)."""
    P = np.asarray(P)
    return int((P.argmax(axis=1) != np.asarray(y)).sum()) if P.size else 0


def changed(P0: np.ndarray, P: np.ndarray, y: np.ndarray) -> dict:
    """The tokens whose decision ``P`` changes from ``P0``'s: ``fixed`` (``P0``'s argmax
    wrong, ``P``'s right) and ``broken`` (the other way round)."""
    a0, a = np.asarray(P0).argmax(axis=1), np.asarray(P).argmax(axis=1)
    y = np.asarray(y)
    return {"fixed": int(((a0 != y) & (a == y)).sum()),
            "broken": int(((a0 == y) & (a != y)).sum())}


def admissible(cv: dict, names, z: float | None = DECISION_Z) -> list:
    """The names among ``names`` allowed to change the decisions (module docstring): those
    whose left-out ``fixed``/``broken`` counts (``cv[name]``, :func:`changed` against the
    uncalibrated model's decisions) satisfy ``fixed - broken >= z sqrt(fixed + broken)``;
    a candidate that changes nothing always does. Without those figures (no
    cross-validation) or with ``z=None`` (no check: the rule before this one) every name;
    when none qualifies, those with the fewest errors."""
    names = list(names)
    if z is None:
        return names
    figs = [cv.get(n) or {} for n in names]
    if any(f.get("fixed") is None or f.get("broken") is None for f in figs):
        return names
    ok = [n for n, f in zip(names, figs)
          if f["fixed"] - f["broken"] >= z * np.sqrt(f["fixed"] + f["broken"])]
    if ok or not names:
        return ok
    fewest = min(f["errors"] for f in figs)
    return [n for n, f in zip(names, figs) if f["errors"] == fewest]


def kept_marginals(P: np.ndarray, F: np.ndarray) -> np.ndarray:
    """``P`` where its argmax is ``F``'s, ``F`` elsewhere (rows of ``(N, J)`` marginals):
    the marginals of a calibrator not allowed to change the decisions, with the decisions of
    ``F`` (a temperature of the uncalibrated marginals: the uncalibrated argmax) kept."""
    out = np.array(P, dtype=float, copy=True)
    moved = out.argmax(axis=1) != np.asarray(F).argmax(axis=1)
    out[moved] = np.asarray(F)[moved]
    return out


def keep_decisions(rich, fallback, *, source: str = ""):
    """The calibrator (``kind="kept"``) whose marginals are ``rich``'s on every token where
    its argmax is the uncalibrated model's and ``fallback``'s (the mean-only temperature,
    which has the uncalibrated argmax) on the others (:func:`kept_marginals`).

    For a candidate whose probabilities are the best by the cross-validated NLL but which was
    not shown to fix more decisions than it breaks (:func:`admissible`): it keeps the
    decisions and still gives the better probabilities wherever it agrees with them. Each
    token's reported marginals keep their argmax as its label. It changes no decision, so it
    is admissible, and it competes on the same left-out figures as the others. (Built as
    the members' class, :class:`~gpsl.calibration.Calibrator`: this module is imported by
    that one.)"""
    if rich.kind == "kept" or fallback.kind != "temperature" or fallback.method != "mean":
        raise ValueError("kept decisions need a calibrator and the mean-only temperature")
    J = fallback.w.size
    method = "probit" if rich.method == "probit" else "mean"
    return type(fallback)(method=method, kind="kept", temperature=1.0, w=np.ones(J),
                          c=np.zeros(J), n_tokens=max(rich.n_tokens, fallback.n_tokens),
                          source=source, members=[rich, fallback])


__all__ = ["UNCALIBRATED", "DECISION_Z", "errors", "changed", "admissible", "kept_marginals",
           "keep_decisions"]
