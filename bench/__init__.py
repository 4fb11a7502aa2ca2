"""Benchmarks that reproduce the project's figures (``python -m bench.<name>``)."""
