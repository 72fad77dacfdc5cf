"""Cached runs of stage 03 (issue 24): a variant whose inputs did not change is read back, one that changed is
searched again; one invalidation test per input (the corpus, the indexes, a query, a parameter, the code version,
the rewrite LLM), and corrupted, missing or foreign key and run files are ignored, never used.

"Searched" is counted where it happens: the indexes are opened (a ``Retriever`` is constructed) only when a
variant is searched, and the fake LLM counts the rewrite requests. Each test builds the tiny manual corpus of
tests/support/builders.py in tmp (its own results, Qdrant store and caches)."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from builders import manual_dataset
from fakellm import FakeLLM
from indexing import build_index
from rerankeval import index, retrieve
from rerankeval.core.ioutil import atomic_write_jsonl, read_jsonl
from rerankeval.core.runs import read_trec, write_trec
from rerankeval.core.settings import Settings, load_settings
from rerankeval.corpus.contract import StageMissing
from rerankeval.evaluate import costs
from rerankeval.index import embed
from rerankeval.llm.cache import LLMCache
from rerankeval.retrieve import codeversion, reformulate, runkey, runstore, search, variants
from rerankeval.retrieve.retriever import Retriever
from roots import env_embeddings, roots_under

QUERIES = {"q1": "install a package with apt", "q2": "where do network settings live", "q3": "grub boot loader"}
BASE = ["vector", "bm25", "hybrid", "qdrant_hybrid"]
PARAMS = retrieve.Params(leg_k=5, pool_k=3, final_k=2, variants=BASE, explain_queries=2)


def _build(dp, **kw) -> None:
    build_index(
        dp,
        index.Params(**kw),
        embedder=embed.Embedder(str(embed.bundled_model_path()), progress=False, cache_root=env_embeddings()),
    )


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    roots_under(monkeypatch, tmp_path)
    for k in ("QDRANT_URL", "RERANKEVAL_QDRANT_BACKEND", "OPENAI_BASE_URL", "RERANK_MODEL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("RERANKEVAL_CROSS_ENCODER", str(tmp_path / "no-such-model"))
    dp = manual_dataset(tmp_path / "src" / "tiny", QUERIES)
    _build(dp)
    return dp


@pytest.fixture
def opened(monkeypatch) -> list[int]:
    """How many times stage 03 opened the indexes (constructed its Retriever)."""
    count: list[int] = []

    class Counting(Retriever):
        def __init__(self, *a, **kw):
            count.append(1)
            super().__init__(*a, **kw)

    monkeypatch.setattr(search, "Retriever", Counting)
    return count


def run03(dp, params=PARAMS, settings: Settings | None = None, cache: LLMCache | None = None) -> retrieve.Result:
    """Stage 03's run on ``settings`` (None: those of the environment the test set up, read now)."""
    return retrieve.run(dp, params, settings if settings is not None else load_settings(), cache=cache)


def run_and_write(dp, params=PARAMS, **kw) -> retrieve.Result:
    result = run03(dp, params, **kw)
    retrieve.write(dp, result)
    return result


def fresh(dp, params=PARAMS, **kw) -> retrieve.Result:
    """What a search from scratch returns (nothing read back, nothing written)."""
    from dataclasses import replace

    return run03(dp, replace(params, reuse_runs=False), **kw)


def test_nothing_changed_reads_every_run_back_without_opening_the_indexes(tiny, opened):
    first = run_and_write(tiny)
    assert len(opened) == 1 and not first.read_back
    assert all(runstore.key_file(tiny, v).is_file() for v in BASE)
    records = {v: json.loads(tiny.variant_record(v).read_text()) for v in BASE}
    second = run_and_write(tiny)
    assert len(opened) == 1  # the indexes were never opened again
    assert list(second.read_back) == BASE and second.notes()[:2] == [
        "vector: unchanged, read back",
        "bm25: unchanged, read back",
    ]
    for v in BASE:
        assert second.retrievals[v].run == read_trec(tiny.run_file(v))
        assert second.retrievals[v].chunk_run == read_trec(tiny.chunk_run_file(v))
        assert list(second.retrievals[v].run) == list(QUERIES)  # every query, in the queries' order
        again = json.loads(tiny.variant_record(v).read_text())
        assert again.pop("read_back") is True and again == records[v]  # the search's own seconds are kept
    assert second.qdrant == first.qdrant  # the Qdrant comparison is read back too
    assert list(second.table(tiny)["read back"]) == [True] * 4


def test_a_read_back_run_is_the_run_a_new_search_returns(tiny, tmp_path):
    run_and_write(tiny)
    back, new = run03(tiny, PARAMS), fresh(tiny)
    assert list(back.read_back) == BASE and not new.read_back
    for v in BASE:  # the new search, written, is the saved file byte for byte; the run read back is that file
        saved = tiny.run_file(v).read_text()
        assert write_trec(new.runs[v], tmp_path / f"{v}.trec", tag=v).read_text() == saved
        assert write_trec(back.runs[v], tmp_path / f"{v}.back.trec", tag=v).read_text() == saved
        assert back.runs[v] == {q: read_trec(tiny.run_file(v)).get(q, {}) for q in QUERIES}


def test_a_changed_parameter_searches_only_the_variants_that_read_it(tiny, opened):
    from dataclasses import replace

    run_and_write(tiny)
    rrf = run_and_write(tiny, replace(PARAMS, rrf_k=30))
    assert set(rrf.read_back) == {"vector", "bm25"}  # the legs do not read rrf_k
    assert rrf.reuse["hybrid"] == "searched (changed: rrf_k 60 -> 30)"
    assert rrf.runs["hybrid"] == fresh(tiny, replace(PARAMS, rrf_k=30)).runs["hybrid"]
    pool = run03(tiny, replace(PARAMS, rrf_k=30, pool_k=4))
    assert set(pool.read_back) == set(BASE)  # pool_k is read by the cross-encoder only
    leg = run03(tiny, replace(PARAMS, rrf_k=30, leg_k=4))
    assert not leg.read_back and leg.reuse["vector"] == "searched (changed: leg_k 5 -> 4)"
    assert len(opened) == 4  # first run, rrf_k, leg_k (twice for the fresh search); pool_k opened nothing
    assert runkey.reads("hybrid_dbsf") == ("leg_k", "weights")


def test_a_changed_query_is_searched_again(tiny):
    run_and_write(tiny)
    rows = read_jsonl(tiny.queries)
    rows[1]["text"] = "network interfaces file"
    atomic_write_jsonl(tiny.queries, rows)
    result = run03(tiny, PARAMS)
    assert not result.read_back and result.reuse["bm25"] == "searched (changed: the queries)"
    assert result.runs["bm25"] == fresh(tiny).runs["bm25"]


def test_changed_indexes_are_searched_again(tiny):
    run_and_write(tiny)
    _build(tiny, k1=2.0)  # another BM25 index (and so another collection name) over the same chunks
    result = run03(tiny, PARAMS)
    assert not result.read_back and result.reuse["vector"] == "searched (changed: the indexes)"


def test_a_changed_corpus_is_never_read_back(tiny):
    run_and_write(tiny)
    rows = read_jsonl(tiny.chunks)
    rows[0]["text"] = "apt-get installs packages; dpkg is lower level"
    atomic_write_jsonl(tiny.chunks, rows)
    with pytest.raises(StageMissing, match="another version of the chunk table"):  # searched: the indexes are stale
        run03(tiny, PARAMS)
    _build(tiny)
    result = run03(tiny, PARAMS)
    assert not result.read_back and result.reuse["bm25"] == "searched (changed: the chunk table, the indexes)"


def test_another_code_version_is_searched_again_but_a_comment_is_not_code(tiny, tmp_path, monkeypatch):
    module = tmp_path / "pkg_extra" / "my_scoring.py"
    module.parent.mkdir()
    module.write_text("def score(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(module.parent))
    monkeypatch.setattr(codeversion, "COMMON_MODULES", (*codeversion.COMMON_MODULES, "my_scoring"))
    run_and_write(tiny)
    module.write_text("# a comment, and another layout\ndef score( x ):\n    return x + 1  # same code\n")
    assert list(run03(tiny, PARAMS).read_back) == BASE
    module.write_text("def score(x):\n    return x + 2\n")
    result = run03(tiny, PARAMS)
    assert not result.read_back and result.reuse["hybrid"] == "searched (changed: the code (my_scoring))"


@pytest.mark.parametrize(
    "damage", ["key garbage", "key missing", "key of another code", "run edited", "chunk run missing", "run truncated"]
)
def test_a_damaged_or_foreign_file_is_ignored_and_the_run_rebuilt(tiny, damage):
    run_and_write(tiny)
    key, run, chunks = runstore.key_file(tiny, "hybrid"), tiny.run_file("hybrid"), tiny.chunk_run_file("hybrid")
    good = read_trec(run)
    if damage == "key garbage":
        key.write_text("{not json")
    elif damage == "key missing":
        key.unlink()
    elif damage == "key of another code":
        entry = json.loads(key.read_text())
        entry["parts"]["code"]["modules"]["rerankeval.retrieve.fusion"] = "0" * 64
        entry["key"] = runkey.key_of(entry["parts"])
        key.write_text(json.dumps(entry))
    elif damage == "run edited":
        run.write_text(run.read_text().replace(" 1 ", " 1 9", 1))
    elif damage == "chunk run missing":
        chunks.unlink()
    else:
        run.write_text(run.read_text()[:50])
    result = run03(tiny, PARAMS)
    assert "hybrid" not in result.read_back and result.reuse["hybrid"].startswith("searched (")
    assert {"vector", "bm25"} <= set(result.read_back)
    assert result.runs["hybrid"] == fresh(tiny).runs["hybrid"]
    retrieve.write(tiny, result)
    assert read_trec(run) == good and "hybrid" in run03(tiny, PARAMS).read_back  # rebuilt, then read back


def _rewrite(n, body):
    return {"content": json.dumps({"query": "network interfaces configuration file"})}


def test_hybrid_reformulate_is_read_back_only_while_its_replies_are_cached(tiny, tmp_path):
    from dataclasses import replace

    p = replace(PARAMS, variants=["hybrid", "hybrid_reformulate"], reformulate_threshold=1.0)  # every query weak
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM(rule=_rewrite) as f:
        s = Settings(
            base_url=f.base_url, api_key="test-key-not-a-secret-0001", model="fake", timeout=2.0, max_retries=0
        )
        first = run_and_write(tiny, p, settings=s, cache=cache)
        asked = f.count
        assert asked == 3 and first.reuse["hybrid_reformulate"] == "searched (no saved run)"
        second = run_and_write(tiny, p, settings=s, cache=cache)
        assert f.count == asked and "hybrid_reformulate" in second.read_back  # no request: read back
        cols = ["qid", "status", "rewrite", "agreement", "rewrite_agreement", "top", "rewrite_top", "cache_hit"]
        assert second.ledger[cols].equals(first.ledger[cols])
        assert second.runs["hybrid_reformulate"] == read_trec(tiny.run_file("hybrid_reformulate"))
        other = run03(tiny, p, settings=s.model_copy(update={"model": "another"}), cache=cache)
        assert other.reuse["hybrid_reformulate"] == "searched (changed: the model)" and f.count == asked + 3
        entry = json.loads(runstore.key_file(tiny, "hybrid_reformulate").read_text())
        cache.path(entry["llm_keys"][0]).unlink()
        gone = run03(tiny, p, settings=s, cache=LLMCache(tmp_path / "llm"))
        assert gone.reuse["hybrid_reformulate"] == "searched (a rewrite's reply is no longer in the LLM cache)"
    down = run_and_write(tiny, p, settings=Settings(base_url=None), cache=cache)  # no endpoint: llm_failed
    assert "not saved for reading back: a rewrite failed" in down.reuse["hybrid_reformulate"]
    assert not runstore.key_file(tiny, "hybrid_reformulate").exists()
    assert set(down.ledger.status) == {reformulate.LLM_FAILED}


def test_a_variant_this_module_does_not_know_reads_every_parameter():
    class Mine(variants.Hybrid):
        name = "my_hybrid_for_the_cache_test"

    variants.register(Mine)
    try:
        assert runkey.reads(Mine.name) == runkey.BUDGET
        assert __name__ in codeversion.variant_modules(Mine.name)  # its own module is part of its code version
    finally:
        variants.REGISTRY.pop(Mine.name)


def test_exact_dense_search_is_asked_of_qdrant_and_its_switch_searches_the_runs_again(tiny, monkeypatch):
    """RERANKEVAL_DENSE_EXACT=true: every dense search of stage 03 asks Qdrant for an exhaustive search (the
    ``exact`` argument the backend gets), and runs saved without it are searched again (the store part of the key);
    unchanged, they are read back."""
    from rerankeval.index.qdrant import edge as qdrant_edge

    asked: list[bool] = []
    for name in ("search_dense", "search_hybrid"):
        real = getattr(qdrant_edge, name)

        def spy(*a, _real=real, exact=False, **kw):
            asked.append(exact)
            return _real(*a, exact=exact, **kw)

        monkeypatch.setattr(qdrant_edge, name, spy)
    run_and_write(tiny)
    assert asked and not any(asked)
    asked.clear()
    monkeypatch.setenv("RERANKEVAL_DENSE_EXACT", "true")
    exact = run_and_write(tiny)
    assert not exact.read_back and exact.reuse["vector"] == "searched (changed: the Qdrant backend)"
    assert asked and all(asked)
    assert set(run03(tiny, PARAMS).read_back) == set(BASE)


def test_the_encoder_load_is_recorded_and_left_out_of_the_cost_per_query(tiny, monkeypatch):
    """Loading the embedding model once (here a known second more) is recorded with the variant that paid it,
    ``vector``, and stage 05's cost per query leaves it out; a warm run keeps the record and reads every run back."""
    load = 1.0
    real = embed.load_sentence_transformer

    def slow(*a, **kw):
        time.sleep(load)
        return real(*a, **kw)

    monkeypatch.setattr(embed, "load_sentence_transformer", slow)
    shutil.rmtree(tiny.roots.cache / "embeddings")  # 02 embedded the queries for its recall check: forget them
    run_and_write(tiny)
    records = {v: json.loads(tiny.variant_record(v).read_text()) for v in BASE}
    assert [v for v in BASE if costs.MODEL_LOAD in records[v]] == ["vector"]  # only the first to embed loads
    rec = records["vector"]
    assert load <= rec[costs.MODEL_LOAD] <= rec["seconds"]
    per_query = costs.retrieval_seconds(tiny.retrieve_dir, BASE)
    assert per_query["vector"] == pytest.approx((rec["seconds"] - rec[costs.MODEL_LOAD]) / len(QUERIES), abs=1e-3)
    assert per_query["vector"] < rec["seconds"] / len(QUERIES) - load / len(QUERIES) + 1e-3
    second = run_and_write(tiny)
    assert list(second.read_back) == BASE  # the recorded load is no input: the warm run stays warm
    again = json.loads(tiny.variant_record("vector").read_text())
    assert again.pop("read_back") is True and again == rec
