"""Failure attribution: each class from hand-built ranks, missing variants, the ledger."""

from __future__ import annotations

import math

import pytest

from rerankeval.evaluate import funnel as F


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
    assert F.attribute({"vector": runs["vector"]}, QRELS, ["q1"], k=10, pool_k=20).empty  # no fused run: no funnel
    no_rr = {k: v for k, v in runs.items() if k != "hybrid_rerank"}
    att = F.attribute(no_rr, QRELS, ["q1", "q2", "q3"], k=10, pool_k=20)
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
