"""The rerank ledger's readers and summaries (rerankeval.rerank.ledger) and the cost table
(rerankeval.evaluate.costs)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rerankeval.evaluate import costs as C
from rerankeval.rerank import ledger as L


def test_ledger(tmp_path):
    p = tmp_path / "ledger.csv"
    pd.DataFrame(
        [
            {
                "qid": "001",
                "pass": 1,
                "status": "ok",
                "n_invalid": 1,
                "n_duplicate": 0,
                "n_missing": 2,
                "retries": 0,
                "error": "",
                "latency_s": 2.0,
                "prompt_tokens": 100,
                "completion_tokens": 10,
                "cost": 0.01,
                "cache_hit": True,
            },
            {
                "qid": "001",
                "pass": 2,
                "status": "fallback",
                "n_invalid": 0,
                "n_duplicate": 0,
                "n_missing": 0,
                "retries": 3,
                "error": "<script>x</script>",
                "latency_s": 4.0,
                "prompt_tokens": 50,
                "completion_tokens": 0,
                "cost": 0.0,
                "cache_hit": False,
            },
            {
                "qid": "002",
                "pass": 1,
                "status": "ok",
                "n_invalid": 0,
                "n_duplicate": 0,
                "n_missing": 0,
                "retries": 0,
                "error": None,
                "latency_s": 1.0,
                "prompt_tokens": 90,
                "completion_tokens": 10,
                "cost": 0.01,
                "cache_hit": False,
            },
        ]
    ).to_csv(p, index=False)
    led = L.read_ledger(p, missing_ok=True)
    assert led.qid.tolist()[0] == "001"  # ids stay strings
    assert L.fallback_queries(led) == {"001"}
    s = L.ledger_summary(led).iloc[0]
    assert s.variant == "hybrid_rerank" and s.n_queries == 2 and s.fallback_rate == 0.5
    assert s.tokens_per_query == pytest.approx((160 + 100) / 2)
    # query 001 was not served wholly from the cache (one pass was not): both count for latency
    assert s.llm_seconds_per_query == pytest.approx(3.5)
    assert s.repairs_per_query == pytest.approx(1.5) and s.cache_hit_rate == 0
    assert L.ledger_summary(led, qids=["002"]).iloc[0].fallback_rate == 0
    notes = L.ledger_notes(led)
    assert "fallback" in notes["001"] and "<script>" in notes["001"]  # raw: callers escape
    assert L.read_ledger(tmp_path / "none.csv", missing_ok=True) is None and L.ledger_summary(None).empty
    assert L.is_fallback("error: timeout") and not L.is_fallback("ok") and not L.is_fallback("repaired")


def test_ledger_cache_and_variants_and_costs(tmp_path):
    led = pd.DataFrame(
        [
            {
                "qid": "1",
                "pass": "main",
                "variant": "hybrid_rerank",
                "status": "ok",
                "latency_s": 10.0,
                "prompt_tokens": 100,
                "completion_tokens": 5,
                "saved_prompt_tokens": 0,
                "saved_completion_tokens": 0,
                "cache_hit": False,
            },
            {
                "qid": "2",
                "pass": "main",
                "variant": "hybrid_rerank",
                "status": "ok",
                "latency_s": 0.01,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "saved_prompt_tokens": 120,
                "saved_completion_tokens": 5,
                "cache_hit": True,
            },
            {
                "qid": "2",
                "pass": "reversed",
                "variant": "hybrid_rerank@reversed",
                "status": "fallback",
                "latency_s": 3.0,
                "prompt_tokens": 50,
                "completion_tokens": 0,
                "cache_hit": False,
            },
        ]
    )
    s = L.ledger_summary(led).set_index("variant")
    main = s.loc["hybrid_rerank"]
    assert main.tokens_per_query == pytest.approx((105 + 125) / 2) and main.fresh_tokens_per_query == 52.5
    assert main.llm_seconds_per_query == pytest.approx(10.0)  # the cached query does not hide the latency
    assert main.cache_hit_rate == 0.5 and main.fallback_rate == 0
    assert s.loc["hybrid_rerank@reversed"].fallback_rate == 1
    assert L.fallback_queries(led, variant="hybrid_rerank") == set() and L.fallback_queries(led) == {"2"}
    assert L.ledger_notes(led, variant="hybrid_rerank") == {}
    (tmp_path / "hybrid.json").write_text('{"seconds": 2.0, "queries": 4, "pool_k": 20}')
    (tmp_path / "vector.json").write_text('{"seconds": 4.0, "queries": 4}')
    (tmp_path / "bm25.json").write_text("not json")
    rs = C.retrieval_seconds(tmp_path, ["hybrid", "bm25", "vector"])
    assert rs == {"hybrid": 0.5, "vector": 1.0}
    assert C.recorded_pool_k(tmp_path, tmp_path / "absent") == {f"{tmp_path.name}/hybrid.json": 20}
    table = C.cost_table(["bm25", "hybrid", "hybrid_rerank"], L.ledger_summary(led), rs).set_index("variant")
    assert math.isnan(table.at["bm25", "seconds_per_query"])
    assert math.isnan(table.at["hybrid", "seconds_per_query"])  # a leg's time is unknown
    rs["bm25"] = 0.25
    table = C.cost_table(["bm25", "hybrid", "hybrid_rerank"], L.ledger_summary(led), rs).set_index("variant")
    assert table.at["hybrid", "seconds_per_query"] == pytest.approx(1.75)  # legs + fusion
    assert table.at["hybrid_rerank", "retrieval_seconds_per_query"] == pytest.approx(1.75)
    assert table.at["hybrid_rerank", "seconds_per_query"] == pytest.approx(11.75)  # + LLM


def test_one_repaired_rate_for_both_summaries():
    """The stage summary (rerank.summarize) and the analysis summary (ledger_summary) agree on the rates."""
    rows = [
        {c: 0 for c in L.COLUMNS}
        | {"qid": q, "pass": "main", "variant": "hybrid_rerank", "status": st, "error": "", "cache_hit": False}
        for q, st in (("1", "ok"), ("2", "repaired"), ("3", "repaired"), ("4", "fallback"))
    ]
    led = L.to_frame(rows)
    stage = L.summarize(led, "main")
    table = L.ledger_summary(led).iloc[0]
    assert stage["repaired_rate"] == table.repaired_rate == 0.5
    assert stage["fallback_rate"] == table.fallback_rate == 0.25


def test_recorded_pool_k_only_counts_the_variants_analysed(tmp_path):
    (tmp_path / "hybrid.json").write_text('{"pool_k": 20}')
    (tmp_path / "old.json").write_text('{"pool_k": 5}')
    assert C.recorded_pool_k(tmp_path, variants=["hybrid"]) == {f"{tmp_path.name}/hybrid.json": 20}
    assert len(C.recorded_pool_k(tmp_path)) == 2
