"""No cost surprises: the plan before the first call, the budget that skips, cached replies keep their cost."""

from __future__ import annotations

import json

import pytest

from fakellm import FakeLLM, make_inputs
from rerank_data import rerank_made
from rerankeval.core.settings import Settings
from rerankeval.llm import budget
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank import prompts
from rerankeval.rerank.config import Params


def _run(fake, cache, **kw):
    fused, queries, texts = make_inputs(n_queries=4, n_docs=8, gold=(3,))
    s = Settings(base_url=fake.base_url, api_key="k", model="fake", timeout=2, max_retries=0)
    params = Params(pool_k=5, **{"mode": "yesno", "yesno_json": True, "alpha": 1.0, **kw})
    return rerank_made(cache.root.parent / "ds", fused, queries, texts, params, s, cache)


def test_max_calls_skips_whole_queries_before_any_call(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM() as f:
        res = _run(f, cache, max_calls=12)  # 5 calls per query: two queries fit, the third would pass 12
        assert f.count == 10
    led = res.ledger.set_index("qid")
    assert led.budget_skipped.tolist() == [False, False, True, True]
    assert led.loc["q0002", "status"] == "fallback" and "BudgetSkipped(max_calls=12)" in led.loc["q0002", "error"]
    assert led.loc["q0002", "llm_calls"] == 0 and led.loc["q0002", "requests"] == 0
    fused, _, _ = make_inputs(n_queries=4, n_docs=8, gold=(3,))
    assert list(res.run["q0003"]) == list(fused["q0003"])  # skipped: fused order, full depth
    assert list(res.run["q0000"])[0] == "d03"  # reranked
    assert res.plan["skipped"] == [["q0002", "main"], ["q0003", "main"]] and res.plan["fresh_calls"] == 10


def test_cached_calls_do_not_count_against_the_budget(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM() as f:
        _run(f, cache, max_calls=10)  # q0000 and q0001 cached
        res = _run(f, cache, max_calls=10)  # q0002, q0003 fit now
        assert f.count == 20
    assert not res.ledger.budget_skipped.any()
    assert res.plan["cache_hits"] == 10 and res.plan["fresh_calls"] == 10


def test_max_cost_stops_before_overspending(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    price = (1e6, 0.0)  # $1 per prompt token: a call costs its prompt tokens in dollars
    with FakeLLM() as f:
        probe = _run(f, LLMCache(tmp_path / "probe" / "llm"), price_per_mtok=price)
        per_query = probe.plan["cost_usd"] / 4
        f.requests.clear()
        res = _run(f, cache, price_per_mtok=price, max_cost=2.5 * per_query)
        sent = f.count
    assert sent == 10 and res.ledger.budget_skipped.sum() == 2
    assert float(res.ledger.cost.sum()) <= 2.5 * per_query * 1.5  # estimates are rough; never runaway


def test_runtime_budget_refuses_calls_the_plan_did_not_foresee():
    b = budget.Budget(max_calls=2)
    assert b.reserve(0.0) and b.reserve(0.0) and not b.reserve(0.0)
    c = budget.Budget(max_cost=1.0)
    assert c.reserve(0.6) and not c.reserve(0.6)
    c.settle(0.6, 0.1)  # the real cost was lower: room again
    assert c.reserve(0.6)


def test_plan_counts_hits_tokens_and_time(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM() as f:
        cold = _run(f, cache)
        warm = _run(f, cache)
    assert cold.plan["calls"] == 20 and cold.plan["cache_hits"] == 0 and cold.plan["fresh_calls"] == 20
    assert cold.plan["processed_tokens"] < cold.plan["prompt_tokens"]  # the shared head is processed once per query
    assert warm.plan["cache_hits"] == 20 and warm.plan["fresh_calls"] == 0 and warm.plan["expected_s"] == 0.0
    rates = json.loads(cache.rates_path.read_text())
    ((key, rate),) = rates.items()
    assert key.endswith("|fake") and rate["s_per_token"] > 0  # per endpoint and model
    assert rate["calls"] == 20 and sum(rate.get(k, 0) for k in ("prompt_s", "gen_s", "call_s")) > 0  # all measured
    assert "measured by the last run on this endpoint" in warm.plan["rate_source"]


def test_cached_reply_keeps_its_original_seconds_and_tokens(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM(rule=lambda n, body: {"delay": 0.05}) as f:
        cold = _run(f, cache)
        warm = _run(f, cache)
    c, w = cold.ledger, warm.ledger
    assert (c.llm_seconds >= 5 * 0.05).all() and (c.fresh_seconds == c.llm_seconds).all()
    assert (w.fresh_seconds == 0).all() and w.llm_seconds.tolist() == c.llm_seconds.tolist()
    assert w.saved_prompt_tokens.tolist() == c.prompt_tokens.tolist() and (w.requests == 0).all()
    entry = json.loads(next((tmp_path / "llm").rglob("*.json")).read_text())
    assert entry["reply"]["latency_s"] >= 0.05


def test_plan_message_says_what_is_skipped():
    p = budget.plan(
        [("q1", "main", [budget.CallEstimate(hit=False, prompt_tokens=100, processed_tokens=50)] * 3)] * 2,
        price=(2.0, 0.0),
        max_calls=4,
        max_cost=0.0,
        s_per_token=0.01,
        rate_source="test",
    )
    assert (p.fresh_calls, p.prompt_tokens, p.processed_tokens, p.expected_s) == (3, 300, 150, pytest.approx(1.5))
    msg = p.message(priced=True)
    assert "1 queries skipped (max_calls=4)" in msg and "expected cost $0.0006" in msg


def test_prompt_layout_shares_instructions_and_query():
    """Two candidates of one query share everything up to the passage (prefix caching)."""
    for json_reply in (True, False):
        a = "\n".join(m["content"] for m in prompts.yesno("Which file?", "alpha text", json_reply))
        b = "\n".join(m["content"] for m in prompts.yesno("Which file?", "beta text", json_reply))
        head = budget.shared_prefix(a, b)
        shared = a[:head]
        assert shared.endswith("Passage: ") and "Which file?" in shared
        assert "relevant" in shared.split("Query:")[0]  # the instructions come before the query
        assert len(a) - head < len("alpha text") + 30  # only the passage and a short reminder differ
    a = prompts.pointwise("Q", ["p1"])[1]["content"]
    assert a.index("from 0 (unrelated) to 10") < a.index("Q") < a.index("p1")


@pytest.mark.parametrize("price", [(-0.15, 0.6), (0.15, -1.0), (float("nan"), 0.0), (float("inf"), 0.0), (1.0,)])
def test_a_negative_or_meaningless_price_is_refused_before_any_call(tmp_path, price):
    """Issue 32: a negative price gave a negative cost (and let max_cost admit any number of calls)."""
    with FakeLLM() as f:
        with pytest.raises(budget.BadPrice, match=r"price_per_mtok=.*two numbers >= 0"):
            _run(f, LLMCache(tmp_path / "llm"), price_per_mtok=price, max_cost=0.01)
        assert f.count == 0
    with pytest.raises(budget.BadPrice):
        budget.plan([], price=price, max_calls=0, max_cost=0.0, s_per_token=None, rate_source="")


@pytest.mark.parametrize("limits", [{"max_calls": -1}, {"max_cost": -0.5}, {"max_cost": float("nan")}])
def test_a_negative_budget_is_refused(limits):
    with pytest.raises(budget.BadPrice, match=f"{next(iter(limits))}=.*>= 0"):
        budget.Budget(**limits)


def test_a_zero_price_and_no_limits_still_mean_unpriced_and_unlimited():
    assert budget.check_price([0, 0.6]) == (0.0, 0.6)
    assert budget.Budget(0, 0.0).reserve(1e9)
