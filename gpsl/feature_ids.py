"""Binary feature matrices from integer ids: the CSR assembly shared by the template expansion
of :class:`gpsl.features.FeatureExtractor`."""

from __future__ import annotations

from operator import itemgetter

import numpy as np
import scipy.sparse as sp

__all__ = ["binary_csr", "template_columns", "unique_sorted", "vocabulary_matrix"]


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



def vocabulary_matrix(feats: list[str], rows: np.ndarray, n_tokens: int,
                      min_freq: int) -> tuple[list[str], sp.csr_matrix]:
    """The vocabulary of training feature strings ``feats`` (of tokens ``rows``): the ones on
    at least ``min_freq`` distinct tokens, sorted; and the training matrix over it."""
    tmp: dict[str, int] = {}
    setdefault = tmp.setdefault
    ids = np.fromiter(
        (setdefault(f, len(tmp)) for f in feats), dtype=np.int64, count=len(feats)
    )
    n_tmp = len(tmp)
    if n_tmp:
        keys = unique_sorted(rows * np.int64(n_tmp) + ids)
        counts = np.bincount(keys % n_tmp, minlength=n_tmp)
    else:
        keys = np.zeros(0, dtype=np.int64)
        counts = np.zeros(0, dtype=np.int64)
    names = list(tmp)
    kept = sorted(np.flatnonzero(counts >= min_freq).tolist(), key=names.__getitem__)
    # the training matrix, from the same expansion
    remap = np.full(n_tmp, -1, dtype=np.int64)
    remap[np.asarray(kept, dtype=np.int64)] = np.arange(len(kept), dtype=np.int64)
    if n_tmp:
        r = keys // n_tmp
        c = remap[keys % n_tmp]
        ok = c >= 0
        return [names[i] for i in kept], binary_csr(r[ok], c[ok], n_tokens, len(kept))
    return [], binary_csr(keys, keys, n_tokens, 0)

# --------------------------------------------------------------------------- id expansion
#
# A CRF++ unigram line ``p0 %x[r1,c1] p1 ... %x[rk,ck] pk`` gives token ``t`` the feature
# string ``p0 + v1 + p1 + ... + vk + pk`` with ``vi`` column ``ci`` of the token ``ri`` away
# (CRF++'s ``_B-1``, ``_B+1``, ... outside the sentence). The string is a function of the
# tuple of values, so it is built (and looked up in the vocabulary) once per distinct tuple:
# each column's values are interned to integer ids, the out-of-sentence markers get ids after
# them, a line's tuple of ids is one integer key, and only the distinct keys meet a string.


def intern(values: list[str]) -> tuple[list[str], np.ndarray]:
    """The distinct ``values`` (first-seen order) and each value's index among them."""
    distinct = list(dict.fromkeys(values))
    index = {v: i for i, v in enumerate(distinct)}
    return distinct, np.fromiter(map(index.__getitem__, values), dtype=np.int64,
                                 count=len(values))


def pad_values(max_offset: int) -> list[str]:
    """The out-of-sentence values, ids ``V .. V + 2 max_offset - 1`` after a column's ``V``
    values: ``_B-1 .. _B-max_offset`` then ``_B+1 .. _B+max_offset`` (CRF++'s markers)."""
    return ([f"_B-{k}" for k in range(1, max_offset + 1)]
            + [f"_B+{k}" for k in range(1, max_offset + 1)])


def shifted(ids: np.ndarray, n_values: int, row: int, pos: np.ndarray, length: np.ndarray,
            max_offset: int) -> np.ndarray:
    """The id of the value ``row`` tokens away from every token (``pos``: its position in its
    sentence, ``length``: its sentence's length), a pad id outside the sentence."""
    if row == 0:
        return ids
    j = pos + row
    out = np.where(j < 0, n_values - j - 1, n_values + max_offset + j - length)
    inside = np.flatnonzero((j >= 0) & (j < length))
    out[inside] = ids[inside + row]
    return out


def group(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)``: the first token of each distinct key (in key order) and every
    token's group, ``key[first[inverse]] == key``."""
    order = np.argsort(key, kind="stable")
    ks = key[order]
    new = np.empty(ks.size, dtype=bool)
    new[:1] = True
    np.not_equal(ks[1:], ks[:-1], out=new[1:])
    inverse = np.empty(ks.size, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse


def join_pieces(pieces: tuple[str, ...], cols: list[list[str]]) -> list[str]:
    """``pieces[0] + cols[0][i] + pieces[1] + ... + pieces[-1]`` for every ``i``."""
    k = len(cols)
    if k == 1:
        p0, p1 = pieces
        return [p0 + x + p1 for x in cols[0]] if p1 else [p0 + x for x in cols[0]]
    if k == 2:
        p0, p1, p2 = pieces
        return [p0 + x + p1 + y + p2 for x, y in zip(*cols)]
    rest = pieces[1:]
    return [pieces[0] + "".join(v + q for v, q in zip(vals, rest)) for vals in zip(*cols)]


def line_columns(pieces, shifted_ids: list[np.ndarray], spans: list[int],
                 values: list[list[str]], lookup) -> np.ndarray:
    """Every token's vocabulary column (-1 unseen) under one line with macros: the
    ``shifted_ids`` of its macros (ids below ``spans``) name the ``values``; ``lookup`` maps
    a list of feature strings to their columns."""
    n = shifted_ids[0].size
    key, span = shifted_ids[0], spans[0]
    for ids, s in zip(shifted_ids[1:], spans[1:]):
        if span * s >= 2**62:  # renumber the keys so far densely before they overflow
            first, key = group(key)
            span = first.size
        key = key * s + ids
        span *= s
    if span <= 4 * n:  # a table over all keys is smaller than a sort
        seen = np.zeros(span, dtype=bool)
        seen[key] = True
        distinct = np.flatnonzero(seen)
        first = np.zeros(span, dtype=np.int64)
        first[key] = np.arange(n)  # a token of each key (any: they share the values)
        first = first[distinct]
        table = np.full(span, -1, dtype=np.int64)
        names = [[vals[i] for i in ids[first].tolist()] for ids, vals in
                 zip(shifted_ids, values)]
        table[distinct] = lookup(join_pieces(pieces, names))
        return table[key]
    first, inverse = group(key)
    names = [[vals[i] for i in ids[first].tolist()] for ids, vals in zip(shifted_ids, values)]
    return lookup(join_pieces(pieces, names))[inverse]


def template_columns(unigrams, tokens: list, lengths: np.ndarray, lookup,
                     max_offset: int = 8) -> np.ndarray | None:
    """``(n_tokens, K)`` vocabulary columns (-1 unseen) of the ``K`` unigram lines
    (:class:`gpsl.template_lines.UnigramTemplate`) at the ``tokens`` of sentences of
    ``lengths``, one after another; ``None`` when a column used holds a value that is not a
    ``str`` (the string expansion then decides what happens). ``lookup`` maps a list of feature
    strings to their columns. Equal to looking up the strings of
    :meth:`gpsl.features.Template.expand_sentence` (tests/test_feature_ids.py)."""
    n = len(tokens)
    lengths = np.asarray(lengths, dtype=np.int64)
    C = np.empty((n, len(unigrams)), dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    length = np.repeat(lengths, lengths)
    pos = np.arange(n, dtype=np.int64) - np.repeat(starts, lengths)
    pads = pad_values(max_offset)
    columns: dict[int, tuple[list[str], np.ndarray]] = {}
    moved: dict[tuple[int, int], np.ndarray] = {}
    for k, line in enumerate(unigrams):
        if not line.macros:
            C[:, k] = lookup([line.pieces[0]])[0]
            continue
        ids, spans, values = [], [], []
        for row, col in line.macros:
            if col not in columns:
                vals = list(map(itemgetter(col), tokens))
                if set(map(type, vals)) - {str}:
                    return None
                distinct, idx = intern(vals)
                columns[col] = (distinct + pads, idx)
            ext, idx = columns[col]
            if (row, col) not in moved:
                moved[row, col] = shifted(idx, len(ext) - len(pads), row, pos, length,
                                          max_offset)
            ids.append(moved[row, col])
            spans.append(len(ext))
            values.append(ext)
        C[:, k] = line_columns(line.pieces, ids, spans, values, lookup) if n else 0
    return C


def rows_csr(C: np.ndarray, n_cols: int) -> sp.csr_matrix:
    """:func:`binary_csr` of the pairs ``(t, C[t, k])`` with ``C[t, k] >= 0`` (``C`` is
    ``(n_rows, K)``, one column per template line; sorted in place)."""
    n_rows = C.shape[0]
    if n_cols == 0 or C.size == 0:
        return binary_csr(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), n_rows,
                          n_cols)
    C.sort(axis=1)
    keep = C >= 0
    np.logical_and(keep[:, 1:], C[:, 1:] != C[:, :-1], out=keep[:, 1:])
    if not keep.any():
        return binary_csr(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), n_rows,
                          n_cols)
    c = C[keep].astype(np.int32 if n_cols < 2**31 else np.int64)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=indptr[1:])
    m = sp.csr_matrix((np.ones(c.size, dtype=np.float64), c, indptr), shape=(n_rows, n_cols))
    m.has_sorted_indices = True
    return m
