"""Label Studio's side of the service: the labeling config, spans <-> token labels, the
payloads of the ML backend protocol.

The protocol (HumanSignal's ``label-studio-ml-backend``, ``label_studio_ml/api.py``):

* ``POST /setup`` ``{"project": "<id>.<created>", "schema": "<View>...</View>",
  "extra_params": ...}`` -> ``{"model_version": "..."}``;
* ``POST /predict`` ``{"tasks": [{"id", "data": {"text": ...}}], "label_config": ...,
  "project": ..., "params": {...}}`` -> ``{"results": [{"result": [region, ...], "score",
  "model_version"}]}`` with one prediction per task, in the order of the tasks; a region is
  ``{"from_name", "to_name", "type": "labels", "value": {"start", "end", "text",
  "labels": [type]}, "score"}`` (character offsets into the task's text, end exclusive);
* ``POST /webhook`` ``{"action": "ANNOTATION_CREATED" | ..., "project": {"id",
  "label_config"}, "annotation": {"id", "task", "completed_by", "result": [region, ...],
  "was_cancelled"}, "task": {"id", "data"}}``;
* ``GET /health`` -> ``{"status": "UP", "model_class": ...}``.

Text is tokenised by :func:`gpsl.annotation.interchange.imports.tokenize` (words and punctuation,
with their character offsets), the tokenizer of the app's Label Studio/doccano/Prodigy imports,
so offsets index the task's text exactly (any Unicode, any run of whitespace).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

import defusedxml.ElementTree as SafeET
import numpy as np
from defusedxml import DefusedXmlException

from gpsl.annotation.interchange.imports import tokenize
from gpsl.metrics import chunks

__all__ = ["LabelConfig", "ProtocolError", "parse_config", "tokenize", "labels_to_spans",
           "spans_to_votes", "regions_to_spans", "task_text"]

#: the largest labeling config read (characters)
MAX_CONFIG_CHARS = 200_000


class ProtocolError(ValueError):
    """A request the service cannot serve: answered with a 4xx and this one-line message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(" ".join(str(message).split()))
        self.status = status


@dataclass(frozen=True)
class LabelConfig:
    """A span-NER labeling config: ``<Labels name=from_name toName=to_name>`` over
    ``<Text name=to_name value="$value_key">``, and the entity types of its ``<Label>``s."""

    from_name: str
    to_name: str
    value_key: str
    types: tuple[str, ...]


def _attr(el, name: str) -> str:
    return (el.get(name) or "").strip()


def parse_config(xml: str) -> LabelConfig:
    """The project's ``<Labels>``/``<Text>`` config; :class:`ProtocolError` for one that is
    not token-span NER on one text (no ``<Labels>``, no ``<Text>``, labels on another kind of
    object, a second ``<Labels>``...). Parsed with defusedxml: no entities, no DTD."""
    if not isinstance(xml, str) or not xml.strip():
        raise ProtocolError("the labeling config is missing or empty")
    if len(xml) > MAX_CONFIG_CHARS:
        raise ProtocolError(f"the labeling config is longer than {MAX_CONFIG_CHARS:,} "
                            "characters")
    try:
        root = SafeET.fromstring(xml, forbid_dtd=True)
    except DefusedXmlException as exc:
        raise ProtocolError(f"the labeling config is refused ({type(exc).__name__}: no DTD "
                            "or entities)") from None
    except ET.ParseError as exc:
        raise ProtocolError(f"the labeling config is not valid XML ({exc})") from None
    texts = {_attr(el, "name"): el for el in root.iter("Text")}
    labels = list(root.iter("Labels"))
    others = sorted({el.tag for el in root.iter() if el.tag in _OTHER_CONTROLS})
    if not labels:
        what = f" (it has {', '.join(others)})" if others else ""
        raise ProtocolError("gpsl serves span NER: the labeling config needs a <Labels> "
                            f"over a <Text>{what}")
    if len(labels) > 1:
        raise ProtocolError("gpsl serves one <Labels> per project; the config has "
                            f"{len(labels)}")
    el = labels[0]
    to_name = _attr(el, "toName")
    if to_name not in texts:
        raise ProtocolError(f"<Labels name={_attr(el, 'name')!r}> labels {to_name!r}, which "
                            "is not a <Text>: gpsl serves span NER on text")
    value = _attr(texts[to_name], "value")
    if not value.startswith("$") or len(value) < 2:
        raise ProtocolError(f"<Text name={to_name!r}> needs value=\"$field\"")
    types = [_attr(lab, "value") for lab in el.iter("Label")]
    if not types or any(not t or any(c.isspace() for c in t) for t in types):
        raise ProtocolError("every <Label> needs a value without spaces (an entity type)")
    if len(set(types)) != len(types):
        raise ProtocolError("two <Label>s have the same value")
    return LabelConfig(_attr(el, "name"), to_name, value[1:], tuple(types))


_OTHER_CONTROLS = {"Choices", "RectangleLabels", "PolygonLabels", "KeyPointLabels",
                   "BrushLabels", "TextArea", "Rating", "Relations", "HyperTextLabels",
                   "ParagraphLabels", "TimeSeriesLabels"}


def task_text(task, config: LabelConfig, max_chars: int) -> str:
    """The text of a task (``task["data"][value_key]``), checked."""
    if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
        raise ProtocolError("each task must be an object with a \"data\" object")
    text = task["data"].get(config.value_key)
    if not isinstance(text, str):
        raise ProtocolError(f"task {task.get('id')!r} has no text in data.{config.value_key}")
    if len(text) > max_chars:
        raise ProtocolError(f"task {task.get('id')!r}: text of {len(text):,} characters, over "
                            f"the limit of {max_chars:,}", status=413)
    return text


def labels_to_spans(offsets: Sequence[tuple[int, int]], labels: Sequence[str],
                    P: np.ndarray | None = None, classes: Sequence[str] = ()
                    ) -> list[tuple[int, int, str, float | None]]:
    """BIO (or IOB) token labels -> character spans ``(start, end, type, p)``: a chunk of
    tokens ``a..b-1`` (:func:`gpsl.metrics.chunks`) starts at the first token's start and
    ends at the last token's end, so whitespace between its tokens is inside the span and
    whitespace around it is not. ``p`` is the span's probability read from the token
    marginals ``P`` (rows in the order of ``classes``): the smallest marginal of the span's
    labels, ``min_t p_t(y_t)``, which is the Frechet upper bound on the probability of the
    whole span, ``P(y_a, ..., y_b) <= min_t P(y_t)``; None without ``P``."""
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for a, b, kind in chunks(list(labels)):
        if not kind:
            continue
        p = None
        if P is not None:
            p = float(min(P[t, index[labels[t]]] for t in range(a, b) if labels[t] in index))
        out.append((offsets[a][0], offsets[b - 1][1], kind, p))
    return out


def spans_to_votes(offsets: Sequence[tuple[int, int]],
                   spans: Sequence[tuple[int, int, str]], complete: bool
                   ) -> list[str | None]:
    """One annotation's character spans -> a BIO label per token: every token that overlaps
    a span takes it (``B-`` on its first token, ``I-`` after). A token in no span is ``O``
    when the project's annotations are ``complete``, else None (unlabeled: the annotator
    said nothing about it). A token covered by two spans of different types is None (the
    annotation contradicts itself there)."""
    labels: list[str | None] = ["O" if complete else None] * len(offsets)
    owner: dict[int, int] = {}
    clash: set[int] = set()
    for k, (start, end, kind) in enumerate(sorted(spans)):
        inside = [t for t, (s, e) in enumerate(offsets) if s < end and e > start]
        for i, t in enumerate(inside):
            lab = f"{'B' if i == 0 else 'I'}-{kind}"
            if t in owner and labels[t] != lab and owner[t] != k:
                clash.add(t)
            owner[t] = k
            labels[t] = lab
    for t in clash:
        labels[t] = None
    return labels


def regions_to_spans(result, config: LabelConfig, text: str) -> list[tuple[int, int, str]]:
    """The ``labels`` regions of an annotation's ``result`` on this config's ``<Labels>``
    -> ``(start, end, type)``; regions of other controls are skipped; a region whose offsets
    are not in the text, or whose type is not text, is a :class:`ProtocolError`."""
    if not isinstance(result, list):
        raise ProtocolError("annotation.result must be a list")
    out = []
    for r in result:
        if not isinstance(r, dict) or r.get("type") != "labels":
            continue
        if r.get("from_name") not in (None, config.from_name):
            continue
        v = r.get("value")
        if not isinstance(v, dict):
            raise ProtocolError("a labels region has no value object")
        start, end, kinds = v.get("start"), v.get("end"), v.get("labels")
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end)) \
                or not 0 <= start < end <= len(text):
            raise ProtocolError(f"region [{start!r}, {end!r}) is not a span of the task's "
                                f"text ({len(text)} characters)")
        if not isinstance(kinds, list) or not kinds or not all(isinstance(k, str)
                                                                 for k in kinds):
            raise ProtocolError("a labels region needs value.labels, a list of types")
        out.append((start, end, kinds[0]))
    return out


def region(config: LabelConfig, text: str, span: tuple[int, int, str, float | None]) -> dict:
    """One predicted region of the protocol (``score`` is the span's probability)."""
    start, end, kind, p = span
    out = {"from_name": config.from_name, "to_name": config.to_name, "type": "labels",
           "value": {"start": start, "end": end, "text": text[start:end], "labels": [kind]}}
    if p is not None:
        out["score"] = round(p, 6)
    return out
