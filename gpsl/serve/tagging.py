"""The tagging API for ML engineers: ``POST /v1/tag`` and ``POST /v1/query``.

A request gives sentences either as ``"sentences"``: a list of token lists (a token is a word,
or a list of the model's feature columns), or as ``"texts"``: a list of strings, tokenised with
their character offsets (:func:`gpsl.serve.labelstudio.tokenize`).

``/v1/tag`` answers what ``gpsl test --marginals`` prints, as JSON: per token its label and
the marginal probability of that label (``label/0.987654``), with ``"marginals": true`` the
whole row (one probability per label of ``labels``); for texts also the tokens' offsets and
the labeled spans. ``/v1/query`` ranks the tokens of a pool by a query score
(:func:`gpsl.active.query_model`, BALD by default, like ``gpsl query``), best first, and the
sentences by their queue score.
"""

from __future__ import annotations

import numpy as np

from gpsl import active
from gpsl.serve import labelstudio as ls
from gpsl.serve.labelstudio import ProtocolError
from gpsl.serve.service import Service

#: the largest query batch
MAX_BATCH = 10_000


def _sentences(payload: dict, service: Service):
    """``(X, texts or None, offsets or None)`` of a request."""
    has_s, has_t = "sentences" in payload, "texts" in payload
    if has_s == has_t:
        raise ProtocolError("give either \"sentences\" (token lists) or \"texts\" (strings)")
    items = payload["sentences" if has_s else "texts"]
    if not isinstance(items, list) or not items:
        raise ProtocolError(f"\"{'sentences' if has_s else 'texts'}\" must be a non-empty list")
    service.check_sizes([0] * len(items), "sentence")
    if has_t:
        for k, t in enumerate(items):
            if not isinstance(t, str):
                raise ProtocolError(f"texts[{k}] must be a string")
            if len(t) > service.limits.max_chars:
                raise ProtocolError(f"texts[{k}]: {len(t):,} characters, over the limit of "
                                    f"{service.limits.max_chars:,}", status=413)
        offsets = [ls.tokenize(t) for t in items]
        service.check_sizes([len(o) for o in offsets], "sentence")
        X = [[(t[a:b],) for a, b in off] for t, off in zip(items, offsets, strict=True)]
        service._rows(X, "sentence")
        return X, items, offsets
    service.check_sizes([len(s) if isinstance(s, list) else 0 for s in items], "sentence")
    X = []
    for k, s in enumerate(items):
        if not isinstance(s, list):
            raise ProtocolError(f"sentences[{k}] must be a list of tokens")
        row = []
        for j, tok in enumerate(s):
            cols = (tok,) if isinstance(tok, str) else tok
            if not isinstance(cols, (list, tuple)) or not cols or not all(
                    isinstance(c, str) and c and not any(ch.isspace() for ch in c)
                    for c in cols):
                raise ProtocolError(f"sentences[{k}][{j}] must be a word or a list of "
                                    "feature columns (non-empty strings without spaces)")
            row.append(tuple(cols))
        if len({len(c) for c in row}) > 1:
            raise ProtocolError(f"sentences[{k}]: tokens with different numbers of columns")
        X.append(row)
    service._rows(X, "sentence")
    return X, None, None


def tag(payload: dict, service: Service) -> dict:
    X, texts, offsets = _sentences(payload, service)
    full = payload.get("marginals", False)
    if not isinstance(full, bool):
        raise ProtocolError("\"marginals\" must be true or false")
    labels, marg, _, classes, version = service.label(X)
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for k, (x, lab, P) in enumerate(zip(X, labels, marg, strict=True)):
        s = {"tokens": [t[0] for t in x], "labels": lab,
             "p": [round(float(P[j, index[v]]), 6) for j, v in enumerate(lab)]}
        if full:
            s["marginals"] = np.round(P, 6).tolist()
        if texts is not None:
            s["offsets"] = [list(o) for o in offsets[k]]
            s["spans"] = [{"start": a, "end": b, "label": kind, "p": round(p, 6)}
                          for a, b, kind, p in ls.labels_to_spans(offsets[k], lab, P, classes)]
        out.append(s)
    return {"model_version": version, "labels": classes, "sentences": out}


def query(payload: dict, service: Service) -> dict:
    X, _, _ = _sentences(payload, service)
    strategy = payload.get("strategy", active.DEFAULT_QUERY)
    if strategy not in (*active.QUERY_SCORES, "random"):
        raise ProtocolError(f"unknown strategy {strategy!r}; choose from "
                            f"{', '.join([*active.QUERY_SCORES, 'random'])}")
    batch = payload.get("batch", 50)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise ProtocolError(f"\"batch\" must be a whole number from 1 to {MAX_BATCH:,}")
    service.sync()
    with service._lock:
        model, version = service.model, service.version
        items = active.query_model(model, X, None, strategy, batch)
        marg = model.predict_marginals(X)
        classes = list(model.classes_)
        from gpsl.annotation.labeling.rules import queue_score
        from gpsl.annotation.training.pipeline import query_scores

        q = query_scores(model, X, None, marg, strategy) if strategy != "random" else None
    tokens = []
    for k, it in enumerate(items, 1):
        row = marg[it.sentence][it.token]
        j = int(np.argmax(row))
        tokens.append({"rank": k, "sentence": it.sentence, "token": it.token,
                       "word": X[it.sentence][it.token][0], "score": round(it.score, 6),
                       "suggestion": classes[j], "p": round(float(row[j]), 6)})
    sentences = []
    if q is not None:
        scores = [queue_score(m, (), s) for m, s in zip(marg, q, strict=True)]
        order = sorted(range(len(X)), key=lambda i: (-scores[i], i))
        sentences = [{"sentence": i, "score": round(scores[i], 6)} for i in order]
    return {"model_version": version, "strategy": strategy, "tokens": tokens,
            "sentences": sentences}
