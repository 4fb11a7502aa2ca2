"""Crowd votes in long form (one entry per vote) and the majority-vote posteriors."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from gpsl.errors import InputError

__all__ = ["Votes", "majority_posteriors"]




@dataclass
class Votes:
    """Votes over the tokens of a corpus in long form (one entry per vote).

    ``token`` is the flat token index (sentences concatenated), ``annotator`` an index into
    ``annotators``, ``label`` an index into ``classes`` (sorted). ``observed`` holds the class
    index of a trusted (adjudicated) label, -1 elsewhere.
    """

    lengths: np.ndarray
    token: np.ndarray
    annotator: np.ndarray
    label: np.ndarray
    annotators: list[str]
    classes: list[str]
    observed: np.ndarray = field(default=None)

    def __post_init__(self):
        self.lengths = np.asarray(self.lengths, dtype=np.int64)
        self.token = np.asarray(self.token, dtype=np.int64)
        self.annotator = np.asarray(self.annotator, dtype=np.int64)
        self.label = np.asarray(self.label, dtype=np.int64)
        if self.observed is None:
            self.observed = np.full(self.n, -1, dtype=np.int64)
        self.observed = np.asarray(self.observed, dtype=np.int64)
        if not (self.token.shape == self.annotator.shape == self.label.shape):
            raise ValueError("token, annotator and label must have the same length")
        if self.observed.shape != (self.n,):
            raise ValueError(f"observed must have {self.n} entries")
        J, A = len(self.classes), len(self.annotators)
        for arr, hi, what in ((self.token, self.n, "token"), (self.annotator, A, "annotator"),
                              (self.label, J, "label")):
            if arr.size and (arr.min() < 0 or arr.max() >= hi):
                raise ValueError(f"{what} index out of range")
        if np.any(self.observed >= J):
            raise ValueError("observed label index out of range")
        pairs = self.token * max(A, 1) + self.annotator
        if np.unique(pairs).size != pairs.size:
            raise ValueError("an annotator voted twice on one token")

    @property
    def n(self) -> int:
        return int(self.lengths.sum())

    @property
    def J(self) -> int:
        return len(self.classes)

    @property
    def A(self) -> int:
        return len(self.annotators)

    def voted(self) -> np.ndarray:
        """(n,) bool: tokens with at least one vote."""
        out = np.zeros(self.n, dtype=bool)
        out[self.token] = True
        return out

    def n_votes(self) -> np.ndarray:
        """(A,) votes per annotator."""
        return np.bincount(self.annotator, minlength=self.A)

    def design(self) -> sparse.csr_matrix:
        """``M`` (A*J, n): ``M[a*J + l, t] = 1`` for a vote ``l`` of ``a`` on ``t``."""
        rows = self.annotator * self.J + self.label
        return sparse.csr_matrix((np.ones(rows.size), (rows, self.token)),
                                 shape=(self.A * self.J, self.n))

    @classmethod
    def from_sentences(cls, sentences, classes=None, trusted: Iterable[str] = (),
                       source: str = "<input>") -> Votes:
        """Votes of sentences with an ``annotations`` mapping ``{annotator: labels}``.

        ``classes`` fixes the label set (default: every label voted, observed or in the
        sentences' gold ``labels``). Votes of a ``trusted`` annotator become observed labels
        (two trusted annotators disagreeing on a token is an :class:`InputError`).
        """
        trusted = set(trusted)
        seen = set()
        for s in sentences:
            for labs in s.annotations.values():
                seen.update(v for v in labs if v is not None)
            seen.update(v for v in (s.labels or []) if v is not None)
        if classes is None:
            classes = sorted(seen)
        else:
            classes = sorted(str(c) for c in classes)
            unknown = sorted(seen - set(classes))
            if unknown:
                raise InputError(f"labels not in the label set: {unknown[:5]}", source=source)
        if not classes:
            raise InputError("no label in the crowd annotations", source=source)
        index = {c: i for i, c in enumerate(classes)}
        names: dict[str, int] = {}
        lengths, tok, ann, lab = [], [], [], []
        observed: list[int] = []
        start = 0
        for s in sentences:
            L = len(s.tokens)
            lengths.append(L)
            obs = [-1] * L
            for name, labs in s.annotations.items():
                if len(labs) != L:
                    raise InputError(f"annotator {name!r} has {len(labs)} labels for {L} "
                                     "tokens", source=source, line=getattr(s, "line", None))
                for j, v in enumerate(labs):
                    if v is None:
                        continue
                    if name in trusted:
                        if obs[j] >= 0 and obs[j] != index[v]:
                            raise InputError(f"trusted annotators disagree on token {j + 1}",
                                             source=source, line=getattr(s, "line", None))
                        obs[j] = index[v]
                        continue
                    a = names.setdefault(name, len(names))
                    tok.append(start + j)
                    ann.append(a)
                    lab.append(index[v])
            observed.extend(obs)
            start += L
        return cls(lengths=np.array(lengths), token=np.array(tok, dtype=np.int64),
                   annotator=np.array(ann, dtype=np.int64), label=np.array(lab, dtype=np.int64),
                   annotators=list(names), classes=list(classes),
                   observed=np.array(observed, dtype=np.int64))

    def token_sum(self, values: np.ndarray) -> np.ndarray:
        """Per-vote rows ``values`` (V, K) summed per token: (n, K)."""
        values = np.asarray(values, dtype=float)
        out = np.empty((self.n, values.shape[1]))
        for k in range(values.shape[1]):
            out[:, k] = np.bincount(self.token, weights=values[:, k], minlength=self.n)
        return out

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """A per-token array cut into sentences."""
        return np.split(flat, np.cumsum(self.lengths)[:-1])


def votes_from_frame(data) -> tuple[Votes, list]:
    """crowd-kit's long format: rows ``(task, worker, label)`` (a DataFrame or triples)."""
    if hasattr(data, "columns"):
        triples = list(zip(data["task"], data["worker"], data["label"]))
    else:
        triples = [tuple(t) for t in data]
    tasks = list(dict.fromkeys(t for t, _, _ in triples))
    workers = list(dict.fromkeys(w for _, w, _ in triples))
    classes = sorted({str(lab) for _, _, lab in triples})
    ti = {t: i for i, t in enumerate(tasks)}
    wi = {w: i for i, w in enumerate(workers)}
    ci = {c: i for i, c in enumerate(classes)}
    votes = Votes(lengths=np.array([len(tasks)]),
                  token=np.array([ti[t] for t, _, _ in triples], dtype=np.int64),
                  annotator=np.array([wi[w] for _, w, _ in triples], dtype=np.int64),
                  label=np.array([ci[str(lab)] for _, _, lab in triples], dtype=np.int64),
                  annotators=[str(w) for w in workers], classes=classes)
    return votes, tasks



def majority_posteriors(votes: Votes) -> np.ndarray:
    """Vote fractions per token (uniform without votes; one-hot at an observed label)."""
    r = np.zeros((votes.n, votes.J))
    np.add.at(r, (votes.token, votes.label), 1.0)
    tot = r.sum(axis=1, keepdims=True)
    r = np.where(tot > 0, r / np.where(tot > 0, tot, 1.0), 1.0 / votes.J)
    obs = votes.observed >= 0
    r[obs] = 0.0
    r[obs, votes.observed[obs]] = 1.0
    return r

