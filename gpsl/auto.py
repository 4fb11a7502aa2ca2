"""The ``"auto"`` choices of :class:`gpsl.model.GPSL`: which inference mode and which bound on
the expected log-partition a fit uses when the user leaves them to the library.

Both rules follow measurements (``docs/speed.md``, each figure with its command).

The inference mode
------------------
For the linear kernel (the paper's, the default) the two modes fit the same model: the
scalable mode's weight space with exact linear features and the Khan family *is* the full GP
(tested to 1e-6). What differs is the covariance family of the default scalable fit
(mean-field), the bound on the log-partition (Boehning's, below) and the cost: ``O(n^3 J)``
per sweep against ``O(nnz J)``. Measured on the paper's own partitions (10 random partitions
per data set, GPSL2, the full GP's losses those of ``bench/results/paper.json``), the scalable
fit is at least as accurate and 30-350 times cheaper at every size the paper uses:

=============  =============  ==============  ==============  ================================
data set       sentences      full GP loss %  scalable loss %  fit (full GP / scalable, CPU s)
=============  =============  ==============  ==============  ================================
basenp         150 / 150      4.92            4.72            63.8 / 0.18
chunking       50 / 50        12.46           11.57           14.3 / 0.12
seg            20 / 16        15.44           15.01           0.62 / 0.02
JapaneseNE     50 / 50        8.37            6.95            14.2 / 0.21
=============  =============  ==============  ==============  ================================

and the gap in time only grows with ``n`` (``bench.scale``: 1.9 s against 0.1 s at 624
tokens, 349 s against 0.8 s at 4,661). So ``"auto"`` is the scalable mode for the linear
kernel at every size; the former rule (full GP up to 4,000 training tokens, kept so that the
paper's Table 1 was the full GP's) made the default both the slow and the less accurate path
(the bundled chunking sample: 429 s and 89.9% against 27 s and 90.3%). ``bench.paper`` asks
for ``inference="full"`` explicitly, so Table 1 stays the full GP's.

For the squared-exponential kernel the scalable mode is an approximation (Nystrom features on
``inducing`` tokens): with every token inducing it is the full GP, so up to ``inducing``
tokens the full GP is the same model at about the same cost and ``"auto"`` keeps it; above,
the approximation lost 0.6-2.3 points against the full GP on the paper's seg and chunking
partitions (600-1,300 tokens, 500 inducing tokens), so there is no mode of equal accuracy and
the rule is a cost cap: the full GP up to :data:`RBF_FULL_TOKENS` training tokens (measured
8-12 CPU s at 1,100-1,300 chunking tokens, growing as ``n^2.5-3``), the scalable mode above.

With a Dask cluster only the scalable mode runs (:mod:`gpsl.distributed`).

The bound on the log-partition
------------------------------
``lse_bound="auto"`` is the paper's Jensen bound in the full GP (Table 1) and Boehning's in
the scalable mode, with or without missing labels. Until this rule, missing labels switched
the scalable mode to Jensen's bound, because Boehning's had stopped far from its maximum
(700-sentence pools, 10% of the tokens labeled: 77% test accuracy against 88%). That was the
start of the fit, not the bound: the first sweep fitted the functions to the uniform guesses
of the missing labels. With the fit started on the labeled tokens
(:meth:`gpsl.sparse.SparseGPSLInference.sweep_labels_first`) Boehning's bound is as accurate or
more with missing labels too, and it decouples the means from the mean-field variances, whose
slow drift under Jensen's bound was what made a missing-label fit take 8 sweeps instead of 2
(``docs/speed.md``, "Why a fit with missing labels took 8 sweeps").
"""

from __future__ import annotations

#: squared-exponential kernel: ``inference="auto"`` uses the full GP up to this many
#: training tokens (or up to ``inducing``, if larger) and the Nystrom approximation above
RBF_FULL_TOKENS = 2000

#: the bound each mode uses with ``lse_bound="auto"`` (with or without missing labels)
AUTO_LSE_BOUND = {"full": "jensen", "sparse": "bohning"}

INFERENCE_MODES = ("auto", "full", "sparse")


def inference_mode(spec, n_tokens: int, *, kernel_scale_only: bool = True,
                   inducing: int = 500) -> str:
    """``"full"`` or ``"sparse"`` for a fit of ``n_tokens`` training tokens.

    ``spec`` is the estimator's ``inference`` (``"auto"``, ``"full"`` or ``"sparse"``);
    ``kernel_scale_only``: the linear kernel (whose scalable form is exact); ``inducing``: the
    Nystrom size of the scalable mode for other kernels. See the module docstring for the
    measurements behind ``"auto"``."""
    mode = str(spec).lower()
    if mode not in INFERENCE_MODES:
        raise ValueError(f"inference must be 'auto', 'full' or 'sparse', not {spec!r}")
    if mode != "auto":
        return mode
    if kernel_scale_only:
        return "sparse"
    return "full" if int(n_tokens) <= max(RBF_FULL_TOKENS, int(inducing)) else "sparse"


def lse_bound(spec, mode: str) -> str:
    """The bound on the expected log-partition for ``spec`` (``"auto"``, ``"jensen"`` or
    ``"bohning"``) in inference mode ``mode``."""
    b = str(spec).lower()
    if b == "auto":
        return AUTO_LSE_BOUND[mode]
    if b not in ("jensen", "bohning"):
        raise ValueError(f"lse_bound must be 'auto', 'jensen' or 'bohning', not {spec!r}")
    return b


__all__ = ["AUTO_LSE_BOUND", "INFERENCE_MODES", "RBF_FULL_TOKENS", "inference_mode",
           "lse_bound"]
