"""The fixed training data of a fit (:class:`Problem`): label indices with missing labels,
the neighbour structure of the dependency set, evidence on missing labels and their factor
weights (EM-lambda, derived in :mod:`gpsl.likelihood`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


def missing_weight(spec, n_observed: int, n_missing: int) -> float:
    """``lambda`` for ``spec``: a number in ``[0, 1]``, or ``"auto"`` =
    ``min(1, n_observed / n_missing)`` (1 without missing labels); see the module docstring."""
    if isinstance(spec, str):
        if spec.strip().lower() != "auto":
            raise ValueError(f"missing_weight must be 'auto' or a number in [0, 1], "
                             f"not {spec!r}")
        return 1.0 if n_missing <= 0 else min(1.0, float(n_observed) / float(n_missing))
    if isinstance(spec, bool) or not isinstance(spec, int | float | np.floating | np.integer):
        raise ValueError(f"missing_weight must be 'auto' or a number in [0, 1], not {spec!r}")
    lam = float(spec)
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"missing_weight must be 'auto' or a number in [0, 1], not {spec!r}")
    return lam


def neighbour_index(lengths, offsets) -> np.ndarray:
    """``nb[t, d]`` = index of token ``t + offsets[d]`` in the same sentence, else -1."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = int(lengths.sum())
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    pos = np.arange(n) - starts
    L = np.repeat(lengths, lengths)
    nb = np.full((n, len(offsets)), -1, dtype=np.int64)
    for d, o in enumerate(offsets):
        ok = (pos + o >= 0) & (pos + o < L)
        nb[ok, d] = np.arange(n)[ok] + o
    return nb


@dataclass
class Problem:
    """Fixed training data: label indices (-1 = missing) and neighbour structure."""

    y: np.ndarray  # (n,) int, -1 for a missing label
    nb: np.ndarray  # (n, R) neighbour index or -1
    J: int
    offsets: tuple
    #: optional ``(n, J)`` log-potentials ``e_t(y)`` on the labels of tokens whose label is
    #: missing (ignored where ``y >= 0``): extra evidence about a latent label, e.g. the
    #: crowd model's ``sum_a log pi_a[y, l_ta]``. The bound gains ``sum_t sum_y r_t(y) e_t(y)``
    #: and the ``r`` update adds ``e_t`` to its softmax argument.
    evidence: np.ndarray | None = None
    #: ``lambda``, the weight of a missing-label token's own factor in the M-steps (1 = the
    #: plain bound; see :func:`missing_weight`). Set with :meth:`set_missing_weight`.
    missing_weight: float = 1.0
    #: ``(n,)`` per-token factor weights ``w_t`` (1 observed, ``lambda`` missing), or
    #: ``None`` when every weight is 1.
    weight: np.ndarray | None = None
    _split: list | None = field(default=None, repr=False, compare=False)
    _groups: list | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(cls, lengths, y, offsets, J, evidence=None, missing_weight=1.0) -> Problem:
        y = np.asarray(y, dtype=np.int64)
        prob = cls(y=y, nb=neighbour_index(lengths, offsets), J=int(J), offsets=tuple(offsets))
        prob.set_evidence(evidence)
        prob.set_missing_weight(missing_weight)
        return prob

    def set_missing_weight(self, lam) -> None:
        """Weight ``lambda`` in ``[0, 1]`` of the missing tokens' own factors (1 = none)."""
        lam = float(lam)
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"missing_weight must be in [0, 1], not {lam}")
        self.missing_weight = lam
        if lam == 1.0 or not self.missing.any():
            self.weight = None
            return
        w = np.ones(self.n)
        w[self.missing] = lam
        self.weight = w

    @property
    def w(self) -> np.ndarray:
        """``(n,)`` factor weights ``w_t`` (ones without a missing weight)."""
        return np.ones(self.n) if self.weight is None else self.weight

    def set_evidence(self, evidence) -> None:
        """Replace the evidence array (``None`` for none); checked against ``(n, J)``."""
        if evidence is None:
            self.evidence = None
            return
        e = np.asarray(evidence, dtype=float)
        if e.shape != (self.n, self.J):
            raise ValueError(f"evidence must have shape {(self.n, self.J)}, not {e.shape}")
        if np.isnan(e).any() or np.isposinf(e).any():
            raise ValueError("evidence must not contain NaN or +inf")
        self.evidence = e

    def evidence_term(self, r) -> float:
        """``sum_{t missing} sum_y r_t(y) e_t(y)`` (0 without evidence; 0 * -inf = 0)."""
        if self.evidence is None:
            return 0.0
        m = self.missing
        rm, em = r[m], self.evidence[m]
        pos = rm > 0
        return float(np.sum(rm[pos] * em[pos]))

    @property
    def n(self) -> int:
        return int(self.y.shape[0])

    @property
    def R(self) -> int:
        return len(self.offsets)

    @property
    def missing(self) -> np.ndarray:
        return self.y < 0

    def initial_r(self) -> np.ndarray:
        """``r`` at the start of a fit: one-hot at observed labels, uniform where missing."""
        r = np.full((self.n, self.J), 1.0 / self.J)
        obs = ~self.missing
        r[obs] = 0.0
        r[obs, self.y[obs]] = 1.0
        return r

    def neighbour_split(self) -> list[tuple]:
        """Per offset ``d``: ``(t_obs, y_obs, A, t_mis, nb_mis, gidx)``: the tokens whose
        ``d``-th neighbour is observed and that neighbour's label, the ``(J, n)`` 0/1 matrix
        ``A[p, t] = [y_nb(t,d) = p]`` over those tokens, the tokens whose ``d``-th
        neighbour is missing with the neighbour's index, and for every token the observed
        neighbour's label or ``J`` (a row of zeros appended to a ``J x J`` table). With
        ``r_nb`` one-hot, the neighbour's part of the bound is a lookup
        (:meth:`PseudoLikelihoodBound._neighbour_sum`); only missing neighbours need
        ``log E_r[exp g]``. Computed once (``y`` is fixed)."""
        if self._split is None:
            out = []
            for d in range(self.R):
                nbd = self.nb[:, d]
                has = nbd >= 0
                nb_lab = np.where(has, self.y[np.where(has, nbd, 0)], -2)
                t_obs = np.flatnonzero(nb_lab >= 0)
                y_obs = nb_lab[t_obs]
                A = sp.csr_matrix((np.ones(t_obs.size), (y_obs, t_obs)),
                                  shape=(self.J, self.n))
                t_mis = np.flatnonzero(nb_lab == -1)
                gidx = np.where(nb_lab >= 0, nb_lab, self.J)  # row J of a table: zeros
                out.append((t_obs, y_obs, A, t_mis, nbd[t_mis], gidx))
            self._split = out
        return self._split

    def neighbour_groups(self) -> list[tuple[tuple[int, ...], np.ndarray]]:
        """The offsets whose observed neighbours' terms are added by one gather each
        (:meth:`PseudoLikelihoodBound._neighbour_sum`): ``[(offsets, code)]``, ``code`` per token
        the index of its row in the group's table ``T[(p_1, ..., p_k)] = sum_i g_{d_i}[p_i]``
        (``p_i = J`` when the ``d_i``-th neighbour is missing or absent: a zero row), i.e.
        ``code = sum_i p_i (J + 1)^(k - 1 - i)``. Offsets are grouped in order while the table
        has at most :data:`GROUP_ROWS` rows. Only offsets where at least a quarter of the
        tokens have an observed neighbour are grouped; the others (a crowd's tokens are nearly
        all missing) keep the scatter over the observed ones alone. Computed once."""
        if self._groups is None:
            split = self.neighbour_split()
            dense = [d for d in range(self.R) if 4 * split[d][0].size >= self.n]
            groups, cur = [], []
            for d in dense:
                if cur and (self.J + 1) ** (len(cur) + 1) > GROUP_ROWS:
                    groups.append(cur)
                    cur = []
                cur.append(d)
            if cur:
                groups.append(cur)
            out = []
            for ds in groups:
                code = np.zeros(self.n, dtype=np.intp)
                for d in ds:
                    code *= self.J + 1
                    code += split[d][5]
                out.append((tuple(ds), code))
            self._groups = out
        return self._groups

    def colours(self) -> list[np.ndarray]:
        """Colour classes of the missing tokens (no two share a factor)."""
        span = 2 * max((abs(o) for o in self.offsets), default=0) + 1
        idx = np.flatnonzero(self.missing)
        return [c for c in (idx[idx % span == k] for k in range(span)) if c.size]


#: the largest table of :meth:`Problem.neighbour_groups` (rows of ``J`` values)
GROUP_ROWS = 4096

__all__ = ["GROUP_ROWS", "Problem", "missing_weight", "neighbour_index"]
