"""CRF++ feature templates and their expansion into sparse binary feature matrices.

Template grammar (as CRF++'s ``crf_learn``):

* blank lines and lines starting with ``#`` are ignored;
* a line starting with ``U`` is a unigram template; the whole line, with each macro
  ``%x[row,col]`` replaced by column ``col`` of the token ``row`` positions away, is the feature
  string (``U05:%x[-1,0]/%x[0,0]`` -> ``U05:He/said``). A line without macros (``U`` or
  ``U01:fixed``) is a bias-like feature active on every token;
* a line starting with ``B`` is a bigram template. It is accepted and recorded
  (:attr:`Template.has_bigram`) but produces no token features: in gpsl the label dependencies
  are the model's own dependency set (``offsets``);
* positions before the sentence read ``_B-1``, ``_B-2`` ...; after it ``_B+1``, ``_B+2`` ...;
  rows are limited to -8..8 and columns must exist in the data, as in CRF++.

Built-in feature sets
---------------------
A *name* instead of template text (never valid CRF++ text) selects a built-in feature set
(:data:`FEATURE_SETS`) wherever a template goes (``GPSL(template="ner")``, ``-t ner``); a
saved model stores the name. ``ner`` (:class:`NerFeatures`) is for word-only data.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from gpsl import feature_ids, limits
from gpsl import lexicon as lexical
from gpsl.errors import InputError, ModelFormatError
from gpsl.feature_ids import binary_csr, ner_columns, rows_csr, template_columns, vocabulary_matrix
from gpsl.template_lines import MAX_OFFSET, Token, UnigramTemplate, _parse_line
from gpsl.word_features import capitalisation, digits, position, short_shape, window, word_shape

__all__ = ["FEATURE_SETS", "MAX_OFFSET", "FeatureExtractor", "NerFeatures", "Template",
           "UnigramTemplate", "capitalisation", "default_template", "short_shape", "word_shape"]


class Template:
    """A parsed CRF++ feature template.

    Attributes
    ----------
    text:
        The original template text.
    source:
        Name used in error messages (file name or ``"<template>"``).
    unigrams:
        Parsed ``U`` lines (:class:`UnigramTemplate`, unpackable; see its fields).
    bigrams:
        Parsed ``B`` lines (recorded only).
    has_bigram:
        Whether there is at least one ``B`` line.
    """

    def __init__(
        self,
        text: str,
        source: str,
        unigrams: list[UnigramTemplate],
        bigrams: list[UnigramTemplate],
    ):
        self.text = text
        self.source = source
        self.unigrams = unigrams
        self.bigrams = bigrams

    # ------------------------------------------------------------------ construction

    @classmethod
    def parse(cls, text: str, source: str = "<template>") -> Template:
        """Parse template text; :class:`InputError` naming ``source`` and the line on error."""
        if not isinstance(text, str):
            raise TypeError("template text must be a str")
        named = NerFeatures.from_name(text)  # a built-in feature set by name
        if named is not None:
            return named
        if "\x00" in text:
            raise InputError("NUL byte in template", source=source)
        if len(text) > limits.MAX_TEMPLATE_CHARS:
            raise InputError(f"template of {len(text):,} characters: the most is "
                             f"{limits.MAX_TEMPLATE_CHARS:,}", source=source)
        unigrams: list[UnigramTemplate] = []
        bigrams: list[UnigramTemplate] = []
        body = text.removeprefix("\ufeff")
        body = body.replace("\r\n", "\n").replace("\r", "\n")
        for lineno, raw in enumerate(body.split("\n"), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if len(unigrams) + len(bigrams) >= limits.MAX_TEMPLATE_LINES:
                raise InputError(f"template of more than {limits.MAX_TEMPLATE_LINES:,} feature"
                                 " lines (every line is a feature of every token)",
                                 source=source, line=lineno)
            if line[0] == "U":
                unigrams.append(_parse_line(line, lineno, source))
            elif line[0] == "B":
                bigrams.append(_parse_line(line, lineno, source))
            else:
                shown = line if len(line) <= 30 else line[:30] + "..."
                raise InputError(
                    f"unknown template line {shown!r}: lines must start with U (unigram),"
                    " B (bigram) or # (comment)",
                    source=source,
                    line=lineno,
                )
        if not unigrams:
            raise InputError("template has no U (unigram) lines, so no features", source=source)
        return cls(text, source, unigrams, bigrams)

    @classmethod
    def from_file(cls, path: str | os.PathLike, encoding: str = "utf-8") -> Template:
        """Read and parse a template file."""
        from gpsl.io.source import read_source

        name = str(path)
        return cls.parse(read_source(path, encoding, name), source=name)

    @classmethod
    def from_spec(cls, spec: str | os.PathLike, encoding: str = "utf-8") -> Template:
        """A built-in feature set by name (``"ner"``), else a template file (a file named like
        a feature set is read as ``./ner``)."""
        named = NerFeatures.from_name(str(spec))
        if named is not None:
            return named
        if not os.path.exists(spec):
            raise InputError("no such template file, and not a built-in feature set ("
                             + ", ".join(FEATURE_SETS) + ")", source=str(spec))
        return cls.from_file(spec, encoding=encoding)

    @classmethod
    def coerce(cls, template: Template | str | None, n_columns: int | None = None) -> Template:
        """A :class:`Template` from a Template, template text, or ``None`` (the default)."""
        if isinstance(template, Template):
            return template
        if template is None:
            if n_columns is None:
                raise ValueError("n_columns is needed to build the default template")
            return default_template(n_columns)
        if isinstance(template, str):
            return cls.parse(template)
        raise TypeError(f"template must be a Template, str or None, not {type(template).__name__}")

    # ------------------------------------------------------------------ properties

    @property
    def has_bigram(self) -> bool:
        return bool(self.bigrams)

    @property
    def max_column(self) -> int:
        """Largest column index used by any macro (-1 when none)."""
        cols = [c for t in self.unigrams + self.bigrams for _, c in t.macros]
        return max(cols, default=-1)

    @property
    def max_offset(self) -> int:
        """Largest ``|row|`` used by any unigram macro."""
        return max((abs(r) for t in self.unigrams for r, _ in t.macros), default=0)

    def __repr__(self) -> str:
        return (
            f"Template({len(self.unigrams)} unigram, {len(self.bigrams)} bigram lines,"
            f" source={self.source!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Template):
            return NotImplemented
        return self.unigrams == other.unigrams and self.bigrams == other.bigrams

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ use

    def validate(self, n_columns: int) -> None:
        """Check that every macro's column exists in data with ``n_columns`` feature columns."""
        for t in self.unigrams + self.bigrams:
            for row, col in t.macros:
                if col >= n_columns:
                    raise InputError(
                        f"%x[{row},{col}] uses column {col} but the data has only"
                        f" {n_columns} feature column{'s' if n_columns != 1 else ''}"
                        f" (columns are numbered from 0)",
                        source=self.source,
                        line=t.line,
                    )

    def expand(self, tokens: Sequence[Token], position: int) -> list[str]:
        """The unigram feature strings of ``tokens[position]``, one per ``U`` line."""
        if not 0 <= position < len(tokens):
            raise IndexError(f"position {position} outside a sentence of {len(tokens)} tokens")
        return [t.expand(tokens, position) for t in self.unigrams]

    def expand_sentence(self, tokens: Sequence[Token]) -> list[list[str]]:
        """Feature strings for every token of a sentence, template-major: ``out[k][i]`` is the
        feature of unigram line ``k`` at position ``i``."""
        n = len(tokens)
        if n == 0:
            return [[] for _ in self.unigrams]
        pad = self.max_offset
        bos = [f"_B-{k}" for k in range(pad, 0, -1)]
        eos = [f"_B+{k}" for k in range(1, pad + 1)]
        padded: dict[int, list[str]] = {}
        out: list[list[str]] = []
        for t in self.unigrams:
            cols = []
            for row, col in t.macros:
                column = padded.get(col)
                if column is None:
                    column = bos + [tok[col] for tok in tokens] + eos
                    padded[col] = column
                cols.append(column[pad + row:pad + row + n])
            p = t.pieces
            k = len(cols)
            if k == 0:
                feats = [p[0]] * n
            elif k == 1:
                a, = cols
                p0, p1 = p
                feats = [p0 + x + p1 for x in a] if p1 else [p0 + x for x in a]
            elif k == 2:
                a, b = cols
                p0, p1, p2 = p
                feats = [p0 + x + p1 + y + p2 for x, y in zip(a, b)]
            elif k == 3:
                a, b, c = cols
                p0, p1, p2, p3 = p
                feats = [p0 + x + p1 + y + p2 + z + p3 for x, y, z in zip(a, b, c)]
            else:
                rest = p[1:]
                feats = [
                    p[0] + "".join(v + q for v, q in zip(vals, rest)) for vals in zip(*cols)
                ]
            out.append(feats)
        return out


def default_template(n_columns: int) -> Template:
    """A default template for data with ``n_columns`` feature columns.

    Column 0: the window -2..2 and the neighbour pairs (-1,0) and (0,1); every other column: the
    same window and pairs. Ends with a ``B`` line so the file also works with ``crf_learn``.
    """
    if n_columns < 1:
        raise ValueError("n_columns must be at least 1")
    lines = ["# gpsl default template"]
    for c in range(n_columns):
        lines.append(f"# column {c}")
        for k, r in enumerate((-2, -1, 0, 1, 2)):
            lines.append(f"U{c}{k}:%x[{r},{c}]")
        lines.append(f"U{c}5:%x[-1,{c}]/%x[0,{c}]")
        lines.append(f"U{c}6:%x[0,{c}]/%x[1,{c}]")
    lines += ["", "B", ""]
    return Template.parse("\n".join(lines), source="<default template>")


# --------------------------------------------------------------------------- built-in sets


class NerFeatures(Template):
    """The built-in feature set ``ner`` for word-only data (column 0 the word).

    Per token, ``name=value`` strings (one per slot, so one feature of each slot is active):

    * ``w``: the lowercased word; ``w-2 w-1 w+1 w+2`` the same at offsets -2..2; the pairs
      ``w-1|w`` and ``w|w+1``;
    * ``sh``: the word shape (:func:`word_shape`, ``Xxxx``, ``dd-dd``); ``ss`` the short shape
      (:func:`short_shape`, ``Xx``, ``d-d``), ``ss-2 .. ss+2`` and the pairs ``ss-1|ss``,
      ``ss|ss+1``, ``w-1|ss``, ``ss|w+1``;
    * ``p1 .. p4`` and ``s1 .. s4``: prefixes and suffixes of the lowercased word (the whole
      word when it is shorter);
    * ``cap`` (:func:`capitalisation`: ``init``, ``all``, ``mixed``, ``lower``, ``none``) and
      ``cap-1``, ``cap+1``, ``cap-1|cap``, ``cap|cap+1``; ``dig`` (digits: ``all``, ``some``,
      ``none``); ``hyp`` (a hyphen: ``1``/``0``); ``pos`` (``first``, ``last``, ``only``,
      ``mid``); ``bias`` (every token);
    * :mod:`gpsl.lexicon`'s groups: ``cluster``, Brown path prefixes ``bc4 .. bc20`` at -1, 0,
      +1; ``freq``, a frequency bucket ``fq`` (``none``: not in the table; ``ner:LANG:GROUPS``).

    Further columns ``c`` (e.g. part of speech) get the default template's window: ``cC-2
    .. cC+2`` and the pairs ``cC-1|cC``, ``cC|cC+1``. Outside the sentence a window reads
    CRF++'s ``_B-1``, ``_B+1`` .... Stored in a saved model as its name.
    """

    NAME = "ner"
    # The estimator's defaults for this set, chosen together on 5 document folds of the
    # crowd-ner *training* sentences (never the reported held-out documents): variance {1, 2,
    # 4} x pair variance {1, 4, 16} x decoder {rns, exact, chain}, best mean span F1 over 200,
    # 400 and all sentences (``python -m bench.ner_cv``: 75.90 against 72.86 for 4, 1, rns).
    # Pair variance 1 cannot reach the scores BIO order needs (``O`` then ``I-PER``), so ~46
    # local features outvote it; the exact decoder was 1-3 points above Algorithm 2. Why, in
    # full: docs/real-crowd.md, section 4.
    VARIANCE = 2.0  #: prior variance of each feature weight (linear kernel; the library's 4)
    PAIR_VARIANCE = 4.0  #: prior variance of the label-pair functions (the paper's 1)
    DECODER = "exact"  #: ``decoder="auto"`` (:func:`gpsl.predict.pl_exact_decode`)
    #: the estimator's defaults this feature set sets (:func:`gpsl.model._feature_set_default`)
    DEFAULTS = {"variance": VARIANCE, "pair_variance": PAIR_VARIANCE, "decoder": DECODER}
    SLOTS = ("w", "w-2", "w-1", "w+1", "w+2", "w-1|w", "w|w+1", "sh", "ss", "ss-2", "ss-1",
             "ss+1", "ss+2", "ss-1|ss", "ss|ss+1", "w-1|ss", "ss|w+1", "p1", "p2", "p3", "p4",
             "s1", "s2", "s3", "s4", "cap", "cap-1", "cap+1", "cap-1|cap", "cap|cap+1", "dig",
             "hyp", "pos", "bias")
    CLUSTER_SLOTS = tuple(f"bc{k}{o}" for k in lexical.CLUSTER_LENGTHS for o in ("-1", "", "+1"))

    def __init__(self, source: str = "<ner>", lang: str = "en",
                 groups: Sequence[str] = lexical.DEFAULT_GROUPS):
        if lang not in lexical.languages():
            lexical.lexicon(lang)  # raises the one-line refusal
        if bad := sorted(set(groups) - set(lexical.GROUPS)):
            raise InputError(f"unknown lexical groups {bad} (groups: {', '.join(lexical.GROUPS)})",
                             source=source)
        self.lang, self.groups = lang, tuple(g for g in lexical.GROUPS if g in groups)
        self.slots = self.SLOTS + (self.CLUSTER_SLOTS if "cluster" in groups else ()) + (
            ("fq",) if "freq" in groups else ())
        name = f"{self.NAME}:{lang}" + ("" if self.groups == lexical.DEFAULT_GROUPS else
                                         ":" + (",".join(self.groups) or "none"))
        units = [UnigramTemplate(k, (), (k,), 0, k) for k in self.slots]
        super().__init__(self.NAME if name == "ner:en" else name, source, units, [])

    @classmethod
    def from_name(cls, name: str) -> NerFeatures | None:
        """``ner``, ``ner:LANG`` or ``ner:LANG:GROUPS`` (comma-separated, or ``none``); ``None``
        for a text that is no such name."""
        parts = name.strip().split(":")
        if parts[0] != cls.NAME or len(parts) > 3 or "\n" in name.strip():
            return None
        groups = lexical.DEFAULT_GROUPS if len(parts) < 3 else tuple(
            g for g in parts[2].split(",") if g and parts[2] != "none")
        return cls(lang=parts[1] if len(parts) > 1 else "en", groups=groups)

    @property
    def max_column(self) -> int:
        return 0

    @property
    def max_offset(self) -> int:
        return 2

    def __repr__(self) -> str:
        return f"NerFeatures({len(self.slots)} slots on column 0, windows on other columns)"

    def validate(self, n_columns: int) -> None:
        if n_columns < 1:
            raise InputError("the ner feature set needs a word column", source=self.source)

    def expand(self, tokens: Sequence[Token], position: int) -> list[str]:
        if not 0 <= position < len(tokens):
            raise IndexError(f"position {position} outside a sentence of {len(tokens)} tokens")
        return [block[position] for block in self.expand_sentence(tokens)]

    def word_columns(self, words: list[str]) -> dict[str, list[str]]:
        """The values that depend on the word alone, one list per name (a value per word):
        what :meth:`expand_sentence` windows and :func:`gpsl.feature_ids.ner_columns`
        computes once per distinct word."""
        low = [w.lower() for w in words]
        shape = [word_shape(w) for w in words]
        ss = [short_shape(s) for s in shape]
        cap = [capitalisation(w) for w in words]
        col: dict[str, list[str]] = {"w": low, "sh": shape, "ss": ss, "cap": cap}
        for k in range(1, 5):
            col[f"p{k}"] = [w[:k] for w in low]
            col[f"s{k}"] = [w[-k:] for w in low]
        col["dig"] = [digits(w) for w in words]
        col["hyp"] = ["1" if "-" in w else "0" for w in words]
        if self.groups:
            lex = lexical.lexicon(self.lang)
            if "cluster" in self.groups:
                for k in lexical.CLUSTER_LENGTHS:
                    col[f"bc{k}"] = lex.clusters(words, k)
            if "freq" in self.groups:
                col["fq"] = lex.buckets(words)
        return col

    def expand_sentence(self, tokens: Sequence[Token]) -> list[list[str]]:
        """One block per slot (in :attr:`slots` order, then the other columns' windows)."""
        n = len(tokens)
        if n == 0:
            return [[] for _ in self.slots]
        words = [tok[0] for tok in tokens]
        col = self.word_columns(words)
        for base in ("w", "ss", "cap"):
            for k in (-2, -1, 1, 2):
                col[f"{base}{k:+d}"] = window(col[base], k)
        col["pos"] = [position(i, n) for i in range(n)]
        if "cluster" in self.groups:
            for k in lexical.CLUSTER_LENGTHS:
                c = col[f"bc{k}"]
                col[f"bc{k}-1"], col[f"bc{k}+1"] = window(c, -1), window(c, 1)
        out = []
        for slot in self.slots:
            if slot == "bias":
                out.append(["bias"] * n)
            elif "|" in slot:
                a, b = slot.split("|")
                out.append([f"{slot}={x}|{y}" for x, y in zip(col[a], col[b])])
            else:
                out.append([f"{slot}={v}" for v in col[slot]])
        for c in range(1, min(len(t) for t in tokens)):
            vals = [tok[c] for tok in tokens]
            win = {k: window(vals, k) if k else vals for k in (-2, -1, 0, 1, 2)}
            for k in (-2, -1, 0, 1, 2):
                out.append([f"c{c}{k:+d}={v}" for v in win[k]])
            out.append([f"c{c}-1|c{c}={x}|{y}" for x, y in zip(win[-1], vals)])
            out.append([f"c{c}|c{c}+1={x}|{y}" for x, y in zip(vals, win[1])])
        return out


#: built-in feature sets by name (see the module docstring)
FEATURE_SETS = {NerFeatures.NAME: NerFeatures}


class FeatureExtractor:
    """Turn sentences into a binary CSR matrix with one row per token.

    Parameters
    ----------
    template:
        A :class:`Template`, template text, or ``None`` for :func:`default_template` over the
        number of columns seen by :meth:`fit`.
    min_freq:
        Keep features seen (on distinct tokens) at least this many times in the training data,
        like ``crf_learn -f``.

    Attributes (after :meth:`fit`): ``vocabulary_`` (feature string -> column, columns in
    sorted string order), ``feature_names_`` (the strings in column order), ``n_columns_``
    (the number of columns of the training tokens).
    """

    def __init__(self, template: Template | str | None = None, min_freq: int = 1):
        if isinstance(min_freq, bool) or not isinstance(min_freq, (int, np.integer)):
            raise TypeError("min_freq must be an integer")
        if min_freq < 1:
            raise ValueError("min_freq must be at least 1")
        self.template = None if template is None else Template.coerce(template)
        self.min_freq = int(min_freq)

    # ------------------------------------------------------------------ helpers

    @property
    def n_features_(self) -> int:
        return len(self.feature_names_)

    @staticmethod
    def lengths(sentences: Sequence[Sequence[Token]]) -> np.ndarray:
        """Number of tokens of each sentence, as an int64 array."""
        return np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))

    @staticmethod
    def _n_columns(sentences: Sequence[Sequence[Token]]) -> int | None:
        return min({len(tok) for s in sentences for tok in s}, default=None)

    def _check_fitted(self) -> None:
        if not hasattr(self, "vocabulary_"):
            raise RuntimeError("FeatureExtractor is not fitted; call fit() first")

    def _expand_all(self, sentences: Sequence[Sequence[Token]]
                    ) -> tuple[list[str], np.ndarray, int]:
        """All feature strings and their row (token) indices; also the number of tokens."""
        assert self.template is not None
        n_cols = self._n_columns(sentences)
        if n_cols is not None:
            self.template.validate(n_cols)
        feats: list[str] = []
        rows: list[np.ndarray] = []
        offset = 0
        expand = self.template.expand_sentence
        for s in sentences:
            n = len(s)
            if n == 0:
                continue
            blocks = expand(s)
            for block in blocks:
                feats.extend(block)
            rows.append(np.tile(np.arange(offset, offset + n, dtype=np.int64), len(blocks)))
            offset += n
        row_arr = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        return feats, row_arr, offset

    _csr = staticmethod(binary_csr)

    # ------------------------------------------------------------------ API

    def fit(self, sentences: Sequence[Sequence[Token]]) -> FeatureExtractor:
        """Build :attr:`vocabulary_` from training sentences (lists of token tuples)."""
        self._fit(sentences)
        return self

    def _fit(self, sentences: Sequence[Sequence[Token]]) -> sp.csr_matrix:
        n_cols = self._n_columns(sentences)
        if self.template is None:
            if n_cols is None:
                raise ValueError("cannot fit on no tokens")
            self.template = default_template(n_cols)
        tokens, lengths = list(itertools.chain.from_iterable(sentences)), self.lengths(sentences)
        self.feature_names_, X = feature_ids.vocabulary_by_ids(
            lambda lookup: self._columns(tokens, lengths, lookup), len(tokens),
            self.min_freq) or vocabulary_matrix(*self._expand_all(sentences), self.min_freq)
        self.vocabulary_ = {f: j for j, f in enumerate(self.feature_names_)}
        self.n_columns_ = n_cols
        return X

    def transform(self, sentences: Sequence[Sequence[Token]]) -> sp.csr_matrix:
        """Binary ``(total tokens, n_features)`` float64 CSR; unseen features are ignored."""
        return self.transform_tokens(list(itertools.chain.from_iterable(sentences)),
                                     self.lengths(sentences))

    def transform_tokens(self, tokens: list[Token], lengths: np.ndarray) -> sp.csr_matrix:
        """:meth:`transform` of sentences given as their ``tokens`` one after another and
        their ``lengths``: a CRF++ template's or ``ner``'s strings once per distinct tuple of
        values (:mod:`gpsl.feature_ids`), else :meth:`transform_strings`."""
        self._check_fitted()
        C = self._columns(tokens, lengths, self._lookup)
        if C is not None:
            return rows_csr(C, len(self.vocabulary_))
        ends = np.cumsum(lengths).tolist()
        return self.transform_strings([tokens[a:b] for a, b in zip([0, *ends], ends)])

    def _columns(self, tokens: list[Token], lengths: np.ndarray, lookup) -> np.ndarray | None:
        """The ``(n_tokens, K)`` columns of a CRF++ template's or ``ner``'s strings looked up
        once per distinct tuple of values (:mod:`gpsl.feature_ids`), None for another kind."""
        kind = type(self.template)
        if kind is not Template and kind is not NerFeatures:
            return None
        n_cols = min(map(len, tokens), default=None)
        if n_cols is not None:
            self.template.validate(n_cols)
        if kind is Template:
            return template_columns(self.template.unigrams, tokens, lengths, lookup)
        return ner_columns(self.template, tokens, lengths, lookup)

    def _lookup(self, feats: list[str]) -> np.ndarray:
        """The vocabulary columns of feature strings (-1: unseen)."""
        return np.fromiter(map(self.vocabulary_.get, feats, itertools.repeat(-1)),
                           dtype=np.int64, count=len(feats))

    def transform_strings(self, sentences: Sequence[Sequence[Token]]) -> sp.csr_matrix:
        """:meth:`transform` by every token's feature strings (the reference)."""
        self._check_fitted()
        feats, rows, n_tokens = self._expand_all(sentences)
        ids = self._lookup(feats)
        ok = ids >= 0
        return self._csr(rows[ok], ids[ok], n_tokens, len(self.vocabulary_))

    def fit_transform(self, sentences: Sequence[Sequence[Token]]) -> sp.csr_matrix:
        """:meth:`fit` then :meth:`transform`, expanding the templates only once."""
        return self._fit(sentences)

    # ------------------------------------------------------------------ persistence

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description (template text, min_freq, vocabulary in order)."""
        self._check_fitted()
        assert self.template is not None
        return {
            "template": self.template.text,
            "template_source": self.template.source,
            "min_freq": self.min_freq,
            "n_columns": self.n_columns_,
            "vocabulary": list(self.feature_names_),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FeatureExtractor:
        """Inverse of :meth:`to_dict`; :class:`ModelFormatError` on a malformed dict."""
        where = "<model features>"
        if not isinstance(d, dict):
            raise ModelFormatError("feature extractor description is not an object", source=where)
        text = d.get("template")
        vocab = d.get("vocabulary")
        min_freq = d.get("min_freq", 1)
        n_columns = d.get("n_columns")
        if not isinstance(text, str):
            raise ModelFormatError("feature extractor: template is not text", source=where)
        if not isinstance(vocab, list) or not all(isinstance(f, str) for f in vocab):
            raise ModelFormatError("feature extractor: vocabulary is not a list of strings",
                                   source=where)
        if len(set(vocab)) != len(vocab):
            raise ModelFormatError("feature extractor: duplicate vocabulary entries", source=where)
        if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
            raise ModelFormatError("feature extractor: bad min_freq", source=where)
        if n_columns is not None and (
            isinstance(n_columns, bool) or not isinstance(n_columns, int) or n_columns < 1
        ):
            raise ModelFormatError("feature extractor: bad n_columns", source=where)
        try:
            template = Template.parse(text, source=str(d.get("template_source", "<template>")))
        except InputError as exc:
            raise ModelFormatError(f"feature extractor: bad template: {exc}",
                                   source=where) from None
        self = cls(template, min_freq=min_freq)
        self.feature_names_ = list(vocab)
        self.vocabulary_ = {f: j for j, f in enumerate(vocab)}
        self.n_columns_ = n_columns
        return self
