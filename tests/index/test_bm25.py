"""BM25: the analyser, closed-form scores, the fast path == rank-bm25, no zero-score padding, persistence."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from rerankeval.core.settings import load_settings
from rerankeval.index.bm25 import STOPWORDS_EN, Analyzer, BM25Index, BM25Params, build_or_load, index_key

K1, B = 1.2, 0.75


def test_analyzer_lowercases_drops_stopwords_and_stems():
    a = Analyzer()
    assert a("The Running dogs, don't RUN!") == ["run", "dog", "run"]
    assert a("IL-6 levels") == ["il", "6", "level"]
    assert a("") == []
    assert "the" in STOPWORDS_EN and len(STOPWORDS_EN) == 179
    assert Analyzer(stopwords=None, stemmer=None)("The dogs") == ["the", "dogs"]


def test_analyzer_spec_changes_the_key():
    k = index_key("h", BM25Params(), Analyzer())
    assert k == index_key("h", BM25Params(), Analyzer())
    assert k != index_key("h", BM25Params(k1=1.5), Analyzer())
    assert k != index_key("h", BM25Params(), Analyzer(stemmer=None))
    assert k != index_key("h2", BM25Params(), Analyzer())


def _index(docs, **kw):
    return BM25Index.from_tokens([f"d{i}" for i in range(len(docs))], docs, params=BM25Params(**kw))


def test_closed_form_equal_lengths():
    # 4 documents of length 2: |d|/avgdl = 1, so saturation = tf (k1+1) / (tf + k1)
    docs = [["apple", "x"], ["pear", "x"], ["plum", "y"], ["fig", "y"]]
    idx = _index(docs)
    s = idx.scores_tokens(["apple"])
    idf_apple = math.log(4 - 1 + 0.5) - math.log(1 + 0.5)  # ln(3.5/1.5)
    assert s[0] == pytest.approx(idf_apple * 1 * (K1 + 1) / (1 + K1), abs=1e-12)
    assert s[1:].tolist() == [0.0, 0.0, 0.0]
    # a repeated query term counts twice (as rank-bm25 does)
    assert idx.scores_tokens(["apple", "apple"])[0] == pytest.approx(2 * s[0], abs=1e-12)
    # df = N/2 gives idf ln(2.5) - ln(2.5) = 0: "x" contributes nothing
    assert idx.scores_tokens(["x"]).tolist() == [0.0] * 4


def test_closed_form_length_normalisation_and_tf():
    docs = [["a", "a", "b", "c"], ["a", "d"], ["e", "f"], ["g", "h"]]  # avgdl = 2.5
    idx = _index(docs)
    idf_a = math.log(4 - 2 + 0.5) - math.log(2 + 0.5)  # 0: exactly half the documents
    assert idf_a == 0.0
    idf_b = math.log(3.5 / 1.5)
    sat = 1 * (K1 + 1) / (1 + K1 * (1 - B + B * 4 / 2.5))
    assert idx.scores_tokens(["b"])[0] == pytest.approx(idf_b * sat, abs=1e-12)


def test_negative_idf_floor_uses_epsilon_times_mean_raw_idf():
    docs = [["t", "u1"], ["t", "u2"], ["t", "u3"], ["v"]]
    idx = _index(docs)
    n = 4
    raw = {
        w: math.log(n - df + 0.5) - math.log(df + 0.5) for w, df in {"t": 3, "u1": 1, "u2": 1, "u3": 1, "v": 1}.items()
    }
    eps = 0.25 * sum(raw.values()) / len(raw)
    assert raw["t"] < 0 and eps > 0
    assert idx.idf[idx.term_id["t"]] == pytest.approx(eps, abs=1e-15)
    assert idx.idf[idx.term_id["v"]] == pytest.approx(raw["v"], abs=1e-15)


def _assert_same_as_rank_bm25(docs, queries, **kw):
    idx = _index(docs, **kw)
    ref = idx.to_rank_bm25(docs)
    for q in queries:
        np.testing.assert_allclose(idx.scores_tokens(q), ref.get_scores(q), rtol=0, atol=1e-9)


def test_fast_path_equals_rank_bm25_hand_built():
    docs = [
        "the quick brown fox jumps over the lazy dog".split(),
        "the lazy dog sleeps".split(),
        "a quick quick quick fox".split(),
        [],  # an empty document
        "dog dog dog dog dog dog dog dog".split(),
        "the fox".split(),
    ]
    queries = [["fox"], ["quick", "fox"], ["dog", "dog"], ["unknown"], [], ["the", "lazy", "zebra"]]
    _assert_same_as_rank_bm25(docs, queries)
    _assert_same_as_rank_bm25(docs, queries, k1=1.5, b=0.3, epsilon=0.5)


@pytest.mark.parametrize("seed", range(8))
def test_fast_path_equals_rank_bm25_random(seed):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(rng.randint(3, 60))]
    weights = [1 / (i + 1) for i in range(len(vocab))]  # Zipf-ish: some terms in most documents
    docs = [rng.choices(vocab, weights, k=rng.randint(0, 40)) for _ in range(rng.randint(1, 80))]
    queries = [rng.choices(vocab + ["oov"], k=rng.randint(0, 8)) for _ in range(20)]
    k1, b = rng.uniform(0.5, 2.0), rng.uniform(0.0, 1.0)
    _assert_same_as_rank_bm25(docs, queries, k1=k1, b=b)


def test_search_never_pads_with_zero_score_documents_and_breaks_ties_by_id():
    texts = {"c": "apples and pears", "a": "apples and pears", "b": "plums", "d": "grapes", "e": "kiwis"}
    idx = BM25Index.build(list(texts), list(texts.values()))
    run = idx.search({"q1": "apple", "q2": "banana", "q3": "the and"}, k=10)
    assert list(run["q1"]) == ["a", "c"]  # tie -> id ascending; plums/grapes/kiwis (score 0) left out
    assert run["q1"]["a"] == run["q1"]["c"] > 0
    assert run["q2"] == {} and run["q3"] == {}
    assert list(idx.search({"q": "apples"}, k=1)["q"]) == ["a"]


def test_top_k_keeps_exact_ties_at_the_cutoff_in_id_order():
    ids = [f"d{i:02d}" for i in range(30)][::-1] + ["e1", "e2", "e3"]
    # "words" is in 30 of 33 documents: its idf is floored to epsilon * mean idf, positive here
    others = ["alpha beta gamma", "delta epsilon", "zeta eta theta"]
    idx = BM25Index.build(ids, ["same words here"] * 30 + others)
    got = list(idx.search({"q": "words"}, k=5)["q"])
    assert got == ["d00", "d01", "d02", "d03", "d04"]


def test_save_load_roundtrip_and_build_or_load(tmp_path):
    ids = ["x", "y", "z"]
    texts = ["red apples", "green apples and pears", "blue sky"]
    idx, built = build_or_load(tmp_path, ids, texts, corpus_hash="h1")
    assert built
    again, built2 = build_or_load(tmp_path, ids, texts, corpus_hash="h1")
    assert not built2 and again.ids == ids and again.vocab == idx.vocab
    np.testing.assert_array_equal(again.scores("apples"), idx.scores("apples"))
    # a damaged index is rebuilt
    key = index_key("h1", BM25Params(), Analyzer())
    (tmp_path / key / "index.npz").write_bytes(b"garbage")
    _, built3 = build_or_load(tmp_path, ids, texts, corpus_hash="h1")
    assert built3
    # other parameters: another folder
    _, built4 = build_or_load(tmp_path, ids, texts, corpus_hash="h1", params=BM25Params(k1=2.0))
    assert built4 and len(list(tmp_path.iterdir())) == 2


def test_sparse_vectors_use_stable_vocabulary_and_saturation():
    idx = BM25Index.build(["a", "b"], ["cat cat dog", "dog"])
    assert idx.vocab == ["cat", "dog"]
    (ia, va), (ib, vb) = idx.sparse_doc_vectors()
    avgdl = 2.0
    assert ia == [0, 1] and ib == [1]
    assert va[0] == pytest.approx(2 * (K1 + 1) / (2 + K1 * (1 - B + B * 3 / avgdl)))
    assert vb[0] == pytest.approx(1 * (K1 + 1) / (1 + K1 * (1 - B + B * 1 / avgdl)))
    assert idx.sparse_query_vector("dogs and cats and unicorns") == ([0, 1], [1.0, 1.0])


@pytest.mark.shared
def test_fast_path_equals_rank_bm25_on_scifact():
    from builders import extract_corpus
    from rerankeval.core import paths
    from rerankeval.corpus import contract as corpus

    if not (paths.SHARED_DATA_DIR / "scifact").is_dir():
        pytest.skip(f"{paths.SHARED_DATA_DIR / 'scifact'} is absent: this test needs ../shared/data/scifact")
    dp = paths.resolve_dataset("scifact", load_settings())
    extract_corpus(dp)  # into the test's own results dir (conftest)
    texts = corpus.chunk_texts(dp)
    ids = sorted(texts)
    an = Analyzer()
    docs = [an(texts[i]) for i in ids]
    idx = BM25Index.from_tokens(ids, docs, analyzer=an)
    ref = idx.to_rank_bm25(docs)
    for text in list(corpus.load_queries(dp).values())[:15]:
        tokens = an(text)
        fast, slow = idx.scores_tokens(tokens), ref.get_scores(tokens)
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-9)
        assert [d for d, _ in idx.top_k(fast, 100)] == [d for d, _ in idx.top_k(slow, 100)]


def test_sparse_rows_are_the_matrix_rows_made_when_asked_for():
    """Indexing, negative indices, slices and iteration give the rows of the saturation matrix; a document
    without terms has an empty row and is not counted by ``nonempty``."""
    idx = BM25Index.build(["a", "b", "c"], ["cat cat dog", "the and", "dog"])
    rows = idx.sparse_doc_vectors()
    sat = idx._saturation()
    want = [
        (sat.indices[a:z].tolist(), sat.data[a:z].tolist())
        for a, z in zip(sat.indptr[:-1], sat.indptr[1:], strict=True)
    ]
    assert len(rows) == 3 and list(rows) == want and rows[-1] == want[2] and rows[1:] == want[1:]
    assert rows[1] == ([], []) and rows.nonempty() == 2
    with pytest.raises(IndexError):
        rows[3]
