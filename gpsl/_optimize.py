"""SciPy's optimisers, imported on first use: ``scipy.optimize`` costs about 0.15-0.3 CPU s to
import (its linear-programming and docstring machinery), a third of a small ``gpsl test``, which
loads a model and never optimises. Every fit and calibration calls these names instead of
importing them from ``scipy.optimize`` at module level (``tests/meta/test_imports.py``)."""

from __future__ import annotations


def minimize(*args, **kwargs):
    """:func:`scipy.optimize.minimize`."""
    from scipy.optimize import minimize as _minimize

    return _minimize(*args, **kwargs)


def minimize_scalar(*args, **kwargs):
    """:func:`scipy.optimize.minimize_scalar`."""
    from scipy.optimize import minimize_scalar as _minimize_scalar

    return _minimize_scalar(*args, **kwargs)
