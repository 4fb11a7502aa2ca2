"""L-BFGS for the scalable mode's mean step (:mod:`gpsl.sparse`): a smooth convex objective in
about a million weights, where the method's own vector bookkeeping, not the objective, set
the cost until it was written for memory traffic (see :func:`lbfgs_min`)."""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular
from scipy.linalg.blas import daxpy as _daxpy
from scipy.linalg.blas import ddot as _ddot


def lbfgs_min(fun, x0, *, maxiter: int = 30, memory: int = 8, ftol: float = 1e-10,
              gtol: float = 1e-6, h0=None):
    """Minimise a smooth convex ``fun(x) -> (f, grad)`` by L-BFGS with Armijo backtracking.

    Every accepted step lowers ``f`` (sufficient decrease), so the caller's block update never
    lowers the bound. For a convex objective ``s'y > 0`` always holds, so no curvature
    safeguard beyond skipping degenerate pairs is needed. Written out because scipy's
    L-BFGS-B spent half of a sparse-mode fit in its own bookkeeping at 200k parameters.

    Memory traffic, not arithmetic, is the cost of the quasi-Newton direction at a million
    parameters (chunking, 800 sentences). The pairs ``(s, y)`` are stored in single precision
    in one preallocated buffer, and the direction ``H g`` is taken in the compact form of Byrd,
    Nocedal and Schnabel (:func:`_compact_coefficients`), equal to the two-loop recursion
    (Nocedal and Wright, Algorithm 7.4) in exact arithmetic: one matrix-vector product over
    the buffer gives ``S'y`` and ``Y'y`` of the new pair (the gradient's products ``S'g``,
    ``Y'g`` follow from them, ``g_new = g + y``), and one more forms ``S p + gamma Y u``: two
    passes over the pairs an iteration, where the recursion made four, each writing the
    direction back (``tests/lib/test_sparse.py`` checks the two agree). Everything that decides a
    step stays in double precision: ``f``, the gradient, ``x``, the curvature ``s'y`` of each
    pair, the descent test ``g'd < 0`` and the Armijo test. The stored pairs only propose a
    direction; a direction that is not downhill is replaced by the gradient. ``fun`` returns
    a new gradient array on every call.

    ``h0`` (optional, positive, the shape of ``x``): a diagonal estimate of the inverse
    Hessian, the preconditioner. The method then runs on ``z`` with ``x = x0 + c z``,
    ``c = sqrt(h0)`` (gradient ``c g``): L-BFGS with the initial inverse Hessian
    ``gamma diag(h0)`` in ``x``. ``gtol`` applies to the scaled gradient ``c g``.

    Stops after ``maxiter`` iterations, when the gradient's largest entry is at most ``gtol``,
    or when the last three steps together lowered ``f`` by at most ``3 ftol max(1, |f|)``
    (one short step after a poor direction does not stop it). Returns ``(x, f)``.
    """
    if h0 is not None:
        base = np.array(x0, dtype=float).ravel()
        c = np.sqrt(np.asarray(h0, dtype=float).ravel())
        xb = np.empty_like(base)  # x = base + c z, rewritten in place at every evaluation

        def scaled(z):
            np.multiply(c, z, out=xb)
            np.add(xb, base, out=xb)
            fz, gz = fun(xb)
            gz = np.array(gz, dtype=float, copy=False).ravel()
            gz *= c  # fun's gradient is a new array on every call (see above)
            return fz, gz

        z, f = lbfgs_min(scaled, np.zeros_like(base), maxiter=maxiter, memory=memory,
                         ftol=ftol, gtol=gtol)
        return base + c * z, f
    x = np.array(x0, dtype=float).ravel()
    N = x.size
    f, g = fun(x)
    g = np.asarray(g, dtype=float).ravel()
    m = max(1, int(memory))
    P = m + 1  # slots: the stored pairs and one for the pair on test
    # the pairs in single precision, slot k's s in row 2k and its y in row 2k + 1 of one
    # buffer, so that one matrix-vector product reads all of them; slots fill from 0 up, so
    # the rows in use are a prefix and only that prefix is read (unused rows stay zero)
    Z = np.zeros((2 * P, N), dtype=np.float32)
    SY = np.zeros((P, P))  # SY[i, j] = s_i'y_j (kept where s_i is not newer than y_j)
    YY = np.zeros((P, P))  # y_i'y_j
    ag = np.zeros(2 * P)  # s_k'g (entry 2k) and y_k'g (2k + 1) at the current gradient
    gamma = 1.0  # s'y / y'y of the newest pair
    order: list[int] = []  # the slots of the stored pairs, oldest first
    recent = [f]
    window = 3
    q32 = np.empty(N, dtype=np.float32)
    q = np.empty(N)
    x_new = np.empty(N)
    y64 = np.empty(N)
    for _ in range(int(maxiter)):
        if float(np.max(np.abs(g))) <= gtol:
            break
        if order:
            coef = _compact_coefficients(order, SY, YY, ag, gamma, P)
            rows = 2 * (max(order) + 1)
            np.dot(coef[:rows].astype(np.float32), Z[:rows], out=q32)  # S p + gamma Y u
            np.multiply(g, gamma, out=q)
            q += q32
        else:
            np.multiply(g, 1.0 / max(1.0, float(np.linalg.norm(g))), out=q)
        gd = -_dot(g, q)  # the direction is d = -q
        if gd >= 0.0:  # not a descent direction: restart from the gradient
            order.clear()
            np.multiply(g, 1.0 / max(1.0, float(np.linalg.norm(g))), out=q)
            gd = -_dot(g, q)
        t = 1.0
        while True:
            np.copyto(x_new, x)
            _axpy(-t, q, x_new)
            f_new, g_new = fun(x_new)
            g_new = np.asarray(g_new, dtype=float).ravel()
            if f_new <= f + 1e-4 * t * gd:
                break
            t *= 0.5
            if t < 1e-12:
                return x, f
        np.subtract(g_new, g, out=y64)
        # s = x_new - x = -t q
        sy = -t * _dot(q, y64)
        ss, yy = t * t * _dot(q, q), _dot(y64, y64)
        k = next(i for i in range(P) if i not in order)
        np.multiply(q, -t, out=Z[2 * k], casting="same_kind")
        np.copyto(Z[2 * k + 1], y64, casting="same_kind")
        # every stored vector's product with y in one pass: s_i'y, y_i'y; the gradient's
        # products move with it (g_new = g + y), the new pair's are taken in double precision
        rows = 2 * (max(order + [k]) + 1)
        zy = np.zeros(2 * P)
        zy[:rows] = np.dot(Z[:rows], Z[2 * k + 1])
        ag += zy
        ag[2 * k], ag[2 * k + 1] = -t * _dot(q, g_new), _dot(y64, g_new)
        if sy > 1e-12 * float(np.sqrt(ss * yy)):
            SY[:, k] = zy[0::2]
            SY[k, k] = sy
            YY[:, k] = YY[k, :] = zy[1::2]
            YY[k, k] = yy
            gamma = sy / yy
            order.append(k)
            if len(order) > m:
                order.pop(0)
        recent.append(f_new)
        # converged: the last `window` steps together lowered f by at most window * ftol
        # (relative); a single short step after a poor direction does not stop the run
        done = (len(recent) > window
                and recent[-window - 1] - f_new <= window * ftol * max(1.0, abs(f_new)))
        x, x_new = x_new, x
        f, g = f_new, g_new
        if done:
            break
    return x, f


def _compact_coefficients(order, SY, YY, ag, gamma, P) -> np.ndarray:
    """The coefficients of the stored pairs in ``H g - gamma g`` (Byrd, Nocedal and Schnabel
    1994, eq. 3.1 with ``H_0 = gamma I``)::

        H g = gamma g + S p + gamma Y u,    u = -R^-1 S'g,
        p = R^-T ((D + gamma Y'Y) R^-1 S'g - gamma Y'g),

    ``R`` the upper triangle of ``S'Y`` (pairs oldest first), ``D`` its diagonal. Equal to the
    two-loop recursion's ``H g`` (Nocedal and Wright, Algorithm 7.4) in exact arithmetic;
    returned over the buffer's rows (slot ``k``'s ``s`` at ``2k``, its ``y`` at ``2k + 1``;
    zero for unused ones). ``ag`` holds ``s_k'g`` and ``y_k'g`` in the same order."""
    idx = np.asarray(order)
    R = np.triu(SY[np.ix_(idx, idx)])
    Sg, Yg = ag[2 * idx], ag[2 * idx + 1]
    v = solve_triangular(R, Sg, lower=False, check_finite=False)  # R^-1 S'g
    w = np.diag(R) * v + gamma * (YY[np.ix_(idx, idx)] @ v) - gamma * Yg
    p = solve_triangular(R, w, lower=False, trans="T", check_finite=False)
    coef = np.zeros(2 * P)
    coef[2 * idx] = p
    coef[2 * idx + 1] = -gamma * v
    return coef


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float(_ddot(a, b))


def _axpy(alpha: float, x: np.ndarray, y: np.ndarray) -> None:
    """``y += alpha x`` in place (BLAS daxpy on contiguous float64 vectors)."""
    _daxpy(x, y, a=float(alpha))


__all__ = ["lbfgs_min"]
