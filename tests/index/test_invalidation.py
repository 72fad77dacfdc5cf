"""Invalidation: every cache and index is keyed by what it depends on; one change rebuilds exactly the
stages that depend on it and nothing else.

One test per key, on the tiny PDF dataset of tests/support/builders.py built in tmp with its own cache (so the
counters are exact): the corpus content (a PDF's text; the queries), the chunking parameters, the BM25
parameters (the analyser is checked at the key level: ``index.Params`` has no analyser), the embedding
model (a second local model folder), and for the LLM cache the prompt template, the reply schema and the
model name, each against "nothing changed".

Signals used: ``corpus.Result.reused``; ``IndexInfo.actions`` (``bm25``: built/loaded, ``embeddings``:
reused/cached/"encoded N, cached M", ``qdrant``: reused/upserted), ``Embedder.stats``; for the LLM the
fake server's request count and the ledger's ``cache_hit``/``cache_hits``/``requests`` columns.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from pydantic import ConfigDict

from builders import TINY_QUERIES, extract_corpus, tiny_pdf_dataset, write_pdf, write_queries
from fakellm import FakeLLM, make_inputs
from indexing import build_index
from rerank_data import rerank_made
from rerankeval import index
from rerankeval.core import paths
from rerankeval.core.settings import Settings, load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.index import bm25, embed
from rerankeval.index.qdrant import store as qdrant_store
from rerankeval.llm import schemas
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank import prompts
from rerankeval.rerank.config import Params
from roots import env_embeddings

ALL_REUSED = {"read chunks": "loaded", "bm25": "loaded", "embeddings": "reused", "qdrant": "reused"}


@pytest.fixture(scope="module")
def minilm():
    """Load the bundled model once for the module (memoised in rerankeval.index.embed, shared with others)."""
    return embed.load_sentence_transformer(str(embed.bundled_model_path()), "cpu")


@pytest.fixture
def ds(tmp_path, monkeypatch, minilm):
    """A fresh tiny PDF dataset, cache and Qdrant store per test; built once (cold)."""
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("QDRANT_URL", raising=False)
    # these tests list the client store's collections; edge's shards: qdrant/test_edge.py, test_store_backend.py
    monkeypatch.setenv("RERANKEVAL_QDRANT_BACKEND", "client")
    folder = tiny_pdf_dataset(tmp_path / "tiny")
    dp = paths.resolve_dataset(folder, load_settings())
    rep = extract_corpus(dp)
    built = build_index(dp)
    info = built.info
    assert not rep.reused and built.cold
    return dp, rep, info


def _encoded(info: index.IndexInfo) -> int:
    """How many texts the index build encoded (0 when every vector came from the cache)."""
    a = info.actions["embeddings"]
    if a in ("reused", "cached"):
        return 0
    m = re.fullmatch(r"encoded (\d+), cached (\d+)", a)
    assert m, a
    return int(m.group(1))


def _collections(dp) -> set[str]:
    with qdrant_store.open_client(dp, settings=load_settings()) as client:
        return {c.name for c in client.get_collections().collections}


def test_nothing_changed_rebuilds_nothing(ds):
    dp, rep, info = ds
    chunks_mtime = dp.chunks.stat().st_mtime_ns
    bm25_file = dp.root / info.bm25_dir / "index.npz"
    bm25_mtime = bm25_file.stat().st_mtime_ns
    again = extract_corpus(dp)
    assert again.reused and again.stats["corpus_hash"] == rep.stats["corpus_hash"]
    warm = build_index(dp).info
    assert warm.actions == ALL_REUSED
    assert warm.collection == info.collection and _collections(dp) == {info.collection}
    assert dp.chunks.stat().st_mtime_ns == chunks_mtime and bm25_file.stat().st_mtime_ns == bm25_mtime


def test_pdf_text_change_rebuilds_corpus_and_indexes(ds):
    dp, rep, info = ds
    old_texts = set(corpus.chunk_texts(dp).values())
    write_pdf(
        dp.source / "gamma-notes.pdf",
        ["Gamma now uses an event loop instead of worker threads; the GAMMA_WORKERS variable is ignored."],
    )
    new = extract_corpus(dp)
    assert not new.reused and new.stats["corpus_hash"] != rep.stats["corpus_hash"]
    with pytest.raises(corpus.StageMissing, match="02-build-indexes"):  # stale indexes are refused ...
        index.load_index_info(dp)
    changed = set(corpus.chunk_texts(dp).values()) - old_texts
    assert len(changed) == 1
    built = build_index(dp).info  # ... and rebuilt
    assert built.actions["bm25"] == "built" and built.actions["qdrant"] == "upserted"
    assert _encoded(built) == len(changed)  # only the new chunk; the others come from the cache
    assert built.corpus_hash != info.corpus_hash and built.collection != info.collection
    assert _collections(dp) == {built.collection}  # the stale collection is dropped
    assert [p.name for p in (dp.index_dir / "bm25").iterdir()] == [built.bm25_dir.split("/")[-1]]
    assert index.load_index_info(dp).collection == built.collection


def test_query_change_rebuilds_the_corpus_stage_but_no_index(ds):
    dp, rep, info = ds
    chunks_before = dp.chunks.read_bytes()
    queries = [(q, text + " please" if q == "t4" else text, s, r) for q, text, s, r in TINY_QUERIES]
    write_queries(dp.source, queries)
    new = extract_corpus(dp)
    assert not new.reused  # the corpus stage's inputs include queries.jsonl
    assert dp.chunks.read_bytes() == chunks_before and new.stats["corpus_hash"] == rep.stats["corpus_hash"]
    assert "please" in corpus.load_queries(dp)["t4"]
    warm = build_index(dp).info
    assert warm.actions == ALL_REUSED  # the indexes depend on the chunks only


def test_chunking_change_rebuilds_corpus_and_indexes(ds):
    dp, rep, info = ds
    new = extract_corpus(dp, chunk_size=120, chunk_overlap=30)
    assert not new.reused and new.stats["params"]["chunk_size"] == 120
    assert new.stats["chunks"] > rep.stats["chunks"]
    built = build_index(dp).info
    assert built.actions["bm25"] == "built" and built.actions["qdrant"] == "upserted"
    assert _encoded(built) > 0 and built.n_chunks == new.stats["chunks"]
    assert built.collection != info.collection and _collections(dp) == {built.collection}
    # and back: the corpus is rebuilt again, the old chunk texts' vectors are still in the cache
    extract_corpus(dp)
    back = build_index(dp).info
    assert back.actions["embeddings"] == "cached" and back.collection == info.collection


def test_bm25_parameters_rebuild_bm25_but_embed_nothing(ds):
    dp, rep, info = ds
    assert extract_corpus(dp).reused  # the corpus does not depend on BM25
    built = build_index(dp, index.Params(k1=0.9, b=0.4)).info
    assert built.actions["bm25"] == "built"
    assert built.actions["embeddings"] == "cached" and _encoded(built) == 0  # every vector from the cache
    # the collection holds BM25 sparse vectors (saturation depends on k1, b): a new one is filled
    assert built.actions["qdrant"] == "upserted" and built.collection != info.collection
    assert built.bm25_params == {"k1": 0.9, "b": 0.4, "epsilon": 0.25}
    meta = json.loads((dp.root / built.bm25_dir / "meta.json").read_text())
    assert meta["params"]["k1"] == 0.9 and meta["params"]["b"] == 0.4
    assert built.bm25_dir != info.bm25_dir and not (dp.root / info.bm25_dir).exists()
    assert build_index(dp, index.Params(k1=0.9, b=0.4)).info.actions == ALL_REUSED


def test_bm25_analyser_is_in_the_index_and_collection_keys(ds, tmp_path):
    """``index.Params`` has no analyser parameter, so the analyser is checked where it is keyed."""
    dp, rep, info = ds
    ids = sorted(corpus.chunk_texts(dp))
    texts = [corpus.chunk_texts(dp)[i] for i in ids]
    folder = tmp_path / "bm25"
    _, built = bm25.build_or_load(folder, ids, texts, corpus_hash=info.corpus_hash)
    _, again = bm25.build_or_load(folder, ids, texts, corpus_hash=info.corpus_hash)
    assert built and not again
    for other in (
        bm25.Analyzer(stemmer=None),
        bm25.Analyzer(stopwords=None),
        bm25.Analyzer(lowercase=False),
        bm25.Analyzer(token_pattern=r"[A-Za-z]+"),
    ):
        idx, rebuilt = bm25.build_or_load(folder, ids, texts, corpus_hash=info.corpus_hash, analyzer=other)
        assert rebuilt and idx.analyzer == other
        key = bm25.index_key(info.corpus_hash, bm25.BM25Params(), other)
        name = qdrant_store.collection_name(
            dp.name, model_key=info.model_key, corpus_hash=info.corpus_hash, bm25_key=key
        )
        assert name != info.collection
    # a saved index reloads with its own analyser (queries are analysed like the documents were)
    loaded, rebuilt = bm25.build_or_load(
        folder, ids, texts, corpus_hash=info.corpus_hash, analyzer=bm25.Analyzer(stemmer=None)
    )
    assert not rebuilt and loaded.analyzer == bm25.Analyzer(stemmer=None)


def test_embedding_model_change_reencodes_and_rebuilds_only_the_dense_side(ds, tmp_path):
    dp, rep, info = ds
    # a second local model: the bundled folder with another max_seq_length (weights linked, not copied)
    src = embed.bundled_model_path()
    other = tmp_path / "minilm-128"
    for f in src.rglob("*"):
        if f.is_file():
            dst = other / f.relative_to(src)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if f.stat().st_size > 1 << 20:
                dst.symlink_to(f)
            else:
                shutil.copyfile(f, dst)
    cfg = other / "sentence_bert_config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "max_seq_length": 128}))
    emb2 = embed.Embedder(other, progress=False, cache_root=env_embeddings())
    assert emb2.key != info.model_key and emb2.max_seq_length == 128

    assert extract_corpus(dp).reused
    built = build_index(dp, index.Params(embedding_model=str(other)), embedder=emb2).info
    assert built.model_key == emb2.key and built.model_source == str(other) and emb2.loaded
    assert built.actions["bm25"] == "loaded"  # BM25 does not depend on the dense model
    assert _encoded(built) == info.n_chunks  # nothing from the other model's cache entries
    assert built.actions["qdrant"] == "upserted" and built.collection != info.collection
    assert _collections(dp) == {built.collection}
    # both models' vectors stay cached side by side: switching back encodes nothing
    back = build_index(dp).info
    assert back.actions["embeddings"] == "cached" and back.collection == info.collection
    assert back.actions["bm25"] == "loaded"


# --------------------------------------------------------------------------- LLM reply cache
def _rerank(fake: FakeLLM, cache: LLMCache, model: str = "fake-reranker"):
    fused, queries, texts = make_inputs(n_queries=2, n_docs=6, gold=(2,))
    s = Settings(base_url=fake.base_url, api_key="k", model=model, timeout=5, max_retries=0)
    params = Params(mode="yesno", yesno_json=True, alpha=1.0, pool_k=3)
    return rerank_made(cache.root.parent / "ds", fused, queries, texts, params, s, cache)


CALLS = 2 * 3  # two queries, three yes/no calls each


class _YesNoDescribed(schemas.YesNoStrict):
    """The yes/no answer, described differently: the schema sent to the endpoint changes."""

    model_config = ConfigDict(extra="forbid", title="RelevanceAnswerV2")


def _change(kind: str, monkeypatch) -> dict:
    """Apply one change to what the LLM reply depends on; returns rerank kwargs."""
    if kind == "template":
        user = prompts.YESNO_USER_JSON.replace("Is the passage relevant", "Does the passage matter")
        monkeypatch.setattr(prompts, "YESNO_USER_JSON", user)
        monkeypatch.setitem(prompts.TEMPLATES, "yesno", (prompts.YESNO_SYSTEM, user))
    elif kind == "schema":
        monkeypatch.setattr(schemas, "YesNoStrict", _YesNoDescribed)
    elif kind == "model":
        return {"model": "another-reranker"}
    return {}


@pytest.mark.parametrize("kind", ["template", "schema", "model"])
def test_llm_cache_misses_exactly_when_a_key_changes(kind, tmp_path, monkeypatch):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM() as fake:
        first = _rerank(fake, cache)
        assert fake.count == CALLS and not first.ledger.cache_hit.any()
        same = _rerank(fake, cache)  # nothing changed: zero calls
        assert fake.count == CALLS and same.ledger.cache_hit.all()
        assert int(same.ledger.requests.sum()) == 0 and same.run == first.run
        with monkeypatch.context() as mp:
            kw = _change(kind, mp)
            changed = _rerank(fake, cache, **kw)
            assert fake.count == 2 * CALLS  # every call is made again
            led = changed.ledger
            assert not led.cache_hit.any() and int(led.cache_hits.sum()) == 0
            assert int(led.requests.sum()) == CALLS and set(led.status) == {"ok"}
            if kind == "template":
                sent = fake.requests[-1][2]["messages"][-1]["content"]
                assert "Does the passage matter" in sent
            if kind == "schema":
                assert fake.requests[-1][2]["response_format"]["json_schema"]["schema"]["title"] == (
                    "RelevanceAnswerV2"
                )
        back = _rerank(fake, cache)  # the change undone: the first replies are still cached
        assert fake.count == 2 * CALLS and back.ledger.cache_hit.all()
    assert len(list((tmp_path / "llm").rglob("*.json"))) == 2 * CALLS
