"""Stages 02/03 end to end on a tiny hand-built PDF-like chunk table (several chunks per page)."""

from __future__ import annotations

import pytest

from indexing import build_index
from rerankeval import index
from rerankeval.core import names, paths
from rerankeval.core.ioutil import atomic_write_jsonl
from rerankeval.core.runs import read_trec, to_units, write_qrels
from rerankeval.core.settings import Settings, load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import metrics
from rerankeval.index import embed
from rerankeval.index.qdrant import edge as qdrant_edge
from rerankeval.index.qdrant import store as qdrant_store
from rerankeval.retrieve import stage, variants
from rerankeval.retrieve.fusion import rrf
from rerankeval.retrieve.qdrant_compare import overlap_at_k
from rerankeval.retrieve.retriever import VARIANTS, Retriever
from roots import env_embeddings

CHUNKS = [
    ("man.pdf#p1:0", "man.pdf#p1", "Install packages with apt-get install; apt downloads and unpacks them."),
    ("man.pdf#p1:300", "man.pdf#p1", "apt-get resolves package dependencies before it installs."),
    ("man.pdf#p2:0", "man.pdf#p2", "Configure the network interfaces in the file /etc/network/interfaces."),
    ("man.pdf#p2:300", "man.pdf#p2", "Network configuration with ifupdown: static addresses and DHCP."),
    ("man.pdf#p3:0", "man.pdf#p3", "The kernel is started by the bootloader, GRUB, at boot time."),
    ("man.pdf#p4:0", "man.pdf#p4", "Debian policy requires a copyright file in every binary package."),
    ("man.pdf#p5:0", "man.pdf#p5", "Mail transfer agents such as exim deliver local mail."),
]
QUERIES = {"q1": "how do I install packages with apt", "q2": "network configuration file", "q3": "grub bootloader"}
QRELS = {"q1": {"man.pdf#p1": 1}, "q2": {"man.pdf#p2": 1}, "q3": {"man.pdf#p3": 1}}


def budget(leg_k: int, pool_k: int = 10) -> dict:
    """The search budget (the library has no defaults below the stage's Params)."""
    return {"leg_k": leg_k, "pool_k": pool_k, "rrf_k": 60}


def opened(dp, emb) -> Retriever:
    """The retriever on the settings of the environment the test set up."""
    return Retriever(dp, load_settings(), embedder=emb, progress=False)


def _write_corpus(dp, chunks):
    atomic_write_jsonl(
        dp.chunks,
        [
            {
                "chunk_id": c,
                "unit_id": u,
                "source": "man.pdf",
                "page": int(u.split("#p")[1]),
                "start": 0,
                "title": "",
                "text": t,
            }
            for c, u, t in sorted(chunks)
        ],
    )
    atomic_write_jsonl(dp.queries, [{"_id": q, "text": t, "slices": {}} for q, t in QUERIES.items()])
    write_qrels(QRELS, dp.qrels)


@pytest.fixture(scope="module")
def minilm():
    return embed.load_sentence_transformer(str(embed.bundled_model_path()), "cpu")


def _env(tmp):
    return {
        "RERANKEVAL_RESULTS": str(tmp / "results"),
        "RERANKEVAL_QDRANT_PATH": str(tmp / "qdrant"),
        "RERANKEVAL_CACHE": str(tmp / "cache"),
    }


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("retrieve")


@pytest.fixture(autouse=True)
def _module_store(module_tmp, monkeypatch):
    """One results dir, Qdrant store and cache for the whole module (conftest isolates each test)."""
    for k, v in _env(module_tmp).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("QDRANT_URL", raising=False)
    monkeypatch.delenv("RERANKEVAL_QDRANT_BACKEND", raising=False)


@pytest.fixture(scope="module")
def built(module_tmp, minilm):
    tmp = module_tmp
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env(tmp).items():
            mp.setenv(k, v)
        mp.delenv("QDRANT_URL", raising=False)
        (tmp / "src" / "tiny").mkdir(parents=True)
        dp = paths.resolve_dataset(tmp / "src" / "tiny", load_settings())
        _write_corpus(dp, CHUNKS)
        emb = embed.Embedder(model_obj=minilm, progress=False, cache_root=env_embeddings())
        cold = build_index(dp, embedder=emb)
        warm = build_index(dp, embedder=embed.Embedder(progress=False, cache_root=env_embeddings()))
        yield dp, emb, cold, warm


def test_build_is_cold_then_warm(built):
    dp, emb, cold, warm = built
    assert cold.cold and cold.info.actions["bm25"] == "built" and cold.info.actions["qdrant"] == "upserted"
    assert cold.info.actions["embeddings"].startswith("encoded 7")
    assert not warm.cold
    assert warm.info.actions == {"read chunks": "loaded", "bm25": "loaded", "embeddings": "reused", "qdrant": "reused"}
    assert warm.info.collection == cold.info.collection and warm.info.collection.startswith("tiny-")
    assert set(cold.timings().columns) == {"step", "action", "seconds"}
    assert index.load_index_info(dp).collection == cold.info.collection


def test_reindexing_is_idempotent(built):
    dp, emb, cold, _ = built
    again = build_index(dp, index.Params(force_rebuild=True), embedder=emb).info
    assert again.actions["qdrant"] == "upserted" and again.actions["embeddings"] == "cached"
    if again.backend == qdrant_edge.EDGE:  # Qdrant's engine in-process: one shard per collection
        with qdrant_edge.open_shard(qdrant_edge.shard_path(dp, cold.info.collection), emb.dim) as shard:
            assert qdrant_edge.point_count(shard) == len(CHUNKS)
    else:
        with qdrant_store.open_client(dp, settings=load_settings()) as client:
            assert qdrant_store.point_count(client, cold.info.collection) == len(CHUNKS)


def test_every_variant_deduplicates_units_and_keeps_full_chunk_depth(built):
    dp, emb, *_ = built
    with opened(dp, emb) as r:
        for v in ("vector", "bm25", "hybrid", "qdrant_hybrid"):
            res = r.search(v, QUERIES, **budget(5))
            assert set(res.run) == set(QUERIES) == set(res.chunk_run)
            for q in QUERIES:
                units = list(res.run[q])
                found = {u for c, u, _ in CHUNKS if c in res.chunk_run[q]}
                assert len(units) == len(set(units)) == len(found)
                assert all(c in dict.fromkeys(x for x, *_ in CHUNKS) for c in res.chunk_run[q])
            if v == "vector":
                assert all(len(res.chunk_run[q]) == 5 for q in QUERIES)  # leg depth, not pool depth
            if v in ("hybrid", "qdrant_hybrid"):
                assert all(len(res.chunk_run[q]) >= 5 for q in QUERIES)  # the fused union of both legs
            assert list(res.run["q2"])[0] == "man.pdf#p2"


def test_bm25_leg_has_no_zero_score_padding(built):
    dp, emb, *_ = built
    with opened(dp, emb) as r:
        res = r.search("bm25", {"q": "grub", "none": "zzzz qqqq"}, **budget(100))
    assert list(res.chunk_run["q"]) == ["man.pdf#p3:0"] and res.run["none"] == {}


def test_hybrid_fuses_units_not_chunks(built):
    dp, emb, *_ = built
    with opened(dp, emb) as r:
        dense, lex = r.dense_leg(QUERIES, 7), r.bm25_leg(QUERIES, 7)
        res = r.search("hybrid", QUERIES, **budget(7))
    unit_of = corpus.unit_of(dp)
    assert res.run == rrf([to_units(dense, unit_of), to_units(lex, unit_of)], k=60)
    # closed form: page 1 scores 1/(60 + its best dense rank) + 1/(60 + its best bm25 rank)
    rank = {leg: list(to_units(run, unit_of)["q1"]).index("man.pdf#p1") + 1 for leg, run in (("d", dense), ("b", lex))}
    expect = 1 / (60 + rank["d"]) + 1 / (60 + rank["b"])
    assert res.run["q1"]["man.pdf#p1"] == pytest.approx(expect, abs=1e-15)


def test_retrieve_writes_unit_and_chunk_runs_and_they_evaluate(built):
    dp, emb, *_ = built
    with opened(dp, emb) as r:
        for v in ("vector", "bm25", "hybrid", "qdrant_hybrid"):
            res = r.search(v, QUERIES, **budget(7))
            stage.write(dp, stage.Result(retrievals={v: res}))
            assert dp.run_file(v).exists() and dp.chunk_run_file(v).exists()
            assert list(read_trec(dp.run_file(v))["q1"]) == list(res.run["q1"])
            assert len(read_trec(dp.chunk_run_file(v))["q1"]) == len(res.chunk_run["q1"])
            assert (dp.stage_dir("retrieve") / f"{v}.json").exists()
    written = {v: read_trec(dp.run_file(v)) for v in ("vector", "bm25", "hybrid", "qdrant_hybrid")}
    qrels = corpus.load_qrels(dp)
    qs = metrics.query_set(written, qrels, QUERIES, policy="zero")
    table = metrics.evaluate(written, qrels, qs, ["ndcg@3", "recall@5"])
    assert set(table.variant) == set(written) and set(table.qid) == set(QUERIES)
    assert (table[table.metric == "recall@5"].value == 1.0).all()


def test_cross_encoder_variant_reorders_the_hybrid_pool(built):
    dp, emb, *_ = built

    class ShortestFirst:  # a stand-in CrossEncoder: shorter passages score higher
        def predict(self, pairs, **kw):
            return [-len(doc) for _, doc in pairs]

    with opened(dp, emb) as r:
        hybrid = r.search("hybrid", QUERIES, **budget(7))
        res = r.search("cross_encoder", QUERIES, **budget(7, pool_k=3), cross_encoder=ShortestFirst())
    texts = corpus.chunk_texts(dp)
    unit_of = corpus.unit_of(dp)
    for q in QUERIES:
        assert list(res.run[q])[3:] == list(hybrid.run[q])[3:]  # below the pool: fused order kept
        head = list(res.chunk_run[q])[:3]
        assert {unit_of[c] for c in head} == set(list(hybrid.run[q])[:3])
        lengths = [len(texts[c]) for c in head]
        assert lengths == sorted(lengths)
        assert [unit_of[c] for c in head] == list(res.run[q])[:3]


def test_unknown_variant_and_stale_indexes(built, tmp_path, minilm, monkeypatch):
    dp, emb, *_ = built
    with opened(dp, emb) as r, pytest.raises(ValueError, match="unknown variant"):
        r.search("nope", QUERIES, **budget(5))
    assert "cross_encoder" in VARIANTS
    with opened(dp, emb) as r, pytest.raises(ValueError, match="stage"):
        r.search(names.HYBRID_RERANK, QUERIES, **budget(5))  # written by stage 04, not searched here
    # a copy of the dataset whose chunk table then changes: old indexes are refused, a rebuild replaces them
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("RERANKEVAL_QDRANT_PATH", str(tmp_path / "qdrant"))
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))
    dp2 = paths.resolve_dataset(dp.source, load_settings())
    _write_corpus(dp2, CHUNKS)
    first = build_index(
        dp2, embedder=embed.Embedder(model_obj=minilm, progress=False, cache_root=env_embeddings())
    ).info
    _write_corpus(dp2, CHUNKS + [("man.pdf#p6:0", "man.pdf#p6", "A new page about printers.")])
    with pytest.raises(corpus.StageMissing, match="02-build-indexes"):
        index.load_index_info(dp2)
    second = build_index(
        dp2, embedder=embed.Embedder(model_obj=minilm, progress=False, cache_root=env_embeddings())
    ).info
    assert second.collection != first.collection
    assert first.collection in second.actions["dropped stale collections"]


def test_overlap_at_k():
    a = {"q": {"x": 3.0, "y": 2.0, "z": 1.0}}
    b = {"q": {"y": 5.0, "w": 4.0, "x": 1.0}}
    assert overlap_at_k(a, b, 2) == {"q": 0.5}
    assert overlap_at_k(a, b, 3) == {"q": 2 / 3}


def test_a_registered_variant_plugs_into_search_and_write(built, monkeypatch):
    """A new variant is one registered class: no branch of the retriever names it."""
    dp, emb, *_ = built

    class Bm25Top1(variants.Variant):
        name = "bm25_top1"
        description = "the best BM25 chunk only"

        def search_runs(self, queries):
            leg = self.source.bm25_leg(queries, self.budget.leg_k)
            chunk_run = {q: dict(list(docs.items())[:1]) for q, docs in leg.items()}
            return variants.Runs(to_units(chunk_run, self.source.unit_of), chunk_run)

    monkeypatch.setitem(variants.REGISTRY, Bm25Top1.name, Bm25Top1)
    with opened(dp, emb) as r:
        res = r.search("bm25_top1", QUERIES, **budget(5))
        bm25 = r.search("bm25", QUERIES, **budget(5))
    top1 = {q: dict(list(bm25.run[q].items())[:1]) for q in QUERIES}
    assert res.run == top1 and res.params == bm25.params and all(top1.values())
    stage.write(dp, stage.Result(retrievals={"bm25_top1": res}))
    assert read_trec(dp.run_file("bm25_top1")) == top1
    assert (dp.stage_dir("retrieve") / "bm25_top1.json").exists()


# -- the two Qdrant backends (RERANKEVAL_QDRANT_BACKEND): parity of the runs stage 03 writes --
BASE = ("vector", "bm25", "hybrid", "qdrant_hybrid")


def _backend_env(mp, tmp, backend: str, cache):
    mp.delenv("QDRANT_URL", raising=False)
    mp.setenv("RERANKEVAL_CACHE", str(cache))
    mp.setenv("RERANKEVAL_RESULTS", str(tmp / "results"))
    mp.setenv("RERANKEVAL_QDRANT_PATH", str(tmp / "qdrant"))
    mp.setenv("RERANKEVAL_QDRANT_BACKEND", backend)


def _tiny(tmp):
    (tmp / "src" / "tiny").mkdir(parents=True, exist_ok=True)
    dp = paths.resolve_dataset(tmp / "src" / "tiny", load_settings())
    _write_corpus(dp, CHUNKS)
    return dp


@pytest.fixture(scope="module")
def by_backend(module_tmp, minilm):
    """The tiny dataset indexed once per backend (own results and store, one embedding cache): per backend the
    index info, the base variants' results (``leg_k=5`` of 7 chunks, so the leg cut matters) and the Qdrant legs."""
    pytest.importorskip(
        "qdrant_edge",
        reason="qdrant-edge-py is not installed (pip install qdrant-edge-py==0.9.0): "
        "the edge backend's parity is not tested",
    )
    out = {}
    for backend in ("client", "edge"):
        with pytest.MonkeyPatch.context() as mp:
            _backend_env(mp, module_tmp / f"parity-{backend}", backend, module_tmp / "cache")
            dp = _tiny(module_tmp / f"parity-{backend}")
            emb = embed.Embedder(model_obj=minilm, progress=False, cache_root=env_embeddings())
            info = build_index(dp, embedder=emb).info
            with opened(dp, emb) as r:
                res = {v: r.search(v, QUERIES, **budget(5)) for v in BASE}
                legs = {"dense": r.dense_leg(QUERIES, 7), "sparse": r.sparse_leg(QUERIES, 7)}
        out[backend] = info, res, legs
    return out


def test_the_backends_write_the_same_runs(by_backend):
    """Compared: for every base variant and query, the unit run and the chunk run at full depth (the same ids in
    the same order) and their scores. bm25 is not Qdrant's, so it must be equal to the bit; the Qdrant variants'
    scores come from two engines' float32 arithmetic (cosine, IDF), so within rtol 1e-5 (RRF scores are sums of
    1/(60 + rank), equal once the ranks are). The same order is required because the legs hold no tied scores
    here (next test): with ties, the engines may order tied points differently inside a leg (the runs' own ties
    are ordered by chunk id, but qdrant_hybrid fuses Qdrant's leg ranks), so a real corpus may differ there."""
    (ci, c, _), (ei, e, _) = by_backend["client"], by_backend["edge"]
    assert (ci.backend, ei.backend) == ("client", "edge") and ci.collection == ei.collection
    assert ei.qdrant.startswith("edge shard ") and ei.qdrant.endswith(ei.collection)
    assert c["bm25"].run == e["bm25"].run and c["bm25"].chunk_run == e["bm25"].chunk_run
    for v in BASE:
        for a, b in ((c[v].run, e[v].run), (c[v].chunk_run, e[v].chunk_run)):
            assert set(a) == set(b) == set(QUERIES)
            for q in QUERIES:
                assert list(a[q]) == list(b[q]), (v, q)
                assert list(a[q].values()) == pytest.approx(list(b[q].values()), rel=1e-5, abs=1e-7), (v, q)


def test_the_parity_case_has_no_tied_leg_scores(by_backend):
    """The precondition of an order-exact comparison: no two chunks share a score in a Qdrant leg."""
    for leg in by_backend["client"][2].values():
        for q, ranking in leg.items():
            assert len(set(ranking.values())) == len(ranking), q


def test_switching_backend_refills_the_store_and_03_follows_the_manifest(module_tmp, tmp_path, minilm):
    pytest.importorskip("qdrant_edge", reason="qdrant-edge-py is not installed (pip install qdrant-edge-py==0.9.0)")
    emb = embed.Embedder(model_obj=minilm, progress=False, cache_root=env_embeddings())
    with pytest.MonkeyPatch.context() as mp:
        _backend_env(mp, tmp_path, "client", module_tmp / "cache")
        dp = _tiny(tmp_path)
        assert build_index(dp, embedder=emb).info.backend == "client"
        mp.setenv("RERANKEVAL_QDRANT_BACKEND", "edge")
        with pytest.raises(corpus.StageMissing, match="built by the 'client' backend.*re-run the 02"):
            opened(dp, emb)
        edge = build_index(dp, embedder=emb).info  # the manifest says client: fill the shard
        assert edge.backend == "edge" and edge.actions["qdrant"] == "upserted"
        assert qdrant_edge.shard_path(dp, edge.collection).is_dir()
        assert build_index(dp, embedder=emb).info.actions["qdrant"] == "reused"
        with opened(dp, emb) as r:
            assert list(r.search("vector", QUERIES, **budget(5)).run["q2"])[0] == "man.pdf#p2"
        mp.setenv("RERANKEVAL_QDRANT_BACKEND", "client")
        back = build_index(dp, embedder=emb).info
        assert back.backend == "client" and back.actions["qdrant"] == "upserted"
        assert index.load_index_info(dp).backend == "client"


def test_edge_is_local_only_and_backends_are_checked(module_tmp, tmp_path, minilm):
    with pytest.raises(ValueError, match="unset QDRANT_URL"):
        qdrant_edge.backend(Settings(qdrant_backend="edge", qdrant_url="http://localhost:6333"))
    assert qdrant_edge.backend(Settings(qdrant_url="http://localhost:6333")) == "client"
    with pytest.raises(ValueError, match="RERANKEVAL_QDRANT_BACKEND='server'.*'client' or 'edge'"):
        load_settings({"RERANKEVAL_QDRANT_BACKEND": "server"}, env_file=tmp_path / "no.env")
    emb = embed.Embedder(model_obj=minilm, progress=False, cache_root=env_embeddings())
    with pytest.MonkeyPatch.context() as mp:
        _backend_env(mp, tmp_path, "edge", module_tmp / "cache")
        dp = _tiny(tmp_path)
        mp.setenv("QDRANT_URL", "http://localhost:1")
        with pytest.raises(ValueError, match="RERANKEVAL_QDRANT_BACKEND=edge .* unset QDRANT_URL"):
            build_index(dp, embedder=emb)
        with pytest.raises(ValueError, match="unknown Qdrant backend 'server'"):
            build_index(dp, embedder=emb, settings=load_settings().model_copy(update={"qdrant_backend": "server"}))
