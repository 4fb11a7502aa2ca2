"""Binary feature matrices from integer ids: the CSR assembly shared by the template expansion
of :class:`gpsl.features.FeatureExtractor`."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["binary_csr", "unique_sorted"]


def unique_sorted(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` for a 1-d integer array by sorting: numpy 2's hash-based ``unique``
    took 0.26 s for the 355k (token, feature) keys of 800 chunking sentences, a sort 2 ms."""
    s = np.sort(a, kind="stable")
    if s.size == 0:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def binary_csr(rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int) -> sp.csr_matrix:
    """Binary CSR from (row, col) pairs, duplicates counted once."""
    if n_cols == 0 or rows.size == 0:
        return sp.csr_matrix((n_rows, n_cols), dtype=np.float64)
    keys = unique_sorted(rows * np.int64(n_cols) + cols)
    r = keys // n_cols
    c = (keys % n_cols).astype(np.int32 if n_cols < 2**31 else np.int64)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=n_rows), out=indptr[1:])
    data = np.ones(keys.size, dtype=np.float64)
    m = sp.csr_matrix((data, c, indptr), shape=(n_rows, n_cols))
    m.has_sorted_indices = True
    return m
