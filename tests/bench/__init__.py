"""The benchmarks' code on small cases: marker ``bench``."""
