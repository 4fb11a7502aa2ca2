"""Active-learning query strategies (one module a family, as scikit-learn's estimators).

* :mod:`gpsl.active.marginal`: scores of one set of per-token marginals (least confidence,
  margin, entropy, random; sentence aggregates) and :func:`query`, the ranked batch;
* :mod:`gpsl.active.bayes`: scores under the posterior q (BALD by Monte Carlo over
  Algorithm 2, the look-ahead gain of a clamped label), determinantal batches over the latent
  functions' correlations, and :func:`query_model` / :func:`score_tokens` (the annotation
  queue's per-token scores, :data:`QUERY_SCORES`).

Every public name is importable from ``gpsl.active``.
"""

from gpsl.active.bayes import (
    BALD_SAMPLES,
    DEFAULT_QUERY,
    QUERY_SCORES,
    diverse_batch,
    lookahead_gain,
    mutual_information,
    query_model,
    sample_marginals,
    score_tokens,
)
from gpsl.active.marginal import (
    AGGREGATES,
    STRATEGIES,
    QueryItem,
    Strategy,
    default_max_per_sentence,
    entropy,
    least_confidence,
    margin,
    query,
    sentence_scores,
    token_scores,
)

__all__ = [
    "AGGREGATES",
    "BALD_SAMPLES",
    "DEFAULT_QUERY",
    "QUERY_SCORES",
    "STRATEGIES",
    "QueryItem",
    "Strategy",
    "default_max_per_sentence",
    "diverse_batch",
    "entropy",
    "least_confidence",
    "lookahead_gain",
    "margin",
    "mutual_information",
    "query",
    "query_model",
    "sample_marginals",
    "score_tokens",
    "sentence_scores",
    "token_scores",
]
