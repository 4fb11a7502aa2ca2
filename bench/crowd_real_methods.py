"""``bench.crowd_real``'s data and methods: the crowd (raw folders or JSONL) and its documents'
split, the span scores, the forked process each method runs in, and the methods themselves
(crowd-kit, gpsl's Dawid-Skene, the joint model, the taggers)."""

from __future__ import annotations

import multiprocessing
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import DataMissing

# --------------------------------------------------------------------------- data


@dataclass
class Data:
    sents: list  # CrowdSentence with the gold as labels
    gold: list  # list of label lists
    docs: list  # document of each sentence
    alignment: dict | None


def check_data(data_dir: Path, which: str) -> None:
    need = [data_dir / "raw"] + ([data_dir / "val.crowd.jsonl", data_dir / "val.gold.conll"]
                                 if which == "jsonl" else [])
    for p in need:
        if not p.exists():
            raise DataMissing(f"shared data absent: {p} not found (the crowd-ner data is "
                              "expected in ../shared/data/crowd-ner next to the repository)")


def load(data_dir: Path, which: str) -> Data:
    """The voted sentences with their gold labels, from ``raw/`` or the JSONL."""
    from gpsl.io import read_conll, read_crowd_jsonl
    from gpsl.io.crowd_raw import read_crowd_folder

    if which == "raw":
        sents, rep = read_crowd_folder(data_dir / "raw")
        return Data(sents, [list(s.labels) for s in sents],
                    [str(s.id).rsplit(":", 1)[0] for s in sents], rep.as_dict())
    sents = read_crowd_jsonl(data_dir / "val.crowd.jsonl")
    gold = read_conll(data_dir / "val.gold.conll")
    if len(gold) != len(sents):
        raise ValueError("val.gold.conll and val.crowd.jsonl differ in length")
    for s, g in zip(sents, gold):
        s.labels = list(g.labels)
    return Data(sents, [list(g.labels) for g in gold],
                [str(s.id).rsplit("-", 1)[0] for s in sents], None)


def votes_of(sents, keep=None):
    """:class:`gpsl.crowd.Votes` of the sentences (the gold is never a vote)."""
    from gpsl.crowd import Votes
    from gpsl.io import CrowdSentence

    chosen = sents if keep is None else [sents[i] for i in keep]
    bare = [CrowdSentence(s.tokens, None, s.line, s.id, annotations=s.annotations)
            for s in chosen]
    return Votes.from_sentences(bare, classes=sorted({v for s in sents for v in s.labels}))


def split_documents(docs) -> tuple[list[int], list[int]]:
    """Sentence indices of the training and the held-out documents (every fifth document
    by name is held out)."""
    names = sorted(set(docs))
    held = set(names[::5])
    train = [i for i, d in enumerate(docs) if d not in held]
    test = [i for i, d in enumerate(docs) if d in held]
    return train, test


# --------------------------------------------------------------------------- scores


def span_scores(gold, pred) -> dict:
    from gpsl import metrics

    s = metrics.chunk_scores(gold, pred)
    flat_g = [v for g in gold for v in g]
    flat_p = [v for p in pred for v in p]
    return {"precision": 100.0 * s["precision"], "recall": 100.0 * s["recall"],
            "f1": 100.0 * s["f1"],
            "token_accuracy": 100.0 * float(np.mean([a == b for a, b in zip(flat_g, flat_p)]))}


def as_sentences(flat, lengths) -> list[list[str]]:
    """Flat labels cut into sentences; a token without a label (no vote, a tie) is ``O``."""
    cuts = np.cumsum(lengths)[:-1]
    return [["O" if v is None else str(v) for v in part]
            for part in np.split(np.array(flat, dtype=object), cuts)]


# --------------------------------------------------------------------------- isolated runs


def _child(conn, fn, args):
    import psutil

    try:
        rss0 = psutil.Process().memory_info().rss
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn(*args)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out.update(cpu_s=cpu, wall_s=wall, peak_mb=max(0.0, (peak - rss0) / 2**20))
        conn.send(out)
    except BaseException as exc:  # noqa: BLE001 - reported by the parent, one line
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def isolated(fn, *args) -> dict:
    """``fn(*args)`` (a dict) in a forked process, with its CPU and wall seconds and the growth
    of its resident set (MB)."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args))
    proc.start()
    send.close()
    try:
        out = recv.recv()
    except EOFError:
        out = {"error": f"the process ended with status {proc.exitcode}"}
    proc.join()
    return out


# --------------------------------------------------------------------------- methods


def crowdkit_labels(name: str, votes) -> dict:
    from bench.peers import crowdkit_aggregator, votes_frame

    kind = {"crowd-kit majority vote": "MV", "crowd-kit Dawid-Skene": "DS",
            "crowd-kit GLAD": "GLAD", "crowd-kit MACE": "MACE",
            "crowd-kit one-coin": "one-coin"}[name]
    got = crowdkit_aggregator(kind).fit_predict(votes_frame(votes.token, votes.annotator,
                                                            votes.label))
    flat: list[str | None] = [None] * votes.n
    for task, lab in got.items():
        flat[int(task)] = votes.classes[int(lab)]
    return {"labels": flat}


def gpsl_ds_labels(votes) -> dict:
    from gpsl.crowd import DawidSkene

    return {"labels": DawidSkene().fit_votes(votes).labels_array_}


def joint_labels(votes, X, annotator_model: str, template, max_iter: int,
                 variance: float | None = None, lse_bound: str = "auto",
                 crowd_kw: dict | None = None) -> dict:
    """The joint model's labels; ``variance``: the tagger's prior variance fixed at that
    value (``tagger_prior="model"``, the default stop rule and Jensen's bound) instead of
    ``"auto"``; ``lse_bound``: the joint fit's bound on the log-partition; ``crowd_kw``:
    other settings of :class:`gpsl.crowd.CrowdGPSL` (the priors' ``kappa``, ``shrink``)."""
    from gpsl.crowd import CrowdGPSL, decode_labels
    from gpsl.crowd.joint import DEFAULT_TOL
    from gpsl.model import GPSL

    fixed = {} if variance is None else {"tagger_prior": "model", "tol": DEFAULT_TOL,
                                         "lse_bound": "jensen"}
    joint = CrowdGPSL(GPSL(template=template, max_iter=max_iter, variance=variance),
                      refit=False, annotator_model=annotator_model,
                      **{"lse_bound": lse_bound, **fixed, **(crowd_kw or {})}).fit(X, votes)
    jt = np.diff(joint.joint_trace_)
    choice = joint.prior_choice_
    rule = {} if choice is None else {"kappa": choice.kappa, "shrink": choice.shrink,
                                      "rule_scores": choice.scores,
                                      "heldout_votes": choice.heldout_votes}
    return {**rule, "labels": joint.labels_array_,
            "argmax_labels": decode_labels(joint.probas_, votes, "argmax"),
            "sweeps": int(joint.joint_model_.n_iter_), "max_iter": max_iter,
            "lse_bound": joint.joint_model_.lse_bound_,
            "variance": float(joint.variance_[0]),
            "crossfit_rounds": 0 if joint.crossfit_ is None else len(joint.crossfit_.rounds),
            "min_bound_step": float(jt.min()) if jt.size else None,
            "bound": float(joint.joint_trace_[-1]) if joint.joint_trace_ else None}


def joint_heldout_score(votes, X, max_iter: int, crowd_kw: dict,
                        variance: float | None = None) -> dict:
    """The held-out-vote score of :mod:`gpsl.crowd.priors` for one setting: the joint fit
    on the kept votes (the rule's fold, seed 0) and the left-out votes' log predictive
    probability (eq. H). ``variance``: the tagger's prior variance fixed, as
    :func:`joint_labels`. No gold is read."""
    from gpsl.crowd import CrowdGPSL
    from gpsl.crowd.joint import DEFAULT_TOL
    from gpsl.crowd.priors import heldout_score, split_votes
    from gpsl.model import GPSL

    fixed = {} if variance is None else {"tagger_prior": "model", "tol": DEFAULT_TOL,
                                         "lse_bound": "jensen"}
    kept, held = split_votes(votes)
    joint = CrowdGPSL(GPSL(template="ner", max_iter=max_iter, variance=variance),
                      refit=False, **{**fixed, **crowd_kw}).fit(X, kept)
    return {"heldout_log_lik": heldout_score(joint.probas_, joint.crowd_, held),
            "heldout_votes": int(held.token.size),
            "heldout_sweeps": int(joint.joint_model_.n_iter_)}


def joint_rule_labels(votes, X, max_iter: int) -> dict:
    """The joint model at the priors the held-out-vote rule chooses (``prior_rule=
    "heldout"``, :mod:`gpsl.crowd.priors`, no gold read), the rule's fits in its CPU s."""
    return joint_labels(votes, X, "sequential", "ner", max_iter,
                        crowd_kw={"prior_rule": "heldout"})


def crfsuite_tagger(Xtr, ytr, Xte, template: str = "ner") -> dict:
    """CRFsuite (sklearn-crfsuite's NER tutorial settings) on the template's feature strings."""
    from bench.peers import CRF_NER_PARAMS, fit_crfsuite, template_features
    from gpsl.features import Template

    tmpl = Template.parse(template)
    crf = fit_crfsuite(Xtr, ytr, tmpl, CRF_NER_PARAMS).crf
    return {"pred": [list(p) for p in crf.predict(template_features(tmpl, Xte))]}


def gpsl_tagger(Xtr, ytr, Xte, template, variance=None) -> dict:
    from gpsl.model import GPSL

    m = GPSL(template=template, variance=variance).fit(Xtr, ytr)
    return {"pred": [list(p) for p in m.predict(Xte)], "sweeps": int(m.n_iter_)}


def crowd_tagger(votes, Xtr, Xte) -> dict:
    """``train --crowd``'s tagger (the refit on the joint posteriors, :func:`gpsl.crowd.joint.
    fit_soft`, at the prior variance the held-out-vote rule chooses, ``refit_prior=
    "heldout"``), and beside it the joint fit's own tagger, the refit on the posteriors at
    GPSL's own variance (``refit_prior="model"``, the default before) and the refit on the
    decoded labels (``refit_on="argmax"``; only the voted tokens labeled)."""
    from gpsl.crowd import CrowdGPSL
    from gpsl.crowd.joint import fit_soft
    from gpsl.model import GPSL

    joint = CrowdGPSL(GPSL(template="ner")).fit(Xtr, votes)  # refit on the posteriors
    rc = joint.refit_choice_
    c0 = time.process_time()
    keep = votes.voted() | (votes.observed >= 0)
    own_var = fit_soft(GPSL(template="ner"), Xtr, joint.probas_, keep, joint.classes_,
                       votes.split, features=joint.joint_model_)
    own_var_cpu = time.process_time() - c0
    c0 = time.process_time()
    hard = GPSL(template="ner").fit(Xtr, [list(v) for v in votes.split(np.array(
        [lab if k else None for lab, k in zip(joint.labels_array_, votes.voted())],
        dtype=object))], classes=joint.classes_)
    hard_cpu = time.process_time() - c0
    trace = np.diff(joint.model_.bound_trace_[1:])
    return {"pred": [list(p) for p in joint.predict(Xte)], "labels": joint.labels_array_,
            "sweeps": int(joint.joint_model_.n_iter_),
            "refit_variance": rc.variance, "refit_scores": rc.scores,
            "own_pred": [list(p) for p in joint.joint_model_.predict(Xte)],
            "model_var_pred": [list(p) for p in own_var.predict(Xte)],
            "model_var_cpu_s": own_var_cpu,
            "hard_pred": [list(p) for p in hard.predict(Xte)], "hard_cpu_s": hard_cpu,
            "min_bound_step": float(trace.min()) if trace.size else None}
