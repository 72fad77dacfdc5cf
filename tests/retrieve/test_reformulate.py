"""hybrid_reformulate (issue 11): the threshold, the judgment-free revert guard, the ledger, the LLM down."""

from __future__ import annotations

import json

import pytest

from fakellm import FakeLLM
from rerankeval.core.settings import Settings
from rerankeval.llm.cache import LLMCache
from rerankeval.retrieve import reformulate, variants
from rerankeval.retrieve.fusion import rrf

# what each leg returns for a query text (chunk ids are unit ids here): ranks only matter
LEGS = {
    "strong query": (["A", "B", "C"], ["A", "B", "C"]),  # both legs put A first: top score 2/61
    "weak query": (["A", "B"], ["B", "D"]),  # top B = 1/62 + 1/61, agreement@2 = 1/2
    "better words": (["C", "E"], ["C", "E"]),  # agreement@2 = 1: retrieves "better"
    "worse words": (["X", "Y"], ["Z", "W"]),  # agreement@2 = 0: retrieves "worse"
}
QUERIES = {"q1": "strong query", "q2": "weak query"}
THRESHOLD = 0.0327  # between 1/61 + 1/62 (0.03252) and 2/61 (0.03279): q2 is weak, q1 is not


class FakeSource:
    """The legs the hybrid and the rewrite step search through (a rerankeval.retrieve.source.Legs, as the
    rerankeval.retrieve.retriever.Retriever is)."""

    def __init__(self) -> None:
        self.unit_of = {d: d for legs in LEGS.values() for leg in legs for d in leg}

    def _leg(self, queries, i):
        return {q: {d: 1.0 / (r + 1) for r, d in enumerate(LEGS[t][i])} for q, t in queries.items()}

    def dense_leg(self, queries, k):
        return self._leg(queries, 0)

    def bm25_leg(self, queries, k):
        return self._leg(queries, 1)


def settings_for(url: str) -> Settings:
    return Settings(base_url=url, api_key="sk-test", model="fake-reranker", timeout=2.0, max_retries=0)


def hybrid() -> variants.Runs:
    """The first search the rewrite step follows."""
    budget = variants.Budget(leg_k=10, pool_k=10, rrf_k=60)
    return variants.complete(variants.Hybrid(FakeSource(), budget).search_runs(QUERIES), QUERIES)


def run_with(fake_url: str, tmp_path, guard_k: int = 2):
    with reformulate.open_rewriter(settings_for(fake_url), LLMCache(tmp_path)) as (rewriter, problem):
        step = reformulate.Reformulate(rewriter, threshold=THRESHOLD, guard_k=guard_k)
        found = step.apply(FakeSource(), QUERIES, hybrid(), leg_k=10, rrf_k=60)
        return found, step.ledger.set_index("qid"), problem


def rewriting_to(text: str):
    return lambda n, body: {"content": json.dumps({"query": text})}


def test_guard_measure_closed_form():
    m = reformulate.guard_measure({"A": 2.0, "B": 1.0}, {"B": 2.0, "D": 1.0}, k=2)
    assert m == reformulate.Measure(0.5, 1 / 62 + 1 / 61)
    assert reformulate.keep_rewrite(m, reformulate.Measure(1.0, 0.0))  # agreement first
    assert not reformulate.keep_rewrite(m, m)  # a tie keeps the original
    assert reformulate.keep_rewrite(m, reformulate.Measure(0.5, 0.04))  # then the top fused score


def test_the_guard_keeps_a_rewrite_that_retrieves_better(tmp_path):
    with FakeLLM(rule=rewriting_to("better words")) as f:
        (run, chunk_run), ledger, problem = run_with(f.base_url, tmp_path)
        assert f.count == 1  # only the weak query was sent, once
    assert problem == ""
    assert ledger.loc["q1", "status"] == reformulate.NOT_REWRITTEN and ledger.loc["q1", "rewrite"] in ("", None)
    row = ledger.loc["q2"]
    assert (row.status, row.rewrite, row.agreement, row.rewrite_agreement) == ("kept", "better words", 0.5, 1.0)
    legs = [{"q": dict.fromkeys(ids, 1.0)} for t in ("weak query", "better words") for ids in LEGS[t]]
    four = [{"q": {d: 1.0 / (r + 1) for r, d in enumerate(leg["q"])}} for leg in legs]
    assert run["q2"] == rrf(four, k=60)["q"]  # the original and the rewrite, both legs each, fused
    assert list(run["q2"])[0] == "C"
    assert run["q1"] == rrf([{"q": {"A": 1, "B": 0.5, "C": 0.3}}] * 2, k=60)["q"]  # q1: exactly hybrid


def test_the_guard_reverts_a_rewrite_that_retrieves_worse(tmp_path):
    with FakeLLM(rule=rewriting_to("worse words")) as f:
        (run, _), ledger, _ = run_with(f.base_url, tmp_path)
    row = ledger.loc["q2"]
    assert (row.status, row.rewrite, row.rewrite_agreement) == ("reverted", "worse words", 0.0)
    assert run == hybrid().run  # reverted: the original result, unchanged


def record_with(fake_url: str, tmp_path) -> dict:
    with reformulate.open_rewriter(settings_for(fake_url), LLMCache(tmp_path)) as (rewriter, _):
        step = reformulate.Reformulate(rewriter, threshold=THRESHOLD, guard_k=2)
        step.apply(FakeSource(), QUERIES, hybrid(), leg_k=10, rrf_k=60)
    return step.record()


def test_rewrites_are_cached(tmp_path):
    with FakeLLM(rule=rewriting_to("better words")) as f:
        run_with(f.base_url, tmp_path)
        _, ledger, _ = run_with(f.base_url, tmp_path)
        assert f.count == 1
    assert bool(ledger.loc["q2", "cache_hit"]) and ledger.loc["q2", "status"] == "kept"


def test_the_rewrites_tokens_are_counted_in_the_record(tmp_path):
    """Through llm.call (issue 20): the sent rewrite's tokens, then the same tokens as saved by the cache."""
    with FakeLLM(rule=rewriting_to("better words")) as f:
        cold, warm = record_with(f.base_url, tmp_path), record_with(f.base_url, tmp_path)
        assert f.count == 1
    assert cold["prompt_tokens"] > 0 and cold["completion_tokens"] > 0
    assert (cold["saved_prompt_tokens"], cold["saved_completion_tokens"]) == (0, 0)
    assert (warm["prompt_tokens"], warm["completion_tokens"]) == (0, 0)
    assert (warm["saved_prompt_tokens"], warm["saved_completion_tokens"]) == (
        cold["prompt_tokens"],
        cold["completion_tokens"],
    )
    assert (cold["rewritten"], cold["kept"]) == (warm["rewritten"], warm["kept"]) == (1, 1)


@pytest.mark.parametrize("reply", [{"content": "no idea"}, {"content": json.dumps({"query": "Weak  query"})}])
def test_an_unusable_rewrite_keeps_the_original(tmp_path, reply):
    with FakeLLM(rule=lambda n, b: reply) as f:
        (run, _), ledger, _ = run_with(f.base_url, tmp_path)
    assert ledger.loc["q2", "status"] == reformulate.LLM_FAILED and ledger.loc["q2", "error"]
    assert run == hybrid().run


def test_the_llm_down_falls_back_with_a_status(tmp_path):
    (run, _), ledger, _ = run_with("http://127.0.0.1:9/v1", tmp_path)  # nothing listens on port 9
    assert ledger.loc["q2", "status"] == reformulate.LLM_FAILED
    assert ledger.loc["q2", "error"] in ("APIConnectionError", "APITimeoutError")
    assert run == hybrid().run
    with reformulate.open_rewriter(Settings(base_url=None), LLMCache(tmp_path)) as (rewriter, problem):
        assert rewriter is None and "no LLM endpoint configured" in problem


def test_without_an_endpoint_every_weak_query_keeps_its_result_and_says_why():
    step = reformulate.Reformulate(None, threshold=THRESHOLD, guard_k=2)
    run, chunk_run = step.apply(FakeSource(), QUERIES, hybrid(), leg_k=10, rrf_k=60)
    assert (run, chunk_run) == tuple(hybrid())
    step.no_endpoint("no LLM endpoint configured")
    ledger = step.ledger.set_index("qid")
    assert ledger.loc["q2", "error"] == "NoEndpoint: no LLM endpoint configured" and ledger.loc["q1", "error"] == ""
    assert step.record() == {
        "threshold": THRESHOLD,
        "guard_k": 2,
        "rewritten": 0,
        "kept": 0,
        **dict.fromkeys(reformulate.TOKEN_FIELDS, 0),
        "llm_calls": 0,
        "llm_cache_hits": 0,
        "llm_seconds": 0.0,
    }


def test_reformulate_uses_the_llm_only_through_rerankeval_llm():
    """The rewrite step never imports the reranker (retrieve and rerank meet only through run files)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(reformulate))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in imported if m.startswith("rerankeval.rerank")}
    assert {
        "rerankeval.llm.call",
        "rerankeval.llm.breaker",
        "rerankeval.llm.client",
        "rerankeval.llm.cache",
    } <= imported


def test_the_chain_starts_the_llm_for_03_only_when_hybrid_reformulate_is_listed():
    from rerankeval.apps.chain import params as chain_params
    from rerankeval.apps.chain import preflight as chain_preflight

    nb03 = next(nb for nb in chain_params.notebooks() if nb.name.startswith("03"))
    assert chain_preflight.wants_llm(nb03, {})  # listed by default
    assert not chain_preflight.wants_llm(nb03, {"variants": ["vector", "bm25", "hybrid"]})
    assert not chain_preflight.wants_llm(next(nb for nb in chain_params.notebooks() if nb.name.startswith("01")), {})
