"""Per-token majority vote."""

from __future__ import annotations

from gpsl.crowd.base import _Aggregator
from gpsl.crowd.votes import Votes, majority_posteriors

__all__ = ["MajorityVote"]


class MajorityVote(_Aggregator):
    """Per-token majority vote (ties: the posterior is the vote fractions, argmax breaks
    ties toward the first class in sorted order)."""

    def fit_votes(self, votes: Votes) -> MajorityVote:
        self._finish(votes, majority_posteriors(votes))
        return self

