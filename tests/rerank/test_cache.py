"""The reply cache: a re-run makes no request; a corrupt entry is ignored and recomputed."""

from __future__ import annotations

import json

from fakellm import FakeLLM, make_inputs
from rerank_data import rerank_made
from rerankeval.core.settings import Settings
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank.config import Params
from rerankeval.rerank.core import build_pools
from rerankeval.rerank.ledger import summarize
from rerankeval.rerank.reranker import Reranker


def _settings(fake) -> Settings:
    return Settings(base_url=fake.base_url, api_key="k", model="fake", timeout=2, max_retries=0)


def _run(fake, cache, mode="listwise", **kw):
    fused, queries, texts = make_inputs(n_queries=3, n_docs=12)
    params = Params(mode=mode, pool_k=10, **{"alpha": 1.0, "window": 8, "step": 4, **kw})
    return rerank_made(cache.root.parent / "ds", fused, queries, texts, params, _settings(fake), cache)


def test_second_run_makes_no_request(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM() as f:
        first = _run(f, cache)
        n = f.count
        second = _run(f, cache)
        assert f.count == n  # zero HTTP requests on the re-run
        third = _run(f, cache, alpha=0.3)  # a new blend re-uses the same replies
        assert f.count == n
    assert n == 3 * 2  # two windows per query
    assert first.run == second.run and third.run != first.run
    s1, s2 = summarize(first.ledger), summarize(second.ledger)
    assert s1["requests"] == n and s1["cache_hits"] == 0
    assert s2["requests"] == 0 and s2["cache_hits"] == s2["llm_calls"] == n
    assert s2["tokens_saved"] == s1["prompt_tokens"] + s1["completion_tokens"] > 0
    assert s2["prompt_tokens"] == 0


def test_cache_key_depends_on_inputs(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM() as f:
        _run(f, cache)
        n = f.count
        _run(f, cache, max_passage_chars=8)  # other passage text -> other keys
        assert f.count == 2 * n
        _run(f, cache, seed=1)
        assert f.count == 3 * n
        _run(f, cache, window=5, step=5)  # other windows -> other calls
        assert f.count == 3 * n + 3 * 2


def test_corrupt_entry_is_recomputed(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM() as f:
        first = _run(f, cache, mode="pointwise")
        files = sorted((tmp_path / "llm").rglob("*.json"))
        assert len(files) == f.count
        files[0].write_text('{"key": "trunc', encoding="utf-8")  # corrupt
        entry = json.loads(files[1].read_text())
        entry["key"] = "0" * 64  # belongs to another key
        files[1].write_text(json.dumps(entry), encoding="utf-8")
        n = f.count
        second = _run(f, cache, mode="pointwise")
        assert f.count == n + 2
        assert json.loads(files[0].read_text())["key"] == files[0].stem  # rewritten
    assert first.run == second.run


def test_cache_disabled_serves_nothing_but_refreshes(tmp_path):
    """use_cache=false (enabled=False) asks every call and stores the fresh replies; write=False stores nothing."""
    cache = LLMCache(tmp_path / "llm", enabled=False)
    with FakeLLM() as f:
        _run(f, cache)
        _run(f, cache)
        assert f.count == 12
        assert len(list((tmp_path / "llm").rglob("*.json"))) == 6
        warm = _run(f, LLMCache(tmp_path / "llm"))
        assert f.count == 12 and summarize(warm.ledger)["cache_hits"] == 6
        fused, queries, texts = make_inputs(n_queries=3, n_docs=12)
        config = Params(mode="listwise", alpha=1.0, window=8, step=4).config()
        with Reranker(config, _settings(f), cache=LLMCache(tmp_path / "none", enabled=False, write=False)) as rr:
            rr.rerank_pools(queries, build_pools(fused, texts, sorted(fused), 10), stability="none", progress=False)
        assert f.count == 18
    assert not (tmp_path / "none").exists()
