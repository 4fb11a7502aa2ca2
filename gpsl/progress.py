"""How long a fit still runs: the stop rule of Algorithm 1's sweep loop
(:meth:`gpsl.likelihood.PseudoLikelihoodBound.fit`) and an estimate of the sweeps and seconds
left from the bounds a fit has reported, for progress displays that should not assume the
sweep cap (``docs/speed.md``, "Honest progress")."""

from __future__ import annotations

import numpy as np

#: the ratio of successive bound improvements assumed while only one improvement is known
#: (measured on the scalable fits of docs/speed.md: 0.02-0.3 after the first two sweeps)
DEFAULT_RATE = 0.3


def remaining_sweeps(bounds, *, tol: float, max_iter: int, rate: float | None = None) -> int:
    """How many more sweeps :meth:`PseudoLikelihoodBound.fit` will run, from the bounds after
    each sweep so far (``bounds[k-1]`` after sweep ``k``, as the ``callback`` reports them)
    and the stop rule (:func:`_converged`: relative improvement at most ``tol``), capped by
    ``max_iter``.

    Once a sweep's improvement ``d_k = L_k - L_{k-1}`` is known, the next ones are taken to
    shrink geometrically, ``d_{k+m} = d_k rho^m`` with ``rho`` the last ratio
    ``d_k / d_{k-1}`` (clipped to [0.01, 0.8]; :data:`DEFAULT_RATE` while only one improvement
    is known, 0.5 while the improvements still grow, as they may for a few sweeps of EM while
    the missing labels' guesses move); the fit stops at the first ``m`` with
    ``d_k rho^m <= tol max(1, |L|)``. With a single bound the stop rule cannot have fired
    yet: at least one sweep remains. The estimate is exact for a geometric trace and good to
    a sweep or two in the last sweeps of a real one; early in a long EM run it is a guess
    (``tests/lib/test_speed.py``). (With ``learn_hyper`` the outer loop may add sweeps after a
    hyper-parameter step; the estimate covers the inner loop it is in.)"""
    b = [float(v) for v in bounds]
    k = len(b)
    left = max(0, int(max_iter) - k)
    if k == 0:
        return min(2, int(max_iter))
    if k == 1 or left == 0:
        return min(1, left)
    if _converged(b[-2], b[-1], tol):
        return 0
    d = b[-1] - b[-2]
    thr = tol * max(1.0, abs(b[-1]))
    if not np.isfinite(d) or d <= thr:
        return min(1, left)
    if rate is None:
        prev = b[-2] - b[-3] if k >= 3 else float("nan")
        rate = d / prev if np.isfinite(prev) and prev > 0 else DEFAULT_RATE
        if rate >= 1.0:
            rate = 0.5
    rho = float(np.clip(rate, 0.01, 0.8))
    m = int(np.ceil(np.log(thr / d) / np.log(rho)))
    return int(min(max(1, m), left))


def fit_eta(bounds, seconds, *, tol: float, max_iter: int) -> float | None:
    """Seconds left in a fit: :func:`remaining_sweeps` times the measured cost of a sweep.

    ``seconds[k-1]`` is the time since the fit started at the end of sweep ``k`` (the
    ``callback``'s ``seconds``). The cost of a sweep is the mean of the sweeps after the
    first (the first also pays the start: the labeled-tokens sweep, cold caches), else the
    first. ``None`` before the first sweep has ended. What the app's progress line reads, in
    place of ``(max_iter - k)`` times the mean sweep, which assumed the fit runs to its cap
    (30 sweeps announced where 2 run)."""
    sec = [float(v) for v in seconds]
    if not sec or len(sec) != len(bounds):
        return None
    per = (sec[-1] - sec[0]) / (len(sec) - 1) if len(sec) > 1 else sec[0]
    return remaining_sweeps(bounds, tol=tol, max_iter=max_iter) * max(per, 0.0)


def _converged(old, new, tol) -> bool:
    """Relative improvement of the bound below ``tol`` (never at a non-finite bound: a first
    bound of -inf, e.g. from -inf evidence, is not convergence)."""
    if not (np.isfinite(old) and np.isfinite(new)):
        return False
    return abs(new - old) <= tol * max(1.0, abs(old))


__all__ = ["DEFAULT_RATE", "fit_eta", "remaining_sweeps"]
