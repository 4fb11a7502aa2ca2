"""Every parameter of GPSL, written once: its constraint, default, presets and help.

In the spirit of scikit-learn's ``_parameter_constraints``, :data:`PARAMS` maps each name to a
:class:`Param`: the constraints its value must meet (:class:`Interval`, :class:`Options`,
:class:`Boolean`, ``None`` ...; one of them; the classes live in :mod:`gpsl.constraints`),
the library's default, a one-line help (command line, widgets) and the longer reason behind
the default (``doc``, the measurements). The
estimator (:class:`gpsl.model.GPSL` checks its parameters with :func:`check_params` in ``fit``),
the command line (:func:`add_option` builds its options), saved models (:mod:`gpsl.persist`
checks a model's recorded configuration against the same constraints) and the app
(``TrainConfig`` and the Train page's widgets) all read this table.

Every number has bounds, so absurd input is refused at once with one line instead of running
(a dependency offset of ``-9999999999`` would make the coordinate ascent's colouring loop over
twenty billion classes): offsets lie within :data:`MAX_OFFSET` tokens either side, at most
:data:`MAX_OFFSETS` of them; every float is finite.

Where a default legitimately differs by the place a fit is started from, the difference is
written in :data:`CONTEXTS` with its reason (:func:`defaults`), never restated by the caller.

The dependency set ``S`` of the paper (section 3: ``f^S_d(y_{l+o_d}, y_l)`` for each offset
``o_d``) is the ``offsets`` parameter; :data:`PRESETS` names the paper's three.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpsl.constraints import (
    Anything,
    Boolean,
    Constraint,
    InstanceOf,
    Interval,
    NoneValue,
    Offsets,
    Options,
    Param,
)
from gpsl.errors import InputError

__all__ = [
    "GPSL1", "GPSL2", "GPSL4", "PRESETS", "PRESET_HELP", "MAX_OFFSET", "MAX_OFFSETS",
    "Constraint", "Interval", "Options", "Boolean", "NoneValue", "Offsets", "InstanceOf",
    "Anything", "Param", "Context", "PARAMS", "ESTIMATOR", "CROWD", "CONTEXTS", "param", "check",
    "check_params", "defaults", "parse_offsets", "parse_text", "preset_of", "add_option",
    "argparse_type", "describe",
]

# --------------------------------------------------------------------------- presets

#: the paper's dependency sets: the previous label; previous and next; two either side
GPSL1 = (-1,)
GPSL2 = (-1, 1)
GPSL4 = (-2, -1, 1, 2)
PRESETS = {"GPSL1": GPSL1, "GPSL2": GPSL2, "GPSL4": GPSL4}
PRESET_HELP = {
    "GPSL1": "previous label (-1)",
    "GPSL2": "previous and next label (-1, 1)",
    "GPSL4": "two labels either side (-2, -1, 1, 2)",
}
#: a dependency offset reaches at most this many tokens either side (the default sentence
#: limit, :data:`gpsl.limits.DEFAULT_MAX_TOKENS`: a farther neighbour never exists)
MAX_OFFSET = 1000
#: at most this many dependency offsets (each adds a ``J x J`` pair function per label)
MAX_OFFSETS = 64


def preset_of(offsets) -> str:
    """``"GPSL1"``/``"GPSL2"``/``"GPSL4"`` for a preset's offsets, else ``"custom"``."""
    offs = tuple(int(o) for o in offsets)
    return next((name for name, value in PRESETS.items() if value == offs), "custom")


# --------------------------------------------------------------------------- the table


def _int(lo, hi) -> Interval:
    return Interval(int, lo, hi)


def _real(lo, hi, closed="both") -> Interval:
    return Interval(float, lo, hi, closed)


def _opts(*options, **kw) -> Options:
    return Options(tuple(options), **kw)


_NONE = NoneValue()
_BOOL = Boolean()

_P = [
    # ------------------------------------------------------------------ the model
    Param("offsets", GPSL2, (Offsets(PRESETS, MAX_OFFSET, MAX_OFFSETS),),
          flags=("-d", "--offsets"), metavar="OFFSETS",
          label="Dependency set", persisted=False,
          help="label dependency offsets: -1 (GPSL1), -1,1 (GPSL2, default), -2,-1,1,2 (GPSL4)",
          doc="the dependency set S as label offsets; ``(-1,)`` = GPSL1, ``(-1, 1)`` = GPSL2, "
              "``(-2, -1, 1, 2)`` = GPSL4, or any other; a preset name or a string like "
              "``\"-1,1\"`` is accepted. (Saved with the model outside its configuration.)"),
    Param("kernel", "linear",
          (_opts("linear", "rbf", aliases={"se": "rbf"}, ignore_case=True,
                 labels={"linear": "Linear", "rbf": "RBF (squared exp.)"}),),
          flags=("--kernel",), label="Kernel",
          help="covariance of the latent functions over the token features: linear or rbf "
               "(squared exponential)",
          doc="``\"linear\"`` or ``\"rbf\"`` (squared exponential, eq. 1; alias ``\"se\"``)."),
    Param("template", None,
          (_NONE, InstanceOf("str", "CRF++ template text"),
           InstanceOf("gpsl.features:Template", "a Template")), persisted=False,
          help="CRF++ template, or the built-in feature set 'ner' (default: a window over every "
               "column)",
          doc="CRF++ template text, the name of a built-in feature set (``\"ner\"``, "
              ":data:`gpsl.features.FEATURE_SETS`), a :class:`~gpsl.features.Template`, or "
              "``None`` for :func:`~gpsl.features.default_template`. (Saved with the model's "
              "features.)"),
    Param("min_freq", 1, (_int(1, 10**9),), flags=("-f", "--min-freq"), metavar="MIN_FREQ",
          label="Minimum feature count",
          help="keep features seen at least MIN_FREQ times (like crf_learn -f)",
          doc="keep features seen at least this often (``crf_learn -f``)."),
    Param("max_iter", 100, (_int(1, 10**6),), flags=("--max-iter",), metavar="N",
          label="Max iterations",
          help="maximum number of coordinate-ascent sweeps",
          doc="coordinate-ascent sweeps of Algorithm 1 at most (``tol`` usually stops "
              "earlier)."),
    Param("tol", 1e-3, (_real(0.0, 1.0),), flags=("--tol",), metavar="X",
          label="Tolerance",
          help="stop when the bound improves by less than this, relative (1e-3 = 0.1% a "
               "sweep)",
          doc="the relative-improvement stop: 1e-3 (0.1% a sweep): on the paper's data sets "
              "the sweeps after that change the bound by less than 0.1% a sweep and the test "
              "loss by about 0.1 point, at twice the time."),
    Param("learn_hyper", False, (_BOOL,), flags=("--learn-hyper",),
          label="Learn hyper-parameters",
          help="learn the per-label kernel hyper-parameters by variational EM (off by default: "
               "maximising the bound shrinks the variances and lowers accuracy on the paper's "
               "data sets)",
          doc="learn the per-label kernel hyper-parameters theta_j by variational EM "
              "(Algorithm 1's outer loop). Off by default: the Jensen bound of eq. (lb2) grows "
              "as the kernel variance shrinks, and maximising it lowered held-out accuracy on "
              "the paper's data sets (see docs, \"Hyper-parameters\")."),
    Param("variance", None, (_NONE, _real(0.0, 1e6, "right")), flags=("--variance",),
          metavar="S2", label="Kernel variance",
          help="kernel variance (linear: prior variance of each feature weight; default 4.0 "
               "linear, 2.0 with the ner feature set, 1.0 rbf); the starting value when "
               "--learn-hyper is given",
          doc="initial kernel variance (linear: prior variance of each feature weight; rbf: "
              "sigma_f^2); ``None`` = 4.0 for the linear kernel (the feature set's own, "
              ":attr:`gpsl.features.NerFeatures.VARIANCE` = 2.0 for ``ner``), 1.0 for rbf. "
              "The linear "
              "default was chosen on GPSL2, partitions 0-2 of the paper's data sets (variance "
              "1 -> 4, Algorithm 2 sequential -> Jacobi: basenp Hamming loss 8.36 -> 5.66, "
              "chunking 12.53 -> 12.17, seg 16.76 -> 16.34, JapaneseNE 8.34 -> 8.43): the "
              "Jensen bound's ``v/2`` terms penalise prior variance, so a weak prior gives "
              "local functions that lean too much on the neighbours' labels."),
    Param("pair_variance", None, (_NONE, _real(0.0, 1e6, "right")),
          flags=("--pair-variance",), metavar="S2", label="Pair-function variance",
          help="prior variance of the label-pair functions f^S (default: the feature set's, "
               "4 for ner; 1, the paper's, otherwise)",
          doc="prior variance ``s2`` of every entry of the label-pair functions, "
              "``f^S_d ~ N(0, s2 I)``; ``None`` = the feature set's (:attr:`gpsl.features."
              "NerFeatures.PAIR_VARIANCE`, 4 for ``ner``, chosen on document folds of "
              "training sentences, ``bench.ner_cv``), else 1 (the paper's ``K^S = I``)."),
    Param("decoder", "auto", (_opts("auto", "rns", "chain", "viterbi", "exact"),),
          flags=("--decoder",), label="Decoder",
          help="auto (the feature set's: exact for ner, else rns), rns (Algorithm 2), chain "
               "(Viterbi on the chain the pair functions estimate, dependencies within "
               "-1..+1), viterbi (one neighbour) or exact (dependencies within -1..+1)",
          doc="``\"auto\"`` (the feature set's decoder, :attr:`gpsl.features.NerFeatures."
              "DECODER`: ``\"exact\"`` for ``ner``, else ``\"rns\"``), ``\"rns\"`` "
              "(Algorithm 2), ``\"chain\"`` (:func:`gpsl.predict.chain_decode`: Viterbi on the "
              "linear chain whose pseudo-likelihood factors the model's are, with the pair "
              "functions' means; beyond the paper), ``\"viterbi\"`` (single-neighbour "
              "models) or ``\"exact\"`` (the exact maximiser of the product of the "
              "pseudo-likelihood factors, for dependencies within -1..+1; beyond the paper)."),
    Param("rns_tol", 1e-4, (_real(0.0, 1.0),),
          help="Algorithm 2 stops when no marginal moves by more than this",
          doc="the stop rule of Algorithm 2: no RNS value changes by more than this."),
    Param("rns_max_iter", 100, (_int(1, 10**6),),
          help="Algorithm 2's passes at most",
          doc="the passes of Algorithm 2 at most."),
    Param("rns_schedule", "adaptive", (_opts("adaptive", "jacobi", "sequential"),),
          help="adaptive (undamped Algorithm 2, damped where it cycles), jacobi (Algorithm 2 "
               "as written, damped by rns_damping) or sequential (newest values, left to right)",
          doc="``\"adaptive\"`` (the default: Algorithm 2 as written, undamped, for at most "
              "20 passes; a sentence still moving then restarts on the damped Jacobi passes of "
              "``rns_damping``; the same fixed points, a third of the passes), ``\"jacobi\"`` "
              "(every RNS^t from RNS^{t-1}, damped by ``rns_damping``; the default before) or "
              "``\"sequential\"`` (positions updated left to right with the newest "
              "values). On basenp (GPSL2, partitions 0-2) Jacobi had 7.0% Hamming loss against "
              "8.4% for sequential; on chunking they tie."),
    Param("rns_damping", 0.5, (_real(0.0, 1.0, "right"),),
          help="eta of the damped Algorithm 2 (1 = undamped)",
          doc="``eta`` of :func:`gpsl.predict.rns` (same fixed points as Algorithm 2; ``1`` = "
              "undamped). Undamped, the Jacobi iteration ends in two-cycles on 4-5% of "
              "basenp's test tokens and its answer depends on the parity of ``rns_max_iter``; "
              "``0.5`` converges in 20-50 passes and lowered GPSL2's loss on basenp partitions "
              "0-2 from 5.66% to 5.18% (chunking unchanged)."),
    Param("rns_variance", False, (_BOOL,),
          help="use m + v/2 as Algorithm 2's local score (eq. rns) instead of the mean m",
          doc="use ``m + v/2`` as the local score of the RNS, exactly as eq. (rns) (the log of "
              "``E[exp f]``). Off by default: the predictive variance is smallest for the label "
              "the training data supports, so ``v/2`` systematically favours the wrong labels; "
              "on basenp (150/150, GPSL2) it raised the Hamming loss from 7.1% (means only) to "
              "11.3%. ``False`` uses the predictive means ``m``."),
    Param("warm_start", False, (_BOOL,), persisted=False,
          help="start fit from the previous fit",
          doc="start ``fit`` from the previous fit (active learning, added labels): in the "
              "scalable mode its weights, their precisions, ``q(f^S)`` and ``theta`` by "
              "feature and label name, with or without missing labels (the fit then ends at "
              "the cold fit's optimum); in the full GP its hyper-parameters always, its "
              "variational state of the kept sentences only when no training label is "
              "missing (:mod:`gpsl.warm` says why)."),
    Param("lambda_floor", 1e-8, (_real(0.0, 1.0, "right"),),
          help="Khan parameters below this are set to 0",
          doc="Khan parameters below this are set to 0 (see :mod:`gpsl.inference`). A large "
              "floor (1e-3) shrinks the Cholesky factors but moves the fixed point: on chunking "
              "the damped steps towards it kept failing (0.6 s of every sweep wasted)."),
    Param("inference", "auto",
          (_opts("auto", "full", "sparse", ignore_case=True,
                 labels={"auto": "Auto", "full": "Full GP", "sparse": "Scalable"}),),
          flags=("--inference",), label="Inference",
          help="full GP, the scalable weight-space mode, or auto (the scalable mode for the "
               "linear kernel; rbf: full up to 2,000 tokens)",
          doc="``\"full\"`` (the full GP of Algorithm 1, ``O(n^3)`` in training tokens), "
              "``\"sparse\"`` (the scalable weight-space mode of :mod:`gpsl.sparse`, about "
              "linear in ``n``) or ``\"auto\"`` (:func:`gpsl.auto.inference_mode`: the "
              "scalable mode for the linear kernel, measured as accurate or more and far "
              "cheaper at every size, the paper's partitions included; for the rbf kernel the "
              "full GP up to 2,000 training tokens)."),
    Param("covariance", "auto", (_opts("auto", "meanfield", "khan", ignore_case=True),),
          help="the scalable mode's covariance family: meanfield, khan or auto",
          doc="the sparse mode's covariance family: ``\"meanfield\"``, ``\"khan\"`` or "
              "``\"auto\"`` (mean-field for the linear kernel, Khan for the rbf kernel's "
              "Nystrom features)."),
    Param("inducing", 500, (_int(1, 10**6),), flags=("--inducing",), metavar="M",
          help="inducing tokens of the rbf kernel in the sparse mode",
          doc="inducing tokens of the rbf kernel in the sparse mode."),
    Param("lse_bound", "auto", (_opts("auto", "jensen", "bohning", ignore_case=True),),
          flags=("--lse-bound",),
          help="bound on the expected log-partition (auto: jensen for full, bohning for "
               "sparse)",
          doc="the upper bound on the expected log-partition (:mod:`gpsl.likelihood`): "
              "``\"jensen\"`` (the paper's eq. lb2), ``\"bohning\"`` (variances enter "
              "additively and do not move the means) or ``\"auto\"`` (Jensen in the full "
              "mode; in the sparse mode Boehning, with or without missing labels - with the "
              "mean-field covariance, whose variances over-state the uncertainty, Jensen's "
              "bound pulls the means and cost 0.4-0.8 points against Boehning's on chunking, "
              "basenp and JapaneseNE at 600-800 sentences, and with missing labels its slow "
              "drift took 8 sweeps: :mod:`gpsl.auto`, ``docs/speed.md``)."),
    Param("marginals", "auto", (_opts("auto", "mean", "probit"),),
          help="the marginals predict_marginals gives: mean (Algorithm 2), probit "
               "(uncertainty-aware) or auto (the calibrator's choice, else mean)",
          doc="the per-token marginals :meth:`~gpsl.model.GPSL.predict_marginals` gives when "
              "no calibrator says otherwise: ``\"mean\"`` (Algorithm 2 on the predictive means, "
              "as the paper), ``\"probit\"`` (the uncertainty-aware RNS of "
              ":func:`gpsl.predict.rns`: the posterior variances of ``f^U`` and ``f^S`` flatten "
              "each score by the probit factor) or ``\"auto\"`` (the calibrator's choice after "
              ":func:`gpsl.calibration.calibrate`, else ``\"mean\"``)."),
    Param("missing_start", "labels",
          (_opts("labels", "uniform", "supervised", ignore_case=True),),
          flags=("--missing-start",),
          help="scalable fit with missing labels: first fit the labeled tokens (labels, the "
               "default), start from zero weights (uniform) or from the fit of the complete "
               "sentences (supervised)",
          doc="where the scalable fit starts when labels are missing: ``\"labels\"`` (the "
              "default: the first sweep fits the labeled tokens, then every missing label "
              "gets the model's guess, "
              ":meth:`gpsl.sparse.SparseGPSLInference.sweep_labels_first`), ``\"uniform\"`` "
              "(zero weights, every missing label uniform, the mean step in three rounds with "
              "an ``r`` update between them: the scalable fit before ``\"labels\"``) or "
              "``\"supervised\"`` (from the fit of the completely labeled sentences, "
              ":meth:`gpsl.engines.SparseEngine.supervised_start`). Measured in "
              "``docs/speed.md`` (``python -m bench.partial``): ``\"labels\"`` with "
              "Boehning's bound is as accurate or more on chunking, JapaneseNE and basenp up "
              "to half the tokens hidden at a fifth of the time or less; on basenp with "
              "85-95% hidden ``\"uniform\"`` with ``lse_bound=\"jensen\"`` was 0.3-1.1 points "
              "better. ``\"supervised\"`` was better than ``\"uniform\"`` on basenp and "
              "worse on chunking (700-sentence pools, the plain bound)."),
    Param("missing_weight", "auto",
          (_opts("auto", ignore_case=True), _real(0.0, 1.0)),
          flags=("--missing-weight",), metavar="W",
          help="weight of a missing label's own factor when fitting, 'auto' (min(1, labeled / "
               "missing tokens), the default) or a number in [0, 1]; 1 = the plain variational "
               "bound",
          doc="``lambda``, the weight of a missing label's own pseudo-likelihood factor in the "
              "M-steps (EM-lambda, :mod:`gpsl.likelihood`): ``\"auto\"`` = ``min(1, labeled / "
              "missing tokens)``, or a number in ``[0, 1]``; ``1`` is the plain variational "
              "bound. The missing labels stay marginalised (their ``r`` is the unweighted "
              "E-step and informs the neighbours); only their pull on the functions as "
              "self-made training targets is discounted. ``\"auto\"`` is ``1`` while at most "
              "half the labels are missing. The fitted value is ``missing_weight_``. Measured "
              "in ``bench.missing_weight``."),
    Param("n_jobs", None, (_NONE, _int(1, 1024)), persisted=False,
          help="threads for the per-label Cholesky factors (None: one more than the CPUs, at "
               "most 4)",
          doc="threads for the per-label Cholesky factors of the covariance update (``None``: "
              "one more than the CPUs, at most 4). BLAS itself runs single-threaded during "
              "``fit`` (threadpoolctl): two BLAS threads per factorisation made a chunking fit "
              "2.4 times slower on 2 cores."),
    Param("callback", None, (_NONE, InstanceOf("callable", "a callable")), persisted=False,
          help="called after every sweep with {iteration, bound, seconds}",
          doc="called after every sweep with ``{\"iteration\", \"bound\", \"seconds\"}``."),
    Param("verbose", False, (_BOOL, _int(0, 100)), persisted=False,
          help="accepted for scikit-learn compatibility; fit prints nothing",
          doc="accepted for scikit-learn compatibility; ``fit`` prints nothing (progress goes "
              "to ``callback``)."),
    Param("cluster", None,
          (_NONE, Anything("a dask.distributed Client or a scheduler address like "
                           "tcp://host:8786 (or gpsl.distributed.InProcess(n))")),
          flags=("--scheduler",), metavar="ADDRESS", persisted=False,
          help="a Dask scheduler (tcp://HOST:PORT): the scalable fit's sums over sentences run "
               "on its workers (linear kernel, mean-field)",
          doc="``None`` (fit in this process) or a Dask cluster for the scalable mode's sums "
              "over sentences: a ``dask.distributed.Client`` or a scheduler address such as "
              "``\"tcp://host:8786\"`` (:mod:`gpsl.distributed`; the linear kernel with the "
              "mean-field covariance). With a cluster, ``inference=\"auto\"`` is ``\"sparse\"`` "
              "and ``inference=\"full\"`` is refused. ``gpsl.distributed.InProcess(n)`` runs "
              "the same shards in this process. Not saved with the model."),
    # ------------------------------------------------------------------ the crowd model
    Param("min_votes", 30, (_int(1, 10**9),), flags=("--min-votes",), metavar="N",
          group="crowd",
          help="annotators with fewer votes get one skill parameter instead of a confusion "
               "matrix"),
    Param("prior_diag", 2.0, (_real(0.0, 1e6),), flags=("--prior-diag",), metavar="X",
          group="crowd", help="Dirichlet pseudo-count on the confusion matrices' diagonal"),
    Param("prior_off", 0.1, (_real(0.0, 1e6),), flags=("--prior-off",), metavar="X",
          group="crowd", help="Dirichlet pseudo-count off the diagonal"),
    Param("shrink", 10.0, (_real(0.0, 1e6),), flags=("--shrink",), metavar="K", group="crowd",
          help="shrink each confusion matrix towards the annotator's one-skill matrix with K "
               "pseudo-votes per row (0: fixed prior, MAP)"),
    Param("tagger_prior", "auto", (_opts("auto", "learn", "model"),), flags=("--tagger-prior",),
          group="crowd",
          help="the joint fit's tagger prior variance: 'auto' 1/(features per token), 'learn' "
               "learned in the joint bound (slow on large data); both refit the saved tagger "
               "with the given settings on the inferred labels; 'model' keeps the given "
               "settings in the joint fit",
          doc="see :class:`gpsl.crowd.CrowdGPSL`, \"The tagger's prior\" (measured in "
              "docs/real-crowd.md)"),
    Param("annotator_model", "sequential", (_opts("sequential", "confusion"),),
          flags=("--annotator-model",), group="crowd",
          help="the joint fit's annotator model: 'sequential' (confusion conditioned on the "
               "annotator's previous label, as BSC-seq) or 'confusion' (Dawid-Skene)",
          doc="see :mod:`gpsl.crowd.sequential`"),
    Param("prior_rule", "fixed", (_opts("fixed", "heldout"),), flags=("--prior-rule",),
          group="crowd",
          help="the sequential model's kappa and shrink: 'fixed' as given, 'heldout' the grid "
               "pair (or a step past its edge) whose fit best predicts a fifth of the votes "
               "left out (no gold read)",
          doc="see :mod:`gpsl.crowd.priors`"),
    Param("centre_target", "one-coin", (_opts("one-coin", "pooled"),),
          flags=("--centre-target",), group="crowd",
          help="sequential annotator model: shrink each annotator's confusion matrix towards "
               "their one-skill matrix ('one-coin') or towards the crowd's own confusion "
               "matrix, learned ('pooled')",
          doc="see :mod:`gpsl.crowd.sequential`, eq. P3"),
    Param("refit_prior", "heldout", (_opts("heldout", "model"),), flags=("--refit-prior",),
          group="crowd",
          help="the refit tagger's prior variance: 'heldout' the one of 1, 1/4 and 1/16 "
               "times the tagger's own (or a step of x4 past them) whose tagger best predicts "
               "the votes of sentences it did not train on (3 folds, no gold read); 'model' "
               "the tagger's own",
          doc="see :func:`gpsl.crowd.priors.choose_refit_variance`"),
    Param("crossfit", 8, (_int(0, 100),), flags=("--crossfit",), metavar="N", group="crowd",
          help="after the joint fit, at most N rounds of cross-fitted taggers as the prior of "
               "the posterior (3 folds of the sentences, each read by a tagger trained on the "
               "others; until the posteriors settle); 0 = off",
          doc="see :mod:`gpsl.crowd.crossfit` (measured in docs/real-crowd.md)"),
    Param("kappa", 30.0, (_real(1e-3, 1e6),), flags=("--kappa",), metavar="K", group="crowd",
          help="sequential annotator model: shrink each previous-label row towards the "
               "annotator's confusion row with K pseudo-votes"),
    # ------------------------------------------------------------------ a run in the app
    Param("max_sentences", None, (_NONE, _int(1, 10**9)), group="app",
          label="Train on at most N labeled sentences (0 = all)",
          help="by default every sentence with a labeled token is used; a cap keeps rounds "
               "short (the most labeled sentences first)"),
    # ------------------------------------------------------------------ command options
    Param("calibrate_folds", None, (_NONE, _int(2, 100)), flags=("--calibrate-folds",),
          metavar="K", group="command",
          help="calibrate on K folds of the training sentences (K more fits; default without "
               "--calibrate: 5 folds up to 1,000 sentences, 3 above)"),
    Param("no_calibrate", False, (_BOOL,), flags=("--no-calibrate",), group="command",
          help="save the model uncalibrated (by default train calibrates its marginals on "
               "--calibrate FILE, else on folds of the training sentences)",
          doc="``train`` calibrates by default with the app's rule "
              "(:func:`gpsl.calibration.calibrate_model`); on the pooled splits of "
              "``bench.cli_calibration`` the uncalibrated marginals' ECE was 2-4 times "
              "CRFsuite's."),
    Param("jobs", None, (_NONE, _int(1, 1024)), flags=("--jobs",), metavar="N",
          group="command",
          help="processes for the calibration's fold fits (default: the folds or the CPUs, "
               "whichever is fewer, when the model's fit took 2 s or more; else 1)",
          doc="processes of the calibration's fold fits "
              "(:func:`gpsl.calibration.fold_processes`; the 2 s are "
              ":data:`gpsl.calibration.rule.PROCESS_MIN_FIT_SECONDS`)."),
    Param("max_tokens", None, (_NONE, _int(0, 10**9)), flags=("--max-tokens",), metavar="N",
          group="command",
          help="refuse sentences longer than N tokens (default 1000 or $GPSL_MAX_TOKENS; 0: no "
               "limit)"),
    Param("annotators", None, (_NONE, _int(1, 10_000)), flags=("--annotators",), metavar="N",
          group="command",
          help="CoNLL crowd input: the last N columns are one label column per annotator ('_' "
               "= no label)"),
    Param("batch", 50, (_int(1, 10**7),), flags=("--batch",), metavar="N", group="command",
          help="tokens to ask"),
    Param("max_per_sentence", None, (_NONE, _int(1, 10**7),), flags=("--max-per-sentence",),
          metavar="K", group="command",
          help="at most K tokens of one sentence (default: a quarter of the batch)"),
    Param("seed", 0, (_int(0, 2**32 - 1),), flags=("--seed",), group="command",
          help="random seed of the query"),
]

#: every parameter by name, in the order above
PARAMS: dict[str, Param] = {p.name: p for p in _P}
#: the parameters of :class:`gpsl.model.GPSL`, in its constructor's order
ESTIMATOR: tuple[str, ...] = tuple(p.name for p in _P if p.group == "estimator")
#: the parameters of :class:`gpsl.crowd.CrowdGPSL` the table holds (group ``"crowd"``): its
#: ``fit`` checks them here, the CLI's crowd options and the app's joint rule read them
CROWD: tuple[str, ...] = tuple(p.name for p in _P if p.group == "crowd")


@dataclass(frozen=True)
class Context:
    """A place a fit starts from, with the defaults that differ there and why."""

    name: str
    why: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


CONTEXTS: dict[str, Context] = {
    "library": Context("library", "GPSL(...) in Python: the table's defaults."),
    "cli": Context("cli", "python -m gpsl train: the library's defaults (a crf_learn run "
                          "is a batch job; nobody waits for it at a screen)."),
    "app": Context("app", "a training run started from the app's Train page while "
                          "annotators keep labeling: rounds are kept short (a round stops "
                          "after 30 sweeps; the next round starts from more labels), so "
                          "max_iter is 30.", {"max_iter": 30}),
}


def param(name: str) -> Param:
    try:
        return PARAMS[name]
    except KeyError:
        raise InputError(f"unknown parameter {name!r}") from None


def defaults(context: str = "library", names: Iterable[str] | None = None) -> dict:
    """The defaults of ``names`` (default: the estimator's) where a fit starts from
    ``context`` (:data:`CONTEXTS`)."""
    ctx = CONTEXTS[context]
    keys = ESTIMATOR if names is None else tuple(names)
    return {k: ctx.overrides.get(k, param(k).default) for k in keys}


def check(name: str, value, source: str | None = None):
    """``value`` of parameter ``name`` in its canonical form (offsets as a tuple, options in
    lower case where any case is accepted, numbers as int or float), or a one-line
    :class:`InputError` naming the parameter."""
    return param(name).check(value, source)


def check_params(params: Mapping[str, Any], source: str | None = None) -> dict:
    """:func:`check` of every item; an unknown name is refused too."""
    return {k: check(k, v, source) for k, v in params.items()}


def parse_offsets(offsets) -> tuple[int, ...]:
    """A dependency set (:class:`Offsets`): a preset name, ``"-1,1"`` or a sequence of ints."""
    return check("offsets", offsets)


def parse_text(name: str, text: str):
    """Parameter ``name`` from a string a person typed (command line, text field)."""
    return param(name).from_text(text)


def describe(names: Iterable[str] = ESTIMATOR) -> str:
    """The parameters' section of a docstring: each name, its constraint, default and
    ``doc`` (or ``help``)."""
    import textwrap

    lines = []
    for n in names:
        p = param(n)
        lines += textwrap.wrap(f"{n}: {p.describe()}; default {p.default!r}.", 92,
                               subsequent_indent="    ")
        lines += textwrap.wrap(p.doc or p.help, 92, initial_indent="    ",
                               subsequent_indent="    ")
    return "\n".join(lines)


# --------------------------------------------------------------------------- argparse


def argparse_type(name: str):
    """An argparse ``type`` reading parameter ``name`` (one-line ``ArgumentTypeError``)."""
    p = param(name)

    def read(text: str):
        try:
            return p.from_text(text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    read.__name__ = name  # argparse names the type in "invalid <name> value"
    return read


def _choices_reader(c: Options):
    """An :class:`Options` reader for argparse: the canonical option, or the text itself so
    that argparse's ``choices`` refuse it with its usual line."""

    def read(text: str):
        return c.canonical(text) if c.accepts(text) else text

    return read


def add_option(parser, name: str, *, context: str = "cli", flags: tuple[str, ...] = (),
               **overrides):
    """Add parameter ``name`` to an argparse ``parser`` as its table entry says: the option
    strings, a type that checks the constraint (the choices of an :class:`Options`
    parameter; a flag for a boolean), the ``context``'s default and the help with that
    default appended. ``overrides`` (e.g. ``default=None``, ``help=...``) replace what the
    table gives."""
    p = param(name)
    kw: dict[str, Any] = {"dest": name,
                          "default": CONTEXTS[context].overrides.get(name, p.default)}
    options = next((c for c in p.constraints if isinstance(c, Options)), None)
    if any(isinstance(c, Boolean) for c in p.constraints):
        kw["action"] = "store_true"
    elif options is not None and all(isinstance(c, Options | NoneValue)
                                     for c in p.constraints):
        kw.update(type=_choices_reader(options), choices=options.options)
    else:
        kw["type"] = argparse_type(name)
        if p.metavar:
            kw["metavar"] = p.metavar
    text = overrides.pop("help", None) or p.help
    shown = kw["default"]  # the value used when the option is not given
    if shown not in (None, False) and "default" not in text:
        shown = ",".join(map(str, shown)) if isinstance(shown, tuple) else shown
        text += f" (default {shown})"
    kw["help"] = text.replace("%", "%%")
    kw.update(overrides)
    return parser.add_argument(*(flags or p.flags), **kw)
