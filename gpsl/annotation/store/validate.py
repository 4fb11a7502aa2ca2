"""One set of checks for every entry point (store calls, uploads, imports): names, label
sets, offsets, splits, annotators and sentences.  Problems raise
:class:`gpsl.errors.InputError` with one line naming the source, line, sentence and token."""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from gpsl import params
from gpsl.errors import InputError, clean_source
from gpsl.features import Template, default_template

SPLITS = ("train", "heldout")
SOURCES = ("human", "accepted")
IMPORT = "import"  # the annotator of labels that came with a file (also "import:<file>")
#: names the store uses for what no person did: imports (``import``, ``import:<file>``), a
#: lead's decision (``adjudicated``), the model's suggestions (``model``); never a person's
RESERVED = (IMPORT, "adjudicated", "model")
MAX_NAME = 60
#: the most labels a project's label set holds (the model's pairwise parameters grow with
#: its square; a file whose last column is words has as many "labels" as words)
MAX_LABELS = 1000
#: what no stored text may hold: NUL (PostgreSQL refuses it), unpaired surrogates (not
#: Unicode, neither back end can store them)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: what a one-line name may not hold besides: control characters (line breaks, tabs ...)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def text(value, what: str, source: str | None = None, *, line: int | None = None,
         one_line: bool = False) -> str:
    """``value`` as text the store can keep on SQLite and PostgreSQL alike: a ``str``
    without NUL or unpaired surrogates (and, with ``one_line``, without control
    characters); anything else is one :class:`InputError` line naming ``what``."""
    if not isinstance(value, str):
        raise InputError(f"{what} must be text, not {type(value).__name__}",
                         source=source, line=line)
    bad = _UNSTORABLE.search(value) or (_CONTROL.search(value) if one_line else None)
    if bad is not None:
        ch = bad.group()
        kind = ("a NUL character" if ch == "\x00" else "an unpaired surrogate (not valid "
                "Unicode)" if "\ud800" <= ch <= "\udfff" else f"a control character "
                f"(U+{ord(ch):04X})")
        raise InputError(f"{what} contains {kind}", source=source, line=line)
    return value


def is_reserved(name: str) -> bool:
    """Whether ``name`` is one the store keeps for what no person did (any case)."""
    low = " ".join(str(name).split()).lower()
    return low in RESERVED or low.startswith(IMPORT + ":")


def person(name, what: str = "annotator name") -> str:
    """The name a person's votes, decisions and leases are credited to: non-empty text of at
    most :data:`MAX_NAME` characters on one line (runs of spaces become one), never a
    reserved name (:data:`RESERVED`, ``import:<file>``): labels can never be credited to an
    import, a decision or the model by naming them."""
    if name is None:
        raise InputError(f"the {what} is empty", source="<annotator>")
    clean = " ".join(text(name, f"the {what}", "<annotator>", one_line=True).split())
    if not clean:
        raise InputError(f"the {what} is empty", source="<annotator>")
    if len(clean) > MAX_NAME:
        raise InputError(f"the {what} is longer than {MAX_NAME} characters",
                         source="<annotator>")
    if any(ch in clean for ch in "<>`"):  # names show in tables, charts and messages
        raise InputError(f"the {what} cannot hold < > or `", source="<annotator>")
    if is_reserved(clean):
        raise InputError(f"{clean!r} is reserved for labels that no person set (imports, "
                         "decisions, the model): choose another name", source="<annotator>")
    return clean


annotator = person


def credit(name) -> str:
    """Who the labels of imported sentences are credited to: ``import``/``import:<file>``
    (:func:`import_credit`), or a person (:func:`person`); no other reserved name."""
    if isinstance(name, str) and is_import(name.strip()):
        return text(name.strip(), "the import's name", "<import>", one_line=True)
    return person(name, "name the imported labels are credited to")


def is_import(annotator: str | None, source: str | None = None) -> bool:
    """A vote that came with an imported file (source ``import``, or annotator ``import`` or
    ``import:<file>``), not a person's: it takes part in no agreement figure and counts
    for a token only while no one has voted on it."""
    name = annotator or ""
    return source == IMPORT or name == IMPORT or name.startswith(IMPORT + ":")


def import_credit(file_name: str) -> str:
    """Who labels that come with an imported file are credited to: ``import:<file name>``."""
    name = _CONTROL.sub(" ", _UNSTORABLE.sub("", str(file_name)))
    return f"{IMPORT}:{' '.join(name.split())[:200] or 'file'}"


def doc_name(doc) -> str | None:
    """The file name sentences came from, as the store keeps it: one line of text (control
    characters become spaces, unpaired surrogates U+FFFD), at most 300 characters."""
    if doc is None:
        return None
    return clean_source(doc)[:300] or None


def project_name(name) -> str:
    if name is None:
        raise InputError("project name is empty", source="<project>")
    clean = text(name, "the project name", "<project>", one_line=True).strip()
    if not clean:
        raise InputError("project name is empty", source="<project>")
    if len(clean) > 200:
        raise InputError("the project name is longer than 200 characters", source="<project>")
    return clean


def label_set(labels) -> list[str]:
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise InputError("labels must be a list of strings", source="<project>")
    if len(labels) > MAX_LABELS:  # refused before each is looked at
        raise InputError(f"{len(labels):,} labels: a project takes at most {MAX_LABELS:,}",
                         source="<project>")
    out = [text(x, "a label", "<project>", one_line=True) for x in labels]
    if not out:
        raise InputError("the label set is empty", source="<project>")
    for lab in out:
        if not lab or lab != lab.strip() or len(lab.split()) != 1 or lab == "_":
            raise InputError(f"invalid label {lab!r} (empty, '_' or contains whitespace)",
                             source="<project>")
    dup = sorted(x for x, n in Counter(out).items() if n > 1)
    if dup:
        raise InputError(f"duplicate labels: {', '.join(dup)}", source="<project>")
    return out


def offsets(values) -> list[int]:
    """A project's default dependency set, checked by the parameter table
    (:func:`gpsl.params.check`: non-zero, distinct, bounded integers), so that a project
    never holds offsets its training would refuse."""
    return list(params.check("offsets", values, source="<project>"))


def kernel(value) -> str:
    """A project's default kernel, checked by the parameter table (``"linear"``, ``"rbf"``)."""
    return params.check("kernel", value, source="<project>")


def split(value) -> str:
    if value not in SPLITS:
        raise InputError(f"split must be 'train' or 'heldout', got {value!r}", source="<import>")
    return value


#: the largest id or index the store takes (a signed 64-bit integer, both back ends)
MAX_ID = 2 ** 63 - 1
#: the arguments the facade reads as whole numbers (:func:`whole`)
ID_ARGS = {"project_id": "project id", "sentence_id": "sentence id",
           "version_id": "version id", "account_id": "account id",
           "token_index": "token index"}


def whole(value, what: str = "id", source: str = "<store>") -> int:
    """``value`` as a whole number 0..:data:`MAX_ID`: an ``int`` (or numpy integer), never a
    bool, a float (``1.9`` is not token 1), a string (``'-0'``) or None; one line
    otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{what} must be a whole number, not {type(value).__name__} "
                         f"{str(value)[:40]!r}", source=source)
    value = int(value)
    if not 0 <= value <= MAX_ID:
        raise InputError(f"{what} {str(value)[:40]} is out of range", source=source)
    return value


def token_index(value, n: int, where: str) -> int:
    """A token index of a sentence of ``n`` tokens (:func:`whole`, below ``n``)."""
    t = whole(value, "token index", where)
    if t >= n:
        raise InputError(f"token index {t} out of range (the sentence has {n} tokens)",
                         source=where)
    return t


def age(value, most: float) -> float:
    """A step's age in seconds: a finite number, not negative; above ``most`` it is
    ``most`` (a key pressed long before the write)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(float(value)) or float(value) < 0:
        raise InputError(f"a step's age must be a finite number of seconds >= 0, not "
                         f"{str(value)[:40]!r}", source="<label>")
    return min(float(value), most)


def source(value) -> str:
    if value not in SOURCES:
        raise InputError(f"source must be 'human' or 'accepted', got {value!r}",
                         source="<label>")
    return value


def _token(tok, where: str, src, line) -> tuple[str, ...]:
    """A token's columns: text (an int is its digits), never empty, NUL or a surrogate."""
    cols = (tok,) if isinstance(tok, str) else tuple(tok) if isinstance(
        tok, (list, tuple)) else None
    if not cols:
        raise InputError(f"{where} must be text or a non-empty list of columns, not "
                         f"{type(tok).__name__}", source=src, line=line)
    out = []
    for c in cols:
        if isinstance(c, int) and not isinstance(c, bool):
            c = str(c)
        if text(c, where, src, line=line) == "":
            raise InputError(f"{where} is empty", source=src, line=line)
        out.append(c)
    return tuple(out)


def _parts(obj):
    """(tokens, labels, line, doc) of a gpsl.io.Sentence-like object or a dict."""
    if isinstance(obj, Mapping):
        return obj.get("tokens"), obj.get("labels"), obj.get("line"), obj.get("doc")
    return (getattr(obj, "tokens", None), getattr(obj, "labels", None),
            getattr(obj, "line", None), None)


def _gold_list(obj):
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get("labels")
    if hasattr(obj, "labels"):
        return obj.labels
    return obj


def sentences(items, labels: Sequence[str], *, n_columns: int | None = None,
              source: str | None = None, gold=None, first: int = 0) -> list[dict]:
    """Check sentences against a project's label set and column count; returns normalised
    dicts ``(tokens: list of tuples, labels: list with None, line, doc, gold)``.

    ``items`` are :class:`gpsl.io.Sentence` objects or dicts (``tokens`` and optional
    ``labels``/``line``/``doc``); a token is a tuple of string columns (a bare string is one
    column); ``"_"`` is a missing label.  ``gold`` is an optional parallel list of label
    lists.  Every problem raises one :class:`InputError` line (``first``: how many
    sentences come before these, for the numbers in the messages)."""
    items = list(items)
    known = set(labels)
    if gold is not None:
        gold = list(gold)
        if len(gold) != len(items):
            raise InputError(f"{len(gold)} gold sentences for {len(items)} sentences",
                             source=source or "<import>")
    out = []

    def check_label(lab, k, t, tokens, src, line, what="label"):
        if lab is None or lab == "_":
            return None
        if not isinstance(lab, str):
            raise InputError(f"sentence {k + 1}, token {t + 1}: {what} must be text or null, "
                             f"not {type(lab).__name__}", source=src,
                             line=line + t if line else None)
        if lab not in known:
            raise InputError(f"sentence {k + 1}, token {t + 1} ({tokens[t][0]!r}): {what} "
                             f"{lab!r} is not in the project's label set", source=src,
                             line=line + t if line else None)
        return lab

    for k, obj in enumerate(items):
        n = k + first  # the sentence's number in messages, less one
        tokens, labs, line, doc = _parts(obj)
        doc = doc_name(doc)
        src = doc or source or "<import>"
        line = line if isinstance(line, int) and not isinstance(line, bool) and line > 0 \
            else None
        if not tokens or isinstance(tokens, (str, bytes)):
            raise InputError(f"sentence {n + 1} has no tokens", source=src, line=line)
        tokens = [_token(tok, f"sentence {n + 1}, token {t + 1}", src,
                         line + t if line else None) for t, tok in enumerate(tokens)]
        for t, tok in enumerate(tokens):
            if n_columns is None:
                n_columns = len(tok)
            if len(tok) != n_columns or n_columns == 0:
                raise InputError(f"sentence {n + 1}, token {t + 1}: {len(tok)} column"
                                 f"{'s' if len(tok) != 1 else ''}, but the project's tokens "
                                 f"have {n_columns} columns", source=src,
                                 line=line + t if line else None)
        labs = [None] * len(tokens) if labs is None else list(labs)
        if len(labs) != len(tokens):
            raise InputError(f"sentence {n + 1}: {len(labs)} labels for {len(tokens)} tokens",
                             source=src, line=line)
        labs = [check_label(lab, n, t, tokens, src, line) for t, lab in enumerate(labs)]
        glabs = None
        if gold is not None and gold[k] is not None:
            glabs = list(_gold_list(gold[k]))
            if len(glabs) != len(tokens):
                raise InputError(f"sentence {n + 1}: {len(glabs)} gold labels for "
                                 f"{len(tokens)} tokens", source=src, line=line)
            glabs = [check_label(lab, n, t, tokens, src, line, "gold label")
                     for t, lab in enumerate(glabs)]
        out.append({"tokens": tokens, "labels": labs, "line": line, "doc": doc, "gold": glabs})
    return out


def template(text: str, n_columns: int) -> None:
    """Parse and validate CRF++ template text against the data's column count."""
    Template.parse(text, source="<template>").validate(int(n_columns))


def default_template_text(n_columns: int) -> str:
    """gpsl's default window template over ``n_columns`` token columns (CRF++ text)."""
    return default_template(max(1, int(n_columns))).text


def typed_ids(cls):
    """Every public method of ``cls`` taking an id or a token index
    (:data:`ID_ARGS`) checks it first (:func:`whole`): a
    bool, a float, a string or a negative number is refused in one line on both back ends
    (``get_project(True)`` was project 1 on SQLite and a raw SQL error on PostgreSQL)."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        sig = inspect.signature(fn)
        checked = [p for p in sig.parameters if p in ID_ARGS]
        if not checked:
            continue

        def wrapper(*args, _fn=fn, _sig=sig, _checked=tuple(checked), **kwargs):
            try:
                a = _sig.bind(*args, **kwargs).arguments
            except TypeError:
                return _fn(*args, **kwargs)  # Python's own error
            for p in _checked:
                if p in a and (a[p] is not None or p == "token_index"):
                    whole(a[p], ID_ARGS[p])
            return _fn(*args, **kwargs)

        setattr(cls, name, functools.wraps(fn)(wrapper))
    return cls
