"""The model behind the HTTP faces: loaded once per worker, asked under a lock, refitted in
the background from Label Studio's votes.

``model_version`` is ``gpsl-<first 12 hex digits of the SHA-256 of model.json>`` (the digest
covers ``arrays.npz`` too, :mod:`gpsl.persist`): it changes exactly when the model does, and
every prediction carries the version of the model that made it. A refit saves its model under
``STATE_DIR/models/<version>`` and records it as current in the state file; every worker
reads that record (at most once a second) and loads the new model before it answers.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpsl import active
from gpsl.annotation.labeling.rules import queue_score
from gpsl.annotation.training.pipeline import query_scores
from gpsl.cli.tag import calibration_state
from gpsl.model import GPSL
from gpsl.persist import save_model
from gpsl.serve import labelstudio as ls
from gpsl.serve.labelstudio import ProtocolError
from gpsl.serve.state import State

log = logging.getLogger("gpsl.serve")
#: the annotator name of the train_data labels (trusted: observed labels)
TRAIN = "gpsl-train-data"


@dataclass(frozen=True)
class Limits:
    """What one request may ask (a request over a limit gets a 413 naming it)."""

    max_body: int = 8 << 20  # bytes of a request body
    max_tasks: int = 1000  # tasks of one /predict, sentences of one /v1/tag or /v1/query
    max_tokens: int = 1000  # tokens of one sentence or task text
    max_total_tokens: int = 200_000  # tokens of one request
    max_chars: int = 100_000  # characters of one task's text
    timeout: float = 90.0  # seconds for one request's model work (LS waits 100 s)


@dataclass(frozen=True)
class Settings:
    model_dir: str
    state_dir: str
    complete: bool = False  # a span-free token of an annotation is O (else unlabeled)
    refit_every: int = 10  # new or changed annotations that trigger a refit
    train_data: str | None = None  # a labeled CoNLL file every refit learns from too
    limits: Limits = Limits()


def model_version(path: Path) -> str:
    return "gpsl-" + hashlib.sha256((Path(path) / "model.json").read_bytes()).hexdigest()[:12]


def _predict(model: GPSL, X, scores: bool):
    """``(labels, marginals, query scores or None)`` of sentences ``X``: what
    ``model.predict``, ``model.predict_marginals`` and the queue's
    :func:`gpsl.annotation.training.pipeline.query_scores` (BALD) give, from one computation of
    Algorithm 2's inputs (:meth:`~gpsl.model.GPSL.calibration_scores`) instead of three."""
    if model.decoder_() != "rns":  # "auto" is the feature set's decoder (exact for ner)
        labels = model.predict(X)
        P = model.predict_marginals(X)
        q = query_scores(model, X, None, P, active.DEFAULT_QUERY) if scores else None
        return labels, P, q
    method = model.marginals_method()
    cal = model.calibrator_ if (model.calibrator_ is not None
                                and model.calibrator_.method == method) else None
    sc = model.calibration_scores(X, with_variance=scores or method == "probit")
    flat = sc.marginals(method) if cal is None else cal.apply(sc, None)
    flat_lab = flat if cal is None or model._labels_follow_calibration() \
        else sc.marginals(method)
    cuts = np.cumsum(sc.lengths)[:-1]
    labels = [[model.classes_[j] for j in p.argmax(axis=1)] for p in np.split(flat_lab, cuts)]
    q = None
    if scores:
        q = np.split(active.score_tokens(sc, active.DEFAULT_QUERY, None, seed=0,
                                         marginals=flat), cuts)
    return labels, np.split(flat, cuts), q


class Service:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.limits = settings.limits
        self.state = State(Path(settings.state_dir))
        self.base_dir = Path(settings.model_dir)
        self._lock = threading.Lock()
        self._checked = 0.0
        self.model = GPSL.load(self.base_dir)
        self.version = model_version(self.base_dir)
        self.base_version = self.version
        self.config: ls.LabelConfig | None = None
        self.refit_thread: threading.Thread | None = None
        self.train = self._read_train(settings.train_data)
        self.sync(force=True)

    def _read_train(self, path: str | None) -> list:
        """The ``train_data`` sentences (the file the model was trained on, typically):
        observed labels of every refit, beside the votes; refused unless it has the model's
        feature columns and a label column."""
        if not path:
            return []
        from gpsl.errors import InputError
        from gpsl.io import read_conll

        sents = read_conll(path)
        n = int(self.model.n_columns_)
        for s in sents:
            if len(s.tokens[0]) != n:
                raise InputError(f"{len(s.tokens[0]) + 1} columns, the model reads {n} "
                                 "feature columns and a label", source=path, line=s.line)
        return sents

    # ------------------------------------------------------------------ the model

    def sync(self, force: bool = False) -> None:
        """Load the refit another worker (or this one) recorded as current."""
        now = time.monotonic()
        if not force and now - self._checked < 1.0:
            return
        self._checked = now
        current = self.state.current_model()
        if current and current[0] != self.version:
            model = GPSL.load(current[1])
            with self._lock:
                self.model, self.version = model, current[0]
            log.info("model loaded", extra={"event": "model", "version": current[0]})

    @property
    def types(self) -> list[str]:
        """The entity types of the model's BIO labels."""
        return sorted({c[2:] for c in self.model.classes_ if c[:2] in ("B-", "I-")})

    def _rows(self, sentences: list[list[tuple[str, ...]]], what: str) -> None:
        n = int(self.model.n_columns_)
        for k, s in enumerate(sentences):
            if s and len(s[0]) != n:
                extra = " (text gives one column, the word: serve a model trained on words " \
                        "only)" if len(s[0]) == 1 else ""
                raise ProtocolError(f"{what} {k}: {len(s[0])} columns per token, the model "
                                    f"reads {n}{extra}", status=422)

    def check_sizes(self, lengths: list[int], what: str) -> None:
        lim = self.limits
        if len(lengths) > lim.max_tasks:
            raise ProtocolError(f"{len(lengths):,} {what}s, over the limit of "
                                f"{lim.max_tasks:,} per request", status=413)
        for k, n in enumerate(lengths):
            if n > lim.max_tokens:
                raise ProtocolError(f"{what} {k}: {n:,} tokens, over the limit of "
                                    f"{lim.max_tokens:,}", status=413)
        if sum(lengths) > lim.max_total_tokens:
            raise ProtocolError(f"{sum(lengths):,} tokens, over the limit of "
                                f"{lim.max_total_tokens:,} per request", status=413)

    def label(self, X: list[list[tuple[str, ...]]], scores: bool = False):
        """``(labels, marginals, task scores or None, version)`` of sentences ``X``: the labels
        and marginals of ``gpsl test --marginals``; with ``scores``, each sentence's
        :func:`gpsl.annotation.labeling.rules.queue_score` over the app's query score (BALD, the
        queue's default) divided by ``log J`` (``J`` labels): higher = asked first. BALD is
        a mutual information, ``I(y_t; f) <= H(y_t) <= log J``, so the score lies in [0, 1],
        as Label Studio shows it (a percentage), in the queue's order."""
        self.sync()
        with self._lock:
            model, version = self.model, self.version
            nonempty = [i for i, x in enumerate(X) if x]
            Xn = [X[i] for i in nonempty]
            labels: list = [[] for _ in X]
            marg: list = [np.zeros((0, len(model.classes_))) for _ in X]
            task_scores: list = [None] * len(X)
            if Xn:
                lab, P, q = _predict(model, Xn, scores)
                for k, i in enumerate(nonempty):
                    labels[i], marg[i] = lab[k], P[k]
                if scores:
                    scale = np.log(max(2, len(model.classes_)))
                    for k, i in enumerate(nonempty):
                        task_scores[i] = queue_score(marg[i], (), q[k]) / scale
        return labels, marg, task_scores if scores else None, list(model.classes_), version

    # ------------------------------------------------------------------ the LS protocol

    def setup(self, schema) -> dict:
        self.config = ls.parse_config(schema)
        unknown = sorted(set(self.config.types) - set(self.types))
        return {"model_version": self.version, "unknown_labels": unknown}

    def predict(self, payload: dict) -> dict:
        tasks = payload.get("tasks")
        if not isinstance(tasks, list):
            raise ProtocolError("the request needs \"tasks\", a list")
        config = ls.parse_config(payload.get("label_config")) \
            if payload.get("label_config") is not None else self.config
        if config is None:
            raise ProtocolError("no label_config in the request and no /setup before it")
        self.check_sizes([0] * len(tasks), "task")
        texts = [ls.task_text(t, config, self.limits.max_chars) for t in tasks]
        offsets = [ls.tokenize(t) for t in texts]
        self.check_sizes([len(o) for o in offsets], "task")
        X = [[(text[a:b],) for a, b in off] for text, off in zip(texts, offsets, strict=True)]
        self._rows(X, "task")
        labels, marg, scores, classes, version = self.label(X, scores=True)
        wanted = set(config.types)
        results = []
        for text, off, lab, P, s in zip(texts, offsets, labels, marg, scores, strict=True):
            spans = [sp for sp in ls.labels_to_spans(off, lab, P, classes) if sp[2] in wanted]
            results.append({"result": [ls.region(config, text, sp) for sp in spans],
                            "score": round(float(s if s is not None else 0.0), 6),
                            "model_version": version})
        return {"results": results}

    def webhook(self, payload: dict) -> tuple[int, dict]:
        action = payload.get("action")
        if action not in ("ANNOTATION_CREATED", "ANNOTATION_UPDATED", "ANNOTATION_DELETED",
                          "ANNOTATIONS_DELETED", "START_TRAINING"):
            return 200, {"status": "Unknown event"}
        project = payload.get("project") if isinstance(payload.get("project"), dict) else {}
        out: dict = {"action": action}
        if action in ("ANNOTATION_DELETED", "ANNOTATIONS_DELETED"):
            anns = payload.get("annotations") or [payload.get("annotation")]
            out["deleted"] = sum(self._delete(a) for a in anns if isinstance(a, dict))
        elif action != "START_TRAINING":
            out["vote"] = self._vote(payload, project)
        out["refit"] = self.maybe_refit(force=action == "START_TRAINING")
        return 201, {"status": "ok", "result": out}

    def _delete(self, ann: dict) -> bool:
        if isinstance(ann.get("id"), bool) or not isinstance(ann.get("id"), int):
            raise ProtocolError("a deleted annotation needs its integer \"id\"")
        return self.state.delete_vote(ann["id"])

    def _vote(self, payload: dict, project: dict) -> dict:
        ann, task = payload.get("annotation"), payload.get("task")
        if not isinstance(ann, dict) or not isinstance(task, dict):
            raise ProtocolError("an annotation event needs \"annotation\" and \"task\" objects")
        config = ls.parse_config(project["label_config"]) if project.get("label_config") \
            else self.config
        if config is None:
            raise ProtocolError("no project.label_config in the event and no /setup before it")
        task_id, ann_id = task.get("id"), ann.get("id")
        if not isinstance(task_id, int) or not isinstance(ann_id, int):
            raise ProtocolError("the annotation and its task need integer ids")
        if ann.get("was_cancelled"):  # a skipped task is no vote
            return {"task": task_id, "skipped": self.state.delete_vote(ann_id)}
        text = ls.task_text(task, config, self.limits.max_chars)
        offsets = ls.tokenize(text)
        self.check_sizes([len(offsets)], "task")
        spans = ls.regions_to_spans(ann.get("result"), config, text)
        labels = ls.spans_to_votes(offsets, spans, self.settings.complete)
        who = ann.get("completed_by")
        if isinstance(who, dict):
            who = who.get("id", who.get("email"))
        if who is None:
            raise ProtocolError("the annotation has no completed_by (its annotator)")
        self.state.put_vote(task_id, str(project.get("id", "")), text,
                            [text[a:b] for a, b in offsets], ann_id, f"ls-user-{who}", labels)
        return {"task": task_id, "annotator": f"ls-user-{who}",
                "labeled": sum(lab is not None for lab in labels), "tokens": len(labels)}

    # ------------------------------------------------------------------ refits

    def maybe_refit(self, force: bool = False) -> str:
        """Start a background refit when ``force`` (START_TRAINING) or when at least
        ``refit_every`` annotations changed since the last one; what happened, in a word."""
        if not force and self.state.new_votes() < self.settings.refit_every:
            return "waiting"
        if not self.state.training_tasks():
            return "no votes"
        if not self.state.claim_refit(stale_after=3600.0):
            return "running"
        self.refit_thread = threading.Thread(target=self._refit, name="gpsl-refit",
                                             daemon=True)
        self.refit_thread.start()
        return "started"

    def wait_refits(self, timeout: float) -> bool:
        """Wait for this worker's refits (one may start the next); False on timeout."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            thread = self.refit_thread
            if thread is None or not thread.is_alive():
                return True
            thread.join(min(0.5, max(0.0, end - time.monotonic())))
        return False

    def _refit(self) -> None:
        t0 = time.perf_counter()
        consumed = self.state.new_votes()
        tasks = self.state.training_tasks()
        n_votes = sum(len(v) for _, _, v in tasks)
        try:
            model = self.fit_votes(tasks)
            tmp = self.state.dir / "models" / f"tmp-{time.time_ns()}"
            save_model(model, tmp)
            version = model_version(tmp)
            path = tmp.with_name(version)
            if path.exists():
                import shutil

                shutil.rmtree(tmp)
            else:
                tmp.rename(path)
            seconds = time.perf_counter() - t0
            self.state.finish_refit(version, str(path), n_votes, len(tasks), seconds, consumed)
            with self._lock:
                self.model, self.version = model, version
            log.info("refit done", extra={"event": "refit", "version": version,
                                          "votes": n_votes, "tasks": len(tasks),
                                          "seconds": round(seconds, 3)})
        except Exception as exc:  # recorded and logged: the current model stays
            self.state.finish_refit(None, None, n_votes, len(tasks), 0.0, 0,
                                    error=f"{type(exc).__name__}: {exc}")
            log.error("refit failed", extra={"event": "refit", "error": str(exc)})
            return
        if self.state.new_votes() >= self.settings.refit_every:  # votes came in meanwhile
            self.maybe_refit()

    def fit_votes(self, tasks) -> GPSL:
        """GPSL with the served model's settings, fitted on the votes by the joint crowd
        model (:class:`gpsl.crowd.CrowdGPSL`: every Label Studio user an annotator of unknown
        skill, eq. J1); the tagger it returns is the refit model. Labels: the served model's,
        those of the project's config and those voted. The sentences of ``train_data`` are
        observed labels (a trusted annotator), so a few votes refine the model rather than
        replace what it learned."""
        from gpsl.crowd import CrowdGPSL
        from gpsl.crowd.vote_matrix import Votes
        from gpsl.io import CrowdSentence

        sents = [CrowdSentence([(w,) for w in toks], annotations=votes)
                 for _, toks, votes in tasks]
        sents += [CrowdSentence(s.tokens, annotations={TRAIN: s.labels}) for s in self.train]
        classes = set(self.model.classes_)
        for kind in (self.config.types if self.config else ()):
            classes |= {f"B-{kind}", f"I-{kind}"}
        for s in sents:
            classes |= {lab for labs in s.annotations.values() for lab in labs if lab}
        votes = Votes.from_sentences(sents, classes=sorted(classes), trusted=[TRAIN],
                                     source="votes")
        tagger = GPSL(**self.model.get_params())
        # the refit at the model's own variance: the refit rule's nine extra fits
        # (refit_prior="heldout", train --crowd's default) would hold up the service
        crowd = CrowdGPSL(tagger, refit_prior="model").fit([s.tokens for s in sents], votes)
        return crowd.model_

    # ------------------------------------------------------------------ the tagging API

    def info(self) -> dict:
        self.sync()
        m = self.model
        y = np.asarray(m.y_train_)
        counts = np.bincount(y[y >= 0], minlength=len(m.classes_))
        run = getattr(m, "calibration_run_", None)
        return {
            "model_version": self.version, "base_version": self.base_version,
            "labels": list(m.classes_), "types": self.types,
            "columns": int(m.n_columns_), "kernel": str(m.kernel),
            "inference": m.inference_,
            "calibration": {"state": calibration_state(m),
                            "calibrated": m.calibrator_ is not None,
                            "source": getattr(run, "source", None),
                            "folds": getattr(run, "folds", None),
                            "tokens": getattr(run, "tokens", None)},
            "training_data": {"sentences": int(len(m.lengths_)), "tokens": int(y.size),
                              "missing_labels": int((y < 0).sum()),
                              "label_counts": {c: int(n) for c, n in
                                               zip(m.classes_, counts, strict=True)},
                              "fit_seconds": round(float(m.fit_seconds_), 3)},
            "votes": self.state.counts(), "refits": self.state.refits(),
            "refit_error": self.state.get("refit_error", "") or None,
            "annotations_complete": self.settings.complete,
            "refit_every": self.settings.refit_every,
        }
