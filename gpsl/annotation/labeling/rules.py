"""The annotation store's rules, as pure functions: no SQL, no store, no state.

* **The training label** of a token (:func:`derive_labels`): labels imported with a file
  count only while nobody has voted on the token; one vote gives that label; with several, a
  lead's adjudicated label wins, else the ``posterior`` hook (the project's crowd model,
  :func:`crowd_posterior`), else the majority (:func:`majority_label`). Both decide by
  :func:`gpsl.crowd.decide`, the library's one rule: a tie leaves the token missing.  With
  soft labels (:func:`training_rule`) the people's votes of a token without a lead's
  decision enter training as evidence on a missing label instead (:func:`crowd_evidence`);
  with the ``joint`` rule (a crowd project's default) the tagger learns from the joint
  model's posterior ``q(y)`` (:mod:`gpsl.annotation.training.joint_labels`).
* **The queue**: a token's query score (:func:`token_scores`: the score the training run
  stored, else least confidence ``1 - max_j p_tj``); a sentence's queue score, its unlabeled
  tokens' largest (:func:`queue_score`); the token the cursor opens on, the unlabeled token
  with the largest score (:func:`opening_token`). The SQL that sorts sentences by the stored
  queue score and applies the team's k rule is :mod:`gpsl.annotation.labeling.queue`'s.
* **The cursor**: where it moves after a label (:func:`next_unlabeled`) and which
  suggestions "accept" takes (:func:`accept_candidates`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from gpsl import active, crowd
from gpsl.annotation.store.records import Derived, TokenView, Vote

__all__ = ["NO_LABEL", "RESOLVE_RULES", "UNKNOWN_SKILL", "Derived", "Posterior", "Vote",
           "accept_candidates", "crowd_evidence", "crowd_posterior", "derive_labels",
           "majority_label", "next_unlabeled", "opening_token", "POSTERIORS", "queue_score",
           "rule_key",
           "rule_settings", "token_scores", "training_rule", "TRAINING_RULES"]

#: one-coin accuracy assumed for an annotator the crowd model has not seen
UNKNOWN_SKILL = 0.8
#: the class a vote without a label counts as in a majority (no label can be empty): Clear
#: withdraws a vote, but stores written before that rule may hold such "no label" votes
NO_LABEL = ""
#: how a disputed token without a lead's decision is decided (a project's ``resolve``)
RESOLVE_RULES = {
    "majority": "the majority of the votes (a tie stays unlabeled)",
    "crowd": "the crowd model's posterior (Dawid–Skene: each vote weighed by its "
             "annotator's estimated reliability; a tie stays unlabeled)",
}


Posterior = Callable[[int, Sequence[Vote]], str | None]


# ----------------------------------------------------------------------------- labels


def _one_token_votes(labels: Sequence[str], classes: Sequence[str],
                     annotators: Sequence[int] | None = None,
                     names: Sequence[str] = ()) -> crowd.Votes:
    index = {c: i for i, c in enumerate(classes)}
    who = list(range(len(labels))) if annotators is None else list(annotators)
    return crowd.Votes(lengths=np.array([1]), token=np.zeros(len(labels), dtype=np.int64),
                       annotator=np.array(who, dtype=np.int64),
                       label=np.array([index[lab] for lab in labels], dtype=np.int64),
                       annotators=list(names) or [str(i) for i in range(len(labels))],
                       classes=list(classes))


#: the training-label rules a project can choose (Team page), one setting: key -> what it
#: does after a lead's decision; :func:`rule_settings` gives its ``resolve`` and ``soft``
TRAINING_RULES = {
    "joint": "the joint crowd model's posterior as soft labels (the annotators learned "
             "together with the tagger, as gpsl train --crowd)",
    "majority": "the majority of the votes (hard labels; a tie stays unlabeled)",
    "crowd": "the Dawid–Skene crowd model's posterior (hard labels; a tie stays unlabeled)",
    "soft": "the Dawid–Skene crowd model's posterior as soft labels (its probabilities, as "
            "evidence)",
}
#: which posterior a training run learns from, by the key of :data:`TRAINING_RULES` (the
#: Train page says it)
POSTERIORS = {
    "joint": "the joint model's posterior q(y): the sequential annotator model and the tagger "
             "fitted together on the votes (gpsl.crowd.CrowdGPSL, as gpsl train --crowd), "
             "then each third of the sentences re-read by a tagger trained on the other two, "
             "the tagger then trained on q(y) as soft labels",
    "majority": "the majority of the votes (no crowd model)",
    "crowd": "the Dawid–Skene posterior, decided to one label per token",
    "soft": "the Dawid–Skene posterior as soft labels",
}


def rule_settings(key: str) -> dict:
    """The team settings (``soft``, ``joint`` and, but for ``joint``, ``resolve``) of a key
    of :data:`TRAINING_RULES`; ``joint`` keeps the project's ``resolve``, which still decides
    the hard label a page shows for a disputed token."""
    if key not in TRAINING_RULES:
        raise ValueError(f"unknown training-label rule {key!r}")
    if key == "joint":
        return {"soft": False, "joint": True}
    return {"resolve": "crowd" if key == "soft" else key, "soft": key == "soft",
            "joint": False}


def rule_key(resolve: str, soft: bool, joint: bool = False) -> str:
    """The key of :data:`TRAINING_RULES` that ``resolve``, ``soft`` and ``joint`` make."""
    if joint:
        return "joint"
    return "soft" if soft and resolve == "crowd" else (resolve if resolve in RESOLVE_RULES
                                                        else "majority")


def training_rule(resolve: str, soft: bool = False, joint: bool = False) -> str:
    """The rule that makes the training labels of a project, in words (the Team and Train
    pages show it): ``resolve`` (a key of :data:`RESOLVE_RULES`), ``soft`` and ``joint``."""
    if joint:
        return ("a lead's decision (kept fixed, observed); else the joint crowd model's "
                "posterior: the annotators (the sequential model) learned together with the "
                "tagger on every person's votes, and the tagger trained on that posterior's "
                "probabilities as soft labels; a file's labels count while nobody has voted")
    if soft:
        return ("a lead's decision; else every person's vote on the token enters training as "
                "a soft label: evidence on the token's missing label under the Dawid–Skene "
                "crowd model (each vote weighed by its annotator's estimated reliability), "
                "so the model "
                "learns from the crowd posterior's probabilities, not one hard label; a file's "
                "labels count while nobody has voted")
    return ("a lead's decision; else one vote's label; else "
            + RESOLVE_RULES.get(resolve, RESOLVE_RULES["majority"])
            + "; hard labels (one per token); a file's labels count while nobody has voted")


def majority_label(labels: Sequence[str | None]) -> str | None:
    """The majority of one token's votes (None: a vote without a label), by the library's
    rule: the vote fractions (:func:`gpsl.crowd.majority_posteriors`) decided by
    :func:`gpsl.crowd.decide`, so a tie leaves the token missing (None), as does a majority
    for "no label"."""
    if not labels:
        return None
    votes = [NO_LABEL if lab is None else lab for lab in labels]
    classes = sorted(set(votes))
    r = crowd.majority_posteriors(_one_token_votes(votes, classes))
    got = crowd.decide(r, classes)[0]
    return None if got in (None, NO_LABEL) else got


def derive_labels(votes: Mapping[int, Sequence[Vote]], adjudicated: Mapping[int, str],
                  posterior: Posterior | None = None) -> dict[int, Derived | None]:
    """The training label of each token in ``votes`` (token index -> its votes, oldest
    first) given the lead's ``adjudicated`` labels.  ``posterior(token, votes)`` (a crowd
    model) decides disputed tokens when given; otherwise the majority
    (:func:`majority_label`; a tie leaves the token missing, None)."""
    out: dict[int, Derived | None] = {}
    for t, vs in votes.items():
        if t in adjudicated:
            out[t] = Derived(adjudicated[t], "human", "adjudicated")
            continue
        vs = [v for v in vs if v.source != "import"] or list(vs)
        if not vs:
            out[t] = None
            continue
        if len(vs) == 1:
            source = "human" if vs[0].source == "import" else vs[0].source
            out[t] = None if vs[0].label is None else \
                Derived(vs[0].label, source, vs[0].annotator)
            continue
        lab = posterior(t, vs) if posterior is not None else \
            majority_label([v.label for v in vs])
        if lab is None:
            out[t] = None
            continue
        voters = [v for v in vs if v.label == lab]
        source = "accepted" if voters and all(v.source == "accepted" for v in voters) \
            else "human"
        out[t] = Derived(lab, source, ", ".join(v.annotator for v in voters) or "model")
    return out


def _crowd_params(model: Mapping, names: Sequence[str]) -> tuple[crowd.CrowdModel, dict]:
    """The stored crowd model's parameters with every annotator of ``names`` it has not
    seen added as the one-coin of accuracy :data:`UNKNOWN_SKILL`; ``{annotator: row}``."""
    classes = list(model["classes"])
    known_names = list(model["annotators"])
    J = len(classes)
    off = np.log((1.0 - UNKNOWN_SKILL) / max(1, J - 1)) if J > 1 else 0.0
    unknown = np.full((J, J), off)
    np.fill_diagonal(unknown, np.log(UNKNOWN_SKILL) if J > 1 else 0.0)
    log_pi = np.asarray(model["log_pi"], dtype=float).reshape(-1, J, J)
    who = {a: i for i, a in enumerate(known_names)}
    strangers = list(dict.fromkeys(a for a in names if a not in who))
    index = {**who, **{a: len(known_names) + k for k, a in enumerate(strangers)}}
    params = crowd.CrowdModel(
        log_pi=np.concatenate([log_pi, np.repeat(unknown[None], len(strangers), 0)]),
        one_coin=np.zeros(len(index), dtype=bool), prior_diag=0.0, prior_off=0.0)
    return params, index


def crowd_posterior(model: Mapping) -> Posterior:
    """The ``posterior(token, votes)`` hook of :func:`derive_labels` from a stored crowd
    model (``classes``, ``annotators``, ``log_pi``, ``log_prior``): the library's E-step
    (:func:`gpsl.crowd.e_step`, eq. E) on the token's votes with a label, decided by
    :func:`gpsl.crowd.decide`.  An annotator the model has not seen counts with the one-coin
    matrix of accuracy :data:`UNKNOWN_SKILL`, a label it does not know is left out; an exact
    tie, or no usable vote, leaves the token missing (None)."""
    classes = list(model["classes"])
    log_prior = np.asarray(model["log_prior"], dtype=float)
    known = set(classes)
    model = {**model, "log_pi": np.asarray(model["log_pi"], dtype=float)}  # converted once

    def posterior(_t, votes: Sequence[Vote]) -> str | None:
        used = [v for v in votes if v.label is not None and v.label in known]
        if not used:
            return None
        params, index = _crowd_params(model, [v.annotator for v in used])
        token = _one_token_votes([v.label for v in used], classes,
                                 [index[v.annotator] for v in used],
                                 sorted(index, key=index.get))
        return crowd.decide(crowd.e_step(params, token, log_prior), classes)[0]

    return posterior


def crowd_evidence(model: Mapping, votes: Sequence[Vote], classes: Sequence[str]
                   ) -> np.ndarray:
    """A soft label: the evidence ``e_t(y) = sum_v log pi_{a_v}[y, l_v]`` of one token's
    votes under the stored crowd model (the votes' log-likelihood given the true label ``y``,
    the term :attr:`gpsl.likelihood.Problem.evidence` adds to a missing token, as
    :class:`gpsl.crowd.CrowdGPSL` does), one entry per class of ``classes`` (the fit's
    sorted classes).  With the GP's own prior over ``y`` in place of the crowd model's class
    prior, the missing label's ``r_t`` is the crowd posterior (eq. E) with the tagger as its
    prior.  An annotator the model has not seen counts as the one-coin of accuracy
    :data:`UNKNOWN_SKILL`; a class or a voted label the model does not know, with that
    one-coin over ``classes``; a vote without a label is no evidence (zeros)."""
    classes = list(classes)
    J = len(classes)
    out = np.zeros(J)
    used = [v for v in votes if v.label is not None]
    if not used or J == 0:
        return out
    mc = list(model["classes"])
    mi = {c: i for i, c in enumerate(mc)}
    params, index = _crowd_params(model, [v.annotator for v in used])
    hit = np.log(UNKNOWN_SKILL) if J > 1 else 0.0
    miss = np.log((1.0 - UNKNOWN_SKILL) / (J - 1)) if J > 1 else 0.0
    for v in used:
        row = np.where(np.array(classes) == v.label, hit, miss)
        if v.label in mi:
            col = params.log_pi[index[v.annotator], :, mi[v.label]]
            known = np.array([c in mi for c in classes])
            row[known] = col[[mi[c] for c in classes if c in mi]]
        out += row
    return out


# ----------------------------------------------------------------------------- the queue


def token_scores(marginals: np.ndarray | None, query_scores: np.ndarray | None = None
                 ) -> np.ndarray:
    """Each token's query score: the ``query_scores`` a training run stored, else the least
    confidence ``1 - max_j p_tj`` of the stored ``marginals`` (rows normalised to sum to 1;
    :func:`gpsl.active.least_confidence`)."""
    if query_scores is not None:
        return np.asarray(query_scores, dtype=float).reshape(-1)
    m = np.asarray(marginals, dtype=float)
    sums = m.sum(axis=1, keepdims=True)
    m = np.where(sums > 0, m / np.where(sums > 0, sums, 1.0), 1.0 / max(1, m.shape[1]))
    return active.least_confidence(m)


def _free(n: int, labeled: Iterable[int]) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    mask[[t for t in labeled if 0 <= t < n]] = False
    return mask


def queue_score(marginals: np.ndarray | None, labeled: Iterable[int],
                query_scores: np.ndarray | None = None) -> float | None:
    """The active-learning score of one sentence (higher: asked first): the largest
    :func:`token_scores` of its unlabeled tokens; None when every token is labeled."""
    scores = token_scores(marginals, query_scores)
    free = scores[_free(scores.shape[0], labeled)]
    return float(free.max()) if free.size else None


def opening_token(labels: Sequence[str | None], scores: Sequence[float | None]) -> int:
    """The token the cursor opens on: the unlabeled token with the largest score (the
    :func:`token_scores` of the token; None where there is none, e.g. a token a blind view
    hides), the first one on a tie; else the first unlabeled token, else the first token."""
    free = [t for t, lab in enumerate(labels) if lab is None]
    scored = [t for t in free if scores[t] is not None]
    if scored:
        return min(scored, key=lambda t: (-float(scores[t]), t))
    return free[0] if free else 0


def next_unlabeled(labels: Sequence[str | None], after: int) -> int:
    """Where the cursor moves after a label: the next unlabeled token after ``after``
    (wrapping); ``after`` itself when every token is labeled, so the next key never lands
    on another token's label by surprise (pages/labeler/widget.js ``advance`` is the same
    rule in the browser)."""
    n = len(labels)
    for k in range(1, n + 1):
        t = (after + k) % n
        if labels[t] is None:
            return t
    return min(after, n - 1)


def accept_candidates(views: Sequence[TokenView], threshold: float,
                      label_set: Sequence[str]) -> dict[int, str]:
    """"Accept suggestions": the tokens unlabeled in the annotator's own copy (``own``) whose
    suggestion is in the label set with probability >= ``threshold`` -> that suggestion."""
    ok = set(label_set)
    return {v.index: v.suggestion for v in views
            if v.own is None and v.suggestion in ok and v.suggestion_p is not None
            and v.suggestion_p >= threshold}
