"""The package's version, in a module of its own so that modules of the package can read it
without importing the package (whose ``GPSL`` attribute imports the estimator)."""

__version__ = "0.1.0"
