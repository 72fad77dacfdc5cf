"""Qdrant store: ids, names, idempotent upserts, native sparse BM25 with IDF, RRF k, unreachable servers."""

from __future__ import annotations

import math
import socket
import uuid

import numpy as np
import pytest

from rerankeval.core.settings import Settings, load_settings
from rerankeval.index.bm25 import BM25Index
from rerankeval.index.qdrant import store as qs
from rerankeval.retrieve.fusion import rrf

TEXTS = {
    "c1": "red apples and green pears",
    "c2": "green apples",
    "c3": "blue sky over the sea",
    "c4": "apples apples apples everywhere",
    "c5": "deep blue sea water",  # not tied with c3 on "blue" (ties are ordered by Qdrant)
}


@pytest.fixture
def store(tmp_path):
    ids = sorted(TEXTS)
    idx = BM25Index.build(ids, [TEXTS[i] for i in ids])
    rng = np.random.default_rng(0)
    dense = rng.normal(size=(len(ids), 8)).astype(np.float32)
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    with qs.open_client(path=tmp_path / "q", url="") as client:
        qs.ensure_collection(client, "ds-0123456789abcdef", 8)
        name = "ds-0123456789abcdef"
        qs.upsert_chunks(client, name, ids, ids, dense, idx.sparse_doc_vectors(), progress=False)
        yield client, name, ids, idx, dense


def test_point_ids_are_deterministic_uuid5():
    assert qs.point_id("doc#p1:0") == qs.point_id("doc#p1:0") != qs.point_id("doc#p1:1")
    assert uuid.UUID(qs.point_id("x")).version == 5


def test_collection_name_changes_with_every_input():
    base = dict(model_key="m", corpus_hash="c", bm25_key="b")
    n = qs.collection_name("my data/set", **base)
    assert n.startswith("my_data_set-") and len(n.split("-")[-1]) == 16
    for k in base:
        assert qs.collection_name("my data/set", **{**base, k: "other"}) != n


def test_upsert_is_idempotent(store):
    client, name, ids, idx, dense = store
    assert qs.point_count(client, name) == len(ids)
    qs.upsert_chunks(client, name, ids, ids, dense, idx.sparse_doc_vectors(), progress=False)
    assert qs.point_count(client, name) == len(ids)
    assert not qs.ensure_collection(client, name, 8)  # exists: left alone


def test_drop_stale_removes_only_this_datasets_old_collections(store):
    client, name, *_ = store
    qs.ensure_collection(client, "ds-ffffffffffffffff", 8)
    qs.ensure_collection(client, "other-ffffffffffffffff", 8)
    assert qs.drop_stale(client, "ds", keep=name) == ["ds-ffffffffffffffff"]
    names = {c.name for c in client.get_collections().collections}
    assert names == {name, "other-ffffffffffffffff"}


def test_dense_search_is_cosine(store):
    client, name, ids, _, dense = store
    id_to_chunk = {qs.point_id(c): c for c in ids}
    run = qs.search_dense(client, name, ["q"], dense[[2]], 3, id_to_chunk)
    assert list(run["q"])[0] == "c3" and run["q"]["c3"] == pytest.approx(1.0, abs=1e-5)
    expect = sorted(ids, key=lambda c: -float(dense[ids.index(c)] @ dense[2]))[:3]
    assert list(run["q"]) == expect


def test_native_sparse_scores_are_bm25_with_qdrant_idf(store):
    client, name, ids, idx, _ = store
    id_to_chunk = {qs.point_id(c): c for c in ids}
    q = idx.sparse_query_vector("apples")
    run = qs.search_sparse(client, name, ["q"], [q], 10, id_to_chunk)["q"]
    n, df = len(ids), 3  # "appl" is in c1, c2, c4
    qidf = math.log((n - df + 0.5) / (df + 0.5) + 1)
    sat = {c: dict(zip(*v, strict=True)) for c, v in zip(ids, idx.sparse_doc_vectors(), strict=True)}
    t = idx.term_id["appl"]
    assert set(run) == {"c1", "c2", "c4"}
    for c, s in run.items():
        assert s == pytest.approx(qidf * sat[c][t], rel=1e-5)
    # a query with no known term returns nothing (no zero-score padding)
    none = idx.sparse_query_vector("zebra")
    assert qs.search_sparse(client, name, ["q"], [none], 10, id_to_chunk) == {"q": {}}


def test_query_api_rrf_is_the_papers_rrf(store):
    client, name, ids, idx, dense = store
    id_to_chunk = {qs.point_id(c): c for c in ids}
    sparse = [idx.sparse_query_vector("blue apples")]
    vec = dense[[0]]
    fused = qs.search_hybrid(client, name, ["q"], vec, sparse, leg_k=3, limit=10, id_to_chunk=id_to_chunk)
    legs = [
        qs.search_dense(client, name, ["q"], vec, 3, id_to_chunk),
        qs.search_sparse(client, name, ["q"], sparse, 3, id_to_chunk),
    ]
    ours = rrf(legs, k=60)["q"]
    assert fused["q"] == pytest.approx(ours, abs=1e-9)
    assert list(fused["q"])[0] == list(ours)[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_fails_clearly(monkeypatch, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("QDRANT_URL", url)
    settings = load_settings()
    assert qs.location(path=tmp_path, settings=settings).url == url
    with pytest.raises(qs.QdrantUnavailable) as err:
        with qs.open_client(path=tmp_path, timeout=2, settings=settings):
            pass
    msg = str(err.value)
    assert url in msg and "QDRANT_URL" in msg and "unset QDRANT_URL" in msg


def _rows(tmp_path, name: str) -> int:
    """Committed points of a local collection, read by another SQLite connection."""
    import sqlite3

    files = list((tmp_path / "q").rglob(f"{name}/storage.sqlite"))
    with sqlite3.connect(files[0]) as conn:
        return conn.execute("SELECT COUNT(*) FROM points").fetchone()[0]


def test_local_upserts_commit_once_and_store_the_same_points(tmp_path):
    """Local mode commits each point on its own; one_commit holds the commits until the block ends."""
    ids = [f"c{i}" for i in range(6)]
    dense = np.eye(6, 8, dtype=np.float32)
    sparse = [([i], [1.0]) for i in range(6)]
    with qs.open_client(path=tmp_path / "q", url="") as client:
        for name in ("held", "plain"):
            qs.ensure_collection(client, name, 8)
        assert qs._local_persistence(client, "held") is not None  # the pinned qdrant-client's storage is found
        with qs.one_commit(client, "held"):
            qs.upsert_chunks(client, "held", ids[:3], ids[:3], dense[:3], sparse[:3], progress=False)
            assert _rows(tmp_path, "held") == 0 and qs.point_count(client, "held") == 3  # applied, not committed
        assert _rows(tmp_path, "held") == 3
        qs.upsert_chunks(client, "held", ids, ids, dense, sparse, progress=False)
        for i in ids:  # today's path: one point per request, one commit each
            j = ids.index(i)
            qs.upsert_chunks(client, "plain", [i], [i], dense[j : j + 1], sparse[j : j + 1], progress=False)
    with qs.open_client(path=tmp_path / "q", url="") as client:  # reopened from disk
        got = {
            n: sorted(
                (p.id, p.payload["chunk_id"], tuple(p.vector["dense"]))
                for p in client.scroll(n, limit=100, with_vectors=True)[0]
            )
            for n in ("held", "plain")
        }
        id_to_chunk = {qs.point_id(c): c for c in ids}
        runs = [qs.search_dense(client, n, ["q"], dense[:1], 6, id_to_chunk) for n in ("held", "plain")]
    assert got["held"] == got["plain"] and len(got["held"]) == 6
    assert runs[0] == runs[1]


def test_the_store_is_where_the_settings_passed_say_never_where_the_environment_does(monkeypatch, tmp_path):
    """No hidden settings: QDRANT_URL in the environment is not read here; without settings the location must be
    explicit (url, '' for the embedded store), and a store without settings is refused, saying what to pass."""
    monkeypatch.setenv("QDRANT_URL", f"http://127.0.0.1:{_closed_port()}")
    assert qs.location(path=tmp_path, url="").path == tmp_path
    assert qs.location(path=tmp_path, settings=Settings(qdrant_url=None)).url is None
    with pytest.raises(TypeError, match="pass the settings .*QDRANT_URL.*or url=''"):
        qs.location(path=tmp_path)
    with pytest.raises(TypeError, match="pass the settings"):
        with qs.open_client(path=tmp_path):
            pass
