"""gpsl.warm: copying the kept sentences' state into a new training set."""

from __future__ import annotations

import numpy as np
import pytest

from gpsl.inference import Problem, initial_state
from gpsl.warm import carry_state, warm_state


def _state(lengths, J=3, seed=0, missing=()):
    n = int(sum(lengths))
    y = np.arange(n) % J
    y[list(missing)] = -1
    problem = Problem.build(np.array(lengths), y, (-1, 1), J)
    s = initial_state(problem, np.array([0.5]))
    rng = np.random.default_rng(seed)
    s.alpha = rng.normal(size=s.alpha.shape)
    s.lam = rng.random(size=s.lam.shape)
    s.m_S = rng.normal(size=s.m_S.shape)
    return problem, s


def test_duplicate_sentences_are_matched_in_turn_and_new_ones_start_cold():
    prev_lengths = np.array([2, 3, 2])
    _, prev = _state(prev_lengths)
    prev_keys = ["a", "b", "a"]  # "a" twice (two copies of one sentence)
    lengths = np.array([2, 4, 2, 2])
    problem, _ = _state(lengths)
    s = carry_state(prev, prev_keys, prev_lengths, problem, ["a", "new", "a", "a"], lengths)
    np.testing.assert_array_equal(s.alpha[:, 0:2], prev.alpha[:, 0:2])  # first "a"
    assert not s.alpha[:, 2:6].any()  # the new sentence
    np.testing.assert_array_equal(s.alpha[:, 6:8], prev.alpha[:, 5:7])  # second "a"
    assert not s.alpha[:, 8:10].any()  # a third "a" has no previous copy left
    np.testing.assert_array_equal(s.lam[:, 6:8], prev.lam[:, 5:7])
    np.testing.assert_array_equal(s.m_S, prev.m_S)
    assert np.all(s.r[np.arange(10), problem.y] == 1.0)  # r is never copied


def test_missing_labels_carry_only_theta_and_unknown_parts_are_refused():
    lengths = np.array([3, 3])
    _, prev = _state(lengths)
    prev.theta[:] = 1.25
    problem, _ = _state(lengths, missing=(1,))
    s = warm_state(prev, ["a", "b"], lengths, problem, ["a", "b"], lengths)
    assert np.all(s.theta == 1.25)
    assert not s.alpha.any() and not s.m_S.any()
    complete, _ = _state(lengths)
    s = warm_state(prev, ["a", "b"], lengths, complete, ["b", "a"], lengths)
    np.testing.assert_array_equal(s.alpha[:, :3], prev.alpha[:, 3:])
    with pytest.raises(ValueError, match="unknown state part"):
        carry_state(prev, ["a"], lengths, problem, ["a"], lengths, parts=("alpha", "r"))
