"""BM25Index.build (one pass over the corpus, index.terms.count_terms) == from_tokens of the analysed texts:
the same vocabulary, the same matrix arrays and dtypes, so the same saved index and the same scores."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rerankeval.index.bm25 import Analyzer, BM25Index
from rerankeval.index.terms import count_terms

TEXTS = [
    "The Running dogs, don't RUN! The dogs run.",
    "",  # an empty document
    "the and of",  # stopwords only: a document without terms
    "IL-6 levels: IL-6, il_6 and Ünïcödé ÉTÉ été 42",
    "running runs ran runner; RUNNING",
    "b-cells B cells b\u00a0cells",
]


def _same(a: BM25Index, b: BM25Index) -> None:
    assert a.ids == b.ids and a.vocab == b.vocab and a.tf.shape == b.tf.shape
    for name in ("data", "indices", "indptr"):
        x, y = getattr(a.tf, name), getattr(b.tf, name)
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y)


def _reference(ids, texts, analyzer):
    return BM25Index.from_tokens(ids, [analyzer(t) for t in texts], analyzer=analyzer)


@pytest.mark.parametrize(
    "analyzer",
    [
        Analyzer(),
        Analyzer(stopwords=None),
        Analyzer(stemmer=None),
        Analyzer(lowercase=False),
        Analyzer(stopwords=None, stemmer=None),
    ],
    ids=["default", "no-stopwords", "no-stemmer", "case-kept", "raw"],
)
def test_build_equals_from_tokens_of_the_analysed_texts(analyzer):
    ids = [f"d{i}" for i in range(len(TEXTS))]
    fast = BM25Index.build(ids, TEXTS, analyzer=analyzer)
    _same(
        fast,
        _reference(
            ids,
            TEXTS,
            Analyzer(**{k: getattr(analyzer, k) for k in ("lowercase", "token_pattern", "stopwords", "stemmer")}),
        ),
    )
    assert fast.tf.getrow(2).nnz == (0 if analyzer.stopwords else 3)


@pytest.mark.parametrize("seed", range(4))
def test_build_equals_from_tokens_random(seed):
    rng = random.Random(seed)
    words = ["Cell", "cells", "the", "of", "growth", "GROWING", "grew", "x1", "é", "don't", "b-12"]
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 30))) for _ in range(rng.randint(1, 60))]
    ids = [f"{rng.random():.12f}" for _ in texts]
    an = Analyzer()
    fast = BM25Index.build(ids, texts, analyzer=an)
    _same(fast, _reference(ids, texts, Analyzer()))
    q = "cells growing of the b 12"
    np.testing.assert_array_equal(fast.scores(q), _reference(ids, texts, Analyzer()).scores(q))


def test_count_terms_known_answer():
    vocab, tf = count_terms(Analyzer(), ["Dogs and dogs", "the cat", "", "cat dog CATS"])
    assert vocab == ["cat", "dog"]
    assert tf.toarray().tolist() == [[0, 2], [1, 0], [0, 0], [2, 1]]


def test_build_refuses_mismatched_or_duplicate_ids():
    with pytest.raises(ValueError, match="2 ids but 1 documents"):
        BM25Index.build(["a", "b"], ["text"])
    with pytest.raises(ValueError, match="unique"):
        BM25Index.build(["a", "a"], ["x", "y"])


@pytest.mark.shared
def test_build_equals_from_tokens_on_scifact():
    from rerankeval.core import paths
    from rerankeval.corpus import beir

    folder = paths.SHARED_DATA_DIR / "scifact"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent: this test needs ../shared/data/scifact")
    docs = beir.read_corpus(beir.find_corpus(folder))
    ids = sorted(docs)
    texts = [f"{docs[i]['title']}\n{docs[i]['text']}" for i in ids]
    _same(BM25Index.build(ids, texts), _reference(ids, texts, Analyzer()))
