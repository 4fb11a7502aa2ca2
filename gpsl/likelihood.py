r"""The pseudo-likelihood part of GPSL's variational bound, shared by every inference mode.

The model's likelihood (paper eq. 4) and everything in the bound that depends on the local
functions only through their marginal means ``m_tj`` and variances ``V_tj`` at the training
tokens lives here: the dependent label-pair functions ``q(f^S)``, the missing-label
distributions ``r`` (and the evidence hook on them), the Jensen bound on the expected
log-partition, and the coordinate-ascent updates of ``q(f^S)`` and ``r``. An inference mode
(:mod:`gpsl.inference` for the full GP, :mod:`gpsl.sparse` for the scalable one) subclasses
:class:`PseudoLikelihoodBound` and supplies the prior part: ``kl_U`` and the updates of
``q(f^U)``, keeping ``self.c.M`` (``(J, n)`` means) and ``self.c.Vd`` (``(J, n)`` marginal
variances) current. The derivation of the terms is in :mod:`gpsl.inference`'s docstring.

The weight of missing labels (EM-lambda)
----------------------------------------
With labels missing, the bound is the evidence lower bound of variational EM: the missing
labels' distributions ``r`` are the E-step, the rest the M-step. A missing token's own factor
``E_r[log p(y_t | y_nb(t), f)]`` then acts as a training target: the M-step fits the local
functions to the model's own guesses ``r_t``. When most tokens are unlabeled (a pool of
partially labeled sentences in active learning, 5-30% of the tokens labeled) these
self-targets outweigh the labels: from the uniform start they pull the functions towards
flat scores and EM stops in a poor local maximum (basenp, 700 sentences with 15% of the
tokens labeled at random: 88.4% test accuracy, against 94.8% for as many tokens in complete
sentences; ``bench.missing_weight``, 3 seeds). As Nigam, McCallum, Thrun and Mitchell
(2000, "EM-lambda") do for unlabeled documents, the M-steps weight each missing token's
own factor by ``lambda`` in ``[0, 1]``:

.. math::

   \mathcal L_\lambda = -\mathrm{KL}_U - \mathrm{KL}_S + \sum_t w_t\,
       E_{q,r}[\log p(y_t \mid y_{nb(t)}, f)] + \lambda \sum_{t\ \mathrm{missing}} H(r_t),
   \qquad w_t = 1 \text{ (observed)},\ \lambda \text{ (missing)}.

Every M-step (``q(f^U)``, ``q(f^S)``, ``theta``) maximises ``L_lambda`` with ``r`` fixed:
the data terms, pair counts and soft counts are weighted sums over tokens and
``-2 dL/dV_tq = w_t pi_tq`` (:meth:`PseudoLikelihoodBound.v_weight`). The E-step is the
unweighted one (every factor at weight 1, as ``lambda = 1``): ``r_t`` is the model's full
posterior guess of the label, the neighbours' evidence included; only its pull on the
functions is discounted. (Maximising ``L_lambda`` over ``r`` instead would multiply the
neighbours' evidence by ``1/lambda`` and gave 0.2-0.7 points lower accuracy on chunking and
basenp.) So a fit is a fixed-point iteration of two blocks, each monotone in its own objective
(tested), and ``lambda = 1`` is exactly the plain bound. The missing labels stay marginalised:
they are never dropped and never replaced by a guess, and they inform their neighbours'
factors through ``r`` at full weight. :func:`missing_weight` gives ``lambda``; its ``"auto"``
rule, ``min(1, n_observed / n_missing)``, keeps the plain bound while at most half the labels
are missing (the paper's Figure 3) and lets the self-targets weigh no more than the labels
otherwise. (The scalable mode now starts a fit with missing labels by an M-step at weight 0,
:meth:`gpsl.sparse.SparseGPSLInference.sweep_labels_first`, which removes most of that pull
from the uniform start; ``lambda`` then changes its fits by 0.1 point or less,
``docs/speed.md``.)

Remaining time
--------------
:func:`gpsl.progress.fit_eta` and :func:`gpsl.progress.remaining_sweeps` estimate how long
a fit still runs from the bounds it has reported and the stop rule of
:meth:`PseudoLikelihoodBound.fit` (:func:`gpsl.progress._converged`), for a progress display
that does not assume the sweep cap. The problem's data (:class:`Problem`, the neighbour
index, the missing weight) live in :mod:`gpsl.problem`, re-exported here.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.special import logsumexp

from gpsl._optimize import minimize
from gpsl.problem import Problem, missing_weight, neighbour_index  # noqa: F401
from gpsl.progress import DEFAULT_RATE, _converged, fit_eta, remaining_sweeps  # noqa: F401

# --------------------------------------------------------------------------- the bound


LSE_BOUNDS = ("jensen", "bohning")


class PseudoLikelihoodBound:
    r"""The data, ``q(f^S)`` and ``r`` parts of the bound, and Algorithm 1's sweep loop.

    Subclasses set ``self.p`` (:class:`Problem`), ``self.s`` (a state with ``theta``,
    ``m_S``, ``v_S``, ``r``), ``self.c`` (a cache with ``M`` and ``Vd``) and implement
    ``kl_U``, ``update_mean_U``, ``update_cov_U`` and ``update_theta``.

    ``lse_bound`` chooses the upper bound on ``E_q[log sum_q exp(f^U_tq + s_tq)]`` over the
    local functions (the neighbours' part ``s`` always takes the Jensen step of
    :mod:`gpsl.inference`):

    * ``"jensen"`` (the paper's eq. lb2): ``log sum_q exp(m_tq + V_tq/2 + c_tq)``;
    * ``"bohning"``: the Hessian of log-sum-exp is bounded by
      ``A = (I - 11'/J)/2`` (Boehning 1992), so a second-order expansion around ``m`` and the
      expectation over ``f ~ N(m, diag V)`` give
      ``log sum_q exp(m_tq + c_tq) + kappa sum_q V_tq`` with ``kappa = (1 - 1/J)/4``.
      The variances then enter the bound additively, independent of the means: a covariance
      family that over-states ``V`` (the sparse mode's mean-field) no longer distorts the
      means. ``dL/dV_tq = -kappa`` for every token and label, so the covariance fixed point
      is data-independent (Khan: ``lambda = 2 kappa``).

    Both are valid upper bounds, so ``L`` stays a lower bound either way.
    """

    lse_bound = "jensen"
    #: ``s2``, the prior variance of every entry of the pair functions: ``f^S_d ~ N(0, s2 I)``.
    #: The paper has ``K^S = I`` (``s2 = 1``, the default here); an engine sets the fit's value
    #: (:attr:`gpsl.features.NerFeatures.PAIR_VARIANCE` says why the ``ner`` set uses 4)
    pair_variance = 1.0
    #: the scalable engines set this: an observed neighbour's term ``c_tdq = g_d[y_nb, q]`` is
    #: looked up instead of computed as ``log sum_p r_nb(p) exp g_d[p, q]`` with a one-hot
    #: ``r_nb`` (the same number up to rounding), the pair term is ``sum_d <N_d, m_S[d]>``
    #: from the pair counts, and the ``r`` update works on the missing tokens' rows only.
    #: The full GP keeps the general form, so its figures (the paper's Table 1) reproduce
    #: to the last digit.
    lookup_neighbours = False
    #: relative decrease per L-BFGS-B step that ends the ``q(f^S)`` step (``None``: scipy's
    #: default, 2.2e-9; the full GP keeps it)
    S_ftol: float | None = None

    @property
    def kappa(self) -> float:
        """The Boehning bound's variance weight ``(1 - 1/J)/4``."""
        return 0.25 * (1.0 - 1.0 / self.p.J)

    def set_lse_bound(self, lse_bound: str) -> None:
        """Choose the bound (checked against :data:`LSE_BOUNDS`)."""
        if lse_bound not in LSE_BOUNDS:
            raise ValueError(f"lse_bound must be one of {LSE_BOUNDS}, not {lse_bound!r}")
        self.lse_bound = lse_bound

    def v_weight(self, pi: np.ndarray) -> np.ndarray:
        """``-2 dL/dV`` per token and label: ``w_t pi`` (Jensen) or ``2 kappa w_t``
        (Boehning), ``w_t`` the factor weights (:attr:`Problem.w`)."""
        out = pi if self.lse_bound == "jensen" else np.full_like(pi, 2.0 * self.kappa)
        if self.p.weight is None:
            return out
        return out * self.p.weight[:, None]

    def base_a(self) -> np.ndarray:
        """``m + V/2`` (Jensen) or ``m`` (Boehning): the local part of ``a``, ``(n, J)``."""
        if self.lse_bound == "jensen":
            return self.c.M.T + 0.5 * self.c.Vd.T
        return self.c.M.T.copy()

    def gS(self) -> np.ndarray:
        return self.s.m_S + 0.5 * self.s.v_S

    def _c_terms(self, gS: np.ndarray, r: np.ndarray) -> np.ndarray:
        """c[d] (n, J): log E_{r_nb}[exp g_d(y_nb, q)], zero where no neighbour."""
        n, J, R = self.p.n, self.p.J, self.p.R
        c = np.zeros((R, n, J))
        if self.lookup_neighbours:
            for d, (t_obs, y_obs, _, t_mis, nb_mis, _) in enumerate(self.p.neighbour_split()):
                c[d][t_obs] = gS[d][y_obs]
                if t_mis.size:
                    shift = gS[d].max(axis=0)
                    E = np.exp(gS[d] - shift)
                    with np.errstate(divide="ignore"):
                        c[d][t_mis] = np.log(r[nb_mis] @ E) + shift
            return c
        for d in range(R):
            nbd = self.p.nb[:, d]
            has = nbd >= 0
            if not has.any():
                continue
            shift = gS[d].max(axis=0)
            E = np.exp(gS[d] - shift)
            with np.errstate(divide="ignore"):
                c[d][has] = np.log(r[nbd[has]] @ E) + shift
        return c

    def _neighbour_sum(self, gS: np.ndarray, r: np.ndarray, out: np.ndarray) -> list:
        """``out += sum_d c_d`` without forming the ``(R, n, J)`` array (the lookup form of
        :meth:`_c_terms`): an observed neighbour's term is a row of ``g_d``, gathered; a
        missing one's ``log sum_p r_nb(p) exp g_d[p, :]``. Returns per offset ``None`` or
        ``(u, E)``: ``E = exp(g_d - shift)`` (a column shift) and ``u = r_nb' E`` at the tokens
        whose neighbour is missing (in the order of :meth:`Problem.neighbour_split`), so that
        their term is ``log u + shift`` and ``exp(-c) e^g = E / u``.

        The observed neighbours of a group of offsets (:meth:`Problem.neighbour_groups`) are
        one gather from the table of their label tuples' summed rows (at most 4,096 rows,
        built per call: ``T[(p, q)] = g_-1[p] + g_+1[q]`` for GPSL2), one pass over ``(n, J)``
        where the scatter over the observed tokens made three per offset: the ``q(f^S)``
        step evaluates this 40-70 times a step (20k tokens, half labeled: 1.2-4 ms a call
        before, 0.2 ms after). The sums are the same up to rounding (``g`` rows added before
        the local part)."""
        J = self.p.J
        split = self.p.neighbour_split()
        grouped = set()
        for ds, code in self.p.neighbour_groups():
            T = np.zeros((1, J))
            for d in ds:
                G = np.zeros((J + 1, J))
                G[:J] = gS[d]
                T = (T[:, None, :] + G[None, :, :]).reshape(-1, J)
            out += np.take(T, code, axis=0)
            grouped.update(ds)
        mis = []
        for d, (t_obs, y_obs, _, t_mis, nb_mis, _) in enumerate(split):
            # an offset outside the groups: only the tokens with an observed neighbour gain a
            # row (the crowd's tokens are nearly all missing: a gather over every token would
            # cost a pass over (n, J) for zeros)
            if d not in grouped and t_obs.size:
                out[t_obs] += gS[d][y_obs]
            if t_mis.size:
                shift = gS[d].max(axis=0)
                E = np.exp(gS[d] - shift)
                u = r[nb_mis] @ E  # E_r[exp(g - shift)]
                with np.errstate(divide="ignore"):
                    cm = np.log(u) + shift
                out[t_mis] += cm
                mis.append((u, E))
            else:
                mis.append(None)
        return mis

    def terms(self, M=None, Vd=None, gS=None, r=None) -> dict:
        M = self.c.M if M is None else M
        Vd = self.c.Vd if Vd is None else Vd
        gS = self.gS() if gS is None else gS
        r = self.s.r if r is None else r
        if self.lookup_neighbours:
            a = M.T + 0.5 * Vd.T if self.lse_bound == "jensen" else M.T.copy()
            mis = self._neighbour_sum(gS, r, a)
            lse, pi = _lse_softmax(a.copy())
            # c: only at the tokens whose neighbour is missing (what update_r reads)
            return {"a": a, "lse": lse, "pi": pi, "c": None, "c_mis": mis}
        c = self._c_terms(gS, r)
        if self.lse_bound == "jensen":
            a = M.T + 0.5 * Vd.T + c.sum(axis=0)  # this order: Table 1 reproduces exactly
        else:
            a = M.T + c.sum(axis=0)
        lse = logsumexp(a, axis=1)
        pi = np.exp(a - lse[:, None])
        return {"a": a, "lse": lse, "pi": pi, "c": c}

    def _own(self, r: np.ndarray) -> np.ndarray:
        """``w_t r_t``: the token's own label distribution times its factor weight."""
        return r if self.p.weight is None else r * self.p.weight[:, None]

    def pair_counts(self, r=None) -> np.ndarray:
        """Expected label-pair counts N_d[p, q] = sum_t w_t r_nb(t,d)(p) r_t(q), (R, J, J)."""
        r = self.s.r if r is None else r
        own = self._own(r)
        if self.lookup_neighbours:  # observed neighbours: a sparse 0/1 matrix
            out = []
            for _, _, A, t_mis, nb_mis, _ in self.p.neighbour_split():
                N = np.asarray(A @ own)
                if t_mis.size:
                    N += r[nb_mis].T @ own[t_mis]
                out.append(N)
            return np.stack(out) if out else np.zeros((0, self.p.J, self.p.J))
        return np.stack([r[nb[nb >= 0]].T @ own[nb >= 0] for nb in self.p.nb.T])

    def _pair_term(self, m_S, r, counts=None) -> float:
        """``sum_t w_t sum_d r_nb(t,d)' m_S[d] r_t`` (``= sum_d <N_d, m_S[d]>`` from the pair
        counts ``N_d`` when given)."""
        if counts is None and self.lookup_neighbours:
            counts = self.pair_counts(r)
        if counts is not None:
            return float(np.vdot(counts, m_S))
        tot = 0.0
        own = self._own(r)
        for d in range(self.p.R):
            nbd = self.p.nb[:, d]
            has = nbd >= 0
            tot += float(np.sum((r[nbd[has]] @ m_S[d]) * own[has]))
        return tot

    def _wsum(self, x: np.ndarray) -> float:
        """``sum_t w_t x_t`` for a per-token ``(n,)`` array."""
        return float(x.sum() if self.p.weight is None else (self.p.weight * x).sum())

    def kl_S(self, m_S=None, v_S=None) -> float:
        """``-KL(q(f^S) || N(0, s2 I))`` with ``s2`` = :attr:`pair_variance` (the paper's
        ``K^S = I`` is ``s2 = 1``): ``1/2 sum (log(v/s2) - v/s2 - m^2/s2 + 1)``."""
        m_S = self.s.m_S if m_S is None else m_S
        v_S = self.s.v_S if v_S is None else v_S
        s2 = float(self.pair_variance)
        if s2 == 1.0:  # the paper's prior, in the form its figures were made with
            return 0.5 * float(np.sum(np.log(v_S) - v_S - m_S ** 2 + 1.0))
        return 0.5 * float(np.sum(np.log(v_S / s2) - (v_S + m_S ** 2) / s2 + 1.0))

    def entropy(self, r=None) -> float:
        """``lambda sum_{t missing} H(r_t)`` (``lambda`` = :attr:`Problem.missing_weight`)."""
        r = self.s.r if r is None else r
        rm = r[self.p.missing]
        with np.errstate(divide="ignore", invalid="ignore"):
            h = float(-np.sum(np.where(rm > 0, rm * np.log(rm), 0.0)))
        return h if self.p.weight is None else self.p.missing_weight * h

    def data_term(self, T=None, M=None, r=None, m_S=None) -> float:
        T = self.terms() if T is None else T
        M = self.c.M if M is None else M
        r = self.s.r if r is None else r
        m_S = self.s.m_S if m_S is None else m_S
        out = float(np.sum(self._own(r) * M.T)) + self._pair_term(m_S, r) \
            - self._wsum(T["lse"])
        if self.lse_bound == "bohning":
            out -= self.kappa * self._wsum(self.c.Vd.sum(axis=0))
        return out

    def elbo(self) -> float:
        """The variational lower bound (eq. lb2, extended to missing labels and evidence)."""
        return (self.kl_U() + self.kl_S() + self.data_term() + self.entropy()
                + self.p.evidence_term(self.s.r))

    def _S_objective(self, x, base_a, counts):
        """-L and its gradient in x = (m_S, log v_S), everything else fixed.

        dL/dm_S[d,p,q] = N_d[p,q] - s_d[p,q] - m_S[d,p,q] / s2,
        dL/dv_S[d,p,q] = 1/2 (1/v - 1/s2) - 1/2 s_d[p,q],
        with expected pair counts N_d = sum_t r_nb(t) r_t' and
        s_d[p,q] = sum_t pi_tq r_nb(p) e^{g[p,q]} / e^{c[t,d,q]}.
        The sums over tokens are :meth:`S_data`; :meth:`S_combine` adds the rest.
        """
        m_S, v_S = self.S_unpack(x)
        pair, lse_sum, soft = self.S_data(
            m_S, v_S, base_a, counts if self.lookup_neighbours else None)
        return self.S_combine(m_S, v_S, pair, lse_sum, soft, counts)

    def S_unpack(self, x):
        """``(m_S, v_S)`` from ``x = (m_S, log v_S)`` ravelled."""
        R, J = self.p.R, self.p.J
        return x[: R * J * J].reshape(R, J, J), np.exp(x[R * J * J:].reshape(R, J, J))

    def S_data(self, m_S, v_S, base_a, counts=None):
        """The token sums of the ``q(f^S)`` objective at ``(m_S, v_S)``: the pair term
        ``sum_t r_nb' m_S r_t``, ``sum_t lse_t`` and the soft counts ``s_d`` (see
        :meth:`_S_objective`). Additive over sentences (a shard computes its own). ``counts``
        (the pair counts, optional) turns the pair term into ``sum_d <N_d, m_S[d]>``."""
        R, J = self.p.R, self.p.J
        gS = m_S + 0.5 * v_S
        r = self.s.r
        soft = np.empty((R, J, J))
        if self.lookup_neighbours:
            a = base_a.copy()
            mis = self._neighbour_sum(gS, r, a)
            lse, pi = _lse_softmax(a)
            pi = self._own(pi)
            for d, (_, _, A, t_mis, nb_mis, _) in enumerate(self.p.neighbour_split()):
                soft[d] = A @ pi  # observed neighbour p: sum of w_t pi_t over those tokens
                if mis[d] is not None:  # e^{g[p,q]} / e^{c_tq} = E[p, q] / u_tq
                    u, E = mis[d]
                    with np.errstate(divide="ignore"):
                        ratio = pi[t_mis] / u
                    soft[d] += E * (r[nb_mis].T @ ratio)
            return self._pair_term(m_S, r, counts), self._wsum(lse), soft
        c = self._c_terms(gS, r)
        a = base_a + c.sum(axis=0)
        lse = logsumexp(a, axis=1)
        pi = self._own(np.exp(a - lse[:, None]))  # w_t pi_t
        for d in range(R):
            nbd = self.p.nb[:, d]
            has = nbd >= 0
            shift = gS[d].max(axis=0)
            E = np.exp(gS[d] - shift)
            with np.errstate(over="ignore"):
                ratio = pi[has] * np.exp(shift - c[d][has])
            soft[d] = E * (r[nbd[has]].T @ ratio)
        return self._pair_term(m_S, r), self._wsum(lse), soft

    def S_combine(self, m_S, v_S, pair, lse_sum, soft, counts):
        """-L and its gradient in ``(m_S, log v_S)`` from the token sums of :meth:`S_data`
        and the pair counts ``N_d`` (:meth:`pair_counts`)."""
        s2 = float(self.pair_variance)
        f = pair - lse_sum + self.kl_S(m_S, v_S)
        grad_m = counts - soft - m_S / s2
        grad_logv = v_S * (0.5 * (1.0 / v_S - 1.0 / s2) - 0.5 * soft)
        return -f, -np.concatenate([grad_m.ravel(), grad_logv.ravel()])

    def _S_problem(self):
        """The objective of :meth:`update_S` and its fixed arguments (pair counts, the local
        part of ``a``), computed once per update."""
        counts = self.pair_counts()
        base_a = self.base_a()
        return self._S_objective, (base_a, counts)

    def update_S(self, maxiter=50):
        """Maximise L over (m_S, v_S) with L-BFGS-B on the exact gradient."""
        if self.p.R == 0:
            return
        R, J = self.p.R, self.p.J
        fun, args = self._S_problem()
        x0 = np.concatenate([self.s.m_S.ravel(), np.log(self.s.v_S).ravel()])
        f0 = fun(x0, *args)[0]
        bounds = [(None, None)] * (R * J * J) + [(-30.0, 5.0)] * (R * J * J)
        options = {"maxiter": maxiter}
        if self.S_ftol is not None:
            options["ftol"] = self.S_ftol
        res = minimize(fun, x0, args=args, jac=True, method="L-BFGS-B", bounds=bounds,
                       options=options)
        if res.fun <= f0:
            self.s.m_S = res.x[: R * J * J].reshape(R, J, J).copy()
            self.s.v_S = np.exp(res.x[R * J * J:]).reshape(R, J, J).copy()

    def update_r(self, rounds=2):
        """Minorise-maximise update of the label distributions of missing tokens.

        The E-step of the plain bound (every factor at weight 1, whatever the missing
        weight ``lambda``; see the module docstring): it never lowers ``L_1`` at fixed
        ``q``."""
        classes = self.p.colours()
        if not classes:
            return
        if self.lookup_neighbours:
            return self._update_r_rows(classes, rounds)
        R = self.p.R
        for _ in range(rounds):
            for cls in classes:
                gS = self.gS()
                T = self.terms(gS=gS)
                G = self.c.M.T.copy()  # own local term, (n, J)
                for d in range(R):
                    nbd = self.p.nb[:, d]
                    has = nbd >= 0
                    # own factor: sum_p r_nb(p) m_S[p, q]
                    G[has] += self.s.r[nbd[has]] @ self.s.m_S[d]
                    # as the d-th neighbour of s: sum_q r_s(q) m_S[p,q]
                    #   - sum_q pi_sq exp(g[p,q] - c[s,d,q])  (tangent of -lse_s)
                    s_idx = np.flatnonzero(has)
                    contrib = self.s.r[s_idx] @ self.s.m_S[d].T
                    shift = gS[d].max(axis=0)
                    E = np.exp(gS[d] - shift)
                    with np.errstate(over="ignore"):
                        ratio = T["pi"][s_idx] * np.exp(shift - T["c"][d][s_idx])
                    contrib -= ratio @ E.T
                    np.add.at(G, nbd[s_idx], contrib)
                Gc = G[cls]
                if self.p.evidence is not None:
                    Gc = Gc + self.p.evidence[cls]
                Gc -= Gc.max(axis=1, keepdims=True)
                rc = np.exp(Gc)
                rc /= rc.sum(axis=1, keepdims=True)
                self.s.r[cls] = rc

    def _update_r_rows(self, classes, rounds) -> None:
        """:meth:`update_r` computing the softmax argument ``G`` at the colour class's rows
        only (the same minoriser; the tokens whose ``d``-th neighbour is in the class are
        found from :meth:`Problem.neighbour_split`)."""
        n = self.p.n
        split = self.p.neighbour_split()
        pos = np.full(n, -1, dtype=np.int64)
        for _ in range(rounds):
            for cls in classes:
                gS = self.gS()
                T = self.terms(gS=gS)
                r = self.s.r
                Gc = self.c.M.T[cls].copy()  # own local term
                pos[cls] = np.arange(cls.size)
                for d, (_, _, _, t_mis, nb_mis, _) in enumerate(split):
                    nbd = self.p.nb[cls, d]
                    has = nbd >= 0
                    # own factor: sum_p r_nb(p) m_S[p, q]
                    Gc[has] += r[nbd[has]] @ self.s.m_S[d]
                    if T["c_mis"][d] is None:
                        continue
                    # as the d-th neighbour of s: sum_q r_s(q) m_S[p,q]
                    #   - sum_q pi_sq exp(g[p,q] - c[s,d,q])  (tangent of -lse_s)
                    u, E = T["c_mis"][d]
                    sel = pos[nb_mis] >= 0
                    s_idx, at = t_mis[sel], pos[nb_mis[sel]]  # each row at most once
                    contrib = r[s_idx] @ self.s.m_S[d].T
                    with np.errstate(divide="ignore"):
                        ratio = T["pi"][s_idx] / u[sel]  # pi e^{g - c} = pi E / u
                    contrib -= ratio @ E.T
                    Gc[at] += contrib
                pos[cls] = -1
                if self.p.evidence is not None:
                    Gc += self.p.evidence[cls]
                Gc -= Gc.max(axis=1, keepdims=True)
                rc = np.exp(Gc)
                rc /= rc.sum(axis=1, keepdims=True)
                self.s.r[cls] = rc

    # ----------------------------------------------------------------- Algorithm 1

    def sweep(self):
        self.update_r()
        self.update_mean_U()
        self.update_cov_U()
        self.update_S()
        self.update_r()
        return self.elbo()

    def sweep_number(self, k: int) -> float:
        """Sweep ``k`` (1-based) of :meth:`fit`: :meth:`sweep` (an engine may start
        differently, see :meth:`gpsl.sparse.SparseGPSLInference.sweep_number`)."""
        return self.sweep()

    def fit(self, max_iter=100, tol=1e-4, learn_hyper=True, callback=None, inner_max=20,
            on_sweep=None):
        """Variational EM (Algorithm 1); returns the bound trace (one value per sweep).

        ``on_sweep(engine)`` (optional) runs after every sweep, before the stop rule; it may
        change the problem's evidence (:meth:`Problem.set_evidence`), e.g. the crowd model's
        M-step, and returns the bound after its change (or ``None`` to keep the sweep's), or
        ``(bound, stop)``: ``stop`` true ends the fit after this sweep (its own stop rule).
        """
        t0 = time.perf_counter()
        trace = [self.elbo()]
        it = 0
        outer_prev = trace[0]
        if not learn_hyper:
            inner_max = max_iter
        while it < max_iter:
            # inner loop: coordinate ascent for fixed theta
            for _ in range(inner_max):
                it += 1
                trace.append(self.sweep_number(it))
                stop = False
                if on_sweep is not None:
                    extra = on_sweep(self)
                    if isinstance(extra, tuple):
                        extra, stop = extra
                    if extra is not None:
                        trace[-1] = float(extra)
                if callback is not None:
                    callback({"iteration": it, "bound": trace[-1],
                              "seconds": time.perf_counter() - t0})
                if stop or _converged(trace[-2], trace[-1], tol) or it >= max_iter:
                    break
            if stop or not learn_hyper or it >= max_iter:
                break
            if _converged(outer_prev, trace[-1], tol) and len(trace) > 2:
                break
            outer_prev = trace[-1]
            self.update_theta()
        self.n_iter = it
        return trace


def _lse_softmax(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(logsumexp(a, axis=1), softmax(a, axis=1))`` of an ``(n, J)`` array, one pass of
    ``exp`` (scipy's ``logsumexp`` plus a second ``exp`` cost twice as much)."""
    amax = a.max(axis=1, keepdims=True)
    pi = a - amax
    np.exp(pi, out=pi)
    z = pi.sum(axis=1, keepdims=True)
    pi /= z
    lse = np.log(z[:, 0])
    lse += amax[:, 0]
    return lse, pi

