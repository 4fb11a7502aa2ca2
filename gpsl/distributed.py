r"""The scalable mode's fit over sentence shards on a Dask cluster (``GPSL(cluster=...)``).

What is sharded
---------------
Every term of the bound that reads the training tokens is a sum over sentences, because a
token's neighbours (its pseudo-likelihood factor) are in its own sentence. So the training
sentences are cut into contiguous shards (one per Dask worker, about equal in tokens) and
each shard keeps, on its worker, its rows of the feature matrix and its per-token state: the
means ``m`` and variances ``V`` at its tokens, its missing-label distributions ``r`` (and
evidence). The client keeps what is global and small: the weights ``W`` (``D x J``), the
mean-field precisions (``D x J``), ``q(f^S)`` (``R x J x J``) and ``theta``. Per sweep of
Algorithm 1 (:meth:`gpsl.likelihood.PseudoLikelihoodBound.sweep`):

* the ``r`` updates (:meth:`~gpsl.likelihood.PseudoLikelihoodBound.update_r`) are per token
  and run on each shard with nothing sent back (the colour classes use the tokens' global
  positions, so the order of the updates is the single-process one);
* every L-BFGS evaluation of the mean step sends ``W`` and gets back each shard's
  ``sum_t r_t'm_t``, ``sum_t lse_t`` and ``Phi_s'(r - pi)`` (:func:`gpsl.sparse.mean_data`);
  the client adds them and the prior (:func:`gpsl.sparse.mean_combine`);
* the covariance fixed point ``1 + sum_t phi_t^2 w_t`` (:meth:`SparseGPSLInference._cov_target`)
  is a sum of the shards' parts; a new covariance is sent to the shards, which refresh
  ``V``;
* the ``q(f^S)`` step sums the shards' pair counts once and, per L-BFGS-B evaluation, their
  pair terms, log-partitions and soft counts
  (:meth:`~gpsl.likelihood.PseudoLikelihoodBound.S_data`);
* the bound (eq. lb2 with Jensen's or Boehning's step) sums the shards' data terms,
  entropies and evidence terms; the KL terms are the client's.

The client runs exactly the single-process code of :class:`gpsl.sparse.SparseGPSLInference`
with these sums in place of its own, so the fit is the same algorithm: a Dask fit equals the
same shards run in this process (:class:`InProcess`; the same additions in the same order,
identical in the tests and at 200k tokens). Against the unsharded engine only the order of
the floating-point additions differs; that difference grows over the sweeps (README, "Beyond
one machine"). Shards live in Dask actors pinned to a worker (their data is scattered there
once per fit, ``broadcast=False``); an actor call goes from the client straight to the
worker.

Supported: the linear kernel with the mean-field covariance (the scalable default), with or
without missing labels, evidence and ``learn_hyper``. The Khan family and the rbf kernel's
Nystrom features form dense per-label matrices on the client and are refused with one line,
as are the crowd model's ``on_sweep`` hook and the full mode (``inference="full"``).

Dask is imported only here, and this module only when ``cluster`` is given.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from gpsl.constraints import address_problem
from gpsl.errors import GpslError, InputError
from gpsl.kernels import LinearFeatures
from gpsl.likelihood import Problem, PseudoLikelihoodBound
from gpsl.sparse import (
    MEAN_FTOL,
    SparseGPSLInference,
    SparseState,
    _Cache,
    mean_combine,
    mean_data,
)


class ShardProblem(Problem):
    """A shard's :class:`~gpsl.likelihood.Problem` whose colour classes use the tokens'
    global positions (``start`` is the global index of its first token)."""

    start: int = 0

    def colours(self) -> list[np.ndarray]:
        span = 2 * max((abs(o) for o in self.offsets), default=0) + 1
        idx = np.flatnonzero(self.missing)
        glob = idx + int(self.start)
        return [c for c in (idx[glob % span == k] for k in range(span)) if c.size]


@dataclass
class ShardData:
    """What one shard needs, sent to its worker once per fit."""

    X: sp.csr_matrix  # the shard's rows of the token features
    lengths: np.ndarray
    y: np.ndarray
    evidence: np.ndarray | None
    start: int
    offsets: tuple
    J: int
    jitter: float
    lse_bound: str
    missing_weight: float = 1.0  # lambda of the whole fit (gpsl.likelihood.missing_weight)


def relax_malloc() -> bool:
    """Undo dask's ``MALLOC_TRIM_THRESHOLD_`` in this worker process (glibc only).

    A Dask nanny starts its worker with ``MALLOC_TRIM_THRESHOLD_=65536``. Fixing that threshold
    also fixes glibc's mmap threshold at 128 KiB, so every numpy temporary of a shard (a
    ``(tokens, labels)`` array is megabytes) becomes a fresh ``mmap`` with its pages faulted in
    again: the shards' work ran 3-4 times slower (``bench.scale --cluster``). Setting the mmap
    threshold to 32 MiB and the trim threshold to 128 MiB with ``mallopt`` restores the heap
    reuse of a plain process. Returns True when it did so."""
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 32 * 2 ** 20)) and \
            bool(libc.mallopt(M_TRIM_THRESHOLD, 128 * 2 ** 20))
    except (OSError, AttributeError):
        return False


class Shard(PseudoLikelihoodBound):
    """The token-level part of the bound for one shard of sentences (lives on a worker).

    Every method takes the global arrays it reads (``theta``, ``W``, ``q(f^S)``) and returns
    the shard's sums; the per-token state (``m``, ``V``, ``r``) never leaves the shard until
    :meth:`get_r` at the end of the fit.
    """

    lookup_neighbours = True  # as the single-process engine (gpsl.sparse)

    def __init__(self, data: ShardData):
        self.malloc_relaxed = relax_malloc()
        self.set_lse_bound(data.lse_bound)
        p = ShardProblem.build(data.lengths, data.y, data.offsets, data.J,
                               evidence=data.evidence, missing_weight=data.missing_weight)
        p.start = int(data.start)
        self.p = p
        self.features = LinearFeatures(data.X, data.jitter, exact=False)
        self.s = SimpleNamespace(r=p.initial_r(), m_S=None, v_S=None)
        self.c = SimpleNamespace(M=None, Vd=None)
        self._base = None
        self._counts = None
        self._busy, self._cpu, self._calls = 0.0, 0.0, 0

    def _qS(self, m_S, v_S) -> None:
        self.s.m_S, self.s.v_S = m_S, v_S

    def set_state(self, theta, W, S) -> None:
        """``m = Phi W`` and ``V`` from the precisions' inverse ``S`` (``D x J``)."""
        self.c.M = self.features.times(theta, W)
        self.set_cov(theta, S)

    def set_W(self, theta, W) -> None:
        self.c.M = self.features.times(theta, W)

    def set_cov(self, theta, S) -> None:
        """``V_tj = sum_k phi_tjk^2 S_kj + e_j`` (:meth:`SparseGPSLInference._refresh_cov`)."""
        self.c.Vd = self.features.sq_times(theta, S) + self.features.resid(theta)

    def bound_parts(self, m_S, v_S) -> tuple:
        """``sum_t w_t r_t'm_t``, the pair term, ``sum_t w_t lse_t``, ``sum_t w_t V_t``, the
        (weighted) entropy of ``r`` and the evidence term: the shard's data part of the bound
        (``w_t`` the factor weights, :attr:`gpsl.likelihood.Problem.w`)."""
        self._qS(m_S, v_S)
        T = self.terms()
        r = self.s.r
        return (float(np.sum(self._own(r) * self.c.M.T)), self._pair_term(m_S, r),
                self._wsum(T["lse"]), self._wsum(self.c.Vd.sum(axis=0)), self.entropy(),
                self.p.evidence_term(r))

    def set_missing_weight(self, lam) -> None:
        self.p.set_missing_weight(lam)

    def update_r_shard(self, m_S, v_S, rounds) -> None:
        self._qS(m_S, v_S)
        self.update_r(rounds=rounds)

    def mean_begin(self, m_S, v_S) -> None:
        """Fix ``base_a = a - m`` for a mean round (:meth:`SparseGPSLInference._mean_problem`)."""
        self._qS(m_S, v_S)
        T = self.terms(gS=self.gS())
        self._base = T["a"] - self.c.M.T

    def mean_eval(self, theta, W) -> tuple:
        return mean_data(self.features, theta, self.s.r, W, self._base, self.p.weight)

    def cov_part(self, theta, m_S, v_S) -> np.ndarray:
        """``Phi^2' w`` (``D x J``), ``w = -2 dL/dV`` (:meth:`v_weight`)."""
        self._qS(m_S, v_S)
        if self.lse_bound == "jensen":
            pi = self.terms()["pi"]
        else:  # Boehning: w = 2 kappa, whatever pi is
            pi = np.empty((self.p.n, self.p.J))
        return self.features.sq_rtimes(theta, self.v_weight(pi).T)

    def S_begin(self, m_S, v_S) -> np.ndarray:
        """The pair counts ``N_d``; fixes the local part of ``a`` for the ``q(f^S)`` step."""
        self._qS(m_S, v_S)
        self._base = self.base_a()
        self._counts = self.pair_counts()
        return self._counts

    def S_eval(self, m_S, v_S) -> tuple:
        return self.S_data(m_S, v_S, self._base, self._counts)

    def get_r(self) -> np.ndarray:
        return self.s.r

    def call(self, name, *args):
        """``name(*args)``, its seconds added to :meth:`stats` (the per-shard cost)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        out = getattr(self, name)(*args)
        self._busy += time.perf_counter() - t0
        self._cpu += time.thread_time() - c0
        self._calls += 1
        return out

    def stats(self) -> dict:
        """Tokens, wall and CPU seconds of its calls, their number; whether
        :func:`relax_malloc` acted."""
        return {"tokens": self.p.n, "seconds": self._busy, "cpu_seconds": self._cpu,
                "calls": self._calls, "malloc_relaxed": self.malloc_relaxed}

    def size(self) -> int:
        return self.p.n


@dataclass(frozen=True)
class InProcess:
    """A stand-in for a cluster: ``GPSL(cluster=InProcess(n_shards))`` runs the sharded fit
    with the same shards in this process (the reference a Dask fit with ``n_shards`` workers
    equals: the same additions in the same order)."""

    n_shards: int = 1


class LocalShards:
    """Shards in this process (the same arithmetic as on a cluster; for tests)."""

    def __init__(self, parts):
        self.shards = [Shard(p) for p in parts]

    def map(self, name, *args) -> list:
        return [s.call(name, *args) for s in self.shards]

    def stats(self) -> list[dict]:
        return [s.stats() for s in self.shards]

    def close(self) -> None:
        self.shards = []


class DaskShards:
    """Shards in Dask actors, one pinned to each worker in turn; their data is scattered to
    that worker once (``broadcast=False``). ``map`` calls a method on every shard at once and
    waits for all of them; a lost worker raises :class:`ClusterError`."""

    def __init__(self, client, parts):
        self.client = client
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise ClusterError("the Dask cluster has no workers")
        self._futures, self.actors = [], []
        self.wall, self.rounds = 0.0, 0  # seconds the client waited on the shards, calls
        try:
            for i, part in enumerate(parts):
                w = workers[i % len(workers)]
                data = client.scatter(part, workers=[w], broadcast=False)
                fut = client.submit(Shard, data, actor=True, workers=[w],
                                    allow_other_workers=False, pure=False)
                self._futures += [data, fut]
            with client.as_current():  # an actor handle binds to the current client
                self.actors = [f.result() for f in self._futures[1::2]]
        except Exception as exc:
            self.close()
            raise ClusterError(f"could not place the shards on the cluster: {_one(exc)}") \
                from exc

    def map(self, name, *args) -> list:
        t0 = time.perf_counter()
        try:
            calls = [a.call(name, *args) for a in self.actors]
            out = [c.result() for c in calls]
        except Exception as exc:
            raise ClusterError(f"a Dask worker failed during the fit: {_one(exc)}") from exc
        self.wall += time.perf_counter() - t0
        self.rounds += 1
        return out

    def stats(self) -> list[dict]:
        """Per shard: tokens, seconds of work and calls (read before :meth:`close`)."""
        return [s.result() for s in [a.stats() for a in self.actors]]

    def close(self) -> None:
        futures, self._futures, self.actors = self._futures, [], []
        if futures:
            try:
                self.client.cancel(futures)
            except Exception:  # noqa: BLE001 - the client may already be closed
                pass


class ClusterError(GpslError):
    """The cluster could not take the shards or lost a worker during a fit (one line)."""


def _one(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def split_sentences(lengths, n_shards: int) -> list[tuple[int, int]]:
    """Contiguous ``(first, stop)`` sentence ranges with about equal tokens, at most
    ``n_shards`` of them, none empty."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n_shards = max(1, min(int(n_shards), len(lengths)))
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if ends.size else 0
    cuts = [0]
    for k in range(1, n_shards):
        i = int(np.searchsorted(ends, total * k / n_shards)) + 1
        if cuts[-1] < i < len(lengths):
            cuts.append(i)
    cuts.append(len(lengths))
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=False) if b > a]


def make_parts(Xf, lengths, y, evidence, offsets, J, jitter, lse_bound, n_shards,
               missing_weight=1.0):
    """The :class:`ShardData` of each shard of sentences (``missing_weight``: the fit's
    ``lambda``, one number for every shard)."""
    Xf = sp.csr_matrix(Xf, dtype=np.float64)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    parts = []
    for a, b in split_sentences(lengths, n_shards):
        t0, t1 = int(starts[a]), int(starts[b])
        parts.append(ShardData(X=Xf[t0:t1], lengths=np.asarray(lengths[a:b]), y=y[t0:t1],
                               evidence=None if evidence is None else evidence[t0:t1],
                               start=t0, offsets=tuple(offsets), J=int(J),
                               jitter=float(jitter), lse_bound=lse_bound,
                               missing_weight=float(missing_weight)))
    return parts


class ShardedSparseInference(SparseGPSLInference):
    """:class:`gpsl.sparse.SparseGPSLInference` (mean-field family) with every sum over
    tokens computed by shards (``LocalShards`` or ``DaskShards``) and added here."""

    def __init__(self, shards, *, J: int, offsets, n: int, any_missing: bool, D: int,
                 theta0, lse_bound: str, mean_iter: int = 30, mean_rounds: int = 1,
                 lambda_floor: float = 1e-8, missing_weight: float = 1.0,
                 evidence: bool = False, labels_first: bool = True):
        self.set_lse_bound(lse_bound)
        self.shards = shards
        self.p = SimpleNamespace(J=int(J), R=len(offsets), n=int(n), offsets=tuple(offsets),
                                 missing_weight=float(missing_weight))
        self._missing = bool(any_missing)
        self._evidence = bool(evidence)
        self.labels_first = bool(labels_first)
        self.features = SimpleNamespace(D=int(D), scale_only=True)
        self.mean_iter = int(mean_iter)
        self.mean_rounds = int(mean_rounds)
        self.mean_ftol = MEAN_FTOL
        self.precondition = False  # never warm (see SparseGPSLInference.precondition)
        self.lambda_floor = float(lambda_floor)
        R = len(offsets)
        self.s = SparseState(theta=np.tile(np.asarray(theta0, dtype=float), (J, 1)),
                             W=np.zeros((D, J)), cov=np.ones((D, J)), m_S=np.zeros((R, J, J)),
                             v_S=np.ones((R, J, J)), r=np.empty((0, J)), family="meanfield")
        self._rho = np.ones(J)
        self.c = _Cache()
        self.n_iter = 0
        self.refresh()

    # ----------------------------------------------------------------- sums over shards

    @staticmethod
    def _sum(parts):
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        return out

    def _column_sums(self, results):
        return [self._sum(list(col)) for col in zip(*results, strict=True)]

    def _any_missing(self) -> bool:
        return self._missing

    def _labels_first_applies(self) -> bool:
        return self.labels_first and self._missing and not self._evidence

    def _set_missing_weight(self, lam: float) -> None:
        self.p.missing_weight = float(lam)
        self.shards.map("set_missing_weight", float(lam))

    def _kl_cache(self) -> None:
        P = self.s.cov
        S = 1.0 / P
        self.c.logdetP = np.log(P).sum(axis=0)
        self.c.trS = S.sum(axis=0)
        return S

    def refresh(self) -> None:
        S = self._kl_cache()
        self.shards.map("set_state", self.s.theta, self.s.W, S)

    def _refresh_cov(self, labels=None) -> None:
        S = self._kl_cache()
        self.shards.map("set_cov", self.s.theta, S)

    def _save_cov_cache(self):
        return None

    def _restore_cov_cache(self, cache) -> None:
        self._refresh_cov()  # the shards recompute V from the restored covariance

    def elbo(self) -> float:
        rM, pair, lse, sV, ent, ev = self._column_sums(
            self.shards.map("bound_parts", self.s.m_S, self.s.v_S))
        data = rM + pair - lse
        if self.lse_bound == "bohning":
            data -= self.kappa * sV
        return self.kl_U() + self.kl_S() + data + ent + ev

    def update_r(self, rounds=2):
        self.shards.map("update_r_shard", self.s.m_S, self.s.v_S, rounds)

    def _mean_problem(self, curvature=None):
        """The mean round's objective over the shards, never preconditioned (see
        :attr:`SparseGPSLInference.precondition`)."""
        self.shards.map("mean_begin", self.s.m_S, self.s.v_S)
        theta, shape = self.s.theta, self.s.W.shape

        def fun(x):
            W = x.reshape(shape)
            rM, lse, g = self._column_sums(self.shards.map("mean_eval", theta, W))
            return mean_combine(W, rM, lse, g)

        return fun, None

    def _set_W(self, W) -> None:
        self.s.W = W
        self.shards.map("set_W", self.s.theta, W)

    def _cov_goal(self) -> np.ndarray:
        return 1.0 + self._sum(self.shards.map("cov_part", self.s.theta, self.s.m_S,
                                               self.s.v_S))

    def _S_problem(self):
        counts = self._sum(self.shards.map("S_begin", self.s.m_S, self.s.v_S))

        def fun(x, counts):
            m_S, v_S = self.S_unpack(x)
            pair, lse, soft = self._column_sums(self.shards.map("S_eval", m_S, v_S))
            return self.S_combine(m_S, v_S, pair, lse, soft, counts)

        return fun, (counts,)

    def gather_r(self) -> np.ndarray:
        """The missing-label distributions of every training token (the end of a fit)."""
        self.s.r = np.concatenate(self.shards.map("get_r"), axis=0)
        return self.s.r


# --------------------------------------------------------------------------- clients


def connect(cluster):
    """``(client, owned)`` for ``cluster``: a ``distributed.Client`` (used as is) or a
    scheduler address such as ``tcp://host:8786`` (a client opened here, ``owned``)."""
    if not isinstance(cluster, str):
        if hasattr(cluster, "submit") and hasattr(cluster, "scatter"):
            return cluster, False
        raise InputError(f"cluster must be a dask.distributed Client or a scheduler address "
                         f"like tcp://host:8786, not {type(cluster).__name__}",
                         source="cluster")
    problem = address_problem(cluster)
    if problem is not None:
        raise InputError(problem, source="cluster")
    try:
        from distributed import Client
    except ImportError:
        raise InputError("cluster= needs dask[distributed] (pip install -r requirements.txt)",
                         source="cluster") from None
    timeout = float(os.environ.get("GPSL_DASK_TIMEOUT", "10"))
    try:
        client = Client(cluster, timeout=timeout, set_as_default=False)
    except Exception as exc:  # noqa: BLE001 - every failure to connect is one line
        raise InputError(f"cannot reach the Dask scheduler at {cluster}: {_one(exc)}",
                         source="cluster") from None
    return client, True


def n_workers(client) -> int:
    return len(client.scheduler_info()["workers"])


__all__ = ["ClusterError", "DaskShards", "InProcess", "LocalShards", "Shard", "ShardData",
           "ShardedSparseInference", "connect", "make_parts", "split_sentences"]
