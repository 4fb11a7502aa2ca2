"""GPSL trained on crowd votes with the annotator model learned jointly (eq. J1 of
:mod:`gpsl.crowd`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpsl.crowd.base import _annotator_accuracy
from gpsl.crowd.confusion import DEFAULT_SHRINK, CrowdModel, m_step
from gpsl.crowd.dawid_skene import DawidSkene
from gpsl.crowd.votes import Votes, majority_posteriors
from gpsl.errors import InputError

__all__ = ["CrowdGPSL"]


class CrowdGPSL:
    """GPSL trained on crowd votes with annotator confusion matrices learned jointly (J1).

    Parameters
    ----------
    model: an unfitted :class:`gpsl.model.GPSL` (default ``GPSL()``); its settings are used.
    prior_diag, prior_off, min_votes, shrink: as :class:`DawidSkene`.
    init: ``"dawid-skene"`` (start ``pi`` from Dawid-Skene alone, default) or ``"majority"``
        (one M-step from the vote fractions).
    tagger_prior: ``"learn"`` (default): the tagger's kernel hyper-parameters (the linear
        kernel's prior variance ``sigma_j^2`` of the feature weights) are learned in the joint
        bound by its own M-step (empirical Bayes, ``learn_hyper=True``; see "Why the tagger's
        prior is learned" below); ``"model"``: the joint fit uses ``model``'s settings as
        they are.
    refit: after the joint fit, train the tagger used for prediction (``model_``) with
        ``model``'s own settings on the inferred labels (argmax of ``r_t`` on the voted and
        observed tokens, the others missing). ``None`` (default): refit exactly when the
        joint fit's settings differ from ``model``'s (``tagger_prior="learn"`` and ``model``
        does not learn its hyper-parameters itself).

    ``fit(X, votes)`` fits the tagger; afterwards ``model_`` is the GPSL for prediction (the
    refit, or the joint fit's tagger), ``joint_model_`` the joint fit's tagger, ``probas_``
    the posteriors ``r_t`` of the training tokens (n, J) from the joint bound,
    ``labels_array_`` their argmax, ``confusions_``, ``accuracy_`` (eq. A), ``bound_trace_``
    (the joint fit's trace: entry 0 is the engine's bound before the first sweep, every later
    entry is (J1) after the M-step) and ``joint_trace_`` (J1 after every sweep and after every
    M-step, alternating).

    Why the tagger's prior is learned
    ---------------------------------
    In the mean-field family ``q(f) prod_t r_t`` the tagger's term in the ``r_t`` update is
    ``E_q[f_t]``, and ``q(f)`` was fitted to ``r_t`` itself: with weights ``w_j ~ N(0,
    sigma_j^2 I)`` on the token's features ``phi_t`` the stationary mean has
    ``m_tj = sigma_j^2 sum_s (phi_t' phi_s)(r_sj - pi_sj)``, whose own part
    ``sigma_j^2 |phi_t|^2 (r_tj - pi_tj)`` echoes the token's current label (``|phi_t|^2``
    is the number of template features, about 20 on basenp and chunking). The bound rewards
    this echo, so at the library's default ``sigma^2 = 4`` (chosen for fully labeled
    training) the tagger reproduces ``r`` on 99.95% of the voted tokens and adds almost
    nothing to the votes: on basenp (700 sentences, 5 votes on 50% of the tokens, 30%
    spammers; the crowd of seed 0 of ``bench/results/crowd_acceptance``, fitted with
    ``tagger_prior="model"``) 97.2% right against 97.07% for the Bayes rule with the *true*
    confusion matrices and 97.04% for crowd-kit's Dawid-Skene. Maximising (J1) over
    ``sigma_j^2`` as well (the closed-form M-step of the linear kernel, monotone like the
    other blocks) gives ``sigma_j^2`` about 0.03 there (0.027-0.030 on the three seeds; the
    joint fit stops at its 100 sweeps); the tagger's term is then carried by
    features shared across tokens and the inferred labels are 99.06% right. That prior is
    too strong for tagging new text (the joint fit's tagger:
    7.35% test loss against 4.83% for GPSL2 on the true labels), hence the refit with
    ``model``'s own settings on the inferred labels (5.32%).
    """

    def __init__(self, model=None, *, prior_diag=2.0, prior_off=0.1, min_votes=30,
                 shrink=DEFAULT_SHRINK, init="dawid-skene", tagger_prior="learn", refit=None):
        self.model = model
        self.prior_diag = prior_diag
        self.prior_off = prior_off
        self.shrink = shrink
        self.min_votes = min_votes
        self.init = init
        self.tagger_prior = tagger_prior
        self.refit = refit

    def fit(self, X: Sequence, votes: Votes, callback=None) -> CrowdGPSL:
        from gpsl.model import GPSL

        if len(X) != len(votes.lengths) or any(len(x) != L for x, L in zip(X, votes.lengths)):
            raise InputError("the votes do not match the sentences' lengths", source="input")
        base = GPSL() if self.model is None else self.model
        if self.tagger_prior not in ("learn", "model"):
            raise ValueError(f"tagger_prior must be 'learn' or 'model', not "
                             f"{self.tagger_prior!r}")
        learn = self.tagger_prior == "learn" and not base.learn_hyper
        refit = learn if self.refit is None else bool(self.refit)
        model = GPSL(**{**base.get_params(), "learn_hyper": True}) if learn else base
        M = votes.design()
        one_coin = votes.n_votes() < self.min_votes
        if self.init == "dawid-skene":
            ds = DawidSkene(self.prior_diag, self.prior_off, self.min_votes,
                            shrink=self.shrink).fit_votes(votes)
            crowd = ds.model_
        elif self.init == "majority":
            crowd = m_step(votes, majority_posteriors(votes), one_coin, self.prior_diag,
                           self.prior_off, M, shrink=self.shrink)
        else:
            raise ValueError(f"init must be 'dawid-skene' or 'majority', not {self.init!r}")
        classes = list(votes.classes)
        obs = votes.observed
        y = [[None if v < 0 else classes[v] for v in part] for part in votes.split(obs)]
        E = crowd.evidence(votes, M)
        joint: list[float] = []
        state = {"crowd": crowd}
        observed = obs >= 0

        def extras(cm: CrowdModel, E_full: np.ndarray) -> float:
            ev_obs = float(np.sum(E_full[observed, obs[observed]])) if observed.any() else 0.0
            return ev_obs + cm.log_prior()

        def on_sweep(engine):
            r = engine.s.r
            joint.append(float(engine.elbo()) + extras(state["crowd"], engine.p.evidence
                                                       if engine.p.evidence is not None
                                                       else E))
            cm = m_step(votes, r, one_coin, self.prior_diag, self.prior_off, M,
                        shrink=self.shrink, skill=state["crowd"].skill)
            E_new = cm.evidence(votes, M)
            engine.p.set_evidence(E_new)
            state["crowd"] = cm
            value = float(engine.elbo()) + extras(cm, E_new)
            joint.append(value)
            return value

        model.fit(X, y, callback=callback, classes=classes, evidence=votes.split(E),
                  on_sweep=on_sweep)
        if list(model.classes_) != classes:  # pragma: no cover - classes are passed through
            raise RuntimeError("the model's classes differ from the votes' classes")
        r = np.array(model.state_.r)
        self.joint_model_ = model
        self.model_ = model
        if refit:
            # the tagger for prediction: model's own settings on the inferred labels
            keep = votes.voted() | observed
            lab = r.argmax(axis=1)
            y_hat = [[classes[v] if k else None for v, k in zip(lv, kv)]
                     for lv, kv in zip(votes.split(lab), votes.split(keep))]
            tagger = base if base is not model else GPSL(**base.get_params())
            self.model_ = tagger.fit(X, y_hat, classes=classes)
        self.crowd_ = state["crowd"]
        self.confusions_ = self.crowd_.pi
        self.one_coin_ = one_coin
        self.probas_ = r
        self.labels_array_ = [classes[i] for i in r.argmax(axis=1)]
        self.accuracy_ = _annotator_accuracy(votes, r)
        self.skills_ = dict(zip(votes.annotators, self.accuracy_))
        self.bound_trace_ = list(model.bound_trace_)
        self.joint_trace_ = joint
        self.classes_ = classes
        self.annotators_ = list(votes.annotators)
        return self

    def predict(self, X, **kw):
        return self.model_.predict(X, **kw)

    def predict_marginals(self, X, **kw):
        return self.model_.predict_marginals(X, **kw)
