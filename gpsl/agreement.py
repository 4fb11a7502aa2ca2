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

__all__ = ["alpha_per_label", "cohen_kappa", "coincidences", "krippendorff_alpha",
           "pairwise_kappa"]


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


def pairwise_kappa(items: Mapping[Hashable, Mapping[str, Hashable | None]],
                   annotators: Sequence[str] | None = None) -> tuple[list[str], np.ndarray,
                                                                     np.ndarray]:
    """Eq. (K) for every pair of annotators over ``items`` (item -> {annotator: value}).

    Returns ``(annotators, kappa, shared)``: symmetric ``(A, A)`` matrices of kappa (NaN
    where undefined; 1 on the diagonal) and of the number of items both labeled."""
    if annotators is None:
        annotators = sorted({a for v in items.values() for a, lab in v.items()
                             if lab is not None})
    annotators = list(annotators)
    index = {a: i for i, a in enumerate(annotators)}
    A = len(annotators)
    kappa = np.full((A, A), np.nan)
    shared = np.zeros((A, A), dtype=int)
    pairs: dict[tuple[int, int], tuple[list, list]] = {}
    for votes in items.values():
        present = sorted((index[a], lab) for a, lab in votes.items()
                         if lab is not None and a in index)
        for (i, x), (j, y) in itertools.combinations(present, 2):
            xs, ys = pairs.setdefault((i, j), ([], []))
            xs.append(x)
            ys.append(y)
    for (i, j), (xs, ys) in pairs.items():
        kappa[i, j] = kappa[j, i] = cohen_kappa(xs, ys)
        shared[i, j] = shared[j, i] = len(xs)
    for i in range(A):
        kappa[i, i] = 1.0
        shared[i, i] = sum(1 for v in items.values() if v.get(annotators[i]) is not None)
    return annotators, kappa, shared


def coincidences(units: Iterable[Iterable[Hashable | None]]) -> tuple[list, np.ndarray]:
    """The coincidence matrix ``o`` of (A) over ``units`` (each the values of one item, one
    per annotator; None left out): ``(values, o)`` with ``values`` sorted by repr."""
    kept = []
    for unit in units:
        vals = [v for v in unit if v is not None]
        if len(vals) >= 2:
            kept.append(vals)
    values = sorted({v for u in kept for v in u}, key=repr)
    index = {v: i for i, v in enumerate(values)}
    o = np.zeros((len(values), len(values)))
    for vals in kept:
        counts = Counter(index[v] for v in vals)
        m = len(vals)
        for c, nc in counts.items():
            for k, nk in counts.items():
                pairs = nc * (nc - 1) if c == k else nc * nk
                o[c, k] += pairs / (m - 1)
    return values, o


def krippendorff_alpha(units: Iterable[Iterable[Hashable | None]]) -> float:
    """Eq. (A), nominal metric, over ``units`` (each the values of one item; None missing)."""
    _values, o = coincidences(units)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    if n <= 1:
        return float("nan")
    observed = o.sum() - np.trace(o)
    expected = (n_c.sum() ** 2 - (n_c ** 2).sum()) / (n - 1)
    if expected <= 0:
        return float("nan")
    return float(1.0 - observed / expected)


def alpha_per_label(units: Sequence[Sequence[Hashable | None]],
                    labels: Iterable[Hashable] | None = None) -> dict:
    """Eq. (A) per label ``c``: every value recoded as ``value == c`` (NaN where ``c``
    never varies across the pairable values)."""
    units = [list(u) for u in units]
    if labels is None:
        labels = sorted({v for u in units for v in u if v is not None}, key=repr)
    return {c: krippendorff_alpha([[None if v is None else v == c for v in u] for u in units])
            for c in labels}
