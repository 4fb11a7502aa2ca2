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
     (eq. S), are concave in ``s_a`` (``-log Gamma`` of an affine function is concave).
     Both at once: at the optimal ``q`` for ``s_a`` (VB) the annotator's terms are
     ``log p(s_a) + sum_y [log B(N_a[y] + kappa m(s_a)[y]) - log B(kappa m(s_a)[y])]``
     (``B`` the multivariate Beta function), concave in ``s_a`` too (``log Gamma(N + x) -
     log Gamma(x)`` is concave in ``x``): one safeguarded Newton solve for ``s_a``, then
     ``q`` by (VB), instead of alternating (VB) and (S), which converges slowly;
   * MAP, fixed prior: ``sum_{y,l} (N_a[y, l] + beta_y[l] - 1) log pi_a[y, l]``, row by row
     on the simplex (Lagrange; concave, every coefficient >= 0)

     .. math::  \pi_a[y, l] = \frac{N_a[y, l] + \beta_y[l] - 1}
                                   {\sum_{l'} (N_a[y, l'] + \beta_y[l'] - 1)}      \qquad (M)

   * one-coin, with ``C_a = sum_{v: a_v = a} r_{t_v}(l_v)`` the expected correct votes out of
     ``n_a``: ``s_a = (C_a + prior_diag) / (n_a + prior_diag + prior_off)``          (M1).

   All are exact block maximisations (started from the previous ``s_a``), so this step never
   lowers (J1) either.
3. With ``tagger_prior="learn"`` the tagger's kernel hyper-parameters ``theta`` are a block
   too: GPSL's own variational-EM M-step (``learn_hyper``; closed form for the linear
   kernel's variance, kept only if the bound does not drop). ``L_GPSL`` is the only term of
   (J1) that depends on ``theta``, so (J1) stays one bound under monotone coordinate ascent.
   The default, ``tagger_prior="auto"``, fixes ``theta`` at the echo bound instead
   (:class:`CrowdGPSL`, "The tagger's prior": on large data the M-step on ``theta`` does
   not converge in useful time).

The sequential annotator model (:mod:`gpsl.crowd.sequential`, the default of
:class:`CrowdGPSL`) replaces ``log pi_a[y, l_v]`` in ``e_t`` by ``E_q log pi_a[y, p_v, l_v]``,
``p_v`` the annotator's own previous label, and the annotator terms by its own (derived
there); (J1) and the coordinate ascent are otherwise the same.

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
skills ``s_a`` are reported too (:func:`annotator_report`).

The package, one aggregator or model a module (as crowd-kit): :mod:`~gpsl.crowd.vote_matrix`
(the votes in long form), :mod:`~gpsl.crowd.confusion` (the confusion models and their
M-step), :mod:`~gpsl.crowd.sequential` (the sequential annotator model),
:mod:`~gpsl.crowd.majority_vote`, :mod:`~gpsl.crowd.dawid_skene`, :mod:`~gpsl.crowd.joint`
(:class:`CrowdGPSL`) and :mod:`~gpsl.crowd.base` (the shared surface, the decision rule, the
annotator report). Crowd input is read by :mod:`gpsl.io`: :mod:`~gpsl.io.crowd` (JSONL and
CoNLL votes) and :mod:`~gpsl.io.crowd_raw` (the one-folder-per-annotator layout, aligned to
the gold tokens).
"""

from __future__ import annotations

from gpsl.crowd.base import TIE, annotator_report, decide, entity_reliability
from gpsl.crowd.confusion import DEFAULT_SHRINK, LOG_FLOOR, CrowdModel, expected_counts, m_step
from gpsl.crowd.dawid_skene import DawidSkene, e_step
from gpsl.crowd.joint import CrowdGPSL, decode_labels, echo_variance
from gpsl.crowd.majority_vote import MajorityVote
from gpsl.crowd.sequential import SequentialModel, previous_labels, sequential_m_step
from gpsl.crowd.vote_matrix import Votes, majority_posteriors

__all__ = ["DEFAULT_SHRINK", "LOG_FLOOR", "TIE", "CrowdGPSL", "CrowdModel", "DawidSkene",
           "MajorityVote", "SequentialModel", "Votes", "annotator_report", "decide",
           "decode_labels", "e_step", "echo_variance", "entity_reliability",
           "expected_counts", "m_step", "majority_posteriors", "previous_labels",
           "sequential_m_step"]
