"""The qdrant-edge backend against the qdrant-client store: the same top-k on a small hand-built case
(dense, sparse BM25 with IDF, RRF hybrid), idempotent upserts, and Qdrant's IDF in closed form.

Skips when qdrant-edge-py is not installed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rerankeval.index.bm25 import BM25Index
from rerankeval.index.qdrant import store as qs

pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install qdrant-edge-py==0.9.0)")

from rerankeval.index.qdrant import edge as qe  # noqa: E402 - after the skip

TEXTS = {
    "c1": "red apples and green pears",
    "c2": "green apples",
    "c3": "blue sky over the sea",
    "c4": "apples apples apples everywhere",
    "c5": "deep blue sea water",
    "c6": "pears in the deep green sea today",  # "today": no BM25 tie with c1 (engines order ties freely)
}
QUERIES = {"q1": "green apples", "q2": "deep blue sea", "q3": "pears", "q4": "nothing matches"}
NAME = "ds-0123456789abcdef"


@pytest.fixture
def both(tmp_path):
    """The same chunks in a qdrant-client store and an edge shard, plus the query vectors."""
    ids = sorted(TEXTS)
    idx = BM25Index.build(ids, [TEXTS[i] for i in ids])
    rng = np.random.default_rng(7)
    dense = rng.normal(size=(len(ids), 8)).astype(np.float32)
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    qvecs = rng.normal(size=(len(QUERIES), 8)).astype(np.float32)
    qsparse = [idx.sparse_query_vector(t) for t in QUERIES.values()]
    id_to_chunk = {qs.point_id(c): c for c in ids}
    with qs.open_client(path=tmp_path / "client", url="") as client, qe.open_shard(tmp_path / "edge", 8) as shard:
        qs.ensure_collection(client, NAME, 8)
        qs.upsert_chunks(client, NAME, ids, ids, dense, idx.sparse_doc_vectors(), progress=False)
        qe.upsert_chunks(shard, ids, ids, dense, idx.sparse_doc_vectors())
        yield client, shard, ids, idx, dense, qvecs, qsparse, id_to_chunk


def _ranked(run):
    return {q: list(r) for q, r in run.items()}


def _close(a, b):
    for q in a:
        assert list(a[q]) == list(b[q])
        assert np.allclose(list(a[q].values()), list(b[q].values()), rtol=1e-5, atol=1e-6)


def test_dense_top_k_is_the_same(both):
    client, shard, ids, idx, dense, qvecs, qsparse, id_to_chunk = both
    qids = list(QUERIES)
    a = qs.search_dense(client, NAME, qids, qvecs, 3, id_to_chunk)
    b = qe.search_dense(shard, qids, qvecs, 3, id_to_chunk)
    _close(a, b)
    # and both are the exact cosine top 3
    unit = qvecs / np.linalg.norm(qvecs, axis=1, keepdims=True)
    for q, v in zip(qids, unit, strict=True):
        assert list(b[q]) == [ids[i] for i in np.argsort(-(dense @ v))[:3]]


def test_sparse_top_k_is_the_same_and_uses_qdrants_idf(both):
    client, shard, ids, idx, dense, qvecs, qsparse, id_to_chunk = both
    qids = list(QUERIES)
    a = qs.search_sparse(client, NAME, qids, qsparse, 10, id_to_chunk)
    b = qe.search_sparse(shard, qids, qsparse, 10, id_to_chunk)
    _close(a, b)
    assert b["q4"] == {}  # no known term: no sparse leg
    # "pears" is in 2 of 6 chunks: idf = ln((6 - 2 + 0.5) / (2 + 0.5) + 1); score = idf * tf saturation
    idf = math.log((6 - 2 + 0.5) / (2 + 0.5) + 1)
    sat = dict(zip(ids, idx.sparse_doc_vectors(), strict=True))
    tid = idx.term_id[idx.analyzer("pears")[0]]
    expect = {c: idf * v[1][v[0].index(tid)] for c, v in sat.items() if tid in v[0]}
    assert set(b["q3"]) == set(expect)
    for c, s in expect.items():
        assert b["q3"][c] == pytest.approx(s, rel=1e-5)


def test_hybrid_is_the_same(both):
    client, shard, ids, idx, dense, qvecs, qsparse, id_to_chunk = both
    qids = list(QUERIES)
    kw = dict(leg_k=4, limit=8, id_to_chunk=id_to_chunk)
    a = qs.search_hybrid(client, NAME, qids, qvecs, qsparse, **kw)
    b = qe.search_hybrid(shard, qids, qvecs, qsparse, **kw)
    _close(a, b)
    # RRF with the paper's k = 60 (Qdrant's 61): every fused score is 1/(60 + r) or 1/(60 + r1) + 1/(60 + r2)
    single = [1 / (60 + r) for r in range(1, 5)]
    allowed = single + [x + y for x in single for y in single]
    for q in qids:
        assert b[q]
        for score in b[q].values():
            assert min(abs(score - v) for v in allowed) < 1e-6


def test_upsert_is_idempotent_and_checks_lengths(both):
    client, shard, ids, idx, dense, qvecs, qsparse, id_to_chunk = both
    qe.upsert_chunks(shard, ids, ids, dense, idx.sparse_doc_vectors())
    assert qe.point_count(shard) == len(ids)
    with pytest.raises(ValueError, match="same length"):
        qe.upsert_chunks(shard, ids[:2], ids, dense, idx.sparse_doc_vectors())


def test_a_shard_reopens_with_its_points(tmp_path):
    ids = ["a", "b"]
    dense = np.eye(2, 4, dtype=np.float32)
    with qe.open_shard(tmp_path / "s", 4) as shard:
        qe.upsert_chunks(shard, ids, ids, dense, [([0], [1.0]), ([], [])])
    with qe.open_shard(tmp_path / "s", 4) as shard:
        assert qe.point_count(shard) == 2
        run = qe.search_dense(shard, ["q"], dense[:1], 2, {qs.point_id(c): c for c in ids})
        assert list(run["q"]) == ["a", "b"]


def test_batched_upserts_keep_each_chunks_vectors_and_write_no_wal(tmp_path):
    """Several update calls (batch_size 2 over 5 chunks): each point keeps its own dense and sparse vector;
    the shard is created without a write-ahead log and reopens with every point after the flush."""
    ids = [f"c{i}" for i in range(5)]
    dense = np.eye(5, 5, dtype=np.float32)
    sparse = [([i], [1.0]) if i != 3 else ([], []) for i in range(5)]
    id_to_chunk = {qs.point_id(c): c for c in ids}
    with qe.open_shard(tmp_path / "s", 5) as shard:
        qe.upsert_chunks(shard, ids, ids, dense, sparse, batch_size=2)
    assert not (tmp_path / "s" / "wal").exists()
    with qe.open_shard(tmp_path / "s", 5) as shard:
        assert qe.point_count(shard) == 5
        dense_run = qe.search_dense(shard, ids, dense, 1, id_to_chunk)
        assert {q: list(r) for q, r in dense_run.items()} == {c: [c] for c in ids}
        sparse_run = qe.search_sparse(shard, ids, sparse, 1, id_to_chunk)
        assert {q: list(r) for q, r in sparse_run.items()} == {c: ([] if c == "c3" else [c]) for c in ids}
