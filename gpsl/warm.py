"""Warm starts: which parts of a previous fit a new fit may start from.

A refit (active learning, an annotator adding labels) usually keeps most sentences of the
previous training set. Sentences are matched by content (``keys``, any order, duplicates in
turn); a kept sentence can hand its part of the variational state to the new fit:

* ``alpha`` - the dual weights of the means ``m_U = K alpha`` (Algorithm 1's ``m_U``);
* ``lam`` - the Khan parameters of ``V_U = (K^-1 + diag lam)^-1``;
* ``S`` - ``q(f_S)``, the means and variances over label pairs (``m_S``, ``v_S``).

The hyper-parameters ``theta`` always carry over. :func:`warm_state` decides what else does,
:func:`carry_state` does the copying.

Why only complete labels carry the variational state
----------------------------------------------------
With every label observed, ``r`` is fixed and the bound (paper eq. lb2) is concave in
``(m_U, m_S, log v_S)`` with the Khan fixed point for ``V_U``: one maximiser, which a warm start
reaches in fewer sweeps. With missing labels the bound also depends on the label
distributions ``r`` of the unlabeled tokens, and it has many local maxima. Carried means are
predictions at *every* token (``m = K alpha`` reaches the new sentences too), so the unlabeled
tokens' ``r`` start at the previous model's labels and coordinate ascent settles in the
maximum around them, which is not the one a cold fit finds and is less accurate: on basenp
(pool 60, random tokens) carrying ``alpha`` reached a *higher* bound than the cold fit (-3098
against -3166) with lower test accuracy (0.899 against 0.913), and tightening ``tol`` to 1e-5
did not bring the fits together (``python -m bench.warm_start``, README "Warm starts").
"""

from __future__ import annotations

import numpy as np

from gpsl.inference import Problem, VariationalState, initial_state

#: every part of the state :func:`carry_state` can copy
PARTS = ("alpha", "lam", "S")


def carry_state(prev_state: VariationalState, prev_keys, prev_lengths, problem: Problem,
                keys, lengths, parts=PARTS) -> VariationalState:
    """A start for ``problem``: the initial state with ``theta`` and ``parts`` of the kept
    sentences copied from ``prev_state``.

    ``keys`` / ``prev_keys`` are content keys of the sentences (equal keys = the same tokens);
    a kept sentence's slice of ``alpha`` and ``lam`` moves to its new position, new sentences
    keep the cold values (``alpha = 0``, ``lam = 1/J``). ``"S"`` copies ``m_S`` and ``v_S``
    (same labels and offsets required). The label distributions ``r`` are never copied.
    """
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown state part(s) {sorted(unknown)}; choose from {PARTS}")
    s = initial_state(problem, prev_state.theta[0])
    s.theta = prev_state.theta.copy()
    if prev_state.alpha.shape[0] != problem.J:
        return s
    where: dict[str, list[int]] = {}
    for i, k in enumerate(prev_keys):
        where.setdefault(k, []).append(i)
    prev_start = np.cumsum(prev_lengths) - prev_lengths
    start = np.cumsum(lengths) - lengths
    for i, k in enumerate(keys):
        if not where.get(k):
            continue
        j = where[k].pop(0)
        src = slice(int(prev_start[j]), int(prev_start[j] + lengths[i]))
        dst = slice(int(start[i]), int(start[i] + lengths[i]))
        if "alpha" in parts:
            s.alpha[:, dst] = prev_state.alpha[:, src]
        if "lam" in parts:
            s.lam[:, dst] = prev_state.lam[:, src]
    if "S" in parts and prev_state.m_S.shape == s.m_S.shape:
        s.m_S = prev_state.m_S.copy()
        s.v_S = prev_state.v_S.copy()
    return s


def warm_state(prev_state: VariationalState, prev_keys, prev_lengths, problem: Problem,
               keys, lengths) -> VariationalState:
    """The warm start of :class:`gpsl.model.GPSL` (``warm_start=True``).

    ``theta`` always; ``alpha``, ``lam`` and ``q(f_S)`` of the kept sentences too when no
    training label is missing (see the module docstring). Measured with ``python -m
    bench.warm_start`` (README, "Warm starts").
    """
    parts = () if bool(problem.missing.any()) else PARTS
    return carry_state(prev_state, prev_keys, prev_lengths, problem, keys, lengths, parts)
