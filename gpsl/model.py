"""The GPSL estimator: scikit-learn style ``fit`` / ``predict`` / ``predict_marginals``.

Parameters are set in ``__init__`` and never changed by ``fit``; learned state
carries a trailing underscore. Input is validated at the boundary; the numerics
live in :mod:`gpsl.inference` (Algorithm 1) and :mod:`gpsl.predict`
(Algorithm 2, Viterbi).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import time
from collections.abc import Sequence

import numpy as np

from gpsl import auto
from gpsl.auto import AUTO_LSE_BOUND  # noqa: F401 - re-exported
from gpsl.calibration import ENSEMBLE
from gpsl.errors import InputError
from gpsl.features import FeatureExtractor, Template, default_template
from gpsl.inference import GPSLInference, VariationalState, initial_state
from gpsl.kernels import LinearKernel, make_kernel
from gpsl.likelihood import Problem, missing_weight
from gpsl.persist import read_model, save_model
from gpsl.predict import make_predictor, pl_decode, viterbi
from gpsl.sparse import SparseGPSLInference, SparseState
from gpsl.warm import carry_sparse_state, warm_state

GPSL1 = (-1,)
GPSL2 = (-1, 1)
GPSL4 = (-2, -1, 1, 2)
PRESETS = {"GPSL1": GPSL1, "GPSL2": GPSL2, "GPSL4": GPSL4}


def parse_offsets(offsets) -> tuple[int, ...]:
    """Validate a dependency set: a preset name, ``"-1,1"`` or a sequence of ints.

    Text must name at least one offset (``""`` and ``"-1,,1"`` are refused); a sequence
    may be empty (no dependencies).
    """
    if isinstance(offsets, str):
        key = offsets.strip().upper()
        if key in PRESETS:
            return PRESETS[key]
        if not key:
            raise InputError("give at least one dependency offset, e.g. -1,1", source="offsets")
        parts = offsets.replace(" ", "").split(",")
        try:
            if "" in parts:
                raise ValueError
            offsets = [int(p) for p in parts]
        except ValueError:
            raise InputError(f"bad offsets {offsets!r}: expected integers like -1,1",
                             source="offsets") from None
    try:
        out = tuple(int(o) for o in offsets)
    except (TypeError, ValueError):
        raise InputError(f"bad offsets {offsets!r}", source="offsets") from None
    if any(o == 0 for o in out):
        raise InputError("dependency offsets must be non-zero (0 is the token itself)",
                         source="offsets")
    if len(set(out)) != len(out):
        raise InputError(f"duplicate dependency offsets in {list(out)}", source="offsets")
    return out


#: prior variance of each feature weight of the linear kernel when ``variance=None``
DEFAULT_LINEAR_VARIANCE = LinearKernel.default_variance

#: ``inference="auto"`` and ``lse_bound="auto"``: :mod:`gpsl.auto` (the rules and their
#: measurements)
#: where a scalable fit with missing labels starts (``missing_start=``)
MISSING_STARTS = ("labels", "uniform", "supervised")

#: the per-token marginals :meth:`GPSL.predict_marginals` can give (``marginals=``)
MARGINALS = ("mean", "probit")


def _single_threaded_blas():
    """A context that limits BLAS to one thread (no-op without threadpoolctl)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is in requirements.txt
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _sentence_key(tokens) -> str:
    """A content key of one sentence's tokens (all columns), for matching across fits."""
    h = hashlib.sha1(usedforsecurity=False)
    for tok in tokens:
        h.update("\x1f".join(tok).encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
    return h.hexdigest()


def _as_tokens(sentence) -> list[tuple[str, ...]]:
    toks = getattr(sentence, "tokens", sentence)
    return [(t,) if isinstance(t, str) else tuple(str(c) for c in t) for t in toks]


class GPSL:
    """Gaussian process pseudo-likelihood sequence labeler (Srijith et al.).

    Parameters
    ----------
    offsets: the dependency set S as label offsets; ``(-1,)`` = GPSL1,
        ``(-1, 1)`` = GPSL2, ``(-2, -1, 1, 2)`` = GPSL4, or any other; a preset
        name or a string like ``"-1,1"`` is accepted.
    kernel: ``"linear"`` or ``"rbf"`` (squared exponential, eq. 1).
    template: CRF++ template text, a :class:`~gpsl.features.Template`, or
        ``None`` for :func:`~gpsl.features.default_template`.
    min_freq: keep features seen at least this often (``crf_learn -f``).
    max_iter, tol: coordinate-ascent sweeps and the relative-improvement stop (``tol``
        1e-3: on the paper's data sets the sweeps after that change the bound by less than
        0.1% a sweep and the test loss by about 0.1 point, at twice the time).
    learn_hyper: learn the per-label kernel hyper-parameters theta_j by variational EM
        (Algorithm 1's outer loop). Off by default: the Jensen bound of eq. (lb2) grows
        as the kernel variance shrinks, and maximising it lowered held-out accuracy on the
        paper's data sets (see README, "Hyper-parameters").
    variance: initial kernel variance (linear: prior variance of each feature weight;
        rbf: sigma_f^2); ``None`` = 4.0 for the linear kernel, 1.0 for rbf. The linear
        default was chosen on GPSL2, partitions 0-2 of the paper's data sets (variance 1
        -> 4, Algorithm 2 sequential -> Jacobi: basenp Hamming loss 8.36 -> 5.66, chunking
        12.53 -> 12.17, seg 16.76 -> 16.34, JapaneseNE 8.34 -> 8.43): the Jensen bound's
        ``v/2`` terms penalise prior variance, so a weak prior gives local functions that
        lean too much on the neighbours' labels.
    decoder: ``"rns"`` (Algorithm 2), ``"viterbi"`` (single-neighbour models) or
        ``"exact"`` (the exact maximiser of the product of the pseudo-likelihood factors,
        for dependencies within -1..+1; beyond the paper).
    rns_tol, rns_max_iter: stop rule of Algorithm 2.
    rns_variance: use ``m + v/2`` as the local score of the RNS, exactly as eq. (rns)
        (the log of ``E[exp f]``). Off by default: the predictive variance is smallest
        for the label the training data supports, so ``v/2`` systematically favours the
        wrong labels; on basenp (150/150, GPSL2) it raised the Hamming loss from 7.1%
        (means only) to 11.3%. ``False`` uses the predictive means ``m``.
    rns_schedule: ``"jacobi"`` (Algorithm 2 as written, every RNS^t from RNS^{t-1}; the
        default) or ``"sequential"`` (positions updated left to right with the newest
        values). On basenp (GPSL2, partitions 0-2) Jacobi had 7.0% Hamming loss against
        8.4% for sequential; on chunking they tie.
    rns_damping: ``eta`` of :func:`gpsl.predict.rns` (same fixed points as Algorithm 2;
        ``1`` = undamped). Undamped, the Jacobi iteration ends in two-cycles on 4-5% of
        basenp's test tokens and its answer depends on the parity of ``rns_max_iter``;
        ``0.5`` converges in 20-50 passes and lowered GPSL2's loss on basenp partitions
        0-2 from 5.66% to 5.18% (chunking unchanged).
    warm_start: start ``fit`` from the previous fit (active learning, added labels): its
        hyper-parameters always, its variational state of the kept sentences only when
        no training label is missing (:mod:`gpsl.warm` says why).
    lambda_floor: Khan parameters below this are set to 0 (see inference). A large floor
        (1e-3) shrinks the Cholesky factors but moves the fixed point: on chunking the
        damped steps towards it kept failing (0.6 s of every sweep wasted).
    n_jobs: threads for the per-label Cholesky factors of the covariance update
        (``None``: one more than the CPUs, at most 4). BLAS itself runs single-threaded
        during ``fit`` (threadpoolctl): two BLAS threads per factorisation made a chunking
        fit 2.4 times slower on 2 cores.
    inference: ``"full"`` (the full GP of Algorithm 1, ``O(n^3)`` in training tokens),
        ``"sparse"`` (the scalable weight-space mode of :mod:`gpsl.sparse`, about linear in
        ``n``) or ``"auto"`` (the scalable mode for the linear kernel, measured as accurate
        and far cheaper at every size; for the rbf kernel the full GP up to 2,000 tokens:
        :mod:`gpsl.auto`).
    covariance: the sparse mode's covariance family: ``"meanfield"``, ``"khan"`` or
        ``"auto"`` (mean-field for the linear kernel, Khan for the rbf kernel's Nystrom
        features).
    inducing: inducing tokens of the rbf kernel in the sparse mode.
    lse_bound: the upper bound on the expected log-partition (:mod:`gpsl.likelihood`):
        ``"jensen"`` (the paper's eq. lb2), ``"bohning"`` (variances enter additively and do
        not move the means) or ``"auto"`` (Jensen in the full mode; in the sparse mode
        Boehning with complete labels - with the mean-field covariance, whose variances
        over-state the uncertainty, Jensen's bound pulls the means and cost 0.4-0.8 points
        against Boehning's on chunking, basenp and JapaneseNE at 600-800 sentences; see
        README, "Scale" - with or without missing labels, :mod:`gpsl.auto`).
    marginals: the per-token marginals :meth:`predict_marginals` gives when no calibrator
        says otherwise: ``"mean"`` (Algorithm 2 on the predictive means, as the paper),
        ``"probit"`` (the uncertainty-aware RNS of :func:`gpsl.predict.rns`: the posterior
        variances of ``f^U`` and ``f^S`` flatten each score by the probit factor) or
        ``"auto"`` (the calibrator's choice after :meth:`calibrate`, else ``"mean"``).
    missing_start: where the scalable fit starts when labels are missing: ``"labels"`` (the
        default: the first sweep fits the labeled tokens, then every missing label gets the
        model's guess, :meth:`gpsl.sparse.SparseGPSLInference.sweep_labels_first`),
        ``"uniform"`` (zero weights, every missing label uniform, the mean step in three
        rounds with an ``r`` update between them: the scalable fit before ``"labels"``) or
        ``"supervised"`` (from the fit of the completely labeled sentences, see
        :meth:`_supervised_start`). Measured in ``docs/speed.md`` (``python -m bench.partial``
        and the partial-label table there): ``"labels"`` with Boehning's bound is as accurate
        or more on chunking, JapaneseNE and basenp up to half the tokens hidden at a fifth to
        a seventh of the time; on basenp with 85-95% hidden ``"uniform"`` with Jensen's bound
        (``lse_bound="jensen"``) was 0.7-2 points better. ``"supervised"`` was better than
        ``"uniform"`` on basenp and worse on chunking (700-sentence pools, the plain bound).
    missing_weight: ``lambda``, the weight of a missing label's own pseudo-likelihood
        factor in the M-steps (EM-lambda, :mod:`gpsl.likelihood`): ``"auto"`` (the default)
        = ``min(1, labeled / missing tokens)``, or a number in ``[0, 1]``; ``1`` is the
        plain variational bound. The missing labels stay marginalised (their ``r`` is the
        unweighted E-step and informs the neighbours); only their pull on the functions as
        self-made training targets is discounted. ``"auto"`` is ``1`` while at most half the
        labels are missing. The fitted value is ``missing_weight_``. Measured in
        ``bench.missing_weight`` (README, "Partial annotation").
    callback: called after every sweep with ``{"iteration", "bound", "seconds"}``.
    cluster: ``None`` (fit in this process) or a Dask cluster for the scalable mode's sums
        over sentences: a ``dask.distributed.Client`` or a scheduler address such as
        ``"tcp://host:8786"`` (:mod:`gpsl.distributed`; the linear kernel with the mean-field
        covariance). With a cluster, ``inference="auto"`` is ``"sparse"`` and
        ``inference="full"`` is refused. ``gpsl.distributed.InProcess(n)`` runs the same
        shards in this process. Not saved with the model.

    Calibration (:meth:`calibrate`, :mod:`gpsl.calibration`): a temperature or the structured
    temperature (optionally followed by a per-label vector scaling) fitted on held-out labeled
    tokens (or out-of-fold predictions) is stored with
    the model and applied by :meth:`predict_marginals`; ``calibrator_`` is ``None`` until
    then.
    """

    def __init__(self, offsets=GPSL2, kernel="linear", template=None, min_freq=1,
                 max_iter=100, tol=1e-3, learn_hyper=False, variance=None, decoder="rns",
                 rns_tol=1e-4, rns_max_iter=100, rns_schedule="jacobi", rns_damping=0.5,
                 rns_variance=False,
                 warm_start=False,
                 lambda_floor=1e-8, inference="auto", covariance="auto", inducing=500,
                 lse_bound="auto", marginals="auto", missing_start="labels",
                 missing_weight="auto", n_jobs=None,
                 callback=None, verbose=False, cluster=None):
        self.offsets = offsets
        self.kernel = kernel
        self.template = template
        self.min_freq = min_freq
        self.max_iter = max_iter
        self.tol = tol
        self.learn_hyper = learn_hyper
        self.variance = variance
        self.decoder = decoder
        self.rns_tol = rns_tol
        self.rns_max_iter = rns_max_iter
        self.rns_schedule = rns_schedule
        self.rns_damping = rns_damping
        self.rns_variance = rns_variance
        self.warm_start = warm_start
        self.lambda_floor = lambda_floor
        self.inference = inference
        self.covariance = covariance
        self.inducing = inducing
        self.lse_bound = lse_bound
        self.marginals = marginals
        self.missing_start = missing_start
        self.missing_weight = missing_weight
        self.n_jobs = n_jobs
        self.callback = callback
        self.verbose = verbose
        self.cluster = cluster

    # ------------------------------------------------------------------ helpers

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """The constructor's parameters, in order (the one list of them)."""
        return tuple(p for p in inspect.signature(cls.__init__).parameters if p != "self")

    def get_params(self, deep=True) -> dict:
        return {k: getattr(self, k) for k in self.param_names()}

    def set_params(self, **params) -> GPSL:
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"unknown parameter {k!r}")
            setattr(self, k, v)
        return self

    def _template(self, n_columns: int) -> Template:
        t = self.template
        if t is None:
            return default_template(n_columns)
        if isinstance(t, Template):
            return t
        return Template.parse(str(t))

    def _check_fitted(self):
        if not hasattr(self, "state_"):
            raise RuntimeError("this GPSL model is not fitted yet: call fit() first")

    def _features(self, X):
        sents = [_as_tokens(s) for s in X]
        for i, s in enumerate(sents):
            for tok in s:
                if len(tok) != self.n_columns_:
                    raise InputError(f"sentence {i + 1} has a token with {len(tok)} columns; "
                                     f"the model was trained on {self.n_columns_}",
                                     source="input")
        lengths = np.array([len(s) for s in sents], dtype=np.int64)
        return self.extractor_.transform(sents), lengths

    # ------------------------------------------------------------------ fit

    def fit(self, X: Sequence, y: Sequence, callback=None, *, classes=None, evidence=None,
            on_sweep=None) -> GPSL:
        """Fit on sentences ``X`` (lists of token tuples) and labels ``y`` (None = missing).

        ``classes`` fixes the label set (default: the labels seen in ``y``). ``evidence``
        (optional) is one ``(len(sentence), n_classes)`` array of log-potentials per
        sentence, columns in the order of the sorted classes, used at tokens whose label is
        missing (:attr:`gpsl.inference.Problem.evidence`). ``on_sweep(engine)`` runs after
        every sweep (see :meth:`gpsl.inference.GPSLInference.fit`).
        """
        t0 = time.perf_counter()
        offsets = parse_offsets(self.offsets)
        kernel = make_kernel(self.kernel)
        if self.decoder not in ("rns", "viterbi", "exact"):
            raise ValueError(f"decoder must be 'rns', 'viterbi' or 'exact', "
                             f"not {self.decoder!r}")
        sents = [_as_tokens(s) for s in X]
        labels = [list(getattr(s, "labels", s)) for s in y]
        if len(sents) != len(labels):
            raise InputError(f"{len(sents)} sentences but {len(labels)} label sequences",
                             source="input")
        if not sents or sum(len(s) for s in sents) == 0:
            raise InputError("no training tokens", source="input")
        ncols = {len(t) for s in sents for t in s}
        if len(ncols) != 1:
            raise InputError(f"tokens have different numbers of columns: {sorted(ncols)}",
                             source="input")
        for i, (s, lab) in enumerate(zip(sents, labels, strict=True)):
            if len(s) != len(lab):
                raise InputError(f"sentence {i + 1} has {len(s)} tokens but {len(lab)} labels",
                                 source="input")
        flat = [None if (v is None or v == "") else str(v) for lab in labels for v in lab]
        seen = {v for v in flat if v is not None}
        if classes is not None:
            classes = [str(c) for c in classes]
            if len(set(classes)) != len(classes):
                raise InputError("duplicate labels in classes", source="input")
            unknown = sorted(seen - set(classes))
            if unknown:
                raise InputError(f"labels not in classes: {unknown[:5]}", source="input")
            classes = sorted(classes)
        else:
            classes = sorted(seen)
        if not classes:
            raise InputError("no labeled token in the training data", source="input")
        prev = self if (self.warm_start and hasattr(self, "state_")) else None

        n_columns = ncols.pop()
        template = self._template(n_columns)
        template.validate(n_columns)
        extractor = FeatureExtractor(template, min_freq=self.min_freq)
        Xf = extractor.fit_transform(sents)
        lengths = np.array([len(s) for s in sents], dtype=np.int64)

        if prev is not None and list(prev.classes_) != classes:
            # a label seen for the first time: keep the classes known before
            classes = sorted(set(classes) | set(prev.classes_))
        index = {c: i for i, c in enumerate(classes)}
        y_idx = np.array([-1 if v is None else index[v] for v in flat], dtype=np.int64)
        problem = Problem.build(lengths, y_idx, offsets, len(classes),
                                evidence=self._evidence(evidence, lengths, len(classes)))
        if evidence is None:  # the crowd model's votes make every token observed evidence
            n_miss = int(problem.missing.sum())
            problem.set_missing_weight(
                missing_weight(self.missing_weight, problem.n - n_miss, n_miss))
        mode = self._inference_mode(int(y_idx.size))
        if mode == "sparse" and self.learn_hyper and not kernel.scale_only:
            raise ValueError("learn_hyper with the rbf kernel needs inference='full'")

        keys = [_sentence_key(x) for x in sents]
        # labels missing without evidence (the crowd model's votes are evidence, see _lse_bound)
        missing = bool(problem.missing.any()) and evidence is None
        cb = callback if callback is not None else self.callback
        for name in ("n_shards_", "shard_stats_"):  # set again by a sharded fit only
            self.__dict__.pop(name, None)
        with _single_threaded_blas():
            if mode == "full":
                base = kernel.base(Xf)
                base_diag = kernel.base_diag(Xf)
                state = self._warm_state(prev, problem, classes, keys, lengths, offsets,
                                         kernel)
                if state is None:
                    state = initial_state(problem, self._theta0(kernel, Xf))
                inf = GPSLInference(problem, kernel, base, base_diag, state,
                                    lambda_floor=self.lambda_floor, n_threads=self.n_jobs,
                                    lse_bound=self._lse_bound(mode, missing))
            else:
                theta0 = self._theta0(kernel, Xf)
                if (prev is not None and getattr(prev, "inference_", "full") == "sparse"
                        and prev.kernel_.name == kernel.name
                        and list(prev.classes_) == list(classes)):
                    theta0 = prev.state_.theta[0].copy()  # warm start: theta only
                family = self._family(kernel)
                if self.cluster is not None:
                    trace, inf = self._fit_sharded(kernel, family, Xf, lengths, problem,
                                                   theta0, mode, cb, on_sweep)
                else:
                    features = kernel.weight_space(Xf, np.tile(theta0, (len(classes), 1)),
                                                   inducing=self.inducing,
                                                   exact=family == "khan")
                    start = self._warm_sparse(prev, problem, classes, offsets, kernel, family,
                                              extractor, keys, lengths)
                    options = self._start_options()
                    if start is None and missing:
                        start = self._supervised_start(kernel, family, Xf, lengths, y_idx,
                                                       problem, offsets, theta0)
                    inf = SparseGPSLInference(problem, features, state=start, family=family,
                                              theta0=theta0, lambda_floor=self.lambda_floor,
                                              lse_bound=self._lse_bound(mode, missing),
                                              **options)
            if self.cluster is None:
                trace = inf.fit(max_iter=self.max_iter, tol=self.tol,
                                learn_hyper=self.learn_hyper, callback=cb, on_sweep=on_sweep)
        self.inference_ = mode
        self.lse_bound_ = self._lse_bound(mode, missing)
        feats = getattr(inf, "features", None)
        if not hasattr(feats, "times"):  # a sharded fit: the predictor builds its own map
            feats = None
        self._features_train = feats
        self.inducing_idx_ = np.asarray(getattr(feats, "Z_idx", np.empty(0)), dtype=np.int64)

        self.classes_ = classes
        self.offsets_ = offsets
        self.kernel_ = kernel
        self.template_ = template
        self.extractor_ = extractor
        self.n_columns_ = n_columns
        self.X_train_ = Xf
        self.lengths_ = lengths
        self.sentence_keys_ = keys
        self.y_train_ = y_idx
        self.state_ = inf.s
        self.bound_trace_ = [float(v) for v in trace]
        self.n_iter_ = int(inf.n_iter)
        self.n_missing_ = int(np.sum(y_idx < 0))
        self.missing_weight_ = float(problem.missing_weight)
        self.fit_seconds_ = time.perf_counter() - t0
        self._predictor = None
        self.calibrator_ = None  # a new fit invalidates the previous calibration
        return self

    def _supervised_start(self, kernel, family, Xf, lengths, y_idx, problem, offsets, theta0):
        """``missing_start="supervised"``: the scalable fit with missing labels starts from
        the fit of its completely labeled sentences (their weights, pair functions and
        variances) instead of zero weights, the start of EM that Nigam et al. (2000) use
        for unlabeled text. From zero weights the first update of ``r`` makes every
        missing label uniform, and with most tokens unlabeled those uniform targets pull
        the weights towards flat scores that coordinate ascent leaves only slowly. ``None``
        (the cold start) when there is no complete sentence or the option is off."""
        how = self._missing_start()
        if how != "supervised" or family != "meanfield":
            return None
        starts = np.r_[0, np.cumsum(lengths)[:-1]]
        full = [i for i, (a, L) in enumerate(zip(starts, lengths, strict=True))
                if L and (y_idx[a:a + L] >= 0).all()]
        if not full or len(full) == len(lengths):
            return None
        rows = np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in full])
        sub = Problem.build(lengths[full], y_idx[rows], offsets, problem.J)
        feats = kernel.weight_space(Xf[rows], np.tile(theta0, (problem.J, 1)),
                                    inducing=self.inducing, exact=False)
        pre = SparseGPSLInference(sub, feats, family=family, theta0=theta0,
                                  lambda_floor=self.lambda_floor,
                                  lse_bound=self._lse_bound("sparse", False))
        pre.fit(max_iter=self.max_iter, tol=self.tol, learn_hyper=False)
        st = pre.s
        return SparseState(theta=st.theta.copy(), W=st.W.copy(), cov=st.cov.copy(),
                           m_S=st.m_S.copy(), v_S=st.v_S.copy(), r=problem.initial_r(),
                           family=family)

    def _missing_start(self) -> str:
        how = str(self.missing_start).lower()
        if how not in MISSING_STARTS:
            raise ValueError(f"missing_start must be one of {MISSING_STARTS}, not "
                             f"{self.missing_start!r}")
        return how

    def _start_options(self) -> dict:
        """The scalable engine's options for ``missing_start`` (see the class docstring)."""
        if self._missing_start() == "labels":
            return {"labels_first": True, "mean_rounds": 1}
        return {"labels_first": False, "mean_rounds": 3}

    def _fit_sharded(self, kernel, family, Xf, lengths, problem, theta0, mode, cb,
                     on_sweep):
        """The scalable fit with its sums over sentence shards on ``cluster``
        (:mod:`gpsl.distributed`); returns the bound trace and the engine (its shards
        closed)."""
        if not kernel.scale_only:
            raise InputError("cluster= supports the linear kernel only (the rbf kernel's "
                             "Nystrom features are dense on the client)", source="cluster")
        if family != "meanfield":
            raise InputError("cluster= supports the mean-field covariance only, not "
                             f"covariance={self.covariance!r}", source="cluster")
        if on_sweep is not None:
            raise InputError("cluster= does not run the crowd model's joint fit (on_sweep)",
                             source="cluster")
        from gpsl import distributed

        missing = bool(problem.missing.any()) and problem.evidence is None
        local = isinstance(self.cluster, distributed.InProcess)
        client, owned = (None, False) if local else distributed.connect(self.cluster)
        shards = None
        try:
            n_shards = self.cluster.n_shards if local else distributed.n_workers(client)
            parts = distributed.make_parts(
                Xf, lengths, problem.y, problem.evidence, problem.offsets, problem.J,
                kernel.jitter(kernel.base_diag(Xf)), self._lse_bound(mode, missing),
                max(1, n_shards), problem.missing_weight)
            shards = (distributed.LocalShards(parts) if local
                      else distributed.DaskShards(client, parts))
            inf = distributed.ShardedSparseInference(
                shards, J=problem.J, offsets=problem.offsets, n=problem.n,
                any_missing=bool(problem.missing.any()), D=Xf.shape[1], theta0=theta0,
                lse_bound=self._lse_bound(mode, missing), lambda_floor=self.lambda_floor,
                missing_weight=problem.missing_weight, evidence=problem.evidence is not None,
                **self._start_options())
            trace = inf.fit(max_iter=self.max_iter, tol=self.tol,
                            learn_hyper=self.learn_hyper, callback=cb)
            inf.gather_r()
            self.n_shards_ = len(parts)
            self.shard_stats_ = {"shards": shards.stats(),
                                 "rounds": getattr(shards, "rounds", None),
                                 "wait_seconds": getattr(shards, "wall", None)}
        finally:
            if shards is not None:
                shards.close()
            if owned:
                client.close()
        inf.shards = None
        return trace, inf

    def _lse_bound(self, mode: str, any_missing: bool = False) -> str:
        """The bound for ``lse_bound``: :func:`gpsl.auto.lse_bound` (``"auto"``: the paper's
        Jensen bound in the full GP, Boehning's in the scalable mode, with or without missing
        labels; ``any_missing`` no longer changes the choice)."""
        return auto.lse_bound(self.lse_bound, mode)

    def _family(self, kernel) -> str:
        fam = str(self.covariance).lower()
        if fam == "auto":
            return "meanfield" if kernel.scale_only else "khan"
        if fam not in ("meanfield", "khan"):
            raise ValueError(f"covariance must be 'auto', 'meanfield' or 'khan', not "
                             f"{self.covariance!r}")
        return fam

    @staticmethod
    def _evidence(evidence, lengths, J):
        if evidence is None:
            return None
        parts = list(evidence)
        if len(parts) != len(lengths):
            raise InputError(f"evidence for {len(parts)} sentences, expected {len(lengths)}",
                             source="input")
        for i, (e, L) in enumerate(zip(parts, lengths)):
            if np.shape(e) != (int(L), J):
                raise InputError(f"sentence {i + 1}: evidence shape {np.shape(e)}, expected "
                                 f"{(int(L), J)}", source="input")
        return np.concatenate([np.asarray(e, dtype=float) for e in parts], axis=0)

    def _inference_mode(self, n_tokens: int) -> str:
        """The inference mode for ``n_tokens`` training tokens (``auto``:
        :func:`gpsl.auto.inference_mode`; with a cluster always the scalable mode)."""
        mode = auto.inference_mode(self.inference, n_tokens,
                                   kernel_scale_only=make_kernel(self.kernel).scale_only,
                                   inducing=self.inducing)
        if self.cluster is not None:
            if str(self.inference).lower() == "full":
                raise InputError("inference='full' does not run on a cluster: cluster= "
                                 "shards the scalable mode (inference='sparse' or 'auto')",
                                 source="cluster")
            return "sparse"
        return mode

    def _warm_state(self, prev, problem, classes, keys, lengths, offsets, kernel):
        """Start from the previous fit (``warm_start=True``), see :mod:`gpsl.warm`.

        The hyper-parameters are always reused. The means, Khan parameters and ``q(f_S)``
        of the kept sentences (matched by content, in any order) are reused only when no
        training label is missing: the bound then has one maximiser and the warm start only
        saves sweeps. With missing labels the previous means would start the unlabeled
        tokens at the previous model's labels and the fit would settle in another, less
        accurate local maximum (measured with ``python -m bench.warm_start``).
        """
        if prev is None or prev.kernel_.name != kernel.name or prev.offsets_ != offsets \
                or list(prev.classes_) != list(classes):
            return None
        return warm_state(prev.state_, getattr(prev, "sentence_keys_", None) or [],
                          prev.lengths_, problem, keys, lengths)

    def _warm_sparse(self, prev, problem, classes, offsets, kernel, family, extractor,
                     keys=None, lengths=None):
        """The scalable mode's warm start (``warm_start=True``, the previous fit also
        scalable, mean-field, same kernel, labels and offsets): :func:`gpsl.warm.
        carry_sparse_state`, with or without missing labels (measured in ``docs/speed.md``);
        ``None`` otherwise (a cold fit, ``theta`` carried as before). ``keys`` and ``lengths``
        (the sentences' content keys and lengths) are not used here: ``r`` is not carried."""
        if (prev is None or getattr(prev, "inference_", "full") != "sparse"
                or family != "meanfield" or getattr(prev.state_, "family", "") != "meanfield"
                or prev.kernel_.name != kernel.name or tuple(prev.offsets_) != tuple(offsets)
                or not set(prev.classes_) <= set(classes) or not kernel.scale_only):
            return None
        return carry_sparse_state(prev.state_, prev.extractor_.feature_names_, problem,
                                  extractor.feature_names_, len(extractor.feature_names_),
                                  prev_classes=prev.classes_, classes=classes)

    def _theta0(self, kernel, Xf) -> np.ndarray:
        """Initial hyper-parameters: the kernel's (:meth:`initial_params`), the variance from
        ``variance``."""
        theta = kernel.initial_params(Xf)
        variance = self.variance if self.variance is not None else kernel.default_variance
        if variance is not None:
            v = float(variance)
            if not v > 0:
                raise ValueError(f"variance must be positive, not {self.variance!r}")
            theta[0] = np.log(v)
        return theta

    # ------------------------------------------------------------------ predict

    @property
    def predictor_(self):
        """The predictive distribution of ``f^U`` (:func:`gpsl.predict.make_predictor`),
        built on first use and cached."""
        self._check_fitted()
        if self._predictor is None:
            self._predictor = make_predictor(self)
        return self._predictor

    def _latent(self, X, with_variance=True):
        self._check_fitted()
        Xf, lengths = self._features(X)
        mean, var = self.predictor_(Xf, with_variance=with_variance)
        return mean, var, lengths

    def predict_latent(self, X):
        """Predictive mean and variance of the local latent functions, per sentence."""
        mean, var, lengths = self._latent(X)
        cuts = np.cumsum(lengths)[:-1]
        return np.split(mean, cuts), np.split(var, cuts)

    def local_scores(self, X):
        """The local scores of Algorithm 2, ``m`` (or ``m + v/2`` with ``rns_variance``),
        as one ``(n_tokens, J)`` array, plus the sentence lengths. The predictive variance
        is computed only when ``rns_variance`` uses it."""
        mean, var, lengths = self._latent(X, with_variance=bool(self.rns_variance))
        return (mean + 0.5 * var if self.rns_variance else mean), lengths

    def _gS(self):
        return self.state_.m_S + 0.5 * self.state_.v_S

    def _clamp(self, y, lengths):
        if y is None:
            return None
        idx = self.gold_index(y)
        for a, L in zip(idx, lengths, strict=True):
            if a.size != L:
                raise InputError("partial labels do not match the sentence lengths",
                                 source="input")
        return np.concatenate(idx) if idx else np.zeros(0, dtype=np.int64)

    def rns_settings(self) -> dict:
        """Algorithm 2's settings (keyword arguments of :func:`gpsl.predict.rns`)."""
        return {"tol": self.rns_tol, "max_iter": self.rns_max_iter,
                "schedule": self.rns_schedule, "damping": self.rns_damping}

    def marginals_method(self) -> str:
        """The marginals :meth:`predict_marginals` gives by default: the calibrator's method
        when there is one and ``marginals="auto"``, else ``marginals`` (``"auto"`` = mean)."""
        m = str(self.marginals)
        if m not in ("auto", *MARGINALS):
            raise ValueError(f"marginals must be 'auto', 'mean' or 'probit', not "
                             f"{self.marginals!r}")
        if m == "auto":
            cal = getattr(self, "calibrator_", None)
            return cal.method if cal is not None else "mean"
        return m

    def predict_marginals(self, X, y=None, return_iterations=False, *, method=None,
                          calibrated=True):
        """Per-token RNS (Algorithm 2): a list of ``(len(sentence), n_classes)`` arrays.

        ``y`` (optional) holds known labels (None elsewhere); known tokens are clamped
        to their label so that partially labeled sentences inform their neighbours.
        ``method``: ``"mean"`` (Algorithm 2 on the predictive means, the paper's RNS) or
        ``"probit"`` (uncertainty-aware, :func:`gpsl.predict.rns`); default
        :meth:`marginals_method`. ``calibrated``: apply ``calibrator_`` when it was fitted on
        the same method (:mod:`gpsl.calibration`).
        """
        method = self.marginals_method() if method is None else method
        if method not in MARGINALS:
            raise ValueError(f"method must be 'mean' or 'probit', not {method!r}")
        cal = getattr(self, "calibrator_", None) if calibrated else None
        if cal is not None and cal.method != method:
            cal = None
        sc = self.calibration_scores(X, with_variance=method == "probit")
        clamp = self._clamp(y, sc.lengths)
        P = sc.marginals(method, clamp=clamp) if cal is None else cal.apply(sc, clamp)
        self.rns_iterations_ = sc.passes
        out = np.split(P, np.cumsum(sc.lengths)[:-1])
        return (out, self.rns_iterations_) if return_iterations else out

    def calibration_scores(self, X, with_variance=True):
        """Algorithm 2's inputs for sentences ``X`` (:class:`gpsl.calibration.Scores`)."""
        from gpsl.calibration import Scores

        need_var = bool(with_variance) or bool(self.rns_variance)
        mean, var, lengths = self._latent(X, with_variance=need_var)
        st = self.state_
        return Scores(mean, var if need_var else None, st.m_S, st.v_S,
                      np.asarray(lengths, dtype=np.int64), tuple(self.offsets_),
                      self.rns_settings(), bool(self.rns_variance))

    def latent_embedding(self, X):
        """Rows ``z_t`` and residuals ``e_t`` with ``z_a . z_b`` the covariance of ``f^U`` at
        tokens ``a`` and ``b`` (averaged over the labels) and ``e_t`` the variance no other
        token shares: what :func:`gpsl.active.diverse_batch` reads.

        Scalable mode, mean-field q over the linear kernel's feature weights
        (``f_tj = sigma_j x_t' w_j + eta_tj``, ``w_dj ~ N(mu_dj, 1/s_dj)``):
        ``Cov_q(f_aj, f_bj) = sigma_j^2 sum_d x_ad x_bd / s_dj``, so
        ``z_td = x_td (mean_j sigma_j^2 / s_dj)^1/2`` and ``e_t = mean_j sigma_j^2 eps``
        (the jitter part). Other modes (the full GP, the rbf kernel) give the prior of the
        linear kernel on the same features, ``z_t = x_t`` and ``e_t = eps``: the candidates'
        feature overlap. Returns ``(csr (n_tokens, D), (n_tokens,))``."""
        import scipy.sparse as sp

        self._check_fitted()
        Xf, _ = self._features(X)
        Xf = sp.csr_matrix(Xf, dtype=np.float64)
        st = self.state_
        feats = self._features_train
        if (getattr(self, "inference_", "full") == "sparse" and getattr(st, "family", None)
                == "meanfield" and hasattr(feats, "scales") and hasattr(st, "cov")):
            sc2 = feats.scales(st.theta) ** 2
            w = (sc2[None, :] / st.cov[: Xf.shape[1]]).mean(axis=1)
            e = float((sc2 * feats.jitter).mean())
            return (Xf @ sp.diags(np.sqrt(w))).tocsr(), np.full(Xf.shape[0], e)
        return Xf, np.full(Xf.shape[0], 1e-3)

    def gold_index(self, y) -> list[np.ndarray]:
        """Label indices of ``y`` per sentence (-1: missing or unknown label)."""
        index = {c: i for i, c in enumerate(self.classes_)}
        return [np.array([-1 if v is None or v not in index else index[v]
                          for v in getattr(lab, "labels", lab)], dtype=np.int64) for lab in y]

    def calibrate(self, X, y, *, folds=None, method="auto",
                  kinds=("temperature", "structured", "structured+vector"), seed=0,
                  source="", criterion="nll", ensemble=ENSEMBLE) -> GPSL:
        """Fit the post-hoc calibration (:class:`gpsl.calibration.Calibrator`) and keep it in
        ``calibrator_`` (saved with the model).

        ``folds=None``: ``(X, y)`` is held-out labeled data for *this* model. ``folds=K``:
        ``(X, y)`` are the training sentences; K models with this model's parameters are fitted
        on K-1 folds each and give Algorithm 2's inputs for the remaining fold (out-of-fold),
        as ``CalibratedClassifierCV(ensemble=False)``. Candidates: a temperature on each
        method's marginals (``method="auto"``: mean-only and uncertainty-aware) and the
        structured temperature with and without a vector scaling after it; the lowest
        cross-validated NLL on the calibration data wins
        (:meth:`gpsl.calibration.Calibrator.select`; ``kinds`` narrows the choice,
        ``criterion`` chooses by the cross-validated ``"brier"`` score or ``"ece"`` instead).
        ``ensemble``: how the candidates' ensemble, itself a candidate, weighs them
        (``"uniform"`` or ``"stack"``, :mod:`gpsl.calibration`); ``None``: no ensemble.
        """
        from gpsl.calibration import Calibrator, fold_indices

        self._check_fitted()
        methods = list(MARGINALS) if method == "auto" else [method]
        if any(m not in MARGINALS for m in methods):
            raise ValueError(f"method must be 'auto', 'mean' or 'probit', not {method!r}")
        X = list(X)
        labels = [list(getattr(lab, "labels", lab)) for lab in y]
        if folds is None:
            scores = [self.calibration_scores(X)]
            gold = [np.concatenate(self.gold_index(labels))] if labels else []
            source = source or "held-out"
        else:
            params = self.get_params()
            params.update(warm_start=False, callback=None, verbose=False)
            scores, gold = [], []
            for held in fold_indices(len(X), int(folds), seed):
                held_set = set(held.tolist())
                tr = [i for i in range(len(X)) if i not in held_set]
                fm = type(self)(**params).fit([X[i] for i in tr], [labels[i] for i in tr],
                                              classes=self.classes_)
                scores.append(fm.calibration_scores([X[i] for i in held]))
                gold.append(np.concatenate(self.gold_index([labels[i] for i in held])))
            source = source or f"{int(folds)}-fold"
        self.calibrator_ = Calibrator.select(scores, gold, methods=methods, kinds=kinds,
                                             source=source, criterion=criterion,
                                             ensemble=ensemble)
        return self

    def predict(self, X, decoder=None, y=None):
        """Labels per sentence: argmax of the RNS, Viterbi (GPSL1) or exact PL decoding."""
        decoder = self.decoder if decoder is None else decoder
        if decoder == "rns":
            P = self.predict_marginals(X, y=y, calibrated=self._labels_follow_calibration())
            return [[self.classes_[i] for i in p.argmax(axis=1)] for p in P]
        decoders = {"viterbi": viterbi, "exact": pl_decode}
        if decoder in decoders:
            b, lengths = self.local_scores(X)
            idx = decoders[decoder](b, self._gS(), lengths, self.offsets_)
            return [[self.classes_[i] for i in part]
                    for part in np.split(idx, np.cumsum(lengths)[:-1])]
        raise ValueError(f"decoder must be 'rns', 'viterbi' or 'exact', not {decoder!r}")

    def _labels_follow_calibration(self) -> bool:
        """A temperature never moves the argmax (so it is skipped); the structured temperature
        and vector scaling may, and their marginals then give the labels."""
        cal = getattr(self, "calibrator_", None)
        return cal is not None and cal.kind != "temperature"

    def score(self, X, y) -> float:
        """Token accuracy over the labeled tokens of ``y``."""
        from gpsl.metrics import token_accuracy

        return token_accuracy([list(getattr(lab, "labels", lab)) for lab in y], self.predict(X))

    # ------------------------------------------------------------------ persistence

    #: constructor parameters that are not part of a saved model (run-time settings, or saved
    #: elsewhere in the model directory: offsets, template)
    _NOT_PERSISTED = ("offsets", "template", "warm_start", "n_jobs", "callback", "verbose",
                      "cluster")

    def persisted_config(self) -> dict:
        """The constructor parameters a model directory records (JSON values)."""
        params = self.get_params()
        return {k: params[k] for k in self.param_names() if k not in self._NOT_PERSISTED}

    def save(self, path) -> None:
        """Write the fitted model as a directory of JSON and NPZ (no pickle)."""
        self._check_fitted()
        save_model(self, path)

    @classmethod
    def load(cls, path) -> GPSL:
        """A model saved by :meth:`save` (format 1, before the sparse mode, loads as full)."""
        parts = read_model(path)
        meta, arrays = parts.meta, parts.arrays
        known = set(cls.param_names())
        model = cls(offsets=tuple(meta["offsets"]), template=parts.extractor.template,
                    **{k: v for k, v in parts.config.items() if k in known and k != "kernel"})
        model.kernel = meta["kernel"]
        model.classes_ = list(meta["classes"])
        model.offsets_ = tuple(meta["offsets"])
        model.kernel_ = parts.kernel
        model.template_ = parts.extractor.template
        model.extractor_ = parts.extractor
        model.n_columns_ = int(meta["n_columns"])
        model.X_train_ = parts.X
        model.lengths_ = arrays["lengths"].astype(np.int64)
        model.y_train_ = arrays["y_train"].astype(np.int64)
        model.inference_ = parts.inference
        a = arrays
        if parts.inference == "sparse":
            model.state_ = SparseState(theta=a["theta"], W=a["W"], cov=a["cov"], m_S=a["m_S"],
                                       v_S=a["v_S"], r=a["r"], family=parts.family)
            model.inducing_idx_ = arrays["inducing"].astype(np.int64)
        else:
            model.state_ = VariationalState(theta=a["theta"], alpha=a["alpha"], lam=a["lam"],
                                            m_S=a["m_S"], v_S=a["v_S"], r=a["r"])
            model.inducing_idx_ = np.empty(0, dtype=np.int64)
        model._features_train = None
        model.bound_trace_ = [float(v) for v in meta.get("bound_trace", [])]
        model.n_iter_ = int(meta.get("n_iter", 0))
        model.n_missing_ = int(np.sum(model.y_train_ < 0))
        model.fit_seconds_ = float(meta.get("fit_seconds", 0.0))
        model._predictor = None
        model.calibrator_ = parts.calibrator
        return model

    @property
    def state(self):
        self._check_fitted()
        return self.state_
