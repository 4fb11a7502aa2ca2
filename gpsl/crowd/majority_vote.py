"""Per-token majority vote."""

from __future__ import annotations

from gpsl.crowd.base import Aggregator
from gpsl.crowd.vote_matrix import Votes, majority_posteriors

__all__ = ["MajorityVote"]


class MajorityVote(Aggregator):
    """Per-token majority vote: the posterior is the vote fractions; a tie leaves the token
    missing (:func:`decide`, the rule the annotation store derives labels by too)."""

    def fit_votes(self, votes: Votes) -> MajorityVote:
        self._finish(votes, majority_posteriors(votes))
        return self

