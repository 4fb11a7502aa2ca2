"""gpsl: Gaussian process pseudo-likelihood models for sequence labeling.

Implements Srijith, Balamurugan and Shevade, "Gaussian Process Pseudo-Likelihood
Models for Sequence Labeling" (see ``../shared/paper/gpsl-paper.tex``).
The library knows nothing about Streamlit; every module is importable alone.
"""

import logging

from gpsl._version import __version__
from gpsl.errors import GpslError, InputError, ModelFormatError

# a library configures no handler: the app, the CLI or the service decide where logs go
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = ["GpslError", "InputError", "ModelFormatError", "GPSL", "__version__"]


def __getattr__(name):  # lazy, so ``import gpsl`` stays cheap
    if name == "GPSL":
        from gpsl.model import GPSL

        return GPSL
    raise AttributeError(name)
