"""String features of one word, for the built-in feature set ``ner`` (:class:`gpsl.features.
NerFeatures`): its shape, short shape, capitalisation, digits, position, and windows over a
sentence's values with CRF++'s out-of-sentence markers."""

from __future__ import annotations

__all__ = ["capitalisation", "digits", "position", "short_shape", "window", "word_shape"]


def word_shape(word: str) -> str:
    """``Xxxx`` for ``Mark``, ``dd-dd`` for ``12-34``: upper-case letters ``X``, other letters
    ``x``, digits ``d``, every other character kept."""
    return "".join("X" if ch.isupper() else "x" if ch.isalpha() else "d" if ch.isdigit()
                   else ch for ch in word)


def short_shape(shape: str) -> str:
    """A shape with runs of one character collapsed: ``Xxxx`` -> ``Xx``, ``dd-dd`` -> ``d-d``."""
    return "".join(ch for i, ch in enumerate(shape) if i == 0 or ch != shape[i - 1])


def capitalisation(word: str) -> str:
    """``all`` (two or more letters, all upper case), ``mixed`` (an upper-case letter after
    the first character and a lower-case one), ``init`` (first character upper case),
    ``lower`` (letters, none upper case) or ``none`` (no letter)."""
    letters = [ch for ch in word if ch.isalpha()]
    if not letters:
        return "none"
    upper = [ch.isupper() for ch in letters]
    if len(letters) > 1 and all(upper):
        return "all"
    if any(ch.isupper() for ch in word[1:]) and not all(upper):
        return "mixed"
    if word[0].isupper():
        return "init"
    return "lower" if not any(upper) else "mixed"


def digits(word: str) -> str:
    """``all`` (every character a digit), ``some`` or ``none``."""
    n = sum(ch.isdigit() for ch in word)
    return "none" if n == 0 else "all" if n == len(word) else "some"


def position(i: int, n: int) -> str:
    """Token ``i`` of ``n``: ``only``, ``first``, ``last`` or ``mid``."""
    return "only" if n == 1 else "first" if i == 0 else "last" if i == n - 1 else "mid"


def window(values: list[str], k: int) -> list[str]:
    """``values`` shifted by ``k`` (``out[i] = values[i + k]``), CRF++'s ``_B-1``/``_B+1``
    outside the sentence."""
    n = len(values)
    return [values[i + k] if 0 <= i + k < n else (f"_B{i + k}" if i + k < 0 else
                                                   f"_B+{i + k - n + 1}") for i in range(n)]
