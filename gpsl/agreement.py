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
           "mean_kappa", "pair_kappas", "pairwise_kappa"]


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
