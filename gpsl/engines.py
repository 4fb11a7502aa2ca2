r"""The inference engines behind one protocol: the full GP, the scalable (sparse) mode and the
scalable mode sharded over a Dask cluster, as polymorphic objects (as the kernels are), so no
caller branches on the mode's name.

Each engine maximises the same variational bound (paper eq. lb2: the pseudo-likelihood part
of :class:`gpsl.likelihood.PseudoLikelihoodBound` plus its own prior part,
``- KL(q(f^U) || p(f^U))``) with Algorithm 1, and offers

* ``fit(X, lengths, problem, ...)`` -> the bound trace; afterwards ``state`` (the variational
  parameters), ``n_iter`` and ``lse_bound_`` (the bound on the expected log-partition used);
* ``predictor()`` -> the predictive distribution of ``f^U`` at new tokens, a callable
  ``(X_test, with_variance) -> (mean, variance)`` (:mod:`gpsl.predict`);
* ``to_arrays()`` / ``from_arrays(arrays, kernel=, X=, family=)`` -> the state as named
  arrays and back (:mod:`gpsl.persist` writes them to ``arrays.npz``; ``name``, ``family``,
  ``FLOAT_ARRAYS``/``INT_ARRAYS``, :meth:`array_shapes` and :meth:`check_values` say what a
  saved model of the mode holds);
* ``embedding(X)`` -> rows whose inner products are the posterior covariance of ``f^U``
  (:meth:`gpsl.model.GPSL.latent_embedding`);
* ``fit_info()`` -> extra fitted attributes of the estimator (a sharded fit's shards).

==================  =========================================  ================================
engine              prior part and its updates                  state
==================  =========================================  ================================
:class:`FullEngine` :class:`gpsl.inference.GPSLInference`:      ``VariationalState`` (``alpha``,
                    ``K_j`` (n x n), Khan ``lambda``, O(n^3)    ``lam``): ``m = K alpha``
:class:`SparseEngine` :class:`gpsl.sparse.SparseGPSLInference`:  ``SparseState`` (``W``, ``cov``)
                    ``phi_j(x)`` of ``kernel.weight_space``     ``m = Phi W``
:class:`ShardedEngine` :class:`gpsl.distributed.               the sparse state (saved as
                    ShardedSparseInference`: the token sums     ``"sparse"``)
                    per sentence shard on Dask workers
==================  =========================================  ================================

:func:`make_engine` picks the class for a fit (the mode comes from
:meth:`gpsl.model.GPSL._inference_mode`); :data:`ENGINES` names the class of a saved mode.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from gpsl.errors import InputError
from gpsl.inference import GPSLInference, VariationalState, initial_state
from gpsl.likelihood import Problem
from gpsl.predict import LatentPredictor, SparsePredictor
from gpsl.sparse import SparseGPSLInference, SparseState
from gpsl.warm import carry_sparse_state, warm_state

__all__ = ["Engine", "FullEngine", "SparseEngine", "ShardedEngine", "ENGINES", "make_engine",
           "initial_theta", "resolve_lse_bound"]

#: the float and integer arrays every mode saves (the state's shared part)
_COMMON_FLOAT = ("theta", "m_S", "v_S", "r")


def initial_theta(kernel, X, variance) -> np.ndarray:
    """Initial hyper-parameters: the kernel's (``initial_params``), the first one (the log
    variance) from ``variance`` when given, else the kernel's ``default_variance``."""
    theta = kernel.initial_params(X)
    v = variance if variance is not None else kernel.default_variance
    if v is not None:
        theta[0] = np.log(float(v))
    return theta


def resolve_lse_bound(setting: str, auto: str, any_missing: bool) -> str:
    """The bound on the expected log-partition for ``lse_bound=setting``: with ``"auto"``,
    the engine's ``auto`` (Jensen for the full GP, Boehning for the scalable mode), with or
    without missing labels (:func:`gpsl.auto.lse_bound`, where the measurements are;
    ``any_missing`` no longer changes the choice: missing labels used to switch the scalable
    mode to Jensen's bound, which was why a fit with them took 8 sweeps, ``docs/speed.md``)."""
    if setting == "auto":
        return auto
    return setting


class Engine:
    """The protocol (see the module docstring). ``settings`` are the estimator's parameters,
    checked (:func:`gpsl.params.check_params`); ``kernel`` a kernel object."""

    #: the mode a saved model records
    name = ""
    #: ``lse_bound="auto"`` with complete labels
    auto_lse_bound = "jensen"
    #: the covariance families a saved model of this mode may record (``()``: none)
    FAMILIES: tuple[str, ...] = ()
    FLOAT_ARRAYS: tuple[str, ...] = _COMMON_FLOAT
    INT_ARRAYS: tuple[str, ...] = ()

    def __init__(self, kernel, settings: dict):
        self.kernel = kernel
        self.settings = settings
        self.X = None
        self.state = None
        self.n_iter = 0
        self.lse_bound_ = None

    @property
    def family(self) -> str | None:
        """The covariance family a saved model records (``None``: the mode has one)."""
        return None

    def pair_variance(self) -> float:
        """The pair functions' prior variance of the fit (``settings["pair_variance"]``, which
        :meth:`gpsl.model.GPSL.fit` resolves; ``None`` = the paper's 1)."""
        v = self.settings.get("pair_variance")
        return 1.0 if v is None else float(v)

    def _run(self, inf, callback, on_sweep) -> list[float]:
        s = self.settings
        inf.pair_variance = self.pair_variance()
        trace = inf.fit(max_iter=s["max_iter"], tol=s["tol"], learn_hyper=s["learn_hyper"],
                        callback=callback, on_sweep=on_sweep)
        self.state, self.n_iter = inf.s, int(inf.n_iter)
        return trace

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self.state, k) for k in self.FLOAT_ARRAYS}

    def embedding(self, X):
        """``(Z, e)``: without a posterior covariance in weight space, the prior of the linear
        kernel on the same features, ``z_t = x_t`` and ``e_t = eps`` (the candidates'
        feature overlap)."""
        return X, np.full(X.shape[0], 1e-3)

    def fit_info(self) -> dict:
        return {}

    @classmethod
    def check_values(cls, arrays: dict, family: str | None) -> None:
        """Refuse (``ValueError``) values a state of this mode cannot hold."""


class FullEngine(Engine):
    """The full GP of Algorithm 1 (:mod:`gpsl.inference`): ``O(n^3)`` in training tokens."""

    name = "full"
    auto_lse_bound = "jensen"
    FLOAT_ARRAYS = _COMMON_FLOAT + ("alpha", "lam")

    def fit(self, X, lengths, problem: Problem, *, classes, keys, any_missing: bool,
            prev=None, callback=None, on_sweep=None, extractor=None) -> list[float]:
        s, kernel = self.settings, self.kernel
        self.X = X
        self.lse_bound_ = resolve_lse_bound(s["lse_bound"], self.auto_lse_bound, any_missing)
        base = kernel.base(X)
        base_diag = kernel.base_diag(X)
        state = self._warm(prev, problem, classes, keys, lengths)
        if state is None:
            state = initial_state(problem, initial_theta(kernel, X, s["variance"]))
        inf = GPSLInference(problem, kernel, base, base_diag, state,
                            lambda_floor=s["lambda_floor"], n_threads=s["n_jobs"],
                            lse_bound=self.lse_bound_)
        return self._run(inf, callback, on_sweep)

    def _warm(self, prev, problem, classes, keys, lengths):
        """Start from the previous fit (``warm_start=True``), see :mod:`gpsl.warm`.

        The hyper-parameters are always reused. The means, Khan parameters and ``q(f_S)``
        of the kept sentences (matched by content, in any order) are reused only when no
        training label is missing: the bound then has one maximiser and the warm start only
        saves sweeps. With missing labels the previous means would start the unlabeled
        tokens at the previous model's labels and the fit would settle in another, less
        accurate local maximum (measured with ``python -m bench.warm_start``). A previous
        fit of another mode, kernel, dependency set or label set starts nothing.
        """
        if (prev is None or not isinstance(prev.engine_, FullEngine)
                or prev.kernel_.name != self.kernel.name
                or tuple(prev.offsets_) != tuple(problem.offsets)
                or list(prev.classes_) != list(classes)):
            return None
        return warm_state(prev.state_, getattr(prev, "sentence_keys_", None) or [],
                          prev.lengths_, problem, keys, lengths)

    def predictor(self):
        st = self.state
        return LatentPredictor(self.kernel, self.X, st.theta, st.alpha, st.lam)

    @classmethod
    def from_arrays(cls, arrays: dict, *, kernel, X, family=None, settings=None) -> FullEngine:
        eng = cls(kernel, settings or {})
        eng.X = X
        eng.state = VariationalState(theta=arrays["theta"], alpha=arrays["alpha"],
                                     lam=arrays["lam"], m_S=arrays["m_S"], v_S=arrays["v_S"],
                                     r=arrays["r"])
        return eng

    @classmethod
    def array_shapes(cls, arrays: dict, *, n: int, J: int, kernel, n_features: int,
                     family) -> dict:
        return {"alpha": (J, n), "lam": (J, n)}

    @property
    def inducing_idx(self) -> np.ndarray:
        return np.empty(0, dtype=np.int64)


class SparseEngine(Engine):
    """The scalable mode (:mod:`gpsl.sparse`): the same bound in weight space, about linear
    in ``n``; the covariance family from ``covariance`` (``"auto"``: mean-field for the linear
    kernel, Khan for the rbf kernel's Nystrom features)."""

    name = "sparse"
    auto_lse_bound = "bohning"
    FAMILIES = ("meanfield", "khan")
    FLOAT_ARRAYS = _COMMON_FLOAT + ("W", "cov")
    INT_ARRAYS = ("inducing",)

    def __init__(self, kernel, settings: dict):
        super().__init__(kernel, settings)
        if settings.get("learn_hyper") and not kernel.scale_only:
            raise ValueError("learn_hyper with the rbf kernel needs inference='full'")
        #: the training features' weight-space map of a local fit (the predictor's; a saved
        #: or sharded model's predictor builds its own)
        self.features = None
        self._inducing = np.empty(0, dtype=np.int64)
        self._family = None

    @property
    def family(self) -> str:
        if self._family is not None:
            return self._family
        fam = self.settings["covariance"]
        if fam == "auto":
            return "meanfield" if self.kernel.scale_only else "khan"
        return fam

    @property
    def inducing_idx(self) -> np.ndarray:
        return self._inducing

    def _theta0(self, X, prev, classes) -> np.ndarray:
        """The kernel's start, or a previous scalable fit's ``theta`` (a warm start that
        cannot carry the weights: theta only, see :mod:`gpsl.warm`)."""
        theta0 = initial_theta(self.kernel, X, self.settings["variance"])
        if (prev is not None and isinstance(prev.engine_, SparseEngine)
                and prev.kernel_.name == self.kernel.name
                and list(prev.classes_) == list(classes)):
            theta0 = prev.state_.theta[0].copy()
        return theta0

    def start_options(self) -> dict:
        """The engine options for ``missing_start`` (:data:`gpsl.params`): ``"labels"`` (the
        default) starts a fit with missing labels on the labeled tokens
        (:meth:`gpsl.sparse.SparseGPSLInference.sweep_labels_first`) and takes one mean round
        a sweep; ``"uniform"`` and ``"supervised"`` keep the earlier fit (every missing label
        uniform at the start, three mean rounds with an ``r`` update between them). The
        labeled-tokens start needs Boehning's bound: under Jensen's the weight-0 sweep leaves
        the variances of the features seen only at unlabeled tokens at their prior and the fit
        does not recover (chunking 800, 50% / 90% hidden: 18.1% / 22.2% test loss against
        8.1% / 10.9% from the uniform start, ``python -m bench.partial --diagnose``), so with
        ``lse_bound="jensen"`` the start is the uniform one."""
        if self.settings.get("missing_start", "labels") == "labels" and self.lse_bound_ != "jensen":
            # evidence (the crowd model's votes) informs r from the start: no labeled-tokens
            # sweep then (SparseGPSLInference._labels_first_applies), one mean round as a
            # complete-label fit (a perfectly reliable annotator gives today's fit exactly)
            return {"labels_first": True, "mean_rounds": 1}
        return {"labels_first": False, "mean_rounds": 3}

    def warm(self, prev, problem: Problem, classes, extractor, keys=None, lengths=None):
        """The warm start (``warm_start=True``) of a mean-field fit of the linear kernel after
        another such fit with the same offsets and no label lost:
        :func:`gpsl.warm.carry_sparse_state` (weights, precisions, ``q(f^S)`` and ``theta``
        by feature and label name, never ``r``), with or without missing labels; ``None``
        otherwise. ``keys`` and ``lengths`` (the sentences' content keys and lengths) are not
        read here (``bench.warm_start`` overrides this to carry ``r`` as well)."""
        if (prev is None or extractor is None or not isinstance(prev.engine_, SparseEngine)
                or self.family != "meanfield" or prev.state_.family != "meanfield"
                or prev.kernel_.name != self.kernel.name or not self.kernel.scale_only
                or tuple(prev.offsets_) != tuple(problem.offsets)
                or not set(prev.classes_) <= set(classes)):
            return None
        return carry_sparse_state(prev.state_, prev.extractor_.feature_names_, problem,
                                  extractor.feature_names_, len(extractor.feature_names_),
                                  prev_classes=prev.classes_, classes=classes)

    def fit(self, X, lengths, problem: Problem, *, classes, keys, any_missing: bool,
            prev=None, callback=None, on_sweep=None, extractor=None) -> list[float]:
        s, kernel, family = self.settings, self.kernel, self.family
        self.X = X
        self.lse_bound_ = resolve_lse_bound(s["lse_bound"], self.auto_lse_bound, any_missing)
        theta0 = self._theta0(X, prev, classes)
        features = kernel.weight_space(X, np.tile(theta0, (len(classes), 1)),
                                       inducing=s["inducing"], exact=family == "khan")
        start = self.warm(prev, problem, classes, extractor, keys, lengths)
        warm = start is not None  # preconditioned mean steps (SparseGPSLInference)
        if start is None and any_missing:
            start = self.supervised_start(X, lengths, problem, theta0)
        inf = SparseGPSLInference(problem, features, state=start, family=family,
                                  theta0=theta0, lambda_floor=s["lambda_floor"],
                                  lse_bound=self.lse_bound_, precondition=warm,
                                  **self.start_options())
        trace = self._run(inf, callback, on_sweep)
        self.features = features
        self._inducing = np.asarray(getattr(features, "Z_idx", np.empty(0)), dtype=np.int64)
        return trace

    def supervised_start(self, X, lengths, problem: Problem, theta0) -> SparseState | None:
        """``missing_start="supervised"``: the scalable fit with missing labels starts from
        the fit of its completely labeled sentences (their weights, pair functions and
        variances) instead of zero weights, the start of EM that Nigam et al. (2000) use
        for unlabeled text. From zero weights the first update of ``r`` makes every
        missing label uniform, and with most tokens unlabeled those uniform targets pull
        the weights towards flat scores that coordinate ascent leaves only slowly. ``None``
        (the cold start) when there is no complete sentence or the option is off."""
        s, family = self.settings, self.family
        if s["missing_start"] != "supervised" or family != "meanfield":
            return None
        y_idx = problem.y
        starts = np.r_[0, np.cumsum(lengths)[:-1]]
        full = [i for i, (a, L) in enumerate(zip(starts, lengths, strict=True))
                if L and (y_idx[a:a + L] >= 0).all()]
        if not full or len(full) == len(lengths):
            return None
        rows = np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in full])
        sub = Problem.build(lengths[full], y_idx[rows], problem.offsets, problem.J)
        feats = self.kernel.weight_space(X[rows], np.tile(theta0, (problem.J, 1)),
                                         inducing=s["inducing"], exact=False)
        pre = SparseGPSLInference(sub, feats, family=family, theta0=theta0,
                                  lambda_floor=s["lambda_floor"],
                                  lse_bound=resolve_lse_bound(s["lse_bound"],
                                                              self.auto_lse_bound, False))
        pre.pair_variance = self.pair_variance()
        pre.fit(max_iter=s["max_iter"], tol=s["tol"], learn_hyper=False)
        st = pre.s
        return SparseState(theta=st.theta.copy(), W=st.W.copy(), cov=st.cov.copy(),
                           m_S=st.m_S.copy(), v_S=st.v_S.copy(), r=problem.initial_r(),
                           family=family)

    def predictor(self):
        st, feats = self.state, self.features
        if feats is None:
            Z = self._inducing
            feats = self.kernel.weight_space(self.X, st.theta, Z_idx=Z if Z.size else None,
                                             exact=st.family == "khan")
        return SparsePredictor(feats, st)

    def embedding(self, X):
        r"""Mean-field ``q`` over the linear kernel's feature weights
        (``f_tj = sigma_j x_t' w_j + eta_tj``, ``w_dj ~ N(mu_dj, 1/s_dj)``):
        ``Cov_q(f_aj, f_bj) = sigma_j^2 sum_d x_ad x_bd / s_dj``, so
        ``z_td = x_td (mean_j sigma_j^2 / s_dj)^1/2`` and ``e_t = mean_j sigma_j^2 eps`` (the
        jitter part). Other families and maps (Khan, Nystrom), and a model without the
        training features' map (loaded or sharded), give the prior form of
        :meth:`Engine.embedding`."""
        st, feats = self.state, self.features
        if st.family != "meanfield" or not hasattr(feats, "scales"):
            return super().embedding(X)
        sc2 = feats.scales(st.theta) ** 2
        w = (sc2[None, :] / st.cov[: X.shape[1]]).mean(axis=1)
        e = float((sc2 * feats.jitter).mean())
        return (X @ sp.diags(np.sqrt(w))).tocsr(), np.full(X.shape[0], e)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {**super().to_arrays(), "inducing": np.asarray(self._inducing, dtype=np.int64)}

    @classmethod
    def from_arrays(cls, arrays: dict, *, kernel, X, family=None,
                    settings=None) -> SparseEngine:
        eng = cls(kernel, settings or {})
        eng.X = X
        eng._family = family
        eng.state = SparseState(theta=arrays["theta"], W=arrays["W"], cov=arrays["cov"],
                                m_S=arrays["m_S"], v_S=arrays["v_S"], r=arrays["r"],
                                family=family)
        eng._inducing = arrays["inducing"].astype(np.int64)
        return eng

    @classmethod
    def array_shapes(cls, arrays: dict, *, n: int, J: int, kernel, n_features: int,
                     family) -> dict:
        Z = arrays["inducing"]
        if Z.ndim != 1 or (Z.size and (Z.min() < 0 or Z.max() >= n)):
            raise ValueError("array inducing holds rows outside the training tokens")
        if not kernel.scale_only:
            D = int(Z.size)  # Nystrom features
        else:  # linear: the jitter features are weights only in the Khan family
            D = n_features + (n if family == "khan" else 0)
        return {"W": (D, J), "cov": (D, J) if family == "meanfield" else (J, n)}

    @classmethod
    def check_values(cls, arrays: dict, family: str | None) -> None:
        if family == "meanfield" and np.any(arrays["cov"] <= 0):
            raise ValueError("array cov holds precisions that are not positive")


class ShardedEngine(SparseEngine):
    """The scalable fit with its sums over sentence shards on ``cluster``
    (:mod:`gpsl.distributed`: the linear kernel, the mean-field family); the fitted state is
    the sparse mode's (saved, loaded and predicted as such)."""

    def fit(self, X, lengths, problem: Problem, *, classes, keys, any_missing: bool,
            prev=None, callback=None, on_sweep=None, extractor=None) -> list[float]:
        s, kernel = self.settings, self.kernel
        if not kernel.scale_only:
            raise InputError("cluster= supports the linear kernel only (the rbf kernel's "
                             "Nystrom features are dense on the client)", source="cluster")
        if self.family != "meanfield":
            raise InputError("cluster= supports the mean-field covariance only, not "
                             f"covariance={s['covariance']!r}", source="cluster")
        if on_sweep is not None:
            raise InputError("cluster= does not run the crowd model's joint fit (on_sweep)",
                             source="cluster")
        from gpsl import distributed

        self.X = X
        self.lse_bound_ = resolve_lse_bound(s["lse_bound"], self.auto_lse_bound, any_missing)
        theta0 = self._theta0(X, prev, classes)
        cluster = s["cluster"]
        local = isinstance(cluster, distributed.InProcess)
        client, owned = (None, False) if local else distributed.connect(cluster)
        shards = None
        try:
            n_shards = cluster.n_shards if local else distributed.n_workers(client)
            parts = distributed.make_parts(
                X, lengths, problem.y, problem.evidence, problem.offsets, problem.J,
                kernel.jitter(kernel.base_diag(X)), self.lse_bound_, max(1, n_shards),
                problem.missing_weight)
            shards = (distributed.LocalShards(parts) if local
                      else distributed.DaskShards(client, parts))
            inf = distributed.ShardedSparseInference(
                shards, J=problem.J, offsets=problem.offsets, n=problem.n,
                any_missing=bool(problem.missing.any()), D=X.shape[1], theta0=theta0,
                lse_bound=self.lse_bound_, lambda_floor=s["lambda_floor"],
                missing_weight=problem.missing_weight,
                evidence=problem.evidence is not None, **self.start_options())
            inf.pair_variance = self.pair_variance()
            trace = inf.fit(max_iter=s["max_iter"], tol=s["tol"],
                            learn_hyper=s["learn_hyper"], callback=callback)
            inf.gather_r()
            self.n_shards = len(parts)
            self.shard_stats = {"shards": shards.stats(),
                                "rounds": getattr(shards, "rounds", None),
                                "wait_seconds": getattr(shards, "wall", None)}
        finally:
            if shards is not None:
                shards.close()
            if owned:
                client.close()
        inf.shards = None
        self.state, self.n_iter = inf.s, int(inf.n_iter)
        return trace

    def fit_info(self) -> dict:
        return {"n_shards_": self.n_shards, "shard_stats_": self.shard_stats}


#: the engine class of each saved mode
ENGINES: dict[str, type[Engine]] = {"full": FullEngine, "sparse": SparseEngine}


def make_engine(mode: str, kernel, settings: dict) -> Engine:
    """The engine of a fit in ``mode`` (``"full"`` or ``"sparse"``): sharded when the
    settings name a ``cluster``."""
    cls = ShardedEngine if settings.get("cluster") is not None else ENGINES[mode]
    return cls(kernel, settings)
