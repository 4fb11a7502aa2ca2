"""Binary feature matrices from integer ids: the CSR assembly shared by the template expansion
of :class:`gpsl.features.FeatureExtractor`."""

from __future__ import annotations

import re
from operator import itemgetter

import numpy as np
import scipy.sparse as sp

from gpsl.word_features import position

__all__ = ["binary_csr", "ner_columns", "template_columns", "unique_sorted",
           "vocabulary_by_ids", "vocabulary_matrix", "vocabulary_of_ids"]


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
    return vocabulary_of_ids(ids, rows, list(tmp), n_tokens, min_freq)


def vocabulary_of_ids(ids: np.ndarray, rows: np.ndarray, names: list[str], n_tokens: int,
                      min_freq: int) -> tuple[list[str], sp.csr_matrix]:
    """:func:`vocabulary_matrix` of features given as ids ``ids`` (of tokens ``rows``) into
    their distinct strings ``names`` (any order: the vocabulary is sorted)."""
    n_tmp = len(names)
    if n_tmp:
        keys = unique_sorted(rows * np.int64(n_tmp) + ids)
        counts = np.bincount(keys % n_tmp, minlength=n_tmp)
    else:
        keys = np.zeros(0, dtype=np.int64)
        counts = np.zeros(0, dtype=np.int64)
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


def vocabulary_by_ids(columns, n_tokens: int, min_freq: int
                      ) -> tuple[list[str], sp.csr_matrix] | None:
    """:func:`vocabulary_matrix` of a template's strings built once per distinct tuple of
    values: ``columns(lookup)`` gives every token's ``(n_tokens, K)`` columns
    (:func:`template_columns`, :func:`ner_columns`) with a ``lookup`` that gives each new
    string the next id, or None where they leave the tokens to the strings (then so does
    this). The same vocabulary and matrix as the strings' (tests/lib/test_feature_ids.py); 0.20
    -> 0.095 CPU s on 18k chunking tokens (the app's 20k-token refit)."""
    names: dict[str, int] = {}
    setdefault = names.setdefault

    def assign(feats: list[str]) -> np.ndarray:
        return np.fromiter((setdefault(f, len(names)) for f in feats), dtype=np.int64,
                           count=len(feats))

    C = columns(assign)
    if C is None:
        return None
    rows = np.repeat(np.arange(C.shape[0], dtype=np.int64), C.shape[1])
    return vocabulary_of_ids(C.ravel(), rows, list(names), n_tokens, min_freq)


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
    if k == 3:
        p0, p1, p2, p3 = pieces
        return [p0 + x + p1 + y + p2 + z + p3 for x, y, z in zip(*cols)]
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


class NotText(Exception):
    """A column holds a value that is not a ``str``: the string expansion decides."""


class Columns:
    """Interned value columns of sentences' ``tokens`` (one after another, sentences of
    ``lengths``), by key: an ``int`` is that column of the tokens, made on first use; other
    keys are given with :meth:`put`. A column is its distinct values, then the
    out-of-sentence markers (:func:`pad_values`), and every token's value id."""

    def __init__(self, tokens: list, lengths: np.ndarray, max_offset: int = 8):
        self.tokens, self.n, self.max_offset = tokens, len(tokens), max_offset
        lengths = np.asarray(lengths, dtype=np.int64)
        self.length = np.repeat(lengths, lengths)
        self.pos = np.arange(self.n, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths,
                                                                 lengths)
        self.pads = pad_values(max_offset)
        self._cols: dict = {}
        self._moved: dict = {}

    def put(self, key, distinct: list[str], ids: np.ndarray) -> None:
        self._cols[key] = (distinct + self.pads, ids)

    def get(self, key) -> tuple[list[str], np.ndarray]:
        """``(distinct values + markers, ids)`` of column ``key``; :class:`NotText` when a
        token column holds something else than ``str``."""
        if key not in self._cols:
            vals = list(map(itemgetter(key), self.tokens))
            if set(map(type, vals)) - {str}:
                raise NotText(key)
            self.put(key, *intern(vals))
        return self._cols[key]

    def at(self, row: int, key) -> tuple[np.ndarray, int, list[str]]:
        """The ids of the values ``row`` tokens away (markers outside the sentence), the
        number of ids and the values they name."""
        ext, idx = self.get(key)
        if (row, key) not in self._moved:
            self._moved[row, key] = shifted(idx, len(ext) - len(self.pads), row, self.pos,
                                            self.length, self.max_offset)
        return self._moved[row, key], len(ext), ext


def expand_lines(lines, cols: Columns, lookup) -> np.ndarray:
    """``(n_tokens, K)`` vocabulary columns (-1 unseen) of ``K`` lines ``(pieces, macros)``:
    a line's feature is ``pieces[0] + v_1 + pieces[1] + ... + pieces[-1]`` with ``v_i`` the
    value of column ``key_i`` at ``row_i`` tokens away (``macros``: ``(row_i, key_i)``)."""
    C = np.empty((cols.n, len(lines)), dtype=np.int64)
    for k, (pieces, macros) in enumerate(lines):
        if not macros:
            C[:, k] = lookup([pieces[0]])[0]
        elif cols.n:
            ids, spans, values = zip(*(cols.at(row, key) for row, key in macros))
            C[:, k] = line_columns(pieces, list(ids), list(spans), list(values), lookup)
    return C


def template_columns(unigrams, tokens: list, lengths: np.ndarray, lookup,
                     max_offset: int = 8) -> np.ndarray | None:
    """:func:`expand_lines` of CRF++ unigram lines (:class:`gpsl.template_lines.
    UnigramTemplate`) over the token columns; ``None`` when a column used holds a value that
    is not a ``str`` (the string expansion then decides what happens). Equal to looking up
    the strings of :meth:`gpsl.features.Template.expand_sentence`
    (tests/lib/test_feature_ids.py)."""
    try:
        return expand_lines([(u.pieces, u.macros) for u in unigrams],
                            Columns(tokens, lengths, max_offset), lookup)
    except NotText:
        return None


_WINDOW = re.compile(r"(.+?)([+-][0-9])")


def ner_columns(ner, tokens: list, lengths: np.ndarray, lookup) -> np.ndarray | None:
    """:func:`expand_lines` of the built-in ``ner`` feature set (:class:`gpsl.features.
    NerFeatures`): its word columns (:meth:`~gpsl.features.NerFeatures.word_columns`) once
    per distinct word, ``pos`` once per distinct (position, length), and its slots as lines
    over them: ``X`` is ``X=v``, ``X-1`` the same one token back (CRF++'s markers outside),
    ``X|Y`` is ``X|Y=u|v``, ``bias`` a line without values; then the other token columns'
    windows. ``None`` (the string expansion decides) for values that are not ``str``, tokens
    of several widths or a slot of another form. Equal to looking up the strings of
    :meth:`~gpsl.features.NerFeatures.expand_sentence` (tests/lib/test_feature_ids.py)."""
    widths = set(map(len, tokens))
    if len(widths) > 1:
        return None
    cols = Columns(tokens, lengths, ner.max_offset)
    try:
        ext, wid = cols.get(0)
    except NotText:
        return None
    for name, vals in ner.word_columns(ext[:len(ext) - len(cols.pads)]).items():
        distinct, vid = intern(vals)
        cols.put(name, distinct, vid[wid])
    first, inverse = group(cols.pos * (int(cols.length.max(initial=0)) + 1) + cols.length)
    cols.put("pos", [position(int(cols.pos[t]), int(cols.length[t])) for t in first.tolist()],
             inverse)

    def ref(name):
        if name in cols._cols:
            return 0, name
        m = _WINDOW.fullmatch(name)
        if m and m.group(1) in cols._cols:
            return int(m.group(2)), m.group(1)
        raise NotText(name)

    lines = []
    try:
        for slot in ner.slots:
            if slot == "bias":
                lines.append(((slot,), ()))
            elif "|" in slot:
                a, b = slot.split("|")
                lines.append(((f"{slot}=", "|", ""), (ref(a), ref(b))))
            else:
                lines.append(((f"{slot}=", ""), (ref(slot),)))
    except NotText:
        return None
    for c in range(1, min(widths, default=1)):
        lines += [((f"c{c}{k:+d}=", ""), ((k, c),)) for k in (-2, -1, 0, 1, 2)]
        lines += [((f"c{c}-1|c{c}=", "|", ""), ((-1, c), (0, c))),
                  ((f"c{c}|c{c}+1=", "|", ""), ((0, c), (1, c)))]
    try:
        return expand_lines(lines, cols, lookup)
    except NotText:
        return None


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
