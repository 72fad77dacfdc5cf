"""Failure attribution: each class from hand-built ranks, missing variants, the ledger."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rerankeval import funnel as F


@pytest.mark.parametrize(
    "legs, fused, reranked, fallback, expected",
    [
        ({"vector": 3, "bm25": None}, 2, 1, False, F.HIT),
        ({"vector": None, "bm25": None}, None, None, False, F.NOT_RETRIEVED),
        ({"vector": 4, "bm25": None}, 25, 30, False, F.LOST_FUSION),  # leg inside the pool, fused outside
        ({"vector": 4, "bm25": None}, None, None, False, F.LOST_FUSION),  # fused list dropped it
        ({"vector": 40, "bm25": 55}, 31, 31, False, F.CUT_POOL),  # only deep in legs and fusion
        ({"vector": 2, "bm25": 3}, 3, 12, True, F.FALLBACK),
        ({"vector": 2, "bm25": 3}, 3, 12, False, F.LOST_RERANK),  # in fused top 10, pushed out
        ({"vector": 14, "bm25": 15}, 15, 11, False, F.NOT_LIFTED),  # in the pool below k, not lifted
        ({"vector": 14, "bm25": 15}, 15, None, False, F.NOT_LIFTED),
    ],
)
def test_classify_with_reranker(legs, fused, reranked, fallback, expected):
    assert F.classify(10, 20, legs, fused, reranked, True, fallback) == expected


def test_classify_without_reranker_or_legs():
    assert F.classify(10, 20, {"bm25": 3}, 5, None, False) == F.HIT
    assert F.classify(10, 20, {"bm25": 3}, 15, None, False) == F.LOST_FUSION
    assert F.classify(10, 20, {"bm25": 12}, 15, None, False) == F.BELOW_CUTOFF
    assert F.classify(10, 20, {}, None, None, True) == F.NOT_RETRIEVED
    assert F.classify(10, 20, {}, 30, None, True) == F.CUT_POOL
    assert F.classify(10, 20, None, 5, 15, True) == F.LOST_RERANK


def _runs():
    def r(*docs):
        return {d: 1.0 / (i + 1) for i, d in enumerate(docs)}

    filler = [f"x{i}" for i in range(30)]
    return {
        "vector": {"q1": r("g1", *filler[:5]), "q2": r(*filler[:5]), "q3": r(*filler[:3], "g3")},
        "bm25": {"q1": r(*filler[:5]), "q2": r(*filler[:5]), "q3": r(*filler[:5])},
        "hybrid": {"q1": r("g1", *filler[:5]), "q2": r(*filler[:5]), "q3": r(*filler[:12], "g3")},
        "hybrid_rerank": {"q1": r(*filler[:11], "g1"), "q2": r(*filler[:5]), "q3": r(*filler[:12], "g3")},
    }


QRELS = {"q1": {"g1": 2, "x0": 0}, "q2": {"g2": 1}, "q3": {"g3": 1}}


def test_attribute_end_to_end():
    att = F.attribute(_runs(), QRELS, ["q1", "q2", "q3"], k=10, pool_k=20, fallback_qids={"q1"})
    got = dict(zip(att.qid, att["class"], strict=True))
    assert got == {"q1": F.FALLBACK, "q2": F.NOT_RETRIEVED, "q3": F.NOT_LIFTED}
    row = att.set_index("qid").loc["q3"]
    assert row.rank_vector == 4 and math.isnan(row.rank_bm25) and row.rank_hybrid == 13
    att2 = F.attribute(_runs(), QRELS, ["q1"], k=10, pool_k=20)
    assert att2["class"].tolist() == [F.LOST_RERANK]
    counts = F.funnel_counts(att)
    assert counts.sum() == 3 and list(counts.index) == [F.NOT_RETRIEVED, F.FALLBACK, F.NOT_LIFTED]


def test_attribute_missing_variants():
    runs = _runs()
    assert F.attribute({"vector": runs["vector"]}, QRELS, ["q1"]).empty  # no fused run: no funnel
    no_rr = {k: v for k, v in runs.items() if k != "hybrid_rerank"}
    att = F.attribute(no_rr, QRELS, ["q1", "q2", "q3"], k=10)
    assert att["class"].tolist() == [F.HIT, F.NOT_RETRIEVED, F.LOST_FUSION]
    assert "rank_hybrid_rerank" not in att
    only = {k: runs[k] for k in ("hybrid", "hybrid_rerank")}
    att = F.attribute(only, QRELS, ["q2", "q3"], k=10, pool_k=20)
    assert att["class"].tolist() == [F.NOT_RETRIEVED, F.NOT_LIFTED]


def test_funnel_by_cutoff_and_rank_shift():
    by_k = F.funnel_by_cutoff(_runs(), QRELS, ["q1", "q2", "q3"], [1, 10, 20, 100], pool_k=20)
    assert list(by_k.index) == [1, 10, 20]  # cutoffs beyond the pool are left out
    assert (by_k.sum(axis=1) == 3).all()
    assert by_k.loc[20, F.HIT] == 2
    shift = F.rank_shift(_runs(), QRELS, ["q1", "q3"], depth=20)
    assert shift.set_index("qid").loc["q1", "dst_rank"] == 12 and len(shift) == 2


def test_first_relevant_ranks():
    fr = F.first_relevant_ranks(_runs(), QRELS, ["q1", "q2"])
    assert fr.loc["q1", "vector"] == 1 and math.isnan(fr.loc["q2", "hybrid"])


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
    led = F.load_ledger(p)
    assert led.qid.tolist()[0] == "001"  # ids stay strings
    assert F.fallback_queries(led) == {"001"}
    s = F.ledger_summary(led).iloc[0]
    assert s.variant == "hybrid_rerank" and s.n_queries == 2 and s.fallback_rate == 0.5
    assert s.tokens_per_query == pytest.approx((160 + 100) / 2)
    # query 001 was not served wholly from the cache (one pass was not): both count for latency
    assert s.llm_seconds_per_query == pytest.approx(3.5)
    assert s.repairs_per_query == pytest.approx(1.5) and s.cache_hit_rate == 0
    assert F.ledger_summary(led, qids=["002"]).iloc[0].fallback_rate == 0
    notes = F.ledger_notes(led)
    assert "fallback" in notes["001"] and "<script>" in notes["001"]  # raw: callers escape
    assert F.load_ledger(tmp_path / "none.csv") is None and F.ledger_summary(None).empty
    assert F.is_fallback("error: timeout") and not F.is_fallback("ok") and not F.is_fallback("repaired")


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
    s = F.ledger_summary(led).set_index("variant")
    main = s.loc["hybrid_rerank"]
    assert main.tokens_per_query == pytest.approx((105 + 125) / 2) and main.fresh_tokens_per_query == 52.5
    assert main.llm_seconds_per_query == pytest.approx(10.0)  # the cached query does not hide the latency
    assert main.cache_hit_rate == 0.5 and main.fallback_rate == 0
    assert s.loc["hybrid_rerank@reversed"].fallback_rate == 1
    assert F.fallback_queries(led, variant="hybrid_rerank") == set() and F.fallback_queries(led) == {"2"}
    assert F.ledger_notes(led, variant="hybrid_rerank") == {}
    (tmp_path / "hybrid.json").write_text('{"seconds": 2.0, "queries": 4, "pool_k": 20}')
    (tmp_path / "vector.json").write_text('{"seconds": 4.0, "queries": 4}')
    (tmp_path / "bm25.json").write_text("not json")
    rs = F.retrieval_seconds(tmp_path, ["hybrid", "bm25", "vector"])
    assert rs == {"hybrid": 0.5, "vector": 1.0}
    assert F.recorded_pool_k(tmp_path, tmp_path / "absent") == {f"{tmp_path.name}/hybrid.json": 20}
    costs = F.cost_table(["bm25", "hybrid", "hybrid_rerank"], F.ledger_summary(led), rs).set_index("variant")
    assert math.isnan(costs.at["bm25", "seconds_per_query"])
    assert math.isnan(costs.at["hybrid", "seconds_per_query"])  # a leg's time is unknown
    rs["bm25"] = 0.25
    costs = F.cost_table(["bm25", "hybrid", "hybrid_rerank"], F.ledger_summary(led), rs).set_index("variant")
    assert costs.at["hybrid", "seconds_per_query"] == pytest.approx(1.75)  # legs + fusion
    assert costs.at["hybrid_rerank", "retrieval_seconds_per_query"] == pytest.approx(1.75)
    assert costs.at["hybrid_rerank", "seconds_per_query"] == pytest.approx(11.75)  # + LLM
