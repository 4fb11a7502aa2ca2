"""The ``joint`` training rule: the tagger learns from the joint crowd model's posterior.

A project whose labels come from several people's votes (a crowd folder's import turns the
rule on, :mod:`gpsl.annotation.interchange.crowd_folders`) trains as ``gpsl train --crowd`` does:

1. :func:`votes_of`: the training set's votes (:func:`gpsl.annotation.labeling.team.training_set`,
   ``annotations``) as :class:`gpsl.crowd.Votes` (:meth:`~gpsl.crowd.Votes.from_sentences`,
   the reader of ``train --crowd``), every label the set observes (a lead's decision; a file's
   label where nobody voted) an observed label of a trusted voter (one-hot ``r_t``, eq. J1 of
   :mod:`gpsl.crowd`);
2. :func:`fit_joint`: :class:`gpsl.crowd.CrowdGPSL` (the sequential annotator model and the
   tagger, eq. J1) with the run's tagger settings and the crowd parameters' defaults of
   :mod:`gpsl.params` (those of ``train --crowd`` without options), without its refit: the
   run fits its own tagger next;
3. :func:`soft_labels`: the posterior ``q(y_t) = r_t`` as the tagger's targets
   (:func:`gpsl.crowd.joint.soft_targets`, what ``train --crowd``'s refit
   :func:`~gpsl.crowd.joint.fit_soft` fits on: ``log q_t`` as evidence on a missing label, a
   one-hot row as its label), and the decoded labels on the voted and observed tokens (the
   calibration data, as ``train --crowd``'s).

One difference from ``train --crowd``, for time: the run fits its tagger at the run's own
prior variance, as ``refit_prior="model"``; ``train --crowd`` chooses it by held-out votes
(``refit_prior="heldout"``, :func:`gpsl.crowd.priors.choose_refit_variance`, nine more tagger
fits; the joint fit, the rule and the refit took 79.4 CPU s together on the CoNLL crowd's
2,150 training sentences), which the app's 60 s from
train to predictions (``bench.app_crowd``: 42.4 s at 0b98bad) has no room for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpsl import params
from gpsl.crowd import CrowdGPSL, Votes
from gpsl.crowd.joint import soft_targets
from gpsl.io import CrowdSentence
from gpsl.model import GPSL

__all__ = ["CROWD_SETTINGS", "OBSERVED", "fit_joint", "joint_settings", "soft_labels",
           "votes_of"]

#: the joint model's parameters the run sets: those of ``train --crowd``, at their
#: :mod:`gpsl.params` defaults (its values without options)
CROWD_SETTINGS = params.CROWD
#: the trusted voter whose votes are the observed labels (no person's name: a name holds no
#: control character, :func:`gpsl.annotation.store.validate.person`)
OBSERVED = "\x00observed"


def joint_settings() -> dict:
    """The joint model's parameters: the :mod:`gpsl.params` defaults (with the cross-fitted
    rounds of :mod:`gpsl.crowd.crossfit`: on the CoNLL crowd's 2,732 training sentences they
    add about 22 s to a run and 1.3 points of held-out span F1, docs/real-crowd.md)."""
    return {k: params.param(k).default for k in CROWD_SETTINGS}


def votes_of(X: Sequence, y: Sequence, annotations: Sequence[dict], classes: Sequence[str]
             ) -> Votes:
    """The votes of the training set's sentences ``X`` (``annotations``: per sentence
    ``{annotator: labels}``), the labels of ``y`` observed."""
    sents = []
    for x, labs, ann in zip(X, y, annotations):
        ann = dict(ann)
        if any(lab is not None for lab in labs):
            ann[OBSERVED] = list(labs)
        sents.append(CrowdSentence(tokens=list(x), annotations=ann))
    return Votes.from_sentences(sents, classes=list(classes), trusted=[OBSERVED],
                                source="<train>")


def fit_joint(X: Sequence, votes: Votes, params_: dict, callback=None) -> CrowdGPSL:
    """The joint model (eq. J1) of ``votes`` and a tagger with the settings ``params_``
    (:meth:`gpsl.model.GPSL.get_params`), fitted without the refit; ``callback`` after every
    sweep (the engine's)."""
    joint = CrowdGPSL(GPSL(**params_), refit=False, **joint_settings())
    return joint.fit(X, votes, callback=callback)


def soft_labels(joint: CrowdGPSL, votes: Votes) -> tuple[list, list | None, list]:
    """``(y, evidence, inferred)``: the tagger's targets from the posterior ``q(y) =
    joint.probas_`` on the voted and observed tokens (:func:`~gpsl.crowd.joint.soft_targets`)
    and the decoded labels (``joint.labels_array_``) on the same tokens, None elsewhere."""
    keep = votes.voted() | (votes.observed >= 0)
    y, evidence = soft_targets(joint.probas_, keep, list(votes.classes), votes.split)
    labels = np.asarray(joint.labels_array_, dtype=object)
    inferred = [[lab if k else None for lab, k in zip(lv, kv)]
                for lv, kv in zip(votes.split(labels), votes.split(keep))]
    return y, evidence, inferred
