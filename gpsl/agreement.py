r"""Inter-annotator agreement: Cohen's kappa for two annotators and Krippendorff's alpha
(nominal) for any number, with missing values.

Items are tokens; a value is the label an annotator gave (``None``: no value, left out).

Cohen's kappa (Cohen 1960) over the items both annotators labeled:

.. math::  \kappa = \frac{p_o - p_e}{1 - p_e},\qquad
           p_e = \sum_c p_A(c)\, p_B(c)                                         \qquad (K)

with ``p_o`` the share of items on which they agree and ``p_A(c)``, ``p_B(c)`` each one's
share of label ``c``.  Undefined (NaN) when ``p_e = 1`` (both used one and the same label
throughout) or when they share no item.

Krippendorff's alpha, nominal metric (Krippendorff 2011, "Computing Krippendorff's
alpha-reliability"): every unit ``u`` with ``m_u >= 2`` values adds ``1 / (m_u - 1)`` to the
coincidence ``o[c, k]`` for each ordered pair of values ``(c, k)`` from different annotators;
``n_c = sum_k o[c, k]``, ``n = sum_c n_c``;

.. math::  \alpha = 1 - (n - 1)\,\frac{\sum_{c \ne k} o[c, k]}
                                     {\sum_{c \ne k} n_c\, n_k}                 \qquad (A)

(``1 - D_o / D_e``).  Undefined (NaN) without pairable values or when every value is the same
(``D_e = 0``).  Per label, alpha is computed on the values recoded as "this label" / "another
label" (:func:`alpha_per_label`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

__all__ = ["alpha_of_counts", "alpha_per_label", "alpha_per_label_of_counts", "cohen_kappa",
           "coincidences", "count_matrix", "krippendorff_alpha", "mean_kappa", "pair_kappas",
           "pair_kappas_coded", "pairwise_kappa"]


def cohen_kappa(a: Sequence[Hashable | None], b: Sequence[Hashable | None]) -> float:
    """Eq. (K) for two aligned sequences of values (pairs with a None are left out)."""
    if len(a) != len(b):
        raise ValueError(f"the sequences differ in length ({len(a)} and {len(b)})")
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    n = len(pairs)
    if n == 0:
        return float("nan")
    p_o = sum(x == y for x, y in pairs) / n
    ca = Counter(x for x, _ in pairs)
    cb = Counter(y for _, y in pairs)
    p_e = sum(ca[c] * cb.get(c, 0) for c in ca) / (n * n)
    if p_e >= 1.0:
        return float("nan")
    return float((p_o - p_e) / (1.0 - p_e))


def pair_kappas(items: Mapping[Hashable, Mapping[str, Hashable | None]]
                ) -> tuple[dict[str, int], dict[tuple[str, str], tuple[float, int]]]:
    """Eq. (K) for every pair of annotators who share an item, in time linear in the votes
    (plus the pairs per item): ``(counts, pairs)`` with ``counts[a]`` the items ``a``
    labeled and ``pairs[(a, b)] = (kappa, shared items)`` for ``a < b``; pairs sharing no
    item are absent (a team of 10,000 shares few of its 50 million pairs)."""
    counts: Counter = Counter()
    values: dict[tuple[str, str], tuple[list, list]] = {}
    for votes in items.values():
        present = sorted((a, lab) for a, lab in votes.items() if lab is not None)
        counts.update(a for a, _ in present)
        for (a, x), (b, y) in itertools.combinations(present, 2):
            xs, ys = values.setdefault((a, b), ([], []))
            xs.append(x)
            ys.append(y)
    return dict(counts), {k: (cohen_kappa(xs, ys), len(xs)) for k, (xs, ys) in values.items()}


def pair_kappas_coded(item: np.ndarray, annotator: np.ndarray, label: np.ndarray,
                      n_annotators: int, n_labels: int):
    """Eq. (K) for every pair of annotators who share an item, from vote columns (one entry
    per vote with a value: ``item``, ``annotator`` and ``label`` codes; an annotator votes
    once per item): :func:`pair_kappas` without a Python object per vote.

    Returns ``(a, b, kappa, shared)``, one entry per pair ``a < b`` (codes) sharing an
    item.  ``p_o`` and ``p_e`` are ratios of whole counts, as in :func:`cohen_kappa`, so
    each kappa is the same float."""
    item, annotator, label = (np.asarray(x, dtype=np.int64) for x in (item, annotator, label))
    order = np.lexsort((annotator, item))
    it, an, lb = item[order], annotator[order], label[order]
    pa, pb, xa, xb = [], [], [], []
    for d in range(1, len(it)):  # votes d apart in the same item: every pair, once
        same = it[:-d] == it[d:]
        if not same.any():
            break
        pa.append(an[:-d][same])
        pb.append(an[d:][same])
        xa.append(lb[:-d][same])
        xb.append(lb[d:][same])
    if not pa:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0), empty
    pa, pb, xa, xb = (np.concatenate(x) for x in (pa, pb, xa, xb))
    keys, inv = np.unique(pa * n_annotators + pb, return_inverse=True)
    P = len(keys)
    n = np.bincount(inv, minlength=P)
    agree = np.bincount(inv[xa == xb], minlength=P)
    ones = np.ones(len(inv), dtype=np.int64)
    ca = sp.csr_matrix((ones, (inv, xa)), shape=(P, n_labels))
    cb = sp.csr_matrix((ones, (inv, xb)), shape=(P, n_labels))
    chance = np.asarray(ca.multiply(cb).sum(axis=1)).ravel().astype(np.int64)
    p_o = agree / n
    p_e = chance / (n * n)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(p_e >= 1.0, np.nan, (p_o - p_e) / (1.0 - p_e))
    return keys // n_annotators, keys % n_annotators, kappa, n


def mean_kappa(counts: Mapping[str, int], pairs: Mapping[tuple[str, str], tuple[float, int]]
               ) -> dict[str, float | None]:
    """Each annotator's mean of eq. (K) with the others, weighted by the items each pair
    shares (pairs with an undefined kappa left out); None without such a pair."""
    num: Counter = Counter()
    den: Counter = Counter()
    for (a, b), (k, n) in pairs.items():
        if n > 0 and k == k:
            for who in (a, b):
                num[who] += n * k
                den[who] += n
    return {a: (num[a] / den[a] if den[a] > 0 else None) for a in counts}


def pairwise_kappa(items: Mapping[Hashable, Mapping[str, Hashable | None]],
                   annotators: Sequence[str] | None = None, *, pairs=None
                   ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Eq. (K) for every pair of annotators over ``items`` (item -> {annotator: value}).

    Returns ``(annotators, kappa, shared)``: symmetric ``(A, A)`` matrices of kappa (NaN
    where undefined; 1 on the diagonal) and of the number of items both labeled (on the
    diagonal: the items each labeled).  ``pairs``: :func:`pair_kappas` of ``items`` when
    already computed."""
    counts, pairs = pair_kappas(items) if pairs is None else pairs
    if annotators is None:
        annotators = sorted(counts)
    annotators = list(annotators)
    index = {a: i for i, a in enumerate(annotators)}
    A = len(annotators)
    kappa = np.full((A, A), np.nan)
    shared = np.zeros((A, A), dtype=int)
    for (a, b), (k, n) in pairs.items():
        if a in index and b in index:
            i, j = index[a], index[b]
            kappa[i, j] = kappa[j, i] = k
            shared[i, j] = shared[j, i] = n
    for a, i in index.items():
        kappa[i, i] = 1.0
        shared[i, i] = counts.get(a, 0)
    return annotators, kappa, shared


def _unit_counts(units: Iterable[Iterable[Hashable | None]]):
    """``(values, N, m)``: the values (sorted by repr), the sparse count matrix ``N[u, c]``
    (how many annotators gave unit ``u`` value ``c``) of the units with two or more values,
    and ``m[u]`` (the values of each such unit): one pass over the votes."""
    kept = []
    for unit in units:
        vals = [v for v in unit if v is not None]
        if len(vals) >= 2:
            kept.append(vals)
    values = sorted({v for u in kept for v in u}, key=repr)
    index = {v: i for i, v in enumerate(values)}
    rows = np.repeat(np.arange(len(kept)), [len(u) for u in kept])
    cols = np.fromiter((index[v] for u in kept for v in u), dtype=np.int64, count=len(rows))
    return (values, *count_matrix(rows, cols, len(kept), len(values)))


def count_matrix(rows: np.ndarray, cols: np.ndarray, n_units: int, n_values: int):
    """``(N, m)`` of (A) from one entry per value: ``N[u, c]`` how many annotators gave
    unit ``rows[i]`` value ``cols[i]``, ``m[u]`` the values of unit ``u`` (units of two or
    more values only: a caller with vote columns builds ``N`` without any per-unit list)."""
    N = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n_units, n_values))
    N.sum_duplicates()
    m = np.asarray(N.sum(axis=1)).ravel()
    return N, m


def _coincidences_of(N, m) -> np.ndarray:
    w = 1.0 / (m - 1.0)
    o = np.asarray((N.T @ sp.diags(w) @ N).todense())
    o -= np.diag(np.asarray(N.T @ w).ravel())
    return o


def coincidences(units: Iterable[Iterable[Hashable | None]]) -> tuple[list, np.ndarray]:
    """The coincidence matrix ``o`` of (A) over ``units`` (each the values of one item, one
    per annotator; None left out): ``(values, o)`` with ``values`` sorted by repr.  Each
    unit ``u`` with counts ``n_u`` adds ``(n_u n_u^T - diag(n_u)) / (m_u - 1)``, so
    ``o = N^T W N - diag(N^T w)`` with ``w_u = 1 / (m_u - 1)`` (one sparse product)."""
    values, N, m = _unit_counts(units)
    if not values:
        return values, np.zeros((0, 0))
    return values, _coincidences_of(N, m)


def alpha_of_counts(N, m) -> float:
    """Eq. (A), nominal metric, from the count matrix of :func:`count_matrix`."""
    if N.shape[1] == 0:
        return float("nan")
    o = _coincidences_of(N, m)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    if n <= 1:
        return float("nan")
    observed = o.sum() - np.trace(o)
    expected = (n_c.sum() ** 2 - (n_c ** 2).sum()) / (n - 1)
    if expected <= 0:
        return float("nan")
    return float(1.0 - observed / expected)


def krippendorff_alpha(units: Iterable[Iterable[Hashable | None]]) -> float:
    """Eq. (A), nominal metric, over ``units`` (each the values of one item; None missing)."""
    _values, N, m = _unit_counts(units)
    return alpha_of_counts(N, m)


def alpha_per_label(units: Sequence[Sequence[Hashable | None]],
                    labels: Iterable[Hashable] | None = None) -> dict:
    """Eq. (A) per label ``c``: every value recoded as ``value == c`` (NaN where ``c``
    never varies across the pairable values).  With ``a_u`` the values ``c`` of unit ``u``
    and ``b_u = m_u - a_u`` the others, the recoded coincidences off the diagonal are
    ``2 sum_u a_u b_u / (m_u - 1)`` and ``D_e = (n^2 - n_c^2 - n_other^2) / (n - 1)``:
    every label from one count matrix, no pass over the units per label."""
    values, N, m = _unit_counts(units)
    return alpha_per_label_of_counts(values, N, m, labels)


def alpha_per_label_of_counts(values: Sequence[Hashable], N, m,
                              labels: Iterable[Hashable] | None = None) -> dict:
    """:func:`alpha_per_label` from the count matrix of :func:`count_matrix` (its columns
    are ``values``)."""
    if labels is None:
        labels = values
    index = {v: i for i, v in enumerate(values)}
    w = 1.0 / (m - 1.0) if m.size else m
    n = float(m.sum())
    out = {}
    for c in labels:
        a = (np.asarray(N[:, index[c]].todense()).ravel() if c in index
             else np.zeros(m.size))
        b = m - a
        observed = 2.0 * float(np.sum(w * a * b))
        expected = ((n ** 2 - float(a.sum()) ** 2 - float(b.sum()) ** 2) / (n - 1)
                    if n > 1 else 0.0)
        out[c] = float(1.0 - observed / expected) if n > 1 and expected > 0 else float("nan")
    return out
