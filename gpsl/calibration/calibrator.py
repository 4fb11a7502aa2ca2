r"""The calibrator of per-token marginals: fitting, choosing and applying the scalings of
:mod:`gpsl.calibration.scores` (temperature and vector scaling, derived there) and the
structured ones below.

**Structured temperature** (``kind="structured"`` and ``"structured+vector"``; not in
the paper): :mod:`gpsl.calibration.structured`. **The step at the fixed point**
(``kind="step"`` and ``"step+vector"``, the default's): :mod:`gpsl.calibration.step`.

**Selection by cross-validated NLL.** The candidates are nested (a vector scaling contains its
temperature, the structured kind with vector scaling contains the structured kind), so the
lowest NLL *on the tokens they were fitted on* always favours the largest; with few labeled
tokens that is over-fitting. :meth:`Calibrator.select` therefore scores every candidate by its
NLL on calibration tokens it was not fitted on: leave one group out over the groups of
calibration data (the held-out folds of the K fold models; a held-out set is split into
:data:`SELECT_GROUPS` groups of sentences), summed over the groups; the candidate with the
lowest cross-validated NLL is then refitted on all the calibration tokens. Only candidates
allowed to change the model's decisions compete (:mod:`gpsl.calibration.decisions`: on the
same left-out predictions, a calibrator that moves argmaxes must fix significantly more of
them than it breaks; the mean-only temperature, which moves none, always may).

**Stacked ensemble** (``kind="ensemble"``; not in the paper). The candidates err differently: a
temperature of the mean-only marginals cannot move the argmax, one of the uncertainty-aware
marginals follows the posterior variances (which shrink as the data grows), the structured
kinds re-weigh the pair scores. Rather than keep one, the ensemble mixes their calibrated
marginals,

.. math::

   \tilde p_t = \sum_k \pi_k\, \tilde p^{(k)}_t, \qquad \pi_k \ge 0,\ \sum_k \pi_k = 1,

with the weights of **stacking** predictive distributions (Wolpert 1992; Yao, Vehtari, Simpson
and Gelman 2018): ``pi`` maximises the cross-validated log score
``(1/N) sum_t log sum_k pi_k q_tk`` where ``q_tk`` is the probability candidate ``k``, fitted
without the token's group, gave the token's gold label (the same left-out predictions the
selection below scores). The objective is concave in ``pi``; :func:`stacking_weights` solves it
by the EM iteration for mixture weights, ``pi_k <- (1/N) sum_t pi_k q_tk / sum_j pi_j q_tj``,
which never lowers it. A mixture of distributions is a distribution (rows still sum to one);
a one-hot weight is that candidate exactly. The weights are fitted on the fold models'
left-out predictions, so they cannot see that the model trained on all the folds is sharper
than the fold models the candidates were fitted on: on the smallest data set
(seg, 20 training sentences) equal weights gave a lower test ECE than stacked ones
(``python -m bench.calibration``, ``uniform ensemble`` beside ``stack ensemble``), on the others
not; the default stays with the weights the data chose. Members with a weight under
:data:`STACK_MIN_WEIGHT` are dropped and the rest renormalised.

Where the held-out data comes from is the caller's choice: a held-out gold set, or predictions of
models fitted on K-1 folds of the training sentences (:func:`gpsl.calibration.calibrate`), as
``sklearn.calibration.CalibratedClassifierCV`` does with ``ensemble=False``.

The :class:`Calibrator` also records *which* marginals it was fitted on (``method``: the
mean-only RNS of Algorithm 2 or the uncertainty-aware one of :func:`gpsl.predict.rns`);
:meth:`Calibrator.select` fits every candidate (temperature on each method, the structured
temperature with and without vector scaling) and keeps the one with the lowest
cross-validated NLL; with ``ensemble="stack"`` (:data:`ENSEMBLE`, the default of
:func:`gpsl.calibration.calibrate`) the stacked ensemble of the candidates joins them, and as its
weights maximise the same cross-validated log score it is the one kept by NLL
(``ensemble="uniform"``: equal weights, kept only when its cross-validated NLL is the lowest;
``None``: no ensemble). The inputs of Algorithm 2 travel as :class:`Scores`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gpsl._optimize import minimize, minimize_scalar
from gpsl.calibration import step as _step
from gpsl.calibration import structured as _structured
from gpsl.calibration.decisions import (
    DECISION_Z,
    UNCALIBRATED,
    admissible,
    changed,
    errors,
    keep_decisions,
    kept_marginals,
)
from gpsl.calibration.scores import (
    _LOG_FLOOR,
    _T_BOUNDS,
    DEFAULT_KINDS,
    ENSEMBLE,
    ENSEMBLES,
    KINDS,
    METHODS,
    SELECT_CRITERIA,
    STACK_MIN_WEIGHT,
    STRUCTURED_KINDS,
    Scores,
    _logits,
    _softmax,
    leave_out_groups,
    nll_and_grad,
    nll_before_after,
    stack,
    stacking_weights,
    temperature_nll,
)
from gpsl.calibration.step import STEP_KINDS
from gpsl.errors import InputError


@dataclass
class Calibrator:
    """Temperature, vector or structured scaling of marginals (:mod:`gpsl.calibration.scores`
    and the module docstring).

    ``method`` names the marginals it applies to; ``kind`` is ``"temperature"``, ``"vector"``,
    ``"structured"``, ``"structured+vector"``, ``"step"`` or ``"step+vector"`` (``u``:
    :mod:`gpsl.calibration.step`); ``w``/``c`` are the per-label scale and shift
    (``w = 1/T``, ``c = 0`` for a temperature; ``w = 1``, ``c = 0`` for the structured kind; the
    scaling after the fixed point for ``"structured+vector"``); ``t_unary``/``t_pair`` the
    structured temperatures (1 otherwise); ``n_tokens``, ``nll_before``/``nll_after`` (on the
    tokens it was fitted on) and ``source`` describe the fit; ``candidates`` the figures of
    every candidate :meth:`select` compared (``cv_nll``: the cross-validated NLL it chose by).
    """

    method: str = "mean"
    kind: str = "temperature"
    temperature: float = 1.0
    w: np.ndarray | None = None
    c: np.ndarray | None = None
    t_unary: float = 1.0
    t_pair: float = 1.0
    n_tokens: int = 0
    nll_before: float | None = None
    nll_after: float | None = None
    source: str = ""
    candidates: dict = field(default_factory=dict)
    criterion: str = "nll"  # what select() chose by
    members: list = field(default_factory=list)  # the stacked calibrators (kind "ensemble")
    weights: np.ndarray | None = None  # their weights (on the simplex)
    u: np.ndarray | None = None  # the step's weight of b (gpsl.calibration.step)

    # ------------------------------------------------------------------ fitting

    @classmethod
    def fit(cls, marginals, gold, *, method: str = "mean", kind: str = "temperature",
            ridge: float = 1e-2, source: str = "") -> Calibrator:
        """Fit on held-out ``marginals`` (list of ``(L, J)`` or one ``(N, J)``) and gold
        indices. Raises :class:`InputError` when there is no labeled token."""
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, not {method!r}")
        if kind not in ("temperature", "vector"):
            raise ValueError(f"kind must be 'temperature' or 'vector', not {kind!r} (the "
                             "structured kind: fit_structured)")
        P, g = stack(marginals, gold)
        if g.size == 0:
            raise InputError("no labeled token to calibrate on", source=source or "calibration")
        L = _logits(P)
        J = L.shape[1]
        before = temperature_nll(1.0, L, g)
        lo, hi = np.log(_T_BOUNDS[0]), np.log(_T_BOUNDS[1])
        res = minimize_scalar(lambda lt: temperature_nll(float(np.exp(lt)), L, g),
                              bounds=(lo, hi), method="bounded", options={"xatol": 1e-6})
        T = float(np.exp(res.x))
        w, c = np.full(J, 1.0 / T), np.zeros(J)
        if kind == "vector":
            out = minimize(nll_and_grad, np.r_[w, c], args=(L, g, ridge), jac=True,
                           method="L-BFGS-B")
            w, c = out.x[:J], out.x[J:]
        cal = cls(method=method, kind=kind, temperature=T, w=w, c=c, n_tokens=int(g.size),
                  nll_before=float(before), source=source)
        cal.nll_after = float(nll_and_grad(np.r_[w, c], L, g)[0])
        return cal

    fit_structured = classmethod(_structured.fit_structured)
    fit_step = classmethod(_step.fit_step)
    with_vector = _structured.with_vector

    @classmethod
    def stacked(cls, members: Sequence[Calibrator], weights, *, source: str = "") -> Calibrator:
        """The ensemble ``sum_k pi_k p~^(k)`` of ``members`` (module docstring) with weights
        ``pi`` (``>= 0``; normalised here); members under :data:`STACK_MIN_WEIGHT` are
        dropped. ``method`` is ``"probit"`` when a kept member reads the uncertainty-aware
        marginals (the model must then give variances), else ``"mean"``."""
        w = np.asarray(weights, dtype=float)
        if w.ndim != 1 or w.size != len(members) or w.size == 0 or not np.all(np.isfinite(w)) \
                or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("stacking weights must be finite, non-negative, not all zero and "
                             "one per member")
        if any(m.kind == "ensemble" for m in members):
            raise ValueError("an ensemble's members cannot be ensembles")
        w = w / w.sum()
        keep = [i for i in range(w.size) if w[i] >= STACK_MIN_WEIGHT]
        members = [members[i] for i in keep]
        w = w[keep] / w[keep].sum()
        J = members[0].w.size
        method = "probit" if any(m.method == "probit" for m in members) else "mean"
        return cls(method=method, kind="ensemble", temperature=1.0, w=np.ones(J),
                   c=np.zeros(J), n_tokens=max(m.n_tokens for m in members), source=source,
                   members=list(members), weights=w)

    @property
    def labels_follow(self) -> bool:
        """Whether the model's labels follow these marginals (:meth:`gpsl.model.GPSL.predict`):
        a temperature never moves the argmax (so it is skipped); the other kinds may, and
        their marginals then give the labels."""
        return self.kind != "temperature"

    def describe(self) -> str:
        """A short text of the calibration: ``"T 1.20"``, ``"T_U 0.87 · T_S 0.27 + vector"``,
        or for an ensemble its members and weights (``"0.62 × [T_U 1.30 · T_S 10.00] + 0.38 ×
        [T 1.20 (probit)]"``)."""
        if self.kind == "ensemble":
            return " + ".join(f"{w:.2f} × [{m.describe()}]" for w, m in
                              zip(self.weights, self.members))
        if self.kind == "kept":
            return (f"[{self.members[0].describe()}], the uncalibrated decisions kept by "
                    f"[{self.members[1].describe()}]")
        if self.kind in STRUCTURED_KINDS:
            how = f"T_U {self.t_unary:.2f} · T_S {self.t_pair:.2f}"
            if self.kind == "structured+vector":
                how += " + vector"
        elif self.kind in STEP_KINDS:
            how = ("step · per label" if self.kind == "step+vector" else
                   f"step · w {self.w[0]:.2f} u {self.u[0]:+.2f}")
        elif self.kind == "vector":
            how = "vector"
        else:
            how = f"T {self.temperature:.2f}"
        return how + (" (probit)" if self.method == "probit" else "")

    @classmethod
    def _fit_candidates(cls, scores: Sequence[Scores], gold: Sequence[np.ndarray],
                        methods: Sequence[str], kinds: Sequence[str], source: str,
                        start: tuple[float, float] | None = None) -> dict[str, Calibrator]:
        """Every candidate of :meth:`select` fitted on all of ``(scores, gold)`` (``start``:
        of the structured search, :meth:`fit_structured`)."""
        flat_gold = np.concatenate(gold) if gold else np.zeros(0, dtype=np.int64)
        fits = {}
        for m in methods:
            for k in kinds:
                if k in STRUCTURED_KINDS:
                    # the structured temperature of the mean method (the probit one is the
                    # same idea on flatter inputs; its NLL was never lower on the paper's data)
                    if m != "mean" or f"{m}/{k}" in fits:
                        continue
                    st = cls.fit_structured(scores, gold, method=m, source=source,
                                            start=start)
                    if "structured" in kinds:
                        fits[f"{m}/structured"] = st
                    if "structured+vector" in kinds:
                        fits[f"{m}/structured+vector"] = st.with_vector(scores, gold)
                    continue
                if k in STEP_KINDS:  # on the mean method's fixed point (gpsl.calibration.step)
                    if m == "mean":
                        fits[f"{m}/{k}"] = cls.fit_step(scores, gold, vector=k == "step+vector",
                                                        source=source, start=fits.get("mean/step"))
                    continue
                P = np.concatenate([sc.fixed_point(m) for sc in scores])
                fits[f"{m}/{k}"] = cls.fit(P, flat_gold, method=m, kind=k, source=source)
        if not fits:
            raise ValueError(f"no calibration candidate for methods {list(methods)} and kinds "
                             f"{list(kinds)}")
        return fits

    @classmethod
    def select_all(cls, scores: Sequence[Scores], gold: Sequence[np.ndarray], *,
                   methods: Sequence[str] = METHODS, kinds: Sequence[str] = DEFAULT_KINDS,
                   source: str = "", seed: int = 0,
                   ensemble: str | None = ENSEMBLE,
                   decision_z: float | None = DECISION_Z) -> tuple[dict, dict]:
        """Every candidate of :meth:`select` fitted on all the tokens, and its cross-validated
        figures: ``(fits, cv)`` with ``cv[name] = {"nll", "brier", "ece"}`` over the left-out
        groups' labeled tokens (``None`` each when there is no cross-validation: a single
        candidate, or fewer than two groups with labels). ``ece`` is over 15 equal-mass bins
        of the pooled left-out tokens; ``errors``/``loss`` count the left-out argmax errors,
        ``fixed``/``broken`` the decisions changed from the uncalibrated model's
        (:func:`gpsl.calibration.decisions.changed`), whose own figures are
        ``cv[UNCALIBRATED]``. ``decision_z``: the test of
        :func:`~gpsl.calibration.decisions.admissible` (``None``: none).

        ``ensemble``: with two or more candidates and a cross-validation, the stacked ensemble
        of them joins (``fits["<method>/ensemble"]``, module docstring): its weights maximise
        the log score of the left-out predictions, and its figures are those predictions
        mixed with the weights (so its NLL there is the lowest by construction; the weights
        are its only parameters fitted on them)."""
        from gpsl.metrics import brier_score, ece_equal_mass

        modes = (() if ensemble is None else (ensemble,) if isinstance(ensemble, str)
                 else tuple(ensemble))
        if any(m not in ENSEMBLES for m in modes):
            raise ValueError(f"ensemble must be one of {ENSEMBLES} or None, not {ensemble!r}")
        gold = [np.asarray(g, dtype=np.int64) for g in gold]
        fits = cls._fit_candidates(scores, gold, methods, kinds, source)
        none = {"nll": None, "brier": None, "ece": None, "errors": None, "loss": None}
        cv = {name: dict(none) for name in fits}
        groups = leave_out_groups(scores, gold, seed) if len(fits) > 1 else []
        if not groups:
            return fits, cv
        st = [c for c in fits.values() if c.kind in STRUCTURED_KINDS]
        start = (st[0].t_unary, st[0].t_pair) if st else None
        held_P = {name: [] for name in (*fits, UNCALIBRATED)}
        held_y = []
        for h, (held_sc, held_g) in enumerate(groups):
            keep = held_g >= 0
            rest = [grp for i, grp in enumerate(groups) if i != h and (grp[1] >= 0).any()]
            if not keep.any() or not rest:
                continue
            part = cls._fit_candidates([r[0] for r in rest], [r[1] for r in rest],
                                       methods, kinds, source, start=start)
            for name, cal in part.items():
                held_P[name].append(cal.apply(held_sc)[keep])
            held_P[UNCALIBRATED].append(held_sc.fixed_point("mean")[keep])
            held_y.append(held_g[keep])
        if not held_y:
            return fits, cv
        y = np.concatenate(held_y)
        rows = np.arange(y.size)
        held = {name: np.concatenate(P) for name, P in held_P.items()}
        for name in (*fits, UNCALIBRATED):
            cv[name] = {"errors": errors(held[name], y),
                        **changed(held[UNCALIBRATED], held[name], y)}
        # the ensemble mixes only the candidates allowed to change the decisions
        names = admissible(cv, list(fits), decision_z)
        for mode in modes if len(names) >= 2 else ():
            pi = (np.ones(len(names)) if mode == "uniform" else
                  stacking_weights(np.stack([held[n][rows, y] for n in names], axis=1)))
            ens = cls.stacked([fits[n] for n in names], pi, source=source)
            key = f"{ens.method}/{mode} ensemble"
            kept = {id(m): w for m, w in zip(ens.members, ens.weights)}
            held[key] = sum(kept[id(fits[n])] * held[n] for n in names if id(fits[n]) in kept)
            ens.nll_before, ens.nll_after = nll_before_after(ens, scores, gold)
            fits[key] = ens
        for k in fits:  # the lowest-NLL candidate, if not admissible, with the decisions kept
            cv[k] = {"errors": errors(held[k], y), **changed(held[UNCALIBRATED], held[k], y)}
        ok = admissible(cv, list(fits), decision_z)
        rich = max(fits, key=lambda k: np.log(np.clip(held[k][rows, y], _LOG_FLOOR, None)).sum())
        if rich not in ok and "mean/temperature" in fits:
            kept = keep_decisions(fits[rich], fits["mean/temperature"], source=source)
            kept.nll_before, kept.nll_after = nll_before_after(kept, scores, gold)
            fits[f"{rich} (decisions kept)"] = kept
            held[f"{rich} (decisions kept)"] = kept_marginals(held[rich],
                                                              held["mean/temperature"])
        for name in (*fits, UNCALIBRATED):
            P = held[name]
            cv[name] = {
                "nll": float(-np.mean(np.log(np.clip(P[rows, y], _LOG_FLOOR, None)))),
                "brier": brier_score(P, y),
                "ece": float(ece_equal_mass(P.max(axis=1), P.argmax(axis=1) == y, 15)),
                "errors": errors(P, y), "loss": errors(P, y) / y.size,
                **changed(held[UNCALIBRATED], P, y),
            }
        return fits, cv

    @staticmethod
    def choose(fits: dict, cv: dict, criterion: str = "nll",
               decision_z: float | None = DECISION_Z) -> Calibrator:
        """The candidate of :meth:`select_all`'s ``(fits, cv)`` with the lowest
        cross-validated ``criterion`` (``"nll"``, ``"brier"`` or ``"ece"``); without
        cross-validated figures, the lowest NLL on the fitted tokens. Its ``candidates``
        record every candidate's figures. Only the candidates
        :func:`~gpsl.calibration.decisions.admissible` allows to change the decisions (by
        ``decision_z``) are chosen from, and with cross-validated figures only those whose
        left-out NLL and ECE are both at or below the uncalibrated model's
        (``cv[UNCALIBRATED]``); the uncalibrated marginals are then a candidate themselves
        (the temperature 1, which returns them), so calibration never ships marginals its
        left-out tokens found worse than none (issue 36)."""
        if criterion not in SELECT_CRITERIA:
            raise ValueError(f"criterion must be one of {SELECT_CRITERIA}, not {criterion!r}")
        ok = admissible(cv, list(fits), decision_z)  # those allowed to change the decisions
        unc = cv.get(UNCALIBRATED) or {}
        if unc.get("nll") is not None and unc.get("ece") is not None:
            ok = [k for k in ok if cv[k]["nll"] is not None and cv[k]["ece"] is not None
                  and cv[k]["nll"] <= unc["nll"] and cv[k]["ece"] <= unc["ece"]]
            one = next(iter(fits.values()))
            fits = {**fits, UNCALIBRATED: Calibrator(
                method="mean", kind="temperature", w=np.ones(one.w.size),
                c=np.zeros(one.w.size), n_tokens=max(c.n_tokens for c in fits.values()),
                nll_before=one.nll_before, nll_after=one.nll_before, source=one.source)}
            ok.append(UNCALIBRATED)
        if all(cv[k][criterion] is None for k in fits):
            name = min(ok, key=lambda k: fits[k].nll_after)
        else:
            name = min(ok, key=lambda k: cv[k][criterion])
        best = replace(fits[name])  # a copy: the fits may serve several criteria
        ref = cv.get(UNCALIBRATED, {}).get("errors")
        best.candidates = {k: {"temperature": c.temperature, "t_unary": c.t_unary,
                               "t_pair": c.t_pair, "nll_before": c.nll_before,
                               "nll_after": c.nll_after, "cv_nll": cv[k]["nll"],
                               "cv_brier": cv[k]["brier"], "cv_ece": cv[k]["ece"],
                               "cv_errors": cv[k].get("errors"),
                               "cv_errors_uncalibrated": ref, "cv_fixed": cv[k].get("fixed"),
                               "cv_broken": cv[k].get("broken"), "admissible": k in ok}
                           for k, c in fits.items()}
        for k, c in fits.items():
            if c.kind == "ensemble":
                best.candidates[k]["weights"] = {f"{m.method}/{m.kind}": float(w)
                                                 for m, w in zip(c.members, c.weights)}
        best.criterion, best.candidates[name]["chosen"] = criterion, True
        return best

    @classmethod
    def select(cls, scores: Sequence[Scores], gold: Sequence[np.ndarray], *,
               methods: Sequence[str] = METHODS, kinds: Sequence[str] = DEFAULT_KINDS,
               source: str = "", seed: int = 0, criterion: str = "nll",
               ensemble: str | None = ENSEMBLE,
               decision_z: float | None = DECISION_Z) -> Calibrator:
        """The candidate with the lowest cross-validated ``criterion`` (module docstring;
        NLL by default), refitted on all the tokens; ``ensemble``: the stacked ensemble of the
        candidates is one of them (:meth:`select_all`; by NLL it is the one kept).

        Candidates: a ``"temperature"``/``"vector"`` scaling of each method's marginals and the
        ``"structured"``/``"structured+vector"`` kinds of the mean method, as ``kinds`` and
        ``methods`` allow. Each is fitted on all groups of calibration data but one and scored
        on the left-out group's labeled tokens, pooled over the groups (:meth:`select_all`);
        with a single candidate, or fewer than two groups with labels, the cross-validation is
        skipped (the NLL on the fitted tokens then decides). Every candidate's figures are
        kept in ``candidates``."""
        fits, cv = cls.select_all(scores, gold, methods=methods, kinds=kinds, source=source,
                                  seed=seed, ensemble=ensemble, decision_z=decision_z)
        return cls.choose(fits, cv, criterion, decision_z)

    # ------------------------------------------------------------------ use

    def apply(self, scores: Scores, clamp=None, _runs: dict | None = None) -> np.ndarray:
        """Calibrated ``(n_tokens, J)`` marginals from Algorithm 2's inputs (``clamp``: known
        labels, -1 elsewhere; a known token stays one-hot). An ensemble runs Algorithm 2 once
        per distinct input its members read (``_runs`` holds those runs; without a clamp, the
        ``Scores``' own :attr:`~gpsl.calibration.Scores.runs`)."""
        runs = _runs if _runs is not None else scores.runs if clamp is None else {}
        if self.kind == "kept":  # gpsl.calibration.decisions.keep_decisions
            return kept_marginals(*(m.apply(scores, clamp, runs) for m in self.members))
        if self.kind == "ensemble":
            passes = 0
            P = 0.0
            for w, m in zip(self.weights, self.members):
                P = P + w * m.apply(scores, clamp, runs)
                passes = max(passes, scores.passes)
            scores.passes = passes
            if clamp is not None:  # one-hot exactly (the weights' float sum may miss 1)
                rows = np.flatnonzero(np.asarray(clamp) >= 0)
                P[rows] = 0.0
                P[rows, np.asarray(clamp)[rows]] = 1.0
            return P
        structured = self.kind in STRUCTURED_KINDS
        key = (self.method, self.t_unary, self.t_pair) if structured else (self.method, 1.0, 1.0)
        if key not in runs:
            runs[key] = scores.marginals(key[0], key[1], key[2], clamp=clamp)
        P = runs[key]
        if self.kind in STEP_KINDS:
            return _step.apply_step(self, scores, P, clamp)
        if self.kind == "structured":
            return P.copy()
        P = self._apply(P)
        if clamp is not None:
            clamp = np.asarray(clamp)
            rows = np.flatnonzero(clamp >= 0)
            P[rows] = 0.0
            P[rows, clamp[rows]] = 1.0
        return P

    def transform(self, marginals):
        """Calibrated marginals, in the shape given (a list of arrays or one array); the
        scalings only (a structured calibrator needs :meth:`apply`)."""
        if self.kind in (*STRUCTURED_KINDS, *STEP_KINDS, "ensemble", "kept"):
            raise ValueError(f"a {self.kind} calibrator applies to Algorithm 2's inputs: use "
                             "apply(scores)")
        if isinstance(marginals, np.ndarray):
            return self._apply(marginals)
        return [self._apply(m) for m in marginals]

    def _apply(self, P: np.ndarray) -> np.ndarray:
        P = np.asarray(P, dtype=float)
        if P.size == 0:
            return P.copy()
        if self.w is None or self.w.size != P.shape[1]:
            raise ValueError(f"calibrator for {0 if self.w is None else self.w.size} labels "
                             f"applied to {P.shape[1]}")
        return _softmax(_logits(P) * self.w + self.c)

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict:
        d = {"method": self.method, "kind": self.kind, "temperature": self.temperature,
             "w": [float(v) for v in self.w], "c": [float(v) for v in self.c],
             "t_unary": self.t_unary, "t_pair": self.t_pair,
             "n_tokens": self.n_tokens, "nll_before": self.nll_before,
             "nll_after": self.nll_after, "source": self.source,
             "candidates": self.candidates, "criterion": self.criterion}
        if self.kind in ("ensemble", "kept"):
            d["members"] = [m.to_dict() for m in self.members]
        if self.kind == "ensemble":
            d["weights"] = [float(v) for v in self.weights]
        if self.kind in STEP_KINDS:
            d["u"] = [float(v) for v in self.u]
        return d

    @classmethod
    def from_dict(cls, d: dict, n_labels: int) -> Calibrator:
        """The calibrator saved by :meth:`to_dict`; ``ValueError`` on a damaged record."""
        if not isinstance(d, dict) or d.get("method") not in METHODS \
                or d.get("kind") not in KINDS:
            raise ValueError("calibration record has no valid method/kind")
        tu, tp = float(d.get("t_unary", 1.0)), float(d.get("t_pair", 1.0))
        if not (np.isfinite(tu) and tu > 0 and np.isfinite(tp) and tp > 0):
            raise ValueError("calibration record's structured temperatures are not positive")
        w = np.asarray(d.get("w"), dtype=float)
        c = np.asarray(d.get("c"), dtype=float)
        T = float(d.get("temperature", 1.0))
        criterion = d.get("criterion", "nll")
        if criterion not in SELECT_CRITERIA:
            raise ValueError("calibration record's selection criterion is unknown")
        if w.shape != (n_labels,) or c.shape != (n_labels,) or not np.all(np.isfinite(w)) \
                or not np.all(np.isfinite(c)) or not (np.isfinite(T) and T > 0):
            raise ValueError("calibration record's parameters do not match the labels")
        out = cls(method=d["method"], kind=d["kind"], temperature=T, w=w, c=c, t_unary=tu,
                  t_pair=tp, n_tokens=int(d.get("n_tokens", 0)), nll_before=d.get("nll_before"),
                  nll_after=d.get("nll_after"), source=str(d.get("source", "")),
                  candidates=dict(d.get("candidates") or {}), criterion=criterion)
        if out.kind in STEP_KINDS:
            out.u = np.asarray(d.get("u"), dtype=float)
            if out.u.shape != (n_labels,) or not np.all(np.isfinite(out.u)):
                raise ValueError("calibration record's step weights do not match the labels")
        if out.kind == "ensemble":
            members = d.get("members")
            if not isinstance(members, list) or not members:
                raise ValueError("calibration record's ensemble has no members")
            members = [cls.from_dict(m, n_labels) for m in members]
            try:
                ens = cls.stacked(members, np.asarray(d.get("weights"), dtype=float))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"calibration record's ensemble is damaged: {exc}") from None
            if len(ens.members) != len(members) or ens.method != out.method:
                raise ValueError("calibration record's ensemble weights or method do not "
                                 "match its members")
            out.members, out.weights = ens.members, ens.weights
        if out.kind == "kept":
            members = d.get("members")
            if not isinstance(members, list) or len(members) != 2:
                raise ValueError("calibration record's kept decisions need two members")
            try:
                kept = keep_decisions(*(cls.from_dict(m, n_labels) for m in members))
            except ValueError as exc:
                raise ValueError(f"calibration record's kept decisions: {exc}") from None
            if kept.method != out.method:
                raise ValueError("calibration record's method does not match its members")
            out.members = kept.members
        return out
