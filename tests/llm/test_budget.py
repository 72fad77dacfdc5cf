"""No cost surprise (issue 23): the plan on the console before the first request of every LLM stage, the warning
for a non-local endpoint without a price, and the rewrite step's tokens in 05's cost table."""

from __future__ import annotations

import json

import pytest

from fakellm import FakeLLM, make_inputs
from rerank_data import rerank_made
from rerankeval.core.settings import Settings
from rerankeval.evaluate import costs
from rerankeval.llm import budget
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank.config import Params
from rerankeval.retrieve import reformulate, variants


def first_request(fake: FakeLLM) -> float:
    return min(t for t, path, _ in fake.requests if path.endswith("/chat/completions"))


def _rerank_six_calls(tmp_path, s: Settings) -> None:
    """Stage 04 (yes/no, progress on) on two queries with a pool of 3: six LLM calls when cold, its cache in tmp."""
    fused, queries, texts = make_inputs(n_queries=2, n_docs=6, gold=(3,))
    rerank_made(
        tmp_path / "ds",
        fused,
        queries,
        texts,
        Params(mode="yesno", yesno_json=True, pool_k=3),
        s,
        LLMCache(tmp_path / "llm"),
        progress=True,
    )


def test_the_rerank_plan_reaches_the_console_before_the_first_request(tmp_path, console, capsys):
    with FakeLLM() as f:
        s = Settings(base_url=f.base_url, api_key="k", model="fake", timeout=2, max_retries=0)
        _rerank_six_calls(tmp_path, s)
        assert f.count == 6
        assert console.first("rerank: Plan: 2 queries, 6 LLM calls") < first_request(f)
    assert "rerank: Plan: 2 queries" in capsys.readouterr().out  # and on the notebook page
    assert not any("no price is set" in line for _, line in console.lines)  # 127.0.0.1 is local


def test_a_warm_plan_stays_off_the_console(tmp_path, console):
    with FakeLLM() as f:
        s = Settings(base_url=f.base_url, api_key="k", model="fake", timeout=2, max_retries=0)
        for _ in range(2):
            console.lines.clear()
            _rerank_six_calls(tmp_path, s)
    assert not any("Plan:" in line for _, line in console.lines)  # the second run sent nothing


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://127.0.0.2:9/v1", True),
        ("http://localhost/v1", True),
        ("http://[::1]:8000/v1", True),
        (None, True),
        ("https://api.openai.com/v1", False),
        ("http://192.168.1.5:8000/v1", False),
        ("http://my-gpu-box:8000/v1", False),
    ],
)
def test_what_counts_as_a_local_endpoint(url, local):
    assert budget.is_local_endpoint(url) is local


def test_a_non_local_endpoint_without_a_price_is_warned_about(console):
    plan = budget.Plan(queries=1, calls=2, fresh_calls=2, prompt_tokens=100)
    text = budget.announce(plan, (0.0, 0.0), "https://api.example.com/v1", stage="rerank")
    assert "costs are shown as $0 because no price is set: set price_per_mtok=[in, out]" in text
    assert any("no price is set" in line for _, line in console.lines)
    priced = budget.announce(plan, (0.15, 0.6), "https://api.example.com/v1")
    assert "no price is set" not in priced and "expected cost $" in priced
    assert budget.price_warning("http://x/v1", "llama-server:qwen", (0, 0)) is None  # the project's own server


# -- the rewrite step --------------------------------------------------------------------------------------
QUERIES = {"q1": "alpha one", "q2": "beta two", "q3": "gamma three"}


class WeakSource:
    """Legs that never agree, so every query is weak (top fused score 1/61 < the threshold)."""

    def __init__(self) -> None:
        self.unit_of = {d: d for d in "ABCDEF"}

    def dense_leg(self, queries, k):
        return {q: {"A": 1.0, "B": 0.5, "C": 0.3} for q in queries}

    def bm25_leg(self, queries, k):
        return {q: {"D": 1.0, "E": 0.5, "F": 0.3} for q in queries}


def rewrite_run(url: str, cache_dir) -> dict:
    settings = Settings(base_url=url, api_key="k", model="fake", timeout=2.0, max_retries=0)
    budget = variants.Budget(leg_k=10, pool_k=10, rrf_k=60)
    base = variants.complete(variants.Hybrid(WeakSource(), budget).search_runs(QUERIES), QUERIES)
    with reformulate.open_rewriter(settings, LLMCache(cache_dir)) as (rewriter, _):
        step = reformulate.Reformulate(rewriter)
        step.apply(WeakSource(), QUERIES, base, leg_k=10, rrf_k=60)
    return step.record()


def rewriting(n: int, body: dict) -> dict:
    return {"content": json.dumps({"query": f"rewritten {n}"})}


def fake_tokens(fake: FakeLLM) -> int:
    """The tokens the fake counted in its usage replies (tests/support/fakellm.py's formula)."""
    total = 0
    for n, (_, _, body) in enumerate(r for r in fake.requests if r[1].endswith("/chat/completions")):
        total += sum(len(m.get("content", "").split()) for m in body["messages"])
        total += max(1, len(rewriting(n, body)["content"]) // 4)
    return total


def test_the_rewrite_plan_reaches_the_console_before_the_first_request(tmp_path, console):
    with FakeLLM(rule=rewriting) as f:
        rewrite_run(f.base_url, tmp_path)
        assert f.count == 3
        assert console.first("rewrite: Plan: 3 queries, 3 LLM calls") < first_request(f)


def test_the_rewrite_tokens_reach_the_cost_table(tmp_path):
    with FakeLLM(rule=rewriting) as f:
        record = rewrite_run(f.base_url, tmp_path / "llm")
        counted = fake_tokens(f)
    assert record["llm_calls"] == 3
    retrieve = tmp_path / "retrieve"
    retrieve.mkdir()
    (retrieve / "hybrid_reformulate.json").write_text(json.dumps({**record, "queries": 3, "seconds": 9.0}))
    (retrieve / "hybrid.json").write_text(json.dumps({"queries": 3, "seconds": 0.3}))  # no LLM: no row
    step = costs.step_llm_costs(retrieve, ["hybrid", "hybrid_reformulate"])
    assert step.variant.tolist() == ["hybrid_reformulate"]
    table = costs.cost_table(
        ["hybrid", "hybrid_reformulate"],
        None,
        costs.retrieval_seconds(retrieve, ["hybrid", "hybrid_reformulate"]),
        inputs_of={},
        step_llm=step,
    ).set_index("variant")
    row = table.loc["hybrid_reformulate"]
    assert counted > 0 and row.tokens_per_query == pytest.approx(counted / 3)
    assert row.fresh_tokens_per_query == pytest.approx(counted / 3) and row.calls_per_query == 1.0
    llm_s = row.llm_seconds_per_query
    assert 0 < llm_s and row.seconds_per_query == pytest.approx(3.0)  # LLM seconds moved out of retrieval, not added
    assert row.retrieval_seconds_per_query == pytest.approx(3.0 - llm_s)
    assert table.loc["hybrid"].isna()["tokens_per_query"]


def test_the_documented_p_syntax_gives_04_a_price_and_a_budget():
    """.env.example and the README: make report P="price_per_mtok=[0.15, 0.6] max_cost=1" (a list through P)."""
    from rerankeval.apps.chain import params as chain_params
    from rerankeval.core import paths

    nbs = sorted((paths.ROOT / "notebooks").glob("*.ipynb"))
    for p in ("price_per_mtok=[0.15, 0.6] max_cost=1", "price_per_mtok=[0.15,0.6] max_calls=500"):
        items = chain_params.split_params(p)
        loaded = chain_params.load_params("x", items)
        typed = chain_params.typed_parameters(nbs, loaded, chain_params.override_texts(items))
        assert typed["price_per_mtok"] == [0.15, 0.6]
        assert typed.get("max_cost", 1) == 1 and typed.get("max_calls", 500) == 500
    env_example = (paths.ROOT / ".env.example").read_text()
    assert 'make report P="price_per_mtok=[0.15, 0.6] max_cost=1"' in env_example
    assert all(name in env_example for name in ("price_per_mtok", "max_calls", "max_cost"))
