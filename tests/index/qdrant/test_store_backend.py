"""Which Qdrant backend stage 02 fills and how its dense search runs: QDRANT_URL means a server, a collection
built by one backend and opened by the other is rebuilt with a message, exact search below Qdrant's indexing
threshold and HNSW above it, and the recall@10 of the approximate search against exact search (closed form,
and cross-checked with ranx). Skips the edge cases when qdrant-edge-py is not installed."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from hashembed import CHUNKS, DIM, QUERIES, HashEmbedder, hash_dataset
from indexing import build_index
from rerankeval import index
from rerankeval.core.settings import Settings, load_settings
from rerankeval.index.qdrant import edge as qdrant_edge
from rerankeval.index.qdrant import recall
from rerankeval.index.qdrant import store as qdrant_store


@pytest.fixture
def dp(tmp_path, monkeypatch):
    monkeypatch.delenv("QDRANT_URL", raising=False)
    monkeypatch.delenv("RERANKEVAL_QDRANT_BACKEND", raising=False)
    return hash_dataset(tmp_path / "src" / "tiny")


def build(dp, backend: str | None = None) -> index.Result:
    """Stage 02 through its face with the hash embedder; ``backend`` overrides the configured one."""
    settings = load_settings()
    if backend is not None:
        settings = settings.model_copy(update={"qdrant_backend": backend})
    return build_index(dp, embedder=HashEmbedder(), settings=settings)


def _edge():
    pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install qdrant-edge-py==0.9.0)")


# ---------------------------------------------------------------- which backend
def test_qdrant_url_means_a_server_whatever_the_default():
    url = "http://localhost:6333"
    assert qdrant_edge.backend(Settings(qdrant_url=url)) == "client"
    assert qdrant_edge.backend(Settings(qdrant_backend="client", qdrant_url=url)) == "client"
    # the default flipped to edge (not set by the user): QDRANT_URL still selects the server
    flipped = Settings.model_construct(qdrant_url=url, qdrant_backend="edge", _fields_set={"qdrant_url"})
    assert qdrant_edge.backend(flipped) == "client"
    assert qdrant_edge.backend(Settings.model_construct(qdrant_backend="edge", _fields_set=set())) == "edge"
    with pytest.raises(ValueError, match="cannot use the server at QDRANT_URL=.*unset QDRANT_URL"):
        qdrant_edge.backend(Settings(qdrant_backend="edge", qdrant_url=url))
    assert qdrant_edge.backend(Settings(qdrant_backend="edge")) == "edge"
    with pytest.raises(ValueError, match="unknown Qdrant backend 'server': set RERANKEVAL_QDRANT_BACKEND"):
        qdrant_edge.backend(Settings().model_copy(update={"qdrant_backend": "server"}))


def test_stage_02_with_qdrant_url_goes_to_the_server(dp, monkeypatch):
    monkeypatch.setenv("QDRANT_URL", "http://127.0.0.1:1")  # nothing listens: the server path must be tried
    with pytest.raises(qdrant_store.QdrantUnavailable, match="QDRANT_URL=http://127.0.0.1:1"):
        build(dp)


# ---------------------------------------------------------------- a collection built by the other backend
def test_a_collection_of_the_other_backend_is_rebuilt_with_a_message(dp, monkeypatch, caplog):
    _edge()
    first = build(dp, "client")
    assert "backend switch" not in first.info.actions and first.messages()[-1].startswith("Dense search (client")
    caplog.set_level(logging.WARNING, logger="rerankeval.index.build")
    edge = build(dp, "edge")
    msg = edge.info.actions["backend switch"]
    assert f"{edge.info.collection} was built by the 'client' backend" in msg and "rebuilding it with 'edge'" in msg
    assert "RERANKEVAL_QDRANT_BACKEND=client" in msg and msg in caplog.text and edge.messages()[0] == msg
    assert edge.info.actions["qdrant"] == "upserted" and index.load_index_info(dp).backend == "edge"
    again = build(dp, "edge")
    assert "backend switch" not in again.info.actions and again.info.actions["qdrant"] == "reused"
    back = build(dp, "client")
    assert "built by the 'edge' backend" in back.info.actions["backend switch"]
    assert back.info.actions["qdrant"] == "upserted"


def test_the_client_backend_is_one_setting_away(dp, monkeypatch):
    _edge()
    monkeypatch.setenv("RERANKEVAL_QDRANT_BACKEND", "edge")
    assert build(dp).info.backend == "edge"
    monkeypatch.setenv("RERANKEVAL_QDRANT_BACKEND", "client")
    info = build(dp)
    assert info.info.backend == "client" and info.info.qdrant.startswith("embedded store ")


# ---------------------------------------------------------------- exact below the threshold, HNSW above
def test_a_small_collection_is_searched_exactly_and_says_so(dp):
    _edge()
    info = build(dp, "edge")
    ds = info.info.dense_search
    assert ds["mode"] == "exact" and ds["hnsw_points"] == 0 and ds["points"] == len(CHUNKS)
    assert ds["queries"] == len(QUERIES) and ds["recall_at_10"] == 1.0  # exact search finds the exact top 10
    assert ds["threshold_points"] == 10_000 * 1024 // (4 * DIM)
    assert info.info.actions["recall check"] == "measured"
    line = info.messages()[-1]
    assert "exact (40 vectors, below Qdrant's indexing threshold" in line
    assert f"recall@10 against exact search on {len(QUERIES)} sampled queries: 1.000" in line
    warm = build(dp, "edge")
    assert warm.info.dense_search == ds and "recall check" not in warm.info.actions  # kept, not re-measured
    assert index.load_index_info(dp).dense_search == ds


def test_above_the_threshold_the_graph_is_built_and_its_recall_measured(dp, monkeypatch):
    _edge()
    monkeypatch.setattr(qdrant_edge, "INDEXING_THRESHOLD_KB", 1)  # 40 x 16 float32 = 2.5 KB > 1 KB
    info = build(dp, "edge")
    ds = info.info.dense_search
    assert ds["mode"] == "hnsw" and ds["hnsw_points"] == len(CHUNKS)
    assert 0.0 <= ds["recall_at_10"] <= 1.0 and "approximate (HNSW graph over 40 of 40" in info.messages()[-1]


def test_the_client_local_mode_is_exact_and_not_measured(dp):
    info = build(dp, "client")
    ds = info.info.dense_search
    assert ds["mode"] == "exact" and ds["recall_at_10"] is None and "scores every point" in ds["reason"]
    assert "recall@10 not measured: qdrant-client's local mode" in info.messages()[-1]


def test_edge_exact_search_is_numpys_cosine_top_10_and_hnsw_is_measured_against_it(tmp_path):
    """Above a lowered threshold the shard holds an HNSW graph; ``exact=True`` is the brute-force top 10
    (numpy), and :func:`recall.measure` is the overlap of the default search with it."""
    _edge()
    rng = np.random.default_rng(3)
    n, dim = 600, 24
    dense = rng.normal(size=(n, dim)).astype(np.float32)
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    ids = [f"c{i:04d}" for i in range(n)]
    qv = rng.normal(size=(30, dim)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    qids = [f"q{i}" for i in range(30)]
    id_to_chunk = {qdrant_store.point_id(c): c for c in ids}
    sparse = [([i % 5], [1.0]) if i % 2 else ([], []) for i in range(n)]
    with qdrant_edge.open_shard(tmp_path / "s", dim, indexing_threshold_kb=4) as shard:
        qdrant_edge.upsert_chunks(shard, ids, ids, dense, sparse)
        assert qdrant_edge.hnsw_points(shard, n // 2) == n
        exact = qdrant_edge.search_dense(shard, qids, qv, 10, id_to_chunk, exact=True)
        approx = qdrant_edge.search_dense(shard, qids, qv, 10, id_to_chunk)
        got, got_eps = recall.measure(lambda *a, **kw: qdrant_edge.search_dense(shard, *a, **kw), qids, qv, id_to_chunk)
    for q, v in zip(qids, qv, strict=True):
        assert list(exact[q]) == [ids[i] for i in np.argsort(-(dense @ v), kind="stable")[:10]]
    assert got == recall.recall_at_k(approx, exact)
    assert recall.recall_within(approx, exact) == got_eps >= got  # every exact hit it finds is within the bound
    assert got == pytest.approx(np.mean([len(set(approx[q]) & set(exact[q])) / 10 for q in qids]))


def test_a_shard_below_the_threshold_holds_no_graph(tmp_path):
    _edge()
    dense = np.eye(8, 8, dtype=np.float32)
    ids = [f"c{i}" for i in range(8)]
    with qdrant_edge.open_shard(tmp_path / "s", 8) as shard:
        qdrant_edge.upsert_chunks(shard, ids, ids, dense, [([i], [1.0]) for i in range(8)])
        assert qdrant_edge.hnsw_points(shard, 8) == 0 and qdrant_edge.point_count(shard) == 8


# ---------------------------------------------------------------- recall@k and the sample
def test_recall_at_k_in_closed_form_and_against_ranx():
    exact = {"a": {f"d{i}": 10.0 - i for i in range(10)}, "b": {f"d{i}": 1.0 for i in range(3)}, "c": {}}
    approx = {"a": {**{f"d{i}": 1.0 for i in range(8)}, "x": 0.5, "y": 0.4}, "b": {"d0": 1.0, "z": 0.9}}
    assert recall.recall_at_k(approx, exact) == pytest.approx((8 / 10 + 1 / 3) / 2)  # "c": no exact result
    assert recall.recall_at_k({}, {"q": {}}) is None
    assert recall.recall_at_k(approx, {"a": exact["a"]}, k=5) == 1.0
    ranx = pytest.importorskip("ranx")
    qrels = ranx.Qrels({q: {d: 1 for d in r} for q, r in exact.items() if r})
    run = ranx.Run({q: approx[q] for q in qrels.keys()})
    assert recall.recall_at_k(approx, exact) == pytest.approx(ranx.evaluate(qrels, run, "recall@10"))


def test_epsilon_recall_counts_near_ties_as_found_in_closed_form():
    """ANN-Benchmarks' epsilon recall: an approximate hit counts when its cosine distance is at most 1.01 times
    the exact 10th neighbour's. Query "a": exact 10th similarity .90 (distance .10, bound .101); the approximate
    list swaps two exact hits for a near-tie (.8995, distance .1005) and a worse one (.80): recall 8/10, epsilon
    recall 9/10. Query "b" has fewer than 10 exact results and is left out."""
    exact = {"a": {f"d{i}": 0.99 - 0.01 * i for i in range(10)}, "b": {"d0": 1.0}}
    approx = {"a": {**{f"d{i}": 0.99 - 0.01 * i for i in range(8)}, "tie": 0.8995, "far": 0.80}, "b": {}}
    assert recall.recall_at_k(approx, {"a": exact["a"]}) == pytest.approx(0.8)
    assert recall.recall_within(approx, exact) == pytest.approx(0.9)
    assert recall.recall_within(approx, exact, eps=0.0) == pytest.approx(0.8)  # exact distances only
    assert recall.recall_within(exact, exact) == 1.0 and recall.recall_within({}, {"b": {"d0": 1.0}}) is None
    line = recall.DenseSearch("edge", recall.HNSW, 20, 20, 10, 0.8, 1, recall_at_10_eps=0.9).describe()
    assert "recall@10 against exact search on 1 sampled queries: 0.800 (0.900 of its top 10 within 1%" in line


def test_the_dense_search_line_names_the_exact_switch_when_recall_is_low_and_says_when_it_is_on():
    low = recall.DenseSearch("edge", recall.HNSW, 20, 20, 10, 0.9, 5, recall_at_10_eps=0.95)
    high = recall.DenseSearch("edge", recall.HNSW, 20, 20, 10, 0.99, 5, recall_at_10_eps=1.0)
    assert "set RERANKEVAL_DENSE_EXACT=true for exact search in stage 03" in low.describe()
    assert "RERANKEVAL_DENSE_EXACT" not in high.describe()
    on = low.describe(exact_in_03=True)
    assert "stage 03 scores every vector instead (RERANKEVAL_DENSE_EXACT)" in on and "set RERANKEVAL" not in on
    below = recall.DenseSearch("edge", recall.EXACT, 5, 0, 10, 1.0, 5)
    assert "RERANKEVAL_DENSE_EXACT" not in below.describe(exact_in_03=True)  # exact anyway


def test_the_query_sample_is_seeded_and_capped():
    queries = {f"q{i:03d}": f"text {i}" for i in range(250)}
    a = recall.sample_queries(queries)
    assert len(a) == recall.SAMPLE and a == recall.sample_queries(queries) and list(a) == sorted(a)
    assert set(a) <= set(queries) and recall.sample_queries(queries, seed=1) != a
    assert recall.sample_queries({"q1": "x"}) == {"q1": "x"} and recall.threshold_points(384) == 6666


def test_a_manifest_without_the_record_gets_it_measured_on_the_kept_shard(dp):
    """A shard built before stage 02 recorded its dense search: reused as is, only the check runs."""
    _edge()
    first = build(dp, "edge")
    m = json.loads(dp.index_manifest.read_text(encoding="utf-8"))
    del m["dense_search"]
    dp.index_manifest.write_text(json.dumps(m), encoding="utf-8")
    again = build(dp, "edge")
    assert again.info.actions["qdrant"] == "reused" and again.info.actions["recall check"] == "measured"
    assert {k: v for k, v in again.info.dense_search.items() if k != "seconds"} == {
        k: v for k, v in first.info.dense_search.items() if k != "seconds"
    }
