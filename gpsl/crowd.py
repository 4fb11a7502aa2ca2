r"""Crowd-sourced partial annotation: annotator reliability, alone or learned jointly with GPSL.

Every token ``t`` may carry votes ``l_v`` from annotators ``a_v`` (zero, one or several, of
unknown skill); a *trusted* annotator (the lead's adjudication) gives an observed label.

Model
-----
Annotator ``a`` reports label ``l`` for a token whose true label is ``y`` with probability
``pi_a[y, l]`` (Dawid and Skene, 1979). Three parametrisations, all with priors favouring the
diagonal (``prior_diag``, ``prior_off`` are pseudo-counts, ``kappa = shrink``):

* **full with shrinkage** (default, annotators with at least ``min_votes`` votes): a ``J x J``
  matrix whose rows are shrunk towards the annotator's own one-coin matrix ``m(s_a)`` (``s_a``
  on the diagonal, ``(1 - s_a) / (J - 1)`` elsewhere):
  ``pi_a[y, :] ~ Dir(kappa m(s_a)[y, :])`` (PS), ``s_a ~ Beta(1 + prior_diag, 1 + prior_off)``
  (P1). A row seen in few votes (a rare true label) stays near ``m(s_a)``: a spammer's vote
  for a rare label carries no weight, an expert's does. ``pi_a`` gets a variational posterior
  ``q(pi_a[y, :]) = Dir(alpha_a[y, :])`` (a MAP estimate of ``pi`` jointly with ``s_a`` is
  degenerate: the Dirichlet's density at its own mode grows without bound as ``s_a -> 1``);
* **full, fixed prior** (``shrink = 0``): MAP rows with ``pi_a[y, :] ~ Dir(beta_y)``,
  ``beta_y[l] = 1 + prior_off + prior_diag [l = y]`` (P0);
* **one-coin** (fewer than ``min_votes`` votes): MAP skill ``s_a`` with the prior (P1),
  ``pi_a[y, y] = s_a`` and ``pi_a[y, l] = (1 - s_a) / (J - 1)`` otherwise.

Write ``e_t(y) = sum_{v: t_v = t} E[log pi_{a_v}[y, l_v]]`` (0 for a token without votes), the
expectation under ``q`` for a variational annotator (``psi(alpha[y, l]) - psi(sum_l'
alpha[y, l'])``) and the plain ``log pi`` for a MAP one.

The joint bound (one objective)
-------------------------------
With the GPSL variational family ``q(f) prod_{t missing} r_t(y_t)`` of :mod:`gpsl.inference`
(eq. lb2 extended to missing labels), ``q(pi)`` for the variational annotators and point
estimates for the others, Jensen's inequality on ``log sum_Y p(Y, L, f, pi | X)`` gives

.. math::

   \mathcal{J} = \mathcal{L}_{GPSL}(q, r) + \sum_t \sum_y r_t(y)\, e_t(y)
       + \sum_{a\ \mathrm{VB}} \big(\log p(s_a) - \mathrm{KL}(q(\pi_a) \,\|\, p(\pi_a | s_a))\big)
       + \sum_{a\ \mathrm{MAP}} \log p(\pi_a)                                      \qquad (J1)

where ``L_GPSL`` is the bound of :mod:`gpsl.inference` (its entropy term ``H(r_t)`` over the
latent labels included) and ``r_t`` is one-hot at an observed (trusted) token. The votes are
conditionally independent of ``f`` given the true labels, so they only add the linear term.
Tokens without votes have ``e_t = 0``: exactly today's missing labels.

Monotone coordinate ascent:

1. ``(q(f), r)`` with the annotators fixed: one sweep of Algorithm 1 with the evidence ``e_t``
   of the missing tokens (:attr:`gpsl.inference.Problem.evidence`). The engine's bound is
   ``L_GPSL + sum_{t missing} r_t' e_t``; the other terms of (J1) do not depend on
   ``(q(f), r)``, so the sweep never lowers (J1). The ``r`` update is the softmax of today's
   terms plus ``e_t`` (``sum_a E log pi_a[y, l_ta]``).
2. The annotators with ``r`` fixed (:func:`m_step`). (J1) depends on annotator ``a`` through
   the expected counts ``N_a[y, l] = sum_{v: a_v = a, l_v = l} r_{t_v}(y)``:

   * variational: ``sum N_a E_q[log pi_a] - KL(q || Dir(kappa m(s_a))) + log p(s_a)``. For
     fixed ``s_a`` its maximiser over ``q`` is exact (conjugacy)

     .. math::  \alpha_a[y, l] = N_a[y, l] + \kappa\, m(s_a)[y, l]                 \qquad (VB)

     and for fixed ``q`` the terms in ``s_a``, ``log p(s_a) + sum_y [log Gamma(kappa) -
     sum_l log Gamma(kappa m_yl(s_a)) + sum_l (kappa m_yl(s_a) - 1) E_q log pi_a[y, l]]``
     (eq. S), are concave in ``s_a`` (``-log Gamma`` of an affine function is concave) and
     maximised by a bounded 1-D search; (VB) and (S) alternate to convergence;
   * MAP, fixed prior: ``sum_{y,l} (N_a[y, l] + beta_y[l] - 1) log pi_a[y, l]``, row by row
     on the simplex (Lagrange; concave, every coefficient >= 0)

     .. math::  \pi_a[y, l] = \frac{N_a[y, l] + \beta_y[l] - 1}
                                   {\sum_{l'} (N_a[y, l'] + \beta_y[l'] - 1)}      \qquad (M)

   * one-coin, with ``C_a = sum_{v: a_v = a} r_{t_v}(l_v)`` the expected correct votes out of
     ``n_a``: ``s_a = (C_a + prior_diag) / (n_a + prior_diag + prior_off)``          (M1).

   All are exact block maximisations (started from the previous ``s_a``), so this step never
   lowers (J1) either.
3. With ``tagger_prior="learn"`` (the default of :class:`CrowdGPSL`) the tagger's kernel
   hyper-parameters ``theta`` are a block too: GPSL's own variational-EM M-step
   (``learn_hyper``; closed form for the linear kernel's variance, kept only if the bound
   does not drop). ``L_GPSL`` is the only term of (J1) that depends on ``theta``, so (J1)
   stays one bound under monotone coordinate ascent. Why this block matters for crowds:
   :class:`CrowdGPSL`, "Why the tagger's prior is learned".

:class:`CrowdGPSL` runs step 2 in the engine's ``on_sweep`` hook after every sweep, sets the
new evidence and hands back (J1) = ``engine.elbo()`` + the observed tokens' vote term + the
annotator terms, which goes into the model's bound trace. It uses only ``engine.p``,
``engine.s.r`` and ``engine.elbo()``, so it works with any engine offering those (full or sparse
inference).

Aggregation alone (:class:`DawidSkene`) is the same with ``L_GPSL`` replaced by a class prior
``sum_t sum_y r_t(y) log rho(y) + H(r_t)`` over the voted tokens (``rho`` maximised in closed
form, ``rho(y) ∝ sum_t r_t(y)``) and the exact ``r`` update

.. math::  r_t(y) = \frac{\rho(y)\, e^{e_t(y)}}{\sum_{y'} \rho(y')\, e^{e_t(y')}}   \qquad (E)

Per-annotator accuracy is estimated as the posterior expected fraction of correct votes,
``acc_a = C_a / n_a`` (eq. A); the confusion matrices (posterior means for ``q``) and the
skills ``s_a`` are reported too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from scipy.special import digamma, gammaln, logsumexp

from gpsl.errors import InputError

#: floor of ``log pi`` (``pi = 1e-304``): a zero in ``pi`` (possible only with ``prior_off = 0``)
#: would make the evidence ``-inf`` and the engine's bound before its first ``r`` update
#: ``-inf``; with the floor every term stays finite and the change of the bound is < 1e-290.
LOG_FLOOR = -700.0
#: default strength ``kappa`` of the shrinkage of a confusion matrix towards the annotator's
#: one-coin matrix (pseudo-counts per row)
DEFAULT_SHRINK = 10.0

__all__ = ["CrowdGPSL", "CrowdModel", "DawidSkene", "MajorityVote", "Votes", "decide", "e_step",
           "m_step"]


# --------------------------------------------------------------------------- the votes


@dataclass
class Votes:
    """Votes over the tokens of a corpus in long form (one entry per vote).

    ``token`` is the flat token index (sentences concatenated), ``annotator`` an index into
    ``annotators``, ``label`` an index into ``classes`` (sorted). ``observed`` holds the class
    index of a trusted (adjudicated) label, -1 elsewhere.
    """

    lengths: np.ndarray
    token: np.ndarray
    annotator: np.ndarray
    label: np.ndarray
    annotators: list[str]
    classes: list[str]
    observed: np.ndarray = field(default=None)

    def __post_init__(self):
        self.lengths = np.asarray(self.lengths, dtype=np.int64)
        self.token = np.asarray(self.token, dtype=np.int64)
        self.annotator = np.asarray(self.annotator, dtype=np.int64)
        self.label = np.asarray(self.label, dtype=np.int64)
        if self.observed is None:
            self.observed = np.full(self.n, -1, dtype=np.int64)
        self.observed = np.asarray(self.observed, dtype=np.int64)
        if not (self.token.shape == self.annotator.shape == self.label.shape):
            raise ValueError("token, annotator and label must have the same length")
        if self.observed.shape != (self.n,):
            raise ValueError(f"observed must have {self.n} entries")
        J, A = len(self.classes), len(self.annotators)
        for arr, hi, what in ((self.token, self.n, "token"), (self.annotator, A, "annotator"),
                              (self.label, J, "label")):
            if arr.size and (arr.min() < 0 or arr.max() >= hi):
                raise ValueError(f"{what} index out of range")
        if np.any(self.observed >= J):
            raise ValueError("observed label index out of range")
        pairs = self.token * max(A, 1) + self.annotator
        if np.unique(pairs).size != pairs.size:
            raise ValueError("an annotator voted twice on one token")

    @property
    def n(self) -> int:
        return int(self.lengths.sum())

    @property
    def J(self) -> int:
        return len(self.classes)

    @property
    def A(self) -> int:
        return len(self.annotators)

    def voted(self) -> np.ndarray:
        """(n,) bool: tokens with at least one vote."""
        out = np.zeros(self.n, dtype=bool)
        out[self.token] = True
        return out

    def n_votes(self) -> np.ndarray:
        """(A,) votes per annotator."""
        return np.bincount(self.annotator, minlength=self.A)

    def design(self) -> sparse.csr_matrix:
        """``M`` (A*J, n): ``M[a*J + l, t] = 1`` for a vote ``l`` of ``a`` on ``t``."""
        rows = self.annotator * self.J + self.label
        return sparse.csr_matrix((np.ones(rows.size), (rows, self.token)),
                                 shape=(self.A * self.J, self.n))

    @classmethod
    def from_sentences(cls, sentences, classes=None, trusted: Iterable[str] = (),
                       source: str = "<input>") -> Votes:
        """Votes of sentences with an ``annotations`` mapping ``{annotator: labels}``.

        ``classes`` fixes the label set (default: every label voted, observed or in the
        sentences' gold ``labels``). Votes of a ``trusted`` annotator become observed labels
        (two trusted annotators disagreeing on a token is an :class:`InputError`).
        """
        trusted = set(trusted)
        seen = set()
        for s in sentences:
            for labs in s.annotations.values():
                seen.update(v for v in labs if v is not None)
            seen.update(v for v in (s.labels or []) if v is not None)
        if classes is None:
            classes = sorted(seen)
        else:
            classes = sorted(str(c) for c in classes)
            unknown = sorted(seen - set(classes))
            if unknown:
                raise InputError(f"labels not in the label set: {unknown[:5]}", source=source)
        if not classes:
            raise InputError("no label in the crowd annotations", source=source)
        index = {c: i for i, c in enumerate(classes)}
        names: dict[str, int] = {}
        lengths, tok, ann, lab = [], [], [], []
        observed: list[int] = []
        start = 0
        for s in sentences:
            L = len(s.tokens)
            lengths.append(L)
            obs = [-1] * L
            for name, labs in s.annotations.items():
                if len(labs) != L:
                    raise InputError(f"annotator {name!r} has {len(labs)} labels for {L} "
                                     "tokens", source=source, line=getattr(s, "line", None))
                for j, v in enumerate(labs):
                    if v is None:
                        continue
                    if name in trusted:
                        if obs[j] >= 0 and obs[j] != index[v]:
                            raise InputError(f"trusted annotators disagree on token {j + 1}",
                                             source=source, line=getattr(s, "line", None))
                        obs[j] = index[v]
                        continue
                    a = names.setdefault(name, len(names))
                    tok.append(start + j)
                    ann.append(a)
                    lab.append(index[v])
            observed.extend(obs)
            start += L
        return cls(lengths=np.array(lengths), token=np.array(tok, dtype=np.int64),
                   annotator=np.array(ann, dtype=np.int64), label=np.array(lab, dtype=np.int64),
                   annotators=list(names), classes=list(classes),
                   observed=np.array(observed, dtype=np.int64))

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """A per-token array cut into sentences."""
        return np.split(flat, np.cumsum(self.lengths)[:-1])


def _votes_from_frame(data) -> tuple[Votes, list]:
    """crowd-kit's long format: rows ``(task, worker, label)`` (a DataFrame or triples)."""
    if hasattr(data, "columns"):
        triples = list(zip(data["task"], data["worker"], data["label"]))
    else:
        triples = [tuple(t) for t in data]
    tasks = list(dict.fromkeys(t for t, _, _ in triples))
    workers = list(dict.fromkeys(w for _, w, _ in triples))
    classes = sorted({str(lab) for _, _, lab in triples})
    ti = {t: i for i, t in enumerate(tasks)}
    wi = {w: i for i, w in enumerate(workers)}
    ci = {c: i for i, c in enumerate(classes)}
    votes = Votes(lengths=np.array([len(tasks)]),
                  token=np.array([ti[t] for t, _, _ in triples], dtype=np.int64),
                  annotator=np.array([wi[w] for _, w, _ in triples], dtype=np.int64),
                  label=np.array([ci[str(lab)] for _, _, lab in triples], dtype=np.int64),
                  annotators=[str(w) for w in workers], classes=classes)
    return votes, tasks


# --------------------------------------------------------------------------- the crowd model


@dataclass
class CrowdModel:
    """Annotator parameters: ``log_pi`` (A, J, J; ``E_q[log pi]`` for a variational annotator),
    which annotators use one skill, the skills ``s_a`` (the one-coin skill, or the centre of
    the shrinkage prior of a full matrix)."""

    log_pi: np.ndarray
    one_coin: np.ndarray  # (A,) bool
    prior_diag: float
    prior_off: float
    shrink: float = 0.0
    skill: np.ndarray | None = None  # (A,)
    #: Dirichlet parameters of ``q(pi_a[y, :])`` of the annotators with a variational posterior
    #: (full matrices with shrinkage, eq. VB); NaN for the others. ``log_pi`` then holds
    #: ``E_q[log pi]``.
    alpha: np.ndarray | None = None

    @property
    def pi(self) -> np.ndarray:
        """Point estimates of the confusion matrices (posterior means where ``q`` is used)."""
        out = np.exp(self.log_pi)
        if self.alpha is not None:
            vb = ~np.isnan(self.alpha[:, 0, 0])
            out[vb] = self.alpha[vb] / self.alpha[vb].sum(axis=2, keepdims=True)
        return out

    def evidence(self, votes: Votes, M=None) -> np.ndarray:
        """``e_t(y) = sum_{v: t_v = t} log pi_{a_v}[y, l_v]``, shape (n, J) (0 without votes);
        ``log pi`` is floored at :data:`LOG_FLOOR` (see there)."""
        out = np.zeros((votes.n, votes.J))
        if votes.token.size == 0:
            return out
        # log pi_a[y, l] for every vote: (V, J)
        np.add.at(out, votes.token, self.log_pi[votes.annotator, :, votes.label])
        return out

    def log_prior(self) -> float:
        """The annotator terms of (J1): ``log p(pi_a)`` for a MAP annotator (P0 or P1, normalised
        densities), ``log p(s_a) - KL(q(pi_a) || Dir(kappa m(s_a)))`` for a variational one."""
        A, J = self.log_pi.shape[:2]
        if J == 1:
            return 0.0
        total = 0.0
        for a in range(A):
            if self.one_coin[a]:
                s = float(np.exp(self.log_pi[a, 0, 0]))
                total += _log_beta_pdf(s, self.prior_diag, self.prior_off)
            elif self.shrink > 0:
                s = float(self.skill[a])
                total += _log_beta_pdf(s, self.prior_diag, self.prior_off) \
                    - _kl_dirichlet_rows(self.alpha[a], _shrink_beta(J, s, self.shrink))
            else:
                total += _log_dirichlet_rows(self.log_pi[a],
                                             _beta_matrix(J, self.prior_diag, self.prior_off))
        return float(total)


def _log_beta_pdf(s: float, prior_diag: float, prior_off: float) -> float:
    """``log Beta(s; 1 + prior_diag, 1 + prior_off)``."""
    b1, b0 = 1.0 + prior_diag, 1.0 + prior_off
    log_s = np.log(s) if s > 0 else -np.inf
    log_1ms = np.log1p(-s) if s < 1.0 else -np.inf
    return float(gammaln(b1 + b0) - gammaln(b1) - gammaln(b0)
                 + _xlogy(b1 - 1.0, log_s) + _xlogy(b0 - 1.0, log_1ms))


def _log_dirichlet_rows(log_pi: np.ndarray, beta: np.ndarray) -> float:
    """``sum_y log Dir(pi[y, :]; beta[y, :])``."""
    lognorm = gammaln(beta.sum(axis=1)) - gammaln(beta).sum(axis=1)
    return float(lognorm.sum() + np.sum(_xlogy(beta - 1.0, log_pi)))


def _kl_dirichlet_rows(alpha: np.ndarray, beta: np.ndarray) -> float:
    """``sum_y KL(Dir(alpha[y]) || Dir(beta[y]))``."""
    a0 = alpha.sum(axis=1)
    return float(np.sum(gammaln(a0) - gammaln(alpha).sum(axis=1) - gammaln(beta.sum(axis=1))
                        + gammaln(beta).sum(axis=1))
                 + np.sum((alpha - beta) * (digamma(alpha) - digamma(a0)[:, None])))


def _dirichlet_elog(alpha: np.ndarray) -> np.ndarray:
    """``E[log pi]`` under ``Dir(alpha)`` row by row: ``psi(alpha) - psi(sum alpha)``."""
    return digamma(alpha) - digamma(alpha.sum(axis=1, keepdims=True))


def _xlogy(c, logx):
    """``c * logx`` with ``0 * -inf = 0`` (elementwise)."""
    c = np.asarray(c, dtype=float)
    logx = np.asarray(logx, dtype=float)
    with np.errstate(invalid="ignore"):
        out = c * logx
    return np.where(c == 0, 0.0, out)


def _beta_matrix(J: int, prior_diag: float, prior_off: float) -> np.ndarray:
    """Dirichlet parameters of the confusion rows without shrinkage (eq. P0):
    ``1 + prior_off + prior_diag [l = y]``."""
    return np.full((J, J), 1.0 + prior_off) + prior_diag * np.eye(J)


def _shrink_beta(J: int, s: float, shrink: float) -> np.ndarray:
    """Dirichlet parameters of the shrinkage prior (eq. PS): ``kappa m(s)`` with the
    one-coin matrix ``m(s)`` (``s`` on the diagonal, ``(1 - s) / (J - 1)`` elsewhere)."""
    B = np.full((J, J), shrink * (1.0 - s) / (J - 1))
    np.fill_diagonal(B, shrink * s)
    return B


def expected_counts(votes: Votes, r: np.ndarray, M=None) -> np.ndarray:
    """``N_a[y, l] = sum_{v: a_v = a, l_v = l} r_{t_v}(y)``, shape (A, J, J)."""
    M = votes.design() if M is None else M
    N = np.asarray(M @ r).reshape(votes.A, votes.J, votes.J)  # [a, l, y]
    return N.transpose(0, 2, 1)


def _dirichlet_map(W: np.ndarray) -> np.ndarray:
    """Row-wise ``log(W / sum W)`` (eq. M), uniform for an all-zero row."""
    J = W.shape[1]
    tot = W.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        P = np.where(tot > 0, W / np.where(tot > 0, tot, 1.0), 1.0 / J)
        return np.log(P)


def _skill_objective(s: float, log_pi: np.ndarray, shrink: float, prior_diag: float,
                     prior_off: float) -> float:
    """The part of (J1) that depends on the shrinkage centre ``s`` (eq. S): concave in ``s``."""
    J = log_pi.shape[0]
    return _log_beta_pdf(s, prior_diag, prior_off) + _log_dirichlet_rows(
        log_pi, _shrink_beta(J, s, shrink))


def _update_skill(s0: float, log_pi: np.ndarray, shrink: float, prior_diag: float,
                  prior_off: float) -> float:
    """Maximise eq. (S) over ``s`` in (0, 1) (bounded Brent; kept only if not worse)."""
    from scipy.optimize import minimize_scalar

    lp = np.maximum(log_pi, LOG_FLOOR)
    res = minimize_scalar(lambda x: -_skill_objective(x, lp, shrink, prior_diag, prior_off),
                          bounds=(1e-9, 1.0 - 1e-9), method="bounded",
                          options={"xatol": 1e-10})
    f0 = _skill_objective(s0, lp, shrink, prior_diag, prior_off)
    return float(res.x) if -res.fun >= f0 else float(s0)


def m_step(votes: Votes, r: np.ndarray, one_coin: np.ndarray, prior_diag: float,
           prior_off: float, M=None, *, shrink: float = 0.0, skill=None,
           inner: int = 30) -> CrowdModel:
    """Maximise (J1) over the annotator parameters with ``r`` fixed.

    * one-coin annotators: eq. (M1), closed form;
    * full matrices without shrinkage (``shrink = 0``): eq. (M) with the prior (P0);
    * full matrices with shrinkage: block coordinate ascent between the variational posterior
      ``q(pi_a[y]) = Dir(N_a[y] + kappa m(s_a)[y])`` (eq. VB, exact) and eq. (S) (a concave
      1-D maximisation), ``inner`` rounds starting from ``skill`` (or the one-coin estimate);
      every round is an exact block maximisation, so the result is never worse than the
      starting point when ``skill`` is the previous ``s_a``.
    """
    if prior_diag < 0 or prior_off < 0 or shrink < 0:
        raise ValueError("prior pseudo-counts must be >= 0")
    A, J = votes.A, votes.J
    N = expected_counts(votes, r, M)
    log_pi = np.empty((A, J, J))
    alpha = np.full((A, J, J), np.nan)
    skills = np.full(A, np.nan)
    for a in range(A):
        n_a = float(N[a].sum())
        C_a = float(np.trace(N[a]))
        s1 = (C_a + prior_diag) / (n_a + prior_diag + prior_off) \
            if n_a + prior_diag + prior_off > 0 else 1.0 / J
        if J == 1:
            log_pi[a] = 0.0
            skills[a] = 1.0
        elif one_coin[a]:
            with np.errstate(divide="ignore"):
                log_pi[a] = np.log((1.0 - s1) / (J - 1)) if s1 < 1.0 else -np.inf
                np.fill_diagonal(log_pi[a], np.log(s1) if s1 > 0 else -np.inf)
            skills[a] = s1
        elif shrink > 0:
            s = float(np.clip(s1 if skill is None or not np.isfinite(skill[a]) else skill[a],
                              1e-9, 1.0 - 1e-9))
            for _ in range(inner):
                elog = _dirichlet_elog(N[a] + _shrink_beta(J, s, shrink))  # eq. VB
                s_new = _update_skill(s, elog, shrink, prior_diag, prior_off)  # eq. S
                done = abs(s_new - s) < 1e-10
                s = s_new
                if done:
                    break
            alpha[a] = N[a] + _shrink_beta(J, s, shrink)
            log_pi[a] = _dirichlet_elog(alpha[a])
            skills[a] = s
        else:
            log_pi[a] = _dirichlet_map(N[a] + _beta_matrix(J, prior_diag, prior_off) - 1.0)
            skills[a] = s1
    np.maximum(log_pi, LOG_FLOOR, out=log_pi)
    return CrowdModel(log_pi=log_pi, one_coin=np.asarray(one_coin, dtype=bool).copy(),
                      prior_diag=float(prior_diag), prior_off=float(prior_off),
                      shrink=float(shrink), skill=skills, alpha=alpha)


def majority_posteriors(votes: Votes) -> np.ndarray:
    """Vote fractions per token (uniform without votes; one-hot at an observed label)."""
    r = np.zeros((votes.n, votes.J))
    np.add.at(r, (votes.token, votes.label), 1.0)
    tot = r.sum(axis=1, keepdims=True)
    r = np.where(tot > 0, r / np.where(tot > 0, tot, 1.0), 1.0 / votes.J)
    obs = votes.observed >= 0
    r[obs] = 0.0
    r[obs, votes.observed[obs]] = 1.0
    return r


#: posteriors within this of the largest are a tie (rounding of the same evidence)
TIE = 1e-12


def e_step(model: CrowdModel, votes: Votes, log_rho: np.ndarray) -> np.ndarray:
    """Eq. (E): ``r_t(y) = rho(y) e^{e_t(y)} / sum_y' rho(y') e^{e_t(y')}`` for every token
    (``rho`` alone for a token without votes), ``e_t`` the votes' evidence under ``model``."""
    a = model.evidence(votes) + np.asarray(log_rho, dtype=float)
    return np.exp(a - logsumexp(a, axis=1, keepdims=True))


def decide(r: np.ndarray, classes: Sequence[str], known: np.ndarray | None = None
           ) -> list[str | None]:
    """The one rule that turns posteriors into labels: each token's most probable class. A
    tie (the largest posterior shared by two classes or more, to :data:`TIE`), or a token
    that is not ``known`` (no vote, no observed label), is left missing (None): a tie is no
    evidence for either label, and GPSL marginalises a missing label rather than guess it."""
    r = np.asarray(r, dtype=float)
    if r.shape[0] == 0:
        return []
    single = (r >= r.max(axis=1, keepdims=True) - TIE).sum(axis=1) == 1
    keep = single if known is None else single & np.asarray(known, dtype=bool)
    return [classes[i] if k else None for i, k in zip(r.argmax(axis=1), keep)]


def _annotator_accuracy(votes: Votes, r: np.ndarray) -> np.ndarray:
    """Eq. (A): ``acc_a = (1 / n_a) sum_{v: a_v = a} r_{t_v}(l_v)`` (NaN without votes)."""
    c = np.bincount(votes.annotator, weights=r[votes.token, votes.label], minlength=votes.A)
    n = votes.n_votes()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, c / np.maximum(n, 1), np.nan)


class _Aggregator:
    """Shared crowd-kit-like surface: ``fit`` / ``fit_predict`` / ``fit_predict_proba``."""

    def fit(self, data) -> _Aggregator:
        votes, tasks = _votes_from_frame(data)
        self.fit_votes(votes)
        self.tasks_ = tasks
        self.labels_ = dict(zip(tasks, self.labels_array_))
        return self

    def fit_predict(self, data) -> dict:
        return self.fit(data).labels_

    def fit_predict_proba(self, data) -> np.ndarray:
        return self.fit(data).probas_

    def _finish(self, votes: Votes, r: np.ndarray) -> None:
        self.votes_ = votes
        self.classes_ = list(votes.classes)
        self.annotators_ = list(votes.annotators)
        self.probas_ = r
        self.labels_array_ = decide(r, votes.classes, votes.voted() | (votes.observed >= 0))
        self.accuracy_ = _annotator_accuracy(votes, r)
        self.skills_ = dict(zip(votes.annotators, self.accuracy_))


class MajorityVote(_Aggregator):
    """Per-token majority vote: the posterior is the vote fractions; a tie leaves the token
    missing (:func:`decide`, the rule the annotation store derives labels by too)."""

    def fit_votes(self, votes: Votes) -> MajorityVote:
        self._finish(votes, majority_posteriors(votes))
        return self


class DawidSkene(_Aggregator):
    """Dawid-Skene aggregation alone (eqs. E, VB/S, M, M1) with diagonal-favouring priors.

    Parameters
    ----------
    prior_diag, prior_off: prior pseudo-counts (see the module docstring).
    min_votes: annotators with fewer votes get the one-coin skill model.
    shrink: ``kappa``, the strength of the shrinkage of a confusion matrix towards the
        annotator's one-coin matrix (variational); ``0``: MAP matrices with the fixed prior.
    max_iter, tol: EM iterations and the relative-improvement stop on the bound.

    Attributes after ``fit``: ``probas_`` (n, J) posteriors, ``labels_`` (crowd-kit style
    mapping task -> label; ``labels_array_`` per token, ``None`` without votes or on a tie,
    :func:`decide`), ``confusions_`` (A, J, J), ``skills_`` / ``accuracy_`` (eq. A), ``one_coin_``,
    ``class_prior_``, ``bound_trace_``.
    """

    def __init__(self, prior_diag=2.0, prior_off=0.1, min_votes=30, max_iter=200, tol=1e-8,
                 shrink=DEFAULT_SHRINK):
        self.prior_diag = prior_diag
        self.prior_off = prior_off
        self.shrink = shrink
        self.min_votes = min_votes
        self.max_iter = max_iter
        self.tol = tol

    def fit_votes(self, votes: Votes) -> DawidSkene:
        if votes.token.size == 0 and not np.any(votes.observed >= 0):
            raise ValueError("no votes to aggregate")
        M = votes.design()
        one_coin = votes.n_votes() < self.min_votes
        r = majority_posteriors(votes)
        free = (votes.observed < 0) & votes.voted()
        trace = []
        model = None
        for _ in range(self.max_iter):
            model = m_step(votes, r, one_coin, self.prior_diag, self.prior_off, M,
                           shrink=self.shrink, skill=None if model is None else model.skill)
            rho = r[free | (votes.observed >= 0)].sum(axis=0)
            rho = rho / rho.sum()
            log_rho = np.log(np.maximum(rho, 1e-300))
            E = model.evidence(votes, M)
            a = E + log_rho
            lse = logsumexp(a, axis=1, keepdims=True)
            r_new = r.copy()
            r_new[free] = np.exp(a[free] - lse[free])
            r = r_new
            bound = self._bound(votes, r, E, log_rho, model, free)
            trace.append(bound)
            if len(trace) > 1 and abs(trace[-1] - trace[-2]) <= self.tol * max(1.0,
                                                                                abs(trace[-2])):
                break
        self.model_ = model
        self.confusions_ = model.pi
        self.one_coin_ = one_coin
        self.class_prior_ = rho
        self.bound_trace_ = trace
        self._finish(votes, r)
        return self

    @staticmethod
    def _bound(votes, r, E, log_rho, model, free) -> float:
        """(J1) with the class prior in place of ``L_GPSL`` on the voted/observed tokens."""
        keep = free | (votes.observed >= 0)
        rk = r[keep]
        lin = float(np.sum(_xlogy(rk, E[keep] + log_rho)))
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = -float(np.sum(np.where(r[free] > 0, r[free] * np.log(r[free]), 0.0)))
        return lin + ent + model.log_prior()


# --------------------------------------------------------------------------- the joint model


class CrowdGPSL:
    """GPSL trained on crowd votes with annotator confusion matrices learned jointly (J1).

    Parameters
    ----------
    model: an unfitted :class:`gpsl.model.GPSL` (default ``GPSL()``); its settings are used.
    prior_diag, prior_off, min_votes, shrink: as :class:`DawidSkene`.
    init: ``"dawid-skene"`` (start ``pi`` from Dawid-Skene alone, default) or ``"majority"``
        (one M-step from the vote fractions).
    tagger_prior: ``"learn"`` (default): the tagger's kernel hyper-parameters (the linear
        kernel's prior variance ``sigma_j^2`` of the feature weights) are learned in the joint
        bound by its own M-step (empirical Bayes, ``learn_hyper=True``; see "Why the tagger's
        prior is learned" below); ``"model"``: the joint fit uses ``model``'s settings as
        they are.
    refit: after the joint fit, train the tagger used for prediction (``model_``) with
        ``model``'s own settings on the inferred labels (argmax of ``r_t`` on the voted and
        observed tokens, the others missing). ``None`` (default): refit exactly when the
        joint fit's settings differ from ``model``'s (``tagger_prior="learn"`` and ``model``
        does not learn its hyper-parameters itself).

    ``fit(X, votes)`` fits the tagger; afterwards ``model_`` is the GPSL for prediction (the
    refit, or the joint fit's tagger), ``joint_model_`` the joint fit's tagger, ``probas_``
    the posteriors ``r_t`` of the training tokens (n, J) from the joint bound,
    ``labels_array_`` their argmax, ``confusions_``, ``accuracy_`` (eq. A), ``bound_trace_``
    (the joint fit's trace: entry 0 is the engine's bound before the first sweep, every later
    entry is (J1) after the M-step) and ``joint_trace_`` (J1 after every sweep and after every
    M-step, alternating).

    Why the tagger's prior is learned
    ---------------------------------
    In the mean-field family ``q(f) prod_t r_t`` the tagger's term in the ``r_t`` update is
    ``E_q[f_t]``, and ``q(f)`` was fitted to ``r_t`` itself: with weights ``w_j ~ N(0,
    sigma_j^2 I)`` on the token's features ``phi_t`` the stationary mean has
    ``m_tj = sigma_j^2 sum_s (phi_t' phi_s)(r_sj - pi_sj)``, whose own part
    ``sigma_j^2 |phi_t|^2 (r_tj - pi_tj)`` echoes the token's current label (``|phi_t|^2``
    is the number of template features, about 20 on basenp and chunking). The bound rewards
    this echo, so at the library's default ``sigma^2 = 4`` (chosen for fully labeled
    training) the tagger reproduces ``r`` on 99.95% of the voted tokens and adds almost
    nothing to the votes: on basenp (700 sentences, 5 votes on 50% of the tokens, 30%
    spammers; the crowd of seed 0 of ``bench/results/crowd_acceptance``, fitted with
    ``tagger_prior="model"``) 97.2% right against 97.07% for the Bayes rule with the *true*
    confusion matrices and 97.04% for crowd-kit's Dawid-Skene. Maximising (J1) over
    ``sigma_j^2`` as well (the closed-form M-step of the linear kernel, monotone like the
    other blocks) gives ``sigma_j^2`` about 0.03 there (0.027-0.030 on the three seeds; the
    joint fit stops at its 100 sweeps); the tagger's term is then carried by
    features shared across tokens and the inferred labels are 99.06% right. That prior is
    too strong for tagging new text (the joint fit's tagger:
    7.35% test loss against 4.83% for GPSL2 on the true labels), hence the refit with
    ``model``'s own settings on the inferred labels (5.32%).
    """

    def __init__(self, model=None, *, prior_diag=2.0, prior_off=0.1, min_votes=30,
                 shrink=DEFAULT_SHRINK, init="dawid-skene", tagger_prior="learn", refit=None):
        self.model = model
        self.prior_diag = prior_diag
        self.prior_off = prior_off
        self.shrink = shrink
        self.min_votes = min_votes
        self.init = init
        self.tagger_prior = tagger_prior
        self.refit = refit

    def fit(self, X: Sequence, votes: Votes, callback=None) -> CrowdGPSL:
        from gpsl.model import GPSL

        if len(X) != len(votes.lengths) or any(len(x) != L for x, L in zip(X, votes.lengths)):
            raise InputError("the votes do not match the sentences' lengths", source="input")
        base = GPSL() if self.model is None else self.model
        if self.tagger_prior not in ("learn", "model"):
            raise ValueError(f"tagger_prior must be 'learn' or 'model', not "
                             f"{self.tagger_prior!r}")
        learn = self.tagger_prior == "learn" and not base.learn_hyper
        refit = learn if self.refit is None else bool(self.refit)
        model = GPSL(**{**base.get_params(), "learn_hyper": True}) if learn else base
        M = votes.design()
        one_coin = votes.n_votes() < self.min_votes
        if self.init == "dawid-skene":
            ds = DawidSkene(self.prior_diag, self.prior_off, self.min_votes,
                            shrink=self.shrink).fit_votes(votes)
            crowd = ds.model_
        elif self.init == "majority":
            crowd = m_step(votes, majority_posteriors(votes), one_coin, self.prior_diag,
                           self.prior_off, M, shrink=self.shrink)
        else:
            raise ValueError(f"init must be 'dawid-skene' or 'majority', not {self.init!r}")
        classes = list(votes.classes)
        obs = votes.observed
        y = [[None if v < 0 else classes[v] for v in part] for part in votes.split(obs)]
        E = crowd.evidence(votes, M)
        joint: list[float] = []
        state = {"crowd": crowd}
        observed = obs >= 0

        def extras(cm: CrowdModel, E_full: np.ndarray) -> float:
            ev_obs = float(np.sum(E_full[observed, obs[observed]])) if observed.any() else 0.0
            return ev_obs + cm.log_prior()

        def on_sweep(engine):
            r = engine.s.r
            joint.append(float(engine.elbo()) + extras(state["crowd"], engine.p.evidence
                                                       if engine.p.evidence is not None
                                                       else E))
            cm = m_step(votes, r, one_coin, self.prior_diag, self.prior_off, M,
                        shrink=self.shrink, skill=state["crowd"].skill)
            E_new = cm.evidence(votes, M)
            engine.p.set_evidence(E_new)
            state["crowd"] = cm
            value = float(engine.elbo()) + extras(cm, E_new)
            joint.append(value)
            return value

        model.fit(X, y, callback=callback, classes=classes, evidence=votes.split(E),
                  on_sweep=on_sweep)
        if list(model.classes_) != classes:  # pragma: no cover - classes are passed through
            raise RuntimeError("the model's classes differ from the votes' classes")
        r = np.array(model.state_.r)
        self.joint_model_ = model
        self.model_ = model
        if refit:
            # the tagger for prediction: model's own settings on the inferred labels
            keep = votes.voted() | observed
            lab = r.argmax(axis=1)
            y_hat = [[classes[v] if k else None for v, k in zip(lv, kv)]
                     for lv, kv in zip(votes.split(lab), votes.split(keep))]
            tagger = base if base is not model else GPSL(**base.get_params())
            self.model_ = tagger.fit(X, y_hat, classes=classes)
        self.crowd_ = state["crowd"]
        self.confusions_ = self.crowd_.pi
        self.one_coin_ = one_coin
        self.probas_ = r
        self.labels_array_ = [classes[i] for i in r.argmax(axis=1)]
        self.accuracy_ = _annotator_accuracy(votes, r)
        self.skills_ = dict(zip(votes.annotators, self.accuracy_))
        self.bound_trace_ = list(model.bound_trace_)
        self.joint_trace_ = joint
        self.classes_ = classes
        self.annotators_ = list(votes.annotators)
        return self

    def predict(self, X, **kw):
        return self.model_.predict(X, **kw)

    def predict_marginals(self, X, **kw):
        return self.model_.predict_marginals(X, **kw)


def annotator_report(agg, votes: Votes) -> list[dict]:
    """One row per annotator: votes, model (full / one-coin), estimated accuracy (eq. A),
    agreement with the aggregated label, skill ``s_a`` and the confusion matrix (posterior
    mean where it is variational) as ``{true label: {reported label: probability}}``."""
    n = votes.n_votes()
    agree = np.zeros(votes.A)
    idx = np.asarray(agg.probas_).argmax(axis=1)
    np.add.at(agree, votes.annotator, (idx[votes.token] == votes.label).astype(float))
    conf = getattr(agg, "confusions_", None)
    one = getattr(agg, "one_coin_", np.zeros(votes.A, dtype=bool))
    crowd = getattr(agg, "crowd_", None) or getattr(agg, "model_", None)
    skill = getattr(crowd, "skill", None) if isinstance(crowd, CrowdModel) else None
    rows = []
    for a, name in enumerate(votes.annotators):
        row = {"annotator": name, "votes": int(n[a]),
               "model": "one-coin" if one[a] else "full",
               "accuracy": float(agg.accuracy_[a]) if n[a] else None,
               "agreement": float(agree[a] / n[a]) if n[a] else None}
        if skill is not None and np.isfinite(skill[a]):
            row["skill"] = float(skill[a])
        if conf is not None:
            row["confusion"] = {y: {lab: float(conf[a, i, k])
                                    for k, lab in enumerate(votes.classes)}
                                for i, y in enumerate(votes.classes)}
        rows.append(row)
    return rows
