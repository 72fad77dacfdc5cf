"""The rerank blend chosen by the sweep (experiments.blend, issue 22.3): alpha x pool_k replayed from recorded LLM
scores, chosen on train or by k-fold, on hand-built pools whose best blend is known in closed form."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rerankeval.experiments import blend
from rerankeval.experiments import grid as gridmod
from rerankeval.experiments.replay import RecordedLLM
from sweep_data import FakeSource

# identical legs, so combsum_minmax's fused score is 2 * minmax(leg): q2's pool of 3 is fused 2, 1, 0 -> 1, .5, 0
LEG = {"q1": {"A": 2.0, "B": 1.0}, "q2": {"C": 3.0, "D": 2.0, "E": 1.0}, "q3": {"F": 2.0, "G": 1.0}}
QRELS = {"q1": {"B": 1}, "q2": {"C": 1}, "q3": {"G": 1}}
# q1 and q3: the relevant second unit rises to the top iff alpha > .5 (alpha = .5 ties: fused order wins);
# q2 (pool 3): C stays first iff .875 a + (1 - a) > a + .5 (1 - a), i.e. a < .8; with pool 2 iff a <= .5
LLM = {"q1": {"A": 0.0, "B": 1.0}, "q2": {"C": 0.875, "D": 1.0, "E": 0.0}, "q3": {"F": 0.0, "G": 1.0}}
ALPHAS = [0, 0.1, 0.2, 0.3, 0.5, 0.7, 1]
POINT = gridmod.Point(method="combsum_minmax", leg_k=5)
G = 1 / math.log2(3)  # nDCG@2 of a list whose only relevant unit is second


class LegSource(FakeSource):
    def __init__(self) -> None:
        super().__init__()
        self.unit_of = {d: d for docs in LEG.values() for d in docs}

    def dense_leg(self, queries, k):
        return {q: LEG[q] for q in queries}

    bm25_leg = dense_leg


def _values(qids):
    eng = gridmod.Engine(LegSource(), {q: q for q in LEG}, max_leg_k=5)
    eng.llm = RecordedLLM(LLM, 0.5, 10.0, 0.1)
    return blend.blend_values(eng, POINT, qids, QRELS, "ndcg@2", [2, 3], ALPHAS)


def test_blend_values_are_closed_form():
    v = _values(["q1", "q2"]).set_index(["pool_k", "alpha", "qid"])
    for a in ALPHAS:
        assert v.loc[(3, float(a), "q1"), "reranked"] == (1.0 if a > 0.5 else pytest.approx(G))
        assert v.loc[(3, float(a), "q2"), "reranked"] == (1.0 if a < 0.8 else pytest.approx(G))
        assert v.loc[(2, float(a), "q2"), "reranked"] == (1.0 if a <= 0.5 else pytest.approx(G))
        assert v.loc[(3, float(a), "q1"), "fused"] == pytest.approx(G) and v.loc[(3, float(a), "q2"), "fused"] == 1.0


def test_train_chooses_the_only_best_blend_and_reports_it_once_on_test():
    values = _values(["q1", "q2", "q3"])
    b = blend.tune(values, {"q1", "q2"}, {"q3"}, "ndcg@2", [2, 3], ALPHAS, n_boot=100)
    assert b.protocol == "train/test" and b.chosen == {"train": (3, 0.7)}  # only pool 3 at alpha .7 gets both right
    train = b.table[b.table.split == "train"].set_index(["pool_k", "alpha"])
    assert train.loc[(3, 0.7), "reranked"] == 1.0 and train.loc[(3, 0.7), "n_queries"] == 2
    assert train.loc[(3, 1.0), "reranked"] == pytest.approx((1 + G) / 2)
    assert set(b.per_query.qid) == {"q3"}  # reported on the query that did not choose it
    h = blend.headline(b)
    assert h["reranked mean"] == 1.0 and h["fused mean"] == pytest.approx(G) and h["n"] == 1
    assert "pool_k 3, alpha 0.7" in blend.sentence(b, "ndcg@2")


def test_kfold_chooses_each_fold_without_its_query():
    values = _values(["q1", "q2", "q3"])
    b = blend.tune(values, set(), {"q1", "q2", "q3"}, "ndcg@2", [2, 3], ALPHAS, folds=3, seed=0, n_boot=100)
    assert b.protocol == "k-fold" and len(b.chosen) == 3
    oof = b.per_query[b.per_query.variant == blend.BLEND].set_index("qid").value
    # without q2: q1 and q3 both need alpha > .5; pool 2 at .7 is the first of the ties. Without q1 or q3: (3, .7)
    assert sorted(b.folds) == ["q1", "q2", "q3"] and len(set(b.folds.values())) == 3
    for q, want in {"q1": (3, 0.7), "q2": (2, 0.7), "q3": (3, 0.7)}.items():
        assert b.chosen[f"fold {b.folds[q]}"] == want, q
    assert oof.to_dict() == {"q1": 1.0, "q2": pytest.approx(G), "q3": 1.0}


def test_pools_not_wholly_scored_are_left_out_and_too_few_queries_say_why():
    values = pd.DataFrame({"pool_k": [5, 5, 10], "alpha": 0.5, "qid": ["a", "b", "a"], "reranked": 1.0, "fused": 0.0})
    keep, note = blend.replayable(values, [5, 10])
    assert keep == [5] and "pool_k 10 (1 of 2 queries wholly scored)" in note
    b = blend.tune(values[values.qid == "a"], set(), {"a"}, "ndcg@2", [5], [0.5], n_boot=10)
    assert b.protocol == "" and "at least 2 are needed" in b.note and b.chosen == {}
    with pytest.raises(ValueError, match="nothing to choose the blend from"):
        blend.choose(values, {"zz"}, [(5, 0.5)])


def test_the_grid_file_has_an_alpha_axis_in_range(tmp_path):
    assert gridmod.load_grid("small").alpha == ALPHAS and gridmod.load_grid("large").alpha == ALPHAS
    bad = tmp_path / "g.yaml"
    bad.write_text("x:\n  alpha: [0.5, 1.5]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        gridmod.load_grid("x", bad)
