"""The pool's predictions after a fit: every sentence's marginals and query scores, in chunks,
on every core, each chunk stored in its own transaction.

Step 6 of :mod:`gpsl.annotation.training.pipeline`. The sentences are cut into chunks of about
:data:`PREDICT_CHUNK_TOKENS` tokens (:func:`chunks`); a chunk's marginals and query scores
(:func:`chunk_predictions`: Algorithm 2 once for the calibrated marginals and, for the default
query ``bald``, once per posterior draw) depend on the chunk alone, so the chunks are
independent jobs. :func:`predict_pool` runs them on a ``fork`` process pool of one process per
core (:func:`processes`): the children inherit the fitted model from the worker's memory
(nothing is re-imported or sent but the chunk's bounds), read the chunk's sentences from the
store themselves when the job says how (:class:`PoolJob` ``read``: the pipeline's way, so the
worker holds only ids and lengths), and send back only the chunk's arrays, in the chunks'
order. The worker stores each chunk as it arrives
(:meth:`Store.save_predictions`, one transaction), so memory holds a few chunks, never the
pool, and a run killed mid-way loses nothing committed: the chunks stored are whole, the
version stays ``'running'``/``'failed'`` and the previously active version keeps serving.

One process (no pool) where ``fork`` is not there, inside a daemonic process (a Dask worker
may not have children), on one core, for one chunk, or with ``GPSL_PREDICT_PROCESSES=1``.
The chunks and their seeds are the same either way, so the stored predictions are the same
(``tests/annotation/test_pool.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from gpsl import active

#: tokens per chunk (bounds Algorithm 2's arrays and the BALD draws: about
#: 10 x 4,000 x J floats)
PREDICT_CHUNK_TOKENS = 4000
#: the environment variable that caps the processes (``1``: predict in the worker itself)
PROCESSES_ENV = "GPSL_PREDICT_PROCESSES"


def chunks(n_tokens: list[int], budget: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` runs of consecutive sentences of at most ``budget`` tokens (a longer
    sentence alone)."""
    start, acc = 0, 0
    for i, n in enumerate(n_tokens):
        if acc and acc + n > budget:
            yield start, i
            start, acc = i, 0
        acc += n
    if start < len(n_tokens):
        yield start, len(n_tokens)


def predict_chunk(model, X, y, strategy: str | None, seed: int = 0
                  ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """The stored marginals of sentences ``X`` (the known labels ``y`` clamped; what
    :meth:`~gpsl.model.GPSL.predict_marginals` gives, calibrated) and, with a ``strategy``,
    their query scores (:func:`gpsl.active.score_tokens`), from one computation of Algorithm
    2's inputs (:meth:`~gpsl.model.GPSL.calibration_scores`: the features and predictive
    variances once for both)."""
    sc = model.calibration_scores(X, with_variance=True)
    method = model.marginals_method()
    cal = model.calibrator_ if getattr(model.calibrator_, "method", None) == method else None
    clamp = np.concatenate(model.gold_index(y)) if len(X) else None
    P = sc.marginals(method, clamp=clamp) if cal is None else cal.apply(sc, clamp)
    cuts = np.cumsum(sc.lengths)[:-1]
    if strategy is None:
        return np.split(P, cuts), None
    Q = active.score_tokens(sc, strategy, clamp, seed=seed, marginals=P)
    return np.split(P, cuts), np.split(Q, cuts)


@dataclass
class PoolJob:
    """What every chunk reads: the fitted model, every sentence (``ids``, tokens ``X``,
    known labels ``y``), the training sentences' ids (the only ones the queue offers: they
    get query scores), the held-out sentences' cross-calibrated marginals (pipeline step 3),
    the query strategy and the seed of its draws. With ``read`` (``read(ids) -> (tokens,
    labels)`` of those sentences, e.g. from the store) and ``lengths`` (the sentences' token
    counts) in place of ``X`` and ``y``, each chunk reads its own sentences where it is
    predicted: the worker never holds the pool's tokens, and the processes share reading
    them as they share the rest."""

    model: object
    ids: list[int]
    X: list | None
    y: list | None
    train: set
    held: dict
    strategy: str | None
    seed: int
    read: Callable[[list[int]], tuple[list, list]] | None = None
    lengths: list[int] | None = None

    def sizes(self) -> list[int]:
        return list(self.lengths) if self.lengths is not None else [len(s) for s in self.X]

    def sentences(self, a: int, b: int) -> tuple[list, list]:
        """Tokens and known labels of sentences ``a:b``."""
        if self.read is not None:
            return self.read(self.ids[a:b])
        return self.X[a:b], self.y[a:b]


def chunk_predictions(job: PoolJob, a: int, b: int
                      ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """``({sentence id: marginals}, {sentence id: query scores})`` of sentences ``a:b``: the
    training ones with the job's query scores, the others without; a held-out sentence
    without labels gets its cross-calibrated marginals."""
    ids = job.ids[a:b]
    X, y = job.sentences(a, b)
    marg: dict[int, np.ndarray] = {}
    query: dict[int, np.ndarray] = {}
    kept = {ids[k] for k in range(b - a) if ids[k] in job.held
            and not any(v is not None for v in y[k])}  # cross-calibrated already
    mine = [k for k in range(b - a) if ids[k] in job.train]
    rest = [k for k in range(b - a) if ids[k] not in job.train and ids[k] not in kept]
    for part, want in ((mine, job.strategy), (rest, None)):
        if part:
            P, Q = predict_chunk(job.model, [X[k] for k in part], [y[k] for k in part], want,
                                 seed=job.seed)
            for j, k in enumerate(part):
                marg[ids[k]] = np.asarray(P[j], dtype=np.float32)
                if Q is not None:
                    query[ids[k]] = np.asarray(Q[j], dtype=np.float32)
    for sid in kept:
        marg[sid] = np.asarray(job.held[sid], dtype=np.float32)
    return {sid: marg[sid] for sid in ids}, query


def processes(n_chunks: int) -> int:
    """How many processes predict: one per core this process may run on (at most
    ``GPSL_PREDICT_PROCESSES``, at most one per chunk); 1 without ``fork`` or in a daemonic
    process."""
    if "fork" not in multiprocessing.get_all_start_methods() or \
            multiprocessing.current_process().daemon:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    cap = os.environ.get(PROCESSES_ENV, "").strip()
    if cap.isdigit() and int(cap) > 0:
        cores = min(cores, int(cap))
    return max(1, min(cores, n_chunks))


_JOB: PoolJob | None = None  # the forked children's job (inherited, never sent)


def _die_with(parent: int) -> None:
    """A child's start (Linux): it is killed when the worker dies (``PR_SET_PDEATHSIG``), so
    a worker stopped or killed mid-chunk leaves no child computing a chunk no one reads."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    if os.getppid() != parent:  # the worker died before the line above
        os._exit(1)


def _child(span: tuple[int, int]):
    return span, chunk_predictions(_JOB, *span)


def predict_pool(job: PoolJob, budget: int | None = None, n_processes: int | None = None
                 ) -> Iterator[tuple[int, dict[int, np.ndarray], dict[int, np.ndarray]]]:
    """``(sentences done, marginals, query scores)`` chunk after chunk, in the sentences'
    order (module docstring), chunks of ``budget`` tokens (default
    :data:`PREDICT_CHUNK_TOKENS`) on ``n_processes`` processes (default :func:`processes`).
    Closing the iterator early stops the children."""
    global _JOB
    spans = list(chunks(job.sizes(), budget or PREDICT_CHUNK_TOKENS))
    n = processes(len(spans)) if n_processes is None else max(1, min(n_processes, len(spans)))
    if n <= 1:
        for a, b in spans:
            yield (b, *chunk_predictions(job, a, b))
        return
    _JOB = job
    try:
        with multiprocessing.get_context("fork").Pool(n, _die_with, (os.getpid(),)) as workers:
            for (_, b), (marg, query) in workers.imap(_child, spans):
                yield b, marg, query
    finally:
        _JOB = None


__all__ = ["PREDICT_CHUNK_TOKENS", "PROCESSES_ENV", "PoolJob", "chunk_predictions", "chunks",
           "predict_chunk", "predict_pool", "processes"]
