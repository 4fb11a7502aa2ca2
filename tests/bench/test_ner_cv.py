"""bench.ner_cv: the folds that choose the ner feature set's defaults keep documents whole."""

import numpy as np

from bench.ner_cv import fold_of


def test_a_documents_sentences_share_one_fold_and_every_fold_has_documents():
    docs = [f"d{i % 13}" for i in range(200)]
    fold = fold_of(docs, folds=5)
    for d in set(docs):
        assert len({int(f) for f, e in zip(fold, docs) if e == d}) == 1
    per_fold = [len({d for f, d in zip(fold, docs) if f == k}) for k in range(5)]
    assert sorted(per_fold) == [2, 2, 3, 3, 3]
    assert np.array_equal(fold, fold_of(docs, folds=5))  # a fixed seed
