"""Stages 02/03 end to end on a tiny hand-built PDF-like chunk table (several chunks per page)."""

from __future__ import annotations

import pytest

from rerankeval import corpus, embed, metrics, paths, qdrant_store, variants
from rerankeval.fusion import rrf
from rerankeval.index import build_indexes, load_index_info
from rerankeval.ioutil import atomic_write_jsonl
from rerankeval.retrieve import VARIANTS, Retriever, overlap_at_k, retrieve, write_runs
from rerankeval.runs import read_trec, to_units, write_qrels

CHUNKS = [
    ("man.pdf#p1:0", "man.pdf#p1", "Install packages with apt-get install; apt downloads and unpacks them."),
    ("man.pdf#p1:300", "man.pdf#p1", "apt-get resolves package dependencies before it installs."),
    ("man.pdf#p2:0", "man.pdf#p2", "Configure the network interfaces in the file /etc/network/interfaces."),
    ("man.pdf#p2:300", "man.pdf#p2", "Network configuration with ifupdown: static addresses and DHCP."),
    ("man.pdf#p3:0", "man.pdf#p3", "The kernel is started by the bootloader, GRUB, at boot time."),
    ("man.pdf#p4:0", "man.pdf#p4", "Debian policy requires a copyright file in every binary package."),
    ("man.pdf#p5:0", "man.pdf#p5", "Mail transfer agents such as exim deliver local mail."),
]
QUERIES = {"q1": "how do I install packages with apt", "q2": "network configuration file",
           "q3": "grub bootloader"}
QRELS = {"q1": {"man.pdf#p1": 1}, "q2": {"man.pdf#p2": 1}, "q3": {"man.pdf#p3": 1}}


def _write_corpus(dp, chunks):
    atomic_write_jsonl(dp.chunks, [
        {"chunk_id": c, "unit_id": u, "source": "man.pdf", "page": int(u.split("#p")[1]), "start": 0,
         "title": "", "text": t} for c, u, t in sorted(chunks)
    ])
    atomic_write_jsonl(dp.queries, [{"_id": q, "text": t, "slices": {}} for q, t in QUERIES.items()])
    write_qrels(QRELS, dp.qrels)


@pytest.fixture(scope="module")
def minilm():
    return embed.load_sentence_transformer(str(embed.bundled_model_path()), "cpu")


def _env(tmp):
    return {"RERANKEVAL_RESULTS": str(tmp / "results"), "RERANKEVAL_QDRANT_PATH": str(tmp / "qdrant"),
            "RERANKEVAL_CACHE": str(tmp / "cache")}


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("retrieve")


@pytest.fixture(autouse=True)
def _module_store(module_tmp, monkeypatch):
    """One results dir, Qdrant store and cache for the whole module (conftest isolates each test)."""
    for k, v in _env(module_tmp).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("QDRANT_URL", raising=False)


@pytest.fixture(scope="module")
def built(module_tmp, minilm):
    tmp = module_tmp
    with pytest.MonkeyPatch.context() as mp:
        for k, v in _env(tmp).items():
            mp.setenv(k, v)
        mp.delenv("QDRANT_URL", raising=False)
        (tmp / "src" / "tiny").mkdir(parents=True)
        dp = paths.resolve_dataset(tmp / "src" / "tiny")
        _write_corpus(dp, CHUNKS)
        emb = embed.Embedder(model_obj=minilm, progress=False)
        cold = build_indexes(dp, embedder=emb, progress=False)
        warm = build_indexes(dp, embedder=embed.Embedder(progress=False), progress=False)
        yield dp, emb, cold, warm


def test_build_is_cold_then_warm(built):
    dp, emb, cold, warm = built
    assert cold.cold and cold.actions["bm25"] == "built" and cold.actions["qdrant"] == "upserted"
    assert cold.actions["embeddings"].startswith("encoded 7")
    assert not warm.cold
    assert warm.actions == {"read chunks": "loaded", "bm25": "loaded", "embeddings": "reused",
                            "qdrant": "reused"}
    assert warm.collection == cold.collection and warm.collection.startswith("tiny-")
    assert set(cold.timings().columns) == {"step", "action", "seconds"}
    assert load_index_info(dp).collection == cold.collection


def test_reindexing_is_idempotent(built):
    dp, emb, cold, _ = built
    again = build_indexes(dp, embedder=emb, force=True, progress=False)
    assert again.actions["qdrant"] == "upserted" and again.actions["embeddings"] == "cached"
    with qdrant_store.open_client(dp) as client:
        assert qdrant_store.point_count(client, cold.collection) == len(CHUNKS)


def test_every_variant_deduplicates_units_and_keeps_full_chunk_depth(built):
    dp, emb, *_ = built
    with Retriever(dp, embedder=emb, progress=False) as r:
        for v in ("vector", "bm25", "hybrid", "qdrant_hybrid"):
            res = r.search(v, QUERIES, leg_k=5)
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
    with Retriever(dp, embedder=emb, progress=False) as r:
        res = r.search("bm25", {"q": "grub", "none": "zzzz qqqq"}, leg_k=100)
    assert list(res.chunk_run["q"]) == ["man.pdf#p3:0"] and res.run["none"] == {}


def test_hybrid_fuses_units_not_chunks(built):
    dp, emb, *_ = built
    with Retriever(dp, embedder=emb, progress=False) as r:
        dense, lex = r.dense_leg(QUERIES, 7), r.bm25_leg(QUERIES, 7)
        res = r.search("hybrid", QUERIES, leg_k=7)
    unit_of = corpus.unit_of(dp)
    assert res.run == rrf([to_units(dense, unit_of), to_units(lex, unit_of)], k=60)
    # closed form: page 1 scores 1/(60 + its best dense rank) + 1/(60 + its best bm25 rank)
    rank = {leg: list(to_units(run, unit_of)["q1"]).index("man.pdf#p1") + 1 for leg, run in
            (("d", dense), ("b", lex))}
    expect = 1 / (60 + rank["d"]) + 1 / (60 + rank["b"])
    assert res.run["q1"]["man.pdf#p1"] == pytest.approx(expect, abs=1e-15)


def test_retrieve_writes_unit_and_chunk_runs_and_they_evaluate(built):
    dp, emb, *_ = built
    with Retriever(dp, embedder=emb, progress=False) as r:
        for v in ("vector", "bm25", "hybrid", "qdrant_hybrid"):
            res = retrieve(dp, v, leg_k=7, retriever=r)
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

    with Retriever(dp, embedder=emb, progress=False) as r:
        hybrid = r.search("hybrid", QUERIES, leg_k=7)
        res = r.search("cross_encoder", QUERIES, leg_k=7, pool_k=3, cross_encoder=ShortestFirst())
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
    with Retriever(dp, embedder=emb, progress=False) as r, pytest.raises(ValueError, match="unknown variant"):
        r.search("nope", QUERIES)
    assert "cross_encoder" in VARIANTS
    with Retriever(dp, embedder=emb, progress=False) as r, pytest.raises(ValueError, match="stage"):
        r.search(variants.HYBRID_RERANK, QUERIES)  # written by stage 04, not searched here
    # a copy of the dataset whose chunk table then changes: old indexes are refused, a rebuild replaces them
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("RERANKEVAL_QDRANT_PATH", str(tmp_path / "qdrant"))
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))
    dp2 = paths.resolve_dataset(dp.source)
    _write_corpus(dp2, CHUNKS)
    first = build_indexes(dp2, embedder=embed.Embedder(model_obj=minilm, progress=False), progress=False)
    _write_corpus(dp2, CHUNKS + [("man.pdf#p6:0", "man.pdf#p6", "A new page about printers.")])
    with pytest.raises(corpus.StageMissing, match="02-build-indexes"):
        load_index_info(dp2)
    second = build_indexes(dp2, embedder=embed.Embedder(model_obj=minilm, progress=False), progress=False)
    assert second.collection != first.collection
    assert first.collection in second.actions["dropped stale collections"]


def test_overlap_at_k():
    a = {"q": {"x": 3.0, "y": 2.0, "z": 1.0}}
    b = {"q": {"y": 5.0, "w": 4.0, "x": 1.0}}
    assert overlap_at_k(a, b, 2) == {"q": 0.5}
    assert overlap_at_k(a, b, 3) == {"q": 2 / 3}


def test_a_registered_variant_plugs_into_search_and_write_runs(built, monkeypatch):
    """A new variant is one registered class: no branch of the retriever names it."""
    dp, emb, *_ = built

    class Bm25Top1(variants.Variant):
        name = "bm25_top1"
        description = "the best BM25 chunk only"

        def search_runs(self, queries):
            leg = self.source.bm25_leg(queries, self.params.leg_k)
            chunk_run = {q: dict(list(docs.items())[:1]) for q, docs in leg.items()}
            return variants.Runs(to_units(chunk_run, self.source.unit_of), chunk_run)

    monkeypatch.setitem(variants.REGISTRY, Bm25Top1.name, Bm25Top1)
    with Retriever(dp, embedder=emb, progress=False) as r:
        res = r.search("bm25_top1", QUERIES, leg_k=5)
        bm25 = r.search("bm25", QUERIES, leg_k=5)
    top1 = {q: dict(list(bm25.run[q].items())[:1]) for q in QUERIES}
    assert res.run == top1 and res.params == bm25.params and all(top1.values())
    write_runs(dp, res)
    assert read_trec(dp.run_file("bm25_top1")) == top1
    assert (dp.stage_dir("retrieve") / "bm25_top1.json").exists()
