"""GPSL trained on crowd votes with the annotator model learned jointly (eq. J1 of
:mod:`gpsl.crowd`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpsl import params
from gpsl.crowd.base import annotator_accuracy
from gpsl.crowd.confusion import DEFAULT_SHRINK, LOG_FLOOR, m_step
from gpsl.crowd.dawid_skene import DawidSkene
from gpsl.crowd.sequential import DEFAULT_KAPPA, previous_labels, sequential_m_step
from gpsl.crowd.vote_matrix import Votes, majority_posteriors
from gpsl.errors import InputError

__all__ = ["ANNOTATOR_MODELS", "LSE_BOUNDS", "REFIT_ON", "TAGGER_PRIORS", "CrowdGPSL",
           "decode_labels", "echo_variance", "fit_soft", "soft_targets"]

#: the annotator models of the joint fit: the sequential model of :mod:`gpsl.crowd.sequential`
#: (confusion conditioned on the annotator's previous label), or Dawid-Skene confusion
#: matrices (the options of :mod:`gpsl.params`' ``annotator_model``)
ANNOTATOR_MODELS = params.param("annotator_model").options
#: how the joint fit sets the tagger's prior variance (see :class:`CrowdGPSL`; the options of
#: :mod:`gpsl.params`' ``tagger_prior``)
TAGGER_PRIORS = params.param("tagger_prior").options
#: the joint fit's bound on the expected log-partition (see :class:`CrowdGPSL`)
LSE_BOUNDS = ("auto", "jensen", "bohning", "model")
DECODERS = ("auto", "valid", "argmax")
#: what the refit tagger learns from: the decoded labels, or the posteriors q(y) themselves
REFIT_ON = ("argmax", "posterior")
#: how ``kappa`` and ``shrink`` are set: as given, or by held-out votes (gpsl.crowd.priors;
#: the options of :mod:`gpsl.params`' ``prior_rule``)
PRIOR_RULES = params.param("prior_rule").options
#: the joint fit's default stop rule: the rise of J1 over a sweep in nats per training token
#: (on the CoNLL crowd a relative 1e-3 stopped after 5 sweeps with 0.1% of the labels still
#: moving each sweep)
DEFAULT_TOL = 1e-4


def echo_variance(X, template=None, min_freq: int = 1) -> float:
    """``sigma^2 = 1 / mean_t |phi_t|^2``: the linear kernel's prior variance at which a
    token's own label moves its own latent score by about one nat (the echo bound of
    :class:`CrowdGPSL`), ``|phi_t|^2`` the number of active features of token ``t`` under
    ``template`` (the model's template: CRF++ template text, a feature-set name, or None for
    the default template). With ``min_freq = 1`` every template line (feature-set slot) gives
    each token one feature, so ``|phi_t|^2`` is their number (features repeated within a
    token counted once); otherwise the features are extracted and counted."""
    from gpsl.features import FeatureExtractor, Template, default_template

    X = [x for x in X if len(x)]
    if not X:
        return 1.0
    if min_freq == 1:
        tmpl = (default_template(len(X[0][0])) if template is None
                else Template.coerce(template))
        sample = X[: min(len(X), 200)]
        n_feat = [len({block[i] for block in tmpl.expand_sentence(x)}) for x in sample
                  for i in range(len(x))]
        return float(1.0 / max(float(np.mean(n_feat)), 1.0))
    Xf = FeatureExtractor(template, min_freq=min_freq).fit_transform(X)
    sq = np.asarray(Xf.multiply(Xf).sum(axis=1)).ravel()
    return float(1.0 / max(float(sq.mean()), 1.0))


def decode_labels(r: np.ndarray, votes: Votes, how: str = "auto") -> list[str]:
    """One label per token from the posteriors ``r`` (n, J): ``"argmax"``; ``"valid"``: the
    most probable span-valid sequence per sentence (:func:`gpsl.tags.valid_decode`, BIO or
    BILOU/IOBES as the labels say); ``"auto"``: ``"valid"`` when the labels form a span
    scheme, else ``"argmax"``."""
    from gpsl import tags

    if how not in DECODERS:
        raise ValueError(f"decode must be one of {DECODERS}, not {how!r}")
    classes = list(votes.classes)
    scheme = tags.scheme_of(classes)
    if how == "argmax" or (how == "auto" and scheme is None):
        return [classes[i] for i in np.asarray(r).argmax(axis=1)]
    if scheme is None:
        raise ValueError("decode='valid' needs span labels (BIO, BILOU or IOBES)")
    out: list[str] = []
    for part in votes.split(np.asarray(r)):
        out.extend(tags.valid_decode(part, classes, scheme))
    return out


def fit_soft(model, X, q: np.ndarray, keep: np.ndarray, classes, split, features=None):
    r"""Fit ``model`` (a GPSL) on soft labels: a distribution ``q_t(y)`` per kept token.

    GPSL's bound with missing labels (the paper's eq. lb2 with the latent labels ``r_t``,
    :mod:`gpsl.inference`) is ``L(q(f), r) = E_{q(f) r}[log PL(y | f)] + sum_t H(r_t) -
    KL(q(f) || p(f))``, ``log PL = sum_t log p(y_t | y_{N(t)}, f_t)`` the pseudo-likelihood
    (eq. pl). Take ``q_t`` as the likelihood of an observation ``z_t`` of the true label,
    ``p(z_t | y_t) = q_t(y_t)``; the log evidence of all ``z`` is then bounded by

    .. math:: \mathcal{L}_z = L(q(f), r) + \sum_t \sum_y r_t(y) \log q_t(y)
              \le \log \sum_Y \int \prod_t q_t(y_t)\, PL(Y | f)\, p(f)\, df,

    which is GPSL's bound with the evidence ``e_t = log q_t`` on a missing label
    (:attr:`gpsl.inference.Problem.evidence`), maximised by the same monotone coordinate
    ascent: its ``r`` update is ``r_t ∝ q_t exp(E_q[f-terms])``, so the pseudo-likelihood is
    marginalised over the labels under ``q`` reweighted by the tagger. A one-hot ``q_t``
    (``log 0 = -inf`` elsewhere) forces ``r_t`` one-hot, its entropy and evidence terms
    vanish, and the fit is the hard-label fit exactly; so a one-hot row is passed as the
    observed label it is (the same fit, and a finite bound before the first sweep, where a
    uniform ``r`` meets ``-inf`` evidence), and without a soft row the fit is the argmax
    refit's. Tokens not kept carry no evidence (missing). The targets are
    :func:`soft_targets`'s. ``features``: a fitted GPSL on ``X`` whose features the fit
    takes over (:meth:`gpsl.model.GPSL.fit`)."""
    y, evidence = soft_targets(q, keep, classes, split)
    return model.fit(X, y, classes=classes, evidence=evidence, features=features)


def soft_targets(q: np.ndarray, keep: np.ndarray, classes, split):
    """What :func:`fit_soft` fits on (the app's training run fits the same): ``(y,
    evidence)`` per sentence, ``y`` the label of a kept token whose ``q_t`` is one-hot (an
    observed label) and None elsewhere, ``evidence`` ``log q_t`` on the other kept tokens and
    0 on the rest (None when no kept token is soft): the evidence ``e_t`` of
    :func:`fit_soft`'s bound. ``log q_t`` is floored at :data:`gpsl.crowd.LOG_FLOOR` (a class
    whose ``q_t`` underflowed to 0 next to a soft one: its ``exp`` is below 1e-300 all the
    same), so that the bound before the first sweep, at a uniform ``r``, is finite (a model
    holds no infinity, :mod:`gpsl.persist`)."""
    q = np.asarray(q, dtype=float)
    hard = keep & (q.max(axis=1) == 1.0)
    with np.errstate(divide="ignore"):
        E = np.where((keep & ~hard)[:, None], np.maximum(np.log(q), LOG_FLOOR), 0.0)
    E[hard] = 0.0
    y = [[classes[int(v)] if h else None for v, h in zip(qs.argmax(axis=1), hs)]
         for qs, hs in zip(split(q), split(hard))]
    soft = keep & ~hard
    return y, (split(E) if soft.any() else None)


class CrowdGPSL:
    """GPSL trained on crowd votes with the annotator model learned jointly (J1).

    Parameters
    ----------
    model: an unfitted :class:`gpsl.model.GPSL` (default ``GPSL()``); its settings are used.
    annotator_model: ``"sequential"`` (default): confusion conditioned on the annotator's previous
        label (:mod:`gpsl.crowd.sequential`: ``kappa`` shrinks its rows to the annotator's
        confusion matrix, ``shrink`` that one to the annotator's one-coin matrix);
        ``"confusion"``: Dawid-Skene confusion matrices (``min_votes``, ``shrink`` as
        :class:`DawidSkene`).
    prior_diag, prior_off: the Dirichlet prior of the confusion rows (both models).
    init: ``"dawid-skene"`` (start from Dawid-Skene alone, default) or ``"majority"`` (one
        M-step from the vote fractions).
    tagger_prior: how the joint fit sets the tagger's prior variance (the linear kernel's
        ``sigma^2``): ``"auto"`` (default) ``sigma^2 = 1 / mean |phi_t|^2``
        (:func:`echo_variance`, see "The tagger's prior" below); ``"learn"``: learned in the
        joint bound by GPSL's hyper-parameter M-step (slow on large data, below);
        ``"model"``: ``model``'s settings as they are.
    refit: after the joint fit, train the tagger used for prediction (``model_``) with
        ``model``'s own settings on the inferred labels (on the voted and observed tokens,
        the others missing). ``None`` (default): refit exactly when the joint fit's
        settings differ from ``model``'s (``tagger_prior`` ``"auto"`` or ``"learn"``, or
        another ``lse_bound``).
    prior_rule: ``"fixed"`` (default): ``kappa`` and ``shrink`` as given; ``"heldout"``: the
        pair of :data:`gpsl.crowd.priors.GRID`, extended past an edge its best sits on
        (:func:`gpsl.crowd.priors.edge_steps`), whose joint fit on four fifths of the votes
        best predicts the fifth left out (:func:`gpsl.crowd.priors.choose_priors`; no gold
        is read), then the fit on all votes with it (``kappa_``, ``shrink_``,
        ``prior_choice_``).
    centre_target: the sequential model's pull on each annotator's confusion matrix:
        ``"one-coin"`` (default) towards their one-coin matrix (eq. P2 of
        :mod:`gpsl.crowd.sequential`), ``"pooled"`` towards the crowd's own confusion matrix,
        learned with the rest (eq. P3). On the CoNLL crowd the pooled target predicts
        held-out votes better and raises (J1), but the inferred labels do not follow (80.70
        against 80.55 span F1 at ``kappa = 30, shrink = 10``, 80.15 at ``shrink = 100``,
        77.39 at ``kappa = 3``, whose held-out votes score best): not the default, and not
        among the candidates of ``prior_rule="heldout"`` (docs/real-crowd.md,
        ``bench/results/crowd_real_priors_heldout.md``).
    refit_prior: the refit tagger's prior variance: ``"heldout"`` (default) the one of
        :data:`gpsl.crowd.priors.REFIT_FACTORS` times ``model``'s own (:meth:`GPSL.start_variance`:
        for ``ner`` its feature set's 2, so 2, 0.5, 0.125; 4 for another template with the linear
        kernel), or a step past the largest or smallest of these at their spacing (x4,
        :func:`gpsl.crowd.priors.edge_steps`), whose soft-label tagger, fitted on two of
        three contiguous folds of the sentences,
        best predicts the votes of the third through the fitted annotator model
        (:func:`gpsl.crowd.priors.choose_refit_variance`; no gold is read; three more fits per
        candidate, ``refit_choice_``); ``"model"``: ``model``'s own. On the CoNLL crowd's held-out
        documents, before ``ner`` had its own variance, the rule chose 1 of 4, 1, 0.25 and the
        tagger scored 76.64 span F1 against 75.26 at 4: soft labels from a crowd are noisier
        than gold, and a stronger prior fits less of their noise; with the set's 2 it keeps 2
        (77.16, docs/real-crowd.md).
    refit_on: what the refit learns from: ``"posterior"`` (default) the joint fit's
        posteriors ``r_t = q(y_t)`` themselves (:func:`fit_soft`), ``"argmax"`` the decoded
        labels (on the CoNLL crowd's held-out documents 74.81 against 74.68 span F1, and
        67.88 for the joint fit's own tagger at the echo prior; docs/real-crowd.md).
    decode: the inferred labels from the posteriors ``r_t``: ``"auto"`` (default: the most
        probable span-valid sequence when the labels are BIO/BILOU/IOBES, else the argmax),
        ``"valid"`` or ``"argmax"`` (:func:`decode_labels`).
    lse_bound: the joint fit's bound on the tagger's expected log-partition (the engines'
        ``lse_bound``, :mod:`gpsl.likelihood`): ``"auto"`` (default): Jensen's (the paper's
        eq. lb2) with ``tagger_prior="auto"`` unless ``model`` sets its own, else ``model``'s
        setting (see "The bound on the log-partition" below); ``"jensen"``, ``"bohning"``;
        ``"model"``: ``model``'s setting as it is.
    tol: the joint fit's stop rule: it has converged when (J1) rose by less than ``tol``
        nats per training token over one sweep and its M-step (in place of the engine's
        relative rule); at most ``model``'s ``max_iter`` sweeps. ``None`` (default):
        :data:`DEFAULT_TOL` with ``tagger_prior="auto"``, else ``model``'s own rule. Per
        token rather than relative: (J1) is a sum of terms of both signs (the Dirichlet
        priors' log densities are positive), so its size says little.

    ``fit(X, votes)`` fits the tagger; afterwards ``model_`` is the GPSL for prediction (the
    refit, or the joint fit's tagger), ``joint_model_`` the joint fit's tagger, ``probas_``
    the posteriors ``r_t`` of the training tokens (n, J) from the joint bound,
    ``labels_array_`` the decoded labels, ``crowd_`` the annotator model,
    ``confusions_`` (A, J, J; for the sequential model its centres ``c_a``), ``accuracy_``
    (eq. A), ``variance_`` (the joint fit's kernel variance per label), ``refit_choice_``
    (the refit rule's :class:`gpsl.crowd.priors.RefitChoice`, or None), ``bound_trace_`` (the joint
    fit's trace: entry 0 is the engine's bound before the first sweep, every later entry is
    (J1) after the M-step), ``joint_trace_`` (J1 after every sweep and after every M-step,
    alternating) and ``fit_seconds_``.

    The tagger's prior
    ------------------
    In the mean-field family ``q(f) prod_t r_t`` the tagger's term in the ``r_t`` update is
    ``E_q[f_t]``, and ``q(f)`` was fitted to ``r_t`` itself: with weights ``w_j ~ N(0,
    sigma_j^2 I)`` on the token's features ``phi_t`` the stationary mean has
    ``m_tj = sigma_j^2 sum_s (phi_t' phi_s)(r_sj - pi_sj)``, whose own part
    ``sigma_j^2 |phi_t|^2 (r_tj - pi_tj)`` echoes the token's current label. The bound
    rewards this echo, so at the library's default ``sigma^2 = 4`` (chosen for fully labeled
    training) the tagger reproduces ``r`` and adds almost nothing to the votes (simulated
    crowds on basenp: 97.2% right against 97.04% for crowd-kit's Dawid-Skene).

    ``"learn"`` maximises (J1) over ``sigma_j^2`` too (the closed-form M-step of the linear
    kernel, monotone like the other blocks): about 0.03 on basenp, and the inferred labels
    99.06% right. On real data it does not converge in useful time: GPSL's M-step on
    ``sigma^2`` runs once the sweeps at fixed ``sigma^2`` have converged, and each step moves
    ``sigma^2`` by a bounded ratio while the prior term of ~10^5 feature weights per label
    dominates the bound, so every step lifts (J1) by 10^4-10^5 (the CoNLL crowd, word
    windows: 28 sweeps, -586k to -79k, 50 minutes, still rising). The value it heads for
    lies below the best one for the labels (bench.crowd_real: the bound keeps rising as
    ``sigma^2`` falls from 0.03 to 0.003, the inferred labels' span F1 falls).

    ``"auto"`` sets ``sigma^2 = 1 / mean_t |phi_t|^2``, the variance at which a token's own
    label moves its own score by about one nat (``sigma^2 |phi_t|^2 ~ 1``): 0.022 for the
    46 features of the ``ner`` set (0.029 for its 34 without the word clusters), 0.05 for
    the 20 of the basenp template, as ``"learn"`` found there. The joint fit is then
    coordinate ascent on one fixed bound and stops by ``tol``. That prior is too strong for
    tagging new text, hence the refit with ``model``'s own settings on the inferred labels.

    The bound on the log-partition
    ------------------------------
    Both of the engines' bounds on ``E_q[log sum_q exp(...)]`` (:mod:`gpsl.likelihood`) make
    (J1) a lower bound on the same ``log p(votes | X)``, so the larger (J1) is the tighter
    bound and the better approximation; the choice is the bound's, like any other block of
    the coordinate ascent, and does not look at labels. The scalable mode's own default is
    Boehning's (fast and as accurate with labels, :mod:`gpsl.auto`); in the joint fit, at
    the echo prior, Jensen's is the tighter by far: on the CoNLL crowd (``bench.crowd_real``,
    the joint fit with the sequential model and ``ner``) (J1) is -35.0k nats against -55.9k
    on ``raw/`` and -26.0k against -46.2k on ``val.crowd.jsonl``, at 13 and 9 sweeps. So
    ``lse_bound="auto"`` takes Jensen's with ``tagger_prior="auto"``. (The inferred labels'
    span F1, looked at afterwards and not used to choose: 80.54 against 79.71 on ``raw/``,
    77.31 against 76.27 on the JSONL.) With ``"learn"`` and ``"model"`` the fit keeps
    ``model``'s own bound, as before (the simulated-crowd bench, ``bench.crowd``).
    """

    def __init__(self, model=None, *, annotator_model="sequential", prior_diag=2.0,
                 prior_off=0.1, min_votes=30, shrink=DEFAULT_SHRINK, kappa=DEFAULT_KAPPA,
                 init="dawid-skene", tagger_prior="auto", refit=None, decode="auto", tol=None,
                 lse_bound="auto", refit_on="posterior", prior_rule="fixed",
                 centre_target="one-coin", refit_prior="heldout", crossfit=8):
        self.model = model
        self.crossfit = crossfit
        self.refit_prior = refit_prior
        self.centre_target = centre_target
        self.refit_on = refit_on
        self.prior_rule = prior_rule
        self.annotator_model = annotator_model
        self.prior_diag = prior_diag
        self.prior_off = prior_off
        self.shrink = shrink
        self.min_votes = min_votes
        self.kappa = kappa
        self.init = init
        self.tagger_prior = tagger_prior
        self.refit = refit
        self.decode = decode
        self.tol = tol
        self.lse_bound = lse_bound

    def _check(self) -> dict:
        """The parameters the table holds (:data:`gpsl.params.CROWD`) checked there, as
        :meth:`gpsl.model.GPSL.fit` checks its own (one-line :class:`gpsl.errors.InputError`,
        a ``ValueError``), in their canonical form; the fit's own options here."""
        checked = params.check_params({k: getattr(self, k) for k in params.CROWD})
        if self.init not in ("dawid-skene", "majority"):
            raise ValueError(f"init must be 'dawid-skene' or 'majority', not {self.init!r}")
        if self.decode not in DECODERS:
            raise ValueError(f"decode must be one of {DECODERS}, not {self.decode!r}")
        if self.refit_on not in REFIT_ON:
            raise ValueError(f"refit_on must be one of {REFIT_ON}, not {self.refit_on!r}")
        if self.lse_bound not in LSE_BOUNDS:
            raise ValueError(f"lse_bound must be one of {LSE_BOUNDS}, not {self.lse_bound!r}")
        return checked

    def _annotators(self, votes: Votes, M, one_coin, prev):
        """The M-step of the chosen annotator model as ``step(r, previous) -> model`` and the
        evidence of a model as ``evidence(model) -> (n, J)``."""
        if self.annotator_model == "sequential":
            def step(r, old):
                return sequential_m_step(votes, r, prev, kappa=self.kappa_, shrink=self.shrink_,
                                         prior_diag=self.prior_diag, prior_off=self.prior_off,
                                         centre=None if old is None else old.centre,
                                         skill=None if old is None else old.skill,
                                         target=self.centre_target,
                                         pooled=None if old is None else old.pooled)

            def evidence(cm):
                return cm.evidence(votes, prev)
        else:
            def step(r, old):
                return m_step(votes, r, one_coin, self.prior_diag, self.prior_off, M,
                              shrink=self.shrink_, skill=None if old is None else old.skill)

            def evidence(cm):
                return cm.evidence(votes, M)
        return step, evidence

    def _crossfit(self, X, r, votes: Votes, state: dict, base, step, evidence, rounds: int):
        """The rounds of :mod:`gpsl.crowd.crossfit` from the joint fit's posteriors ``r``:
        each fold's tagger has ``base``'s own settings (its own prior variance, warm-started
        from the round before); an observed label stays observed (its evidence forbids the
        other classes). Sets ``crossfit_`` and the annotator model ``state["crowd"]``."""
        from gpsl.crowd.crossfit import crossfit
        from gpsl.model import GPSL

        observed = votes.observed >= 0
        forced = np.where(np.arange(votes.J)[None, :] == votes.observed[:, None], 0.0,
                          LOG_FLOOR)

        def evidence_obs(cm):
            E = evidence(cm)
            return np.where(observed[:, None], forced, E)

        tp = {**base.get_params(), "warm_start": True}
        taggers: dict = {}

        def fit_tagger(k, *data):
            return fit_soft(taggers.setdefault(k, GPSL(**tp)), *data)

        keep = votes.voted() | observed
        self.crossfit_ = crossfit(X, r, keep, votes, state["crowd"], step, evidence_obs,
                                  fit_tagger, max_rounds=rounds)
        state["crowd"] = self.crossfit_.model
        return self.crossfit_.r

    def fit(self, X: Sequence, votes: Votes, callback=None) -> CrowdGPSL:
        import time

        from gpsl.model import GPSL

        t0 = time.perf_counter()
        checked = self._check()
        if len(X) != len(votes.lengths) or any(len(x) != L for x, L in zip(X, votes.lengths)):
            raise InputError("the votes do not match the sentences' lengths", source="input")
        base = GPSL() if self.model is None else self.model
        self.kappa_, self.shrink_, self.prior_choice_ = checked["kappa"], checked["shrink"], None
        if self.prior_rule == "heldout":  # gpsl.crowd.priors: a fold of the votes left out
            from gpsl.crowd.priors import choose_priors

            same = {k: getattr(self, k) for k in ("annotator_model", "prior_diag", "prior_off",
                                                  "min_votes", "init", "tagger_prior", "decode",
                                                  "tol", "lse_bound", "centre_target", "crossfit")}

            def make(kappa, shrink):
                return CrowdGPSL(GPSL(**base.get_params()), kappa=kappa, shrink=shrink,
                                 refit=False, **same)

            self.prior_choice_ = choose_priors(X, votes, make)
            self.kappa_, self.shrink_ = self.prior_choice_.kappa, self.prior_choice_.shrink
        params = base.get_params()
        if self.tagger_prior == "learn" and not base.learn_hyper:
            params["learn_hyper"] = True
        elif self.tagger_prior == "auto":
            params.update(learn_hyper=False,
                          variance=echo_variance(X, base.template, base.min_freq))
        bound = self.lse_bound
        if bound == "auto":
            bound = ("jensen" if self.tagger_prior == "auto" and str(base.lse_bound) == "auto"
                     else "model")
        if bound != "model":
            params["lse_bound"] = bound
        tol_token = DEFAULT_TOL if (self.tol is None and self.tagger_prior == "auto") \
            else self.tol
        if tol_token is not None:  # the joint fit's own stop rule replaces the engine's
            params["tol"] = 1e-12
        model = GPSL(**params) if params != base.get_params() else base
        refit = (model is not base) if self.refit is None else bool(self.refit)
        M = votes.design()
        one_coin = votes.n_votes() < self.min_votes
        prev = previous_labels(votes) if self.annotator_model == "sequential" else None
        step, evidence = self._annotators(votes, M, one_coin, prev)
        if self.init == "dawid-skene":
            ds = DawidSkene(self.prior_diag, self.prior_off, self.min_votes,
                            shrink=self.shrink_).fit_votes(votes)
            crowd = ds.model_ if self.annotator_model == "confusion" else step(ds.probas_, None)
        else:
            crowd = step(majority_posteriors(votes), None)
        classes = list(votes.classes)
        obs = votes.observed
        y = [[None if v < 0 else classes[v] for v in part] for part in votes.split(obs)]
        E = evidence(crowd)
        joint: list[float] = []
        state = {"crowd": crowd}
        observed = obs >= 0

        def extras(cm, E_full: np.ndarray) -> float:
            ev_obs = float(np.sum(E_full[observed, obs[observed]])) if observed.any() else 0.0
            return ev_obs + cm.log_prior()

        def on_sweep(engine):
            r = engine.s.r
            joint.append(float(engine.elbo()) + extras(state["crowd"], engine.p.evidence
                                                       if engine.p.evidence is not None
                                                       else E))
            cm = step(r, state["crowd"])
            E_new = evidence(cm)
            engine.p.set_evidence(E_new)
            state["crowd"] = cm
            value = float(engine.elbo()) + extras(cm, E_new)
            joint.append(value)
            if tol_token is None or len(joint) < 4:
                return value
            return value, bool(value - joint[-3] <= float(tol_token) * votes.n)

        model.fit(X, y, callback=callback, classes=classes, evidence=votes.split(E),
                  on_sweep=on_sweep)
        if list(model.classes_) != classes:  # pragma: no cover - classes are passed through
            raise RuntimeError("the model's classes differ from the votes' classes")
        r = np.array(model.state_.r)
        self.crossfit_ = None
        if checked["crossfit"] > 0:
            r = self._crossfit(X, r, votes, state, base, step, evidence, checked["crossfit"])
        labels = decode_labels(r, votes, self.decode)
        self.joint_model_ = model
        self.model_ = model
        self.refit_choice_ = None
        if refit:
            # the tagger for prediction: model's own settings (the prior variance by held-out
            # votes with refit_prior="heldout") on the inferred labels or the posteriors
            keep = votes.voted() | observed
            tagger = base if base is not model else GPSL(**base.get_params())
            if self.refit_prior == "heldout":  # gpsl.crowd.priors: folds of the sentences
                from gpsl.crowd.priors import REFIT_FACTORS, choose_refit_variance

                v0 = tagger.start_variance()  # ner: the feature set's own (2)
                tp = tagger.get_params()

                def make_tagger(v):
                    return GPSL(**{**tp, "variance": v})

                def fit_tagger(v, *data):
                    return fit_soft(make_tagger(v), *data)

                self.refit_choice_ = choose_refit_variance(
                    X, r, keep, votes, state["crowd"], fit_tagger,
                    [v0 * f for f in REFIT_FACTORS])
                tagger = make_tagger(self.refit_choice_.variance)
            if self.refit_on == "posterior":
                self.model_ = fit_soft(tagger, X, r, keep, classes, votes.split,
                                       features=model)
            else:
                y_hat = [[lab if k else None for lab, k in zip(lv, kv)]
                         for lv, kv in zip(votes.split(np.array(labels, dtype=object)),
                                           votes.split(keep))]
                self.model_ = tagger.fit(X, y_hat, classes=classes, features=model)
        self.crowd_ = state["crowd"]
        cm = self.crowd_
        self.confusions_ = cm.confusion if hasattr(cm, "confusion") else cm.pi
        self.one_coin_ = (one_coin if self.annotator_model == "confusion"
                          else np.zeros(votes.A, dtype=bool))
        self.probas_ = r
        self.labels_array_ = labels
        self.accuracy_ = annotator_accuracy(votes, r)
        self.skills_ = dict(zip(votes.annotators, self.accuracy_))
        self.variance_ = np.exp(np.asarray(model.state_.theta)[:, 0])  # per label
        self.bound_trace_ = list(model.bound_trace_)
        self.joint_trace_ = joint
        self.classes_ = classes
        self.annotators_ = list(votes.annotators)
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def predict(self, X, **kw):
        return self.model_.predict(X, **kw)

    def predict_marginals(self, X, **kw):
        return self.model_.predict_marginals(X, **kw)
