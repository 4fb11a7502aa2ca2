"""One set of checks for every entry point (store calls, uploads, imports): names, label
sets, offsets, splits, annotators and sentences.  Problems raise
:class:`gpsl.errors.InputError` with one line naming the source, line, sentence and token."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpsl import params
from gpsl.errors import InputError
from gpsl.features import Template, default_template

SPLITS = ("train", "heldout")
SOURCES = ("human", "accepted")
IMPORT = "import"  # the annotator of labels that came with a file (also "import:<file>")


def annotator(name) -> str:
    text = str(name).strip() if name is not None else ""
    if not text:
        raise InputError("annotator name is empty", source="<annotator>")
    return text


def is_import(annotator: str | None, source: str | None = None) -> bool:
    """A vote that came with an imported file (source ``import``, or annotator ``import`` or
    ``import:<file>``), not a person's: it takes part in no agreement figure and counts
    for a token only while no one has voted on it."""
    name = annotator or ""
    return source == IMPORT or name == IMPORT or name.startswith(IMPORT + ":")


def import_credit(file_name: str) -> str:
    """Who labels that come with an imported file are credited to: ``import:<file name>``."""
    return f"{IMPORT}:{' '.join(str(file_name).split()) or 'file'}"


def project_name(name) -> str:
    text = str(name).strip() if name is not None else ""
    if not text:
        raise InputError("project name is empty", source="<project>")
    return text


def label_set(labels) -> list[str]:
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise InputError("labels must be a list of strings", source="<project>")
    out = [str(x) for x in labels]
    if not out:
        raise InputError("the label set is empty", source="<project>")
    for lab in out:
        if not lab or lab != lab.strip() or len(lab.split()) != 1 or lab == "_":
            raise InputError(f"invalid label {lab!r} (empty, '_' or contains whitespace)",
                             source="<project>")
    dup = sorted({x for x in out if out.count(x) > 1})
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


def source(value) -> str:
    if value not in SOURCES:
        raise InputError(f"source must be 'human' or 'accepted', got {value!r}",
                         source="<label>")
    return value


def _token(tok) -> tuple[str, ...]:
    if isinstance(tok, str):
        return (tok,)
    return tuple(str(c) for c in tok)


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
              source: str | None = None, gold=None) -> list[dict]:
    """Check sentences against a project's label set and column count; returns normalised
    dicts ``(tokens: list of tuples, labels: list with None, line, doc, gold)``.

    ``items`` are :class:`gpsl.io.Sentence` objects or dicts (``tokens`` and optional
    ``labels``/``line``/``doc``); a token is a tuple of string columns (a bare string is one
    column); ``"_"`` is a missing label.  ``gold`` is an optional parallel list of label
    lists.  Every problem raises one :class:`InputError` line."""
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
        lab = str(lab)
        if lab not in known:
            raise InputError(f"sentence {k + 1}, token {t + 1} ({tokens[t][0]!r}): {what} "
                             f"{lab!r} is not in the project's label set", source=src,
                             line=line + t if line else None)
        return lab

    for k, obj in enumerate(items):
        tokens, labs, line, doc = _parts(obj)
        src = doc or source or "<import>"
        line = int(line) if line else None
        if not tokens:
            raise InputError(f"sentence {k + 1} has no tokens", source=src, line=line)
        tokens = [_token(tok) for tok in tokens]
        for t, tok in enumerate(tokens):
            if n_columns is None:
                n_columns = len(tok)
            if len(tok) != n_columns or n_columns == 0:
                raise InputError(f"sentence {k + 1}, token {t + 1}: {len(tok)} column"
                                 f"{'s' if len(tok) != 1 else ''}, but the project's tokens "
                                 f"have {n_columns} columns", source=src,
                                 line=line + t if line else None)
        labs = [None] * len(tokens) if labs is None else list(labs)
        if len(labs) != len(tokens):
            raise InputError(f"sentence {k + 1}: {len(labs)} labels for {len(tokens)} tokens",
                             source=src, line=line)
        labs = [check_label(lab, k, t, tokens, src, line) for t, lab in enumerate(labs)]
        glabs = None
        if gold is not None and gold[k] is not None:
            glabs = list(_gold_list(gold[k]))
            if len(glabs) != len(tokens):
                raise InputError(f"sentence {k + 1}: {len(glabs)} gold labels for "
                                 f"{len(tokens)} tokens", source=src, line=line)
            glabs = [check_label(lab, k, t, tokens, src, line, "gold label")
                     for t, lab in enumerate(glabs)]
        out.append({"tokens": tokens, "labels": labs, "line": line, "doc": doc, "gold": glabs})
    return out


def template(text: str, n_columns: int) -> None:
    """Parse and validate CRF++ template text against the data's column count."""
    Template.parse(text, source="<template>").validate(int(n_columns))


def default_template_text(n_columns: int) -> str:
    """gpsl's default window template over ``n_columns`` token columns (CRF++ text)."""
    return default_template(max(1, int(n_columns))).text
