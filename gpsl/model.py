"""The GPSL estimator: scikit-learn style ``fit`` / ``predict`` / ``predict_marginals``.

Parameters are set in ``__init__`` and never changed by ``fit``; learned state carries a
trailing underscore. Every parameter's constraint, default and help is written once, in
:mod:`gpsl.params` (``fit`` checks them there). Input is validated at the boundary; the
numerics live in the engines of :mod:`gpsl.engines` (Algorithm 1: the full GP, the scalable
mode, the sharded scalable mode) and :mod:`gpsl.predict` (Algorithm 2, Viterbi).
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import time
from collections.abc import Sequence

import numpy as np

from gpsl import auto, params
from gpsl.engines import make_engine
from gpsl.errors import InputError
from gpsl.features import FeatureExtractor, Template, default_template
from gpsl.kernels import make_kernel
from gpsl.likelihood import Problem, missing_weight
from gpsl.params import GPSL1, GPSL2, GPSL4, PRESETS, parse_offsets
from gpsl.persist import read_model, save_model
from gpsl.predict import MARGINALS, Scores, chain_decode, pl_decode, viterbi
from gpsl.rns_sweeps import single_threaded_blas

__all__ = ["GPSL", "GPSL1", "GPSL2", "GPSL4", "PRESETS", "parse_offsets"]

#: ``inference="auto"`` and ``lse_bound="auto"``: :mod:`gpsl.auto` (the rules and the
#: measurements behind them)


def _sentence_key(tokens) -> str:
    """A content key of one sentence's tokens (all columns), for matching across fits."""
    h = hashlib.sha1(usedforsecurity=False)
    for tok in tokens:
        h.update("\x1f".join(tok).encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
    return h.hexdigest()


def _shared_features(other, template, min_freq: int, keys: list[str]):
    """``(extractor, X)`` of the fitted GPSL ``other`` when its fit extracted the features
    that ``template`` and ``min_freq`` give on the sentences of content keys ``keys`` (the
    same sentences in the same order, the same template text and ``min_freq``: the same
    vocabulary and matrix), else None."""
    if other is None or not hasattr(other, "extractor_"):
        return None
    ext = other.extractor_
    if (type(ext.template) is not type(template) or ext.template.text != template.text
            or ext.min_freq != min_freq or list(other.sentence_keys_) != keys):
        return None
    return ext, other.X_train_


def _as_tokens(sentence) -> list[tuple[str, ...]]:
    toks = getattr(sentence, "tokens", sentence)
    return [(t,) if isinstance(t, str) else tuple(str(c) for c in t) for t in toks]


def _as_token(t) -> tuple[str, ...]:
    return (t,) if isinstance(t, str) else tuple(str(c) for c in t)


def _token_list(X) -> tuple[list, np.ndarray]:
    """The tokens of sentences ``X`` one after another, each as :func:`_as_tokens` gives it
    (or a list of the same strings), and the sentence lengths. Tokens that are tuples or lists
    of ``str`` (what the readers give) are taken as they are, without a step per token."""
    seqs = [getattr(s, "tokens", s) for s in X]
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    tokens = list(itertools.chain.from_iterable(seqs))
    if (set(map(type, tokens)) - {tuple, list}
            or set(map(type, itertools.chain.from_iterable(tokens))) - {str}):
        tokens = list(map(_as_token, tokens))
    return tokens, lengths


def _training_data(X, y, classes):
    """Sentences, flat labels (None = missing), the label set and the column count of a
    training set, each problem a one-line :class:`InputError`."""
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
    return sents, flat, classes, ncols.pop()


def _feature_set_default(template, name: str, value, otherwise):
    """``value`` unless it is ``None``; then the feature set's own default of parameter
    ``name`` (:attr:`gpsl.features.NerFeatures.DEFAULTS`), else ``otherwise``."""
    if value is not None:
        return value
    return getattr(template, "DEFAULTS", {}).get(name, otherwise)


def _feature_set_variance(template, kernel: str, variance):
    """``variance``, else with the linear kernel the feature set's own (a feature set's
    variance is per weight of its features), else ``None`` (the kernel's default)."""
    if kernel != "linear":
        return variance
    return _feature_set_default(template, "variance", variance, None)


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


class GPSL:
    """Gaussian process pseudo-likelihood sequence labeler (Srijith et al.).

    Parameters (each one's constraint, default and the measurements behind the default are
    in :data:`gpsl.params.PARAMS`, listed below):

{parameters}

    Calibration is not the estimator's: the wrapper :func:`gpsl.calibration.calibrate` (as
    scikit-learn's ``CalibratedClassifierCV``) fits the fold models, chooses the calibrator and
    keeps it in ``calibrator_`` (``None`` until then; a new fit clears it), saved with the
    model. The estimator only applies it in :meth:`predict_marginals`, through its
    ``method``, ``labels_follow`` and ``apply(scores, clamp)`` (:class:`gpsl.calibration.
    Calibrator`), and never imports :mod:`gpsl.calibration`.
    """

    def __init__(self, offsets=GPSL2, kernel="linear", template=None, min_freq=1,
                 max_iter=100, tol=1e-3, learn_hyper=False, variance=None, pair_variance=None,
                 decoder="auto",
                 rns_tol=1e-4, rns_max_iter=100, rns_schedule="adaptive", rns_damping=0.5,
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
        self.pair_variance = pair_variance
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

    def set_params(self, **values) -> GPSL:
        for k, v in values.items():
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

    def start_variance(self) -> float:
        """The kernel variance a fit starts from: ``variance``, else (linear kernel) the
        feature set's own (:attr:`gpsl.features.NerFeatures.DEFAULTS`), else the kernel's
        default (4 linear, 1 rbf)."""
        kernel = make_kernel(self.kernel)
        v = _feature_set_variance(self._template(1), kernel.name, self.variance)
        if v is None:
            v = kernel.default_variance
        return 1.0 if v is None else float(v)

    def _check_fitted(self):
        if not hasattr(self, "state_"):
            raise RuntimeError("this GPSL model is not fitted yet: call fit() first")

    def _features(self, X):
        """The feature matrix of sentences ``X`` and their lengths (:func:`_token_list`)."""
        tokens, lengths = _token_list(X)
        if set(map(len, tokens)) - {self.n_columns_}:  # one pass; then find it
            ends = np.cumsum(lengths)
            for t, tok in enumerate(tokens):
                if len(tok) != self.n_columns_:
                    raise InputError(f"sentence {int(np.searchsorted(ends, t, 'right')) + 1} "
                                     f"has a token with {len(tok)} columns; the model was "
                                     f"trained on {self.n_columns_}", source="input")
        return self.extractor_.transform_tokens(tokens, lengths), lengths

    # ------------------------------------------------------------------ fit

    def fit(self, X: Sequence, y: Sequence, callback=None, *, classes=None, evidence=None,
            on_sweep=None, features=None) -> GPSL:
        """Fit on sentences ``X`` (lists of token tuples) and labels ``y`` (None = missing).

        ``classes`` fixes the label set (default: the labels seen in ``y``). ``evidence``
        (optional) is one ``(len(sentence), n_classes)`` array of log-potentials per
        sentence, columns in the order of the sorted classes, used at tokens whose label is
        missing (:attr:`gpsl.inference.Problem.evidence`). ``on_sweep(engine)`` runs after
        every sweep (see :meth:`gpsl.inference.GPSLInference.fit`). ``features`` (optional):
        a fitted GPSL whose feature extractor and training matrix are taken over when it
        was trained on the same sentences (their content keys) with the same template and
        ``min_freq`` (the extraction would give the same vocabulary and matrix: a crowd
        fit's tagger after its joint fit, :mod:`gpsl.crowd.joint`); otherwise they are
        extracted as usual.
        """
        t0 = time.perf_counter()
        p = params.check_params(self.get_params())
        offsets = p["offsets"]
        kernel = make_kernel(p["kernel"])
        sents, flat, classes, n_columns = _training_data(X, y, classes)
        prev = self if (p["warm_start"] and hasattr(self, "state_")) else None

        template = self._template(n_columns)
        template.validate(n_columns)
        keys = [_sentence_key(x) for x in sents]
        shared = _shared_features(features, template, p["min_freq"], keys)
        if shared is None:
            extractor = FeatureExtractor(template, min_freq=p["min_freq"])
            Xf = extractor.fit_transform(sents)
        else:
            extractor, Xf = shared
        lengths = np.array([len(s) for s in sents], dtype=np.int64)
        p["pair_variance"] = _feature_set_default(template, "pair_variance",
                                                  p["pair_variance"], 1.0)
        p["variance"] = _feature_set_variance(template, kernel.name, p["variance"])

        if prev is not None and list(prev.classes_) != classes:
            # a label seen for the first time: keep the classes known before
            classes = sorted(set(classes) | set(prev.classes_))
        index = {c: i for i, c in enumerate(classes)}
        y_idx = np.array([-1 if v is None else index[v] for v in flat], dtype=np.int64)
        problem = Problem.build(lengths, y_idx, offsets, len(classes),
                                evidence=_evidence(evidence, lengths, len(classes)))
        if evidence is None:  # the crowd model's votes make every token observed evidence
            n_miss = int(problem.missing.sum())
            problem.set_missing_weight(
                missing_weight(p["missing_weight"], problem.n - n_miss, n_miss))
        engine = self._make_engine(self._inference_mode(int(y_idx.size)), kernel, p)

        for name in ("n_shards_", "shard_stats_"):  # set again by a sharded fit only
            self.__dict__.pop(name, None)
        with single_threaded_blas():
            trace = engine.fit(
                Xf, lengths, problem, classes=classes, keys=keys, prev=prev,
                extractor=extractor,
                # labels missing without evidence (the crowd model's votes are evidence,
                # see gpsl.engines.resolve_lse_bound)
                any_missing=bool(problem.missing.any()) and evidence is None,
                callback=callback if callback is not None else self.callback,
                on_sweep=on_sweep)
        self.engine_ = engine
        self.lse_bound_ = engine.lse_bound_
        self.__dict__.update(engine.fit_info())
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
        self.bound_trace_ = [float(v) for v in trace]
        self.n_iter_ = int(engine.n_iter)
        self.n_missing_ = int(np.sum(y_idx < 0))
        self.missing_weight_ = float(problem.missing_weight)
        self.fit_seconds_ = time.perf_counter() - t0
        self._predictor = None
        self.calibrator_ = None  # a new fit invalidates the previous calibration
        self.calibration_run_ = None
        return self

    # ------------------------------------------------------------------ the fitted engine

    def _make_engine(self, mode: str, kernel, settings: dict):
        """The engine of a fit in ``mode`` (:func:`gpsl.engines.make_engine`); a subclass may
        give another (``bench.warm_start`` forces what a warm start carries this way)."""
        return make_engine(mode, kernel, settings)

    @property
    def state_(self):
        """The variational state of the fitted engine (:mod:`gpsl.engines`)."""
        return self.engine_.state

    @property
    def inference_(self) -> str:
        """The fitted mode, ``"full"`` or ``"sparse"`` (what a saved model records)."""
        return self.engine_.name

    @property
    def inducing_idx_(self) -> np.ndarray:
        """The rbf kernel's inducing tokens of the scalable mode (else empty)."""
        return self.engine_.inducing_idx

    def _inference_mode(self, n_tokens: int) -> str:
        """The inference mode for ``n_tokens`` training tokens (``auto``:
        :func:`gpsl.auto.inference_mode`; with a cluster always the scalable mode)."""
        mode = auto.inference_mode(self.inference, n_tokens,
                                   kernel_scale_only=make_kernel(self.kernel).scale_only,
                                   inducing=self.inducing)
        if self.cluster is not None:
            if mode == "full" and str(self.inference).lower() == "full":
                raise InputError("inference='full' does not run on a cluster: cluster= "
                                 "shards the scalable mode (inference='sparse' or 'auto')",
                                 source="cluster")
            return "sparse"
        return mode

    # ------------------------------------------------------------------ predict

    @property
    def predictor_(self):
        """The predictive distribution of ``f^U`` (the engine's ``predictor``), built on first
        use and cached."""
        self._check_fitted()
        if self._predictor is None:
            self._predictor = self.engine_.predictor()
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
        m = params.check("marginals", self.marginals)
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
        the same method (its ``apply(scores, clamp)``).
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
        """Algorithm 2's inputs for sentences ``X`` (:class:`gpsl.predict.Scores`)."""
        need_var = bool(with_variance) or bool(self.rns_variance)
        mean, var, lengths = self._latent(X, with_variance=need_var)
        st = self.state_
        return Scores(mean, var if need_var else None, st.m_S, st.v_S,
                      np.asarray(lengths, dtype=np.int64), tuple(self.offsets_),
                      self.rns_settings(), bool(self.rns_variance))

    def latent_embedding(self, X):
        """Rows ``z_t`` and residuals ``e_t`` with ``z_a . z_b`` the covariance of ``f^U`` at
        tokens ``a`` and ``b`` (averaged over the labels) and ``e_t`` the variance no other
        token shares: what :func:`gpsl.active.diverse_batch` reads (the engine's
        ``embedding``: the mean-field posterior of the scalable mode, else the prior of the
        linear kernel on the same features). Returns ``(csr (n_tokens, D), (n_tokens,))``."""
        import scipy.sparse as sp

        self._check_fitted()
        Xf, _ = self._features(X)
        return self.engine_.embedding(sp.csr_matrix(Xf, dtype=np.float64))

    def gold_index(self, y) -> list[np.ndarray]:
        """Label indices of ``y`` per sentence (-1: missing or unknown label)."""
        index = {c: i for i, c in enumerate(self.classes_)}
        return [np.array([-1 if v is None or v not in index else index[v]
                          for v in getattr(lab, "labels", lab)], dtype=np.int64) for lab in y]

    def decoder_(self, decoder=None) -> str:
        """The decoder :meth:`predict` uses for ``decoder`` (default: the estimator's):
        ``"auto"`` is the feature set's (:attr:`gpsl.features.NerFeatures.DECODER`, when the
        dependency set is within -1..+1), else ``"rns"``."""
        d = params.check("decoder", self.decoder if decoder is None else decoder)
        if d != "auto":
            return d
        self._check_fitted()
        own = _feature_set_default(self.template_, "decoder", None, "rns")
        return own if own == "rns" or set(self.offsets_) <= {-1, 1} else "rns"

    def predict(self, X, decoder=None, y=None):
        """Labels per sentence: argmax of the RNS, the chain's Viterbi path, Viterbi (GPSL1)
        or exact PL decoding (:meth:`decoder_`)."""
        decoder = self.decoder_(decoder)
        if decoder == "rns":
            P = self.predict_marginals(X, y=y, calibrated=self._labels_follow_calibration())
            return [[self.classes_[i] for i in p.argmax(axis=1)] for p in P]
        if decoder == "chain":  # the local and the pair functions' means
            mean, _, lengths = self._latent(X, with_variance=False)
            idx = chain_decode(mean, self.state_.m_S, lengths, self.offsets_)
            return [[self.classes_[i] for i in part]
                    for part in np.split(idx, np.cumsum(lengths)[:-1])]
        b, lengths = self.local_scores(X)
        idx = {"viterbi": viterbi, "exact": pl_decode}[decoder](b, self._gS(), lengths,
                                                               self.offsets_)
        return [[self.classes_[i] for i in part]
                for part in np.split(idx, np.cumsum(lengths)[:-1])]

    def _labels_follow_calibration(self) -> bool:
        """Whether the calibrator's marginals give the labels (its ``labels_follow``:
        :attr:`gpsl.calibration.Calibrator.labels_follow`)."""
        cal = getattr(self, "calibrator_", None)
        return cal is not None and bool(cal.labels_follow)

    def score(self, X, y) -> float:
        """Token accuracy over the labeled tokens of ``y``."""
        from gpsl.metrics import token_accuracy

        return token_accuracy([list(getattr(lab, "labels", lab)) for lab in y], self.predict(X))

    # ------------------------------------------------------------------ persistence

    def persisted_config(self) -> dict:
        """The constructor parameters a model directory records (JSON values; the table's
        ``persisted`` ones: offsets and template are saved elsewhere in the directory, the
        run-time settings not at all)."""
        return {k: v for k, v in self.get_params().items() if params.PARAMS[k].persisted}

    def save(self, path) -> None:
        """Write the fitted model as a directory of JSON and NPZ (no pickle)."""
        self._check_fitted()
        save_model(self, path)

    @classmethod
    def load(cls, path) -> GPSL:
        """A model saved by :meth:`save` (format 1, before the sparse mode, loads as full)."""
        parts = read_model(path)
        meta, arrays = parts.meta, parts.arrays  # parts.engine: the mode's engine
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
        model.engine_ = parts.engine
        model.bound_trace_ = [float(v) for v in meta.get("bound_trace", [])]
        model.n_iter_ = int(meta.get("n_iter", 0))
        model.n_missing_ = int(np.sum(model.y_train_ < 0))
        model.fit_seconds_ = float(meta.get("fit_seconds", 0.0))
        model._predictor = None
        model.calibrator_ = parts.calibrator
        model.calibration_run_ = parts.calibration_run
        return model


GPSL.__doc__ = GPSL.__doc__.replace(
    "{parameters}", "\n".join("    " + line for line in params.describe().splitlines()))
