"""Robustness benchmarks (issue #7): hostile inputs, concurrent annotators, crashes.

``python -m bench.robustness [--long]`` writes ``bench/results/robustness.json`` and ``.md``.
"""
