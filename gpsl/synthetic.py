"""Small synthetic sequence-labeling tasks with known structure (tests, examples, demos).

``make_chain_task`` draws label sequences from a sticky Markov chain and words from
label-dependent vocabularies that overlap, so a token's own word is ambiguous and
the neighbouring labels carry real information: the setting where GPSL's dependent
latent functions and the marginalisation of missing labels matter.
"""

from __future__ import annotations

import numpy as np


def make_chain_task(n_sentences: int, *, n_labels: int = 3, vocab_per_label: int = 8,
                    shared_vocab: int = 6, ambiguity: float = 0.45, stay: float = 0.8,
                    min_len: int = 5, max_len: int = 14, seed: int = 0):
    """Sentences (one-column tokens) and label sequences from a sticky Markov chain.

    Each label ``k`` emits a word from its own vocabulary ``w<k>_<i>`` with probability
    ``1 - ambiguity`` and otherwise a word from a vocabulary shared by all labels.
    Labels stay the same with probability ``stay`` and otherwise move to the next
    label cyclically, so label pairs are highly predictable from their neighbours.

    Returns ``(sentences, labels)``: ``sentences[i]`` is a list of ``(word,)`` tuples,
    ``labels[i]`` a list of label names ``"L0"``, ``"L1"``, ...
    """
    rng = np.random.default_rng(seed)
    sentences, labels = [], []
    for _ in range(n_sentences):
        L = int(rng.integers(min_len, max_len + 1))
        y = [int(rng.integers(n_labels))]
        for _ in range(L - 1):
            y.append(y[-1] if rng.random() < stay else (y[-1] + 1) % n_labels)
        words = []
        for k in y:
            if rng.random() < ambiguity:
                words.append((f"s_{int(rng.integers(shared_vocab))}",))
            else:
                words.append((f"w{k}_{int(rng.integers(vocab_per_label))}",))
        sentences.append(words)
        labels.append([f"L{k}" for k in y])
    return sentences, labels


def hide_labels(labels, fraction: float, seed: int = 0):
    """Copy of ``labels`` with each label replaced by ``None`` with probability ``fraction``."""
    rng = np.random.default_rng(seed)
    return [[None if rng.random() < fraction else v for v in lab] for lab in labels]


UNIGRAM_TEMPLATE = "U00:%x[0,0]\nU01:%x[-1,0]\nU02:%x[1,0]\nB\n"
"""A CRF++ template for one-column tokens: the word and its two neighbours."""
