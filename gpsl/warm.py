"""Warm starts: which parts of a previous fit a new fit may start from.

A refit (active learning, an annotator adding labels) usually keeps most sentences of the
previous training set. Sentences are matched by content (``keys``, any order, duplicates in
turn); a kept sentence can hand its part of the variational state to the new fit:

* ``alpha`` - the dual weights of the means ``m_U = K alpha`` (Algorithm 1's ``m_U``);
* ``lam`` - the Khan parameters of ``V_U = (K^-1 + diag lam)^-1``;
* ``S`` - ``q(f_S)``, the means and variances over label pairs (``m_S``, ``v_S``).

The hyper-parameters ``theta`` always carry over. :func:`warm_state` decides what else does
in the full GP, :func:`carry_state` does the copying; the scalable mode (the default) carries
its weight-space state by feature and label name, :func:`carry_sparse_state` (below).

The scalable mode: the same optimum as a cold fit, with or without missing labels
--------------------------------------------------------------------------------
The scalable mode's state lives on features, not tokens: the weight means ``W``, their
mean-field precisions, ``q(f^S)`` and ``theta`` carry by feature and label name into the new
vocabulary; the missing labels' ``r`` do not. A fit with missing labels then starts as a cold
one (:meth:`gpsl.sparse.SparseGPSLInference.sweep_labels_first`: an M-step on the labeled
tokens, then the E-step) from the previous functions instead of zero, and ends at the cold
fit's optimum: ``tests/lib/test_warm.py`` checks that the bound and the marginals meet the cold
fit's as the stop rule tightens (``tol`` 1e-8: bound within 1e-7, marginals within 1e-3;
measured 3e-9 and 2e-5). Carrying ``r`` as well (the previous model's guesses) ended in
another optimum, with the higher bound and the worse labels described below for the full GP:
chunking, 700 -> 800 sentences, 90% -> 85% of the tokens hidden, test loss 10.51% against
the cold fit's 9.84%, 97.4% of the test labels equal; without ``r`` 9.88% and 99.96% (50% ->
45% hidden: 7.41% / 7.37%, 99.87%; complete labels: 6.40% / 6.45%, 99.4%). At the default
``tol`` a warm refit costs about what a cold one does (two sweeps either way; the mean steps
end earlier from a warm start), see ``docs/speed.md``.

The full GP
-----------

Why only complete labels carry the variational state
----------------------------------------------------
With every label observed, ``r`` is fixed and the bound (paper eq. lb2) is concave in
``(m_U, m_S, log v_S)`` with the Khan fixed point for ``V_U``: one maximiser, which a warm start
reaches in fewer sweeps. With missing labels the bound also depends on the label
distributions ``r`` of the unlabeled tokens, and it has many local maxima. Carried means are
predictions at *every* token (``m = K alpha`` reaches the new sentences too), so the unlabeled
tokens' ``r`` start at the previous model's labels and coordinate ascent settles in the
maximum around them, which is not the one a cold fit finds and is less accurate although its
bound is *higher*. Measured on active-learning rounds (``python -m bench.warm_start``,
``bench/results/warm_start.md``), warm against cold:

* complete labels, carrying ``alpha``, ``lam`` and ``q(f_S)`` (what ``warm_state`` does):
  0.82 (basenp) and 0.47 (chunking) of the cold fit's time, test accuracy -0.001 and -0.003,
  bound +0.5 and +3.1 (the warm fit goes on a little further before ``tol`` stops it);
* missing labels, carrying ``alpha``: accuracy -0.010 / -0.012 on average (worst round -0.032)
  at a bound +78 / +43 higher; ``alpha`` and ``lam``: 0.78 / 0.57 of the time, accuracy -0.019 /
  -0.022; everything: -0.044 / -0.023 (worst -0.12). With ``tol`` 1e-5 the warm and cold fits
  stay apart too (``--dataset basenp --strategies random --rounds 2 --tol 1e-5 --max-iter 300``,
  ``warm_start_tol1e-5.md``: carrying ``alpha`` gave 0.851 and 0.900 against the cold fits'
  0.866 and 0.913), so it is not an effect of the stopping rule.
"""

from __future__ import annotations

import itertools

import numpy as np

from gpsl.inference import Problem, VariationalState, initial_state
from gpsl.sparse import SparseState, initial_sparse_state

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


def carry_sparse_state(prev_state: SparseState, prev_features, problem: Problem, features,
                       D: int, prev_classes=None, classes=None) -> SparseState:
    """A warm start of the scalable mode (mean-field family) for ``problem``.

    The weight space is indexed by features, not tokens, so the parts carry by feature name:
    ``W`` (the weight means) and the mean-field precisions of every feature the new
    vocabulary ``features`` shares with ``prev_features`` (a new feature starts at the prior:
    mean 0, precision 1); ``theta`` and ``q(f^S)`` as they are. Labels carry by name
    (``prev_classes`` -> ``classes``, both in column order; default: the same labels): a label
    new to this fit starts at the prior and takes ``theta`` of the first label. ``D`` is the
    new weight dimension (``len(features)``); the offsets must be the same (the caller
    checks).

    The label distributions ``r`` are *not* carried: a fit with missing labels then starts as
    a cold one does (:meth:`gpsl.sparse.SparseGPSLInference.sweep_labels_first`: the labeled
    tokens first, then the E-step), only from the previous functions instead of zero, and
    ends at the cold fit's optimum (see the module docstring for the measurements).
    """
    J = problem.J
    prev_classes = list(range(J)) if prev_classes is None else list(prev_classes)
    classes = list(range(J)) if classes is None else list(classes)
    col = {c: i for i, c in enumerate(prev_classes)}
    new_cols = np.array([i for i, c in enumerate(classes) if c in col], dtype=np.int64)
    old_cols = np.array([col[c] for c in classes if c in col], dtype=np.int64)
    s = initial_sparse_state(problem, prev_state.theta[0], D, "meanfield")
    s.theta[new_cols] = prev_state.theta[old_cols]
    # by name, looked up in C (dict, map, fromiter): a Python loop over the 41k features of
    # the app's 20k-token refit took 0.1 s
    index = dict(zip(prev_features, range(len(prev_features))))
    found = np.fromiter(map(index.get, features, itertools.repeat(-1)), dtype=np.int64,
                        count=len(features))
    new_rows = np.flatnonzero(found >= 0)
    old_rows = found[new_rows]
    if new_rows.size and new_cols.size:
        s.W[np.ix_(new_rows, new_cols)] = prev_state.W[np.ix_(old_rows, old_cols)]
        s.cov[np.ix_(new_rows, new_cols)] = prev_state.cov[np.ix_(old_rows, old_cols)]
    if prev_state.m_S.shape[0] == s.m_S.shape[0] and new_cols.size:
        R = np.arange(s.m_S.shape[0])
        s.m_S[np.ix_(R, new_cols, new_cols)] = prev_state.m_S[np.ix_(R, old_cols, old_cols)]
        s.v_S[np.ix_(R, new_cols, new_cols)] = prev_state.v_S[np.ix_(R, old_cols, old_cols)]
    return s
