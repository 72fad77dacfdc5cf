"""Issue 10 point 3: Judged@k (closed form), the unjudged pool, and grades recorded while exploring that reach the
next analysis' qrels (and the manifest), never silently overwriting an existing judgment."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from judgments_data import UNITS, _dataset
from rerankeval.core.settings import load_settings
from rerankeval.evaluate import analyse, judgments


def test_judged_at_k_closed_form():
    qrels = {"q1": {"a": 1, "b": 0}, "q2": {"x": 2}}
    run = {"q1": {"a": 5.0, "c": 4.0, "b": 3.0, "d": 2.0}, "q2": {"y": 3.0, "x": 2.0}}
    other = {"q1": {"e": 1.0}}  # answers q1 only: the mean is over the queries it answered
    got = judgments.judged_at_k({"v": run, "w": other}, qrels, ["q1", "q2"], k=3)
    # q1: a, c, b -> 2 of 3 judged (a grade 0 is a judgment); q2: y, x -> 1 of 2 (fewer than k returned)
    assert got["v"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert got["w"] == 0.0
    assert judgments.judged_at_k({"v": run}, qrels, ["q1"], k=1)["v"] == 1.0


def test_the_unjudged_pool_lists_each_unit_once_with_its_variants_and_best_rank():
    qrels = {"q1": {"a": 1}}
    pool = judgments.unjudged_pool(
        {"v": {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}}, "w": {"q1": {"c": 2.0, "b": 1.0}}},
        qrels,
        ["q1"],
        k=2,
        snippet=lambda v, q, d: f"{v}:{d}",
    )
    assert pool[["unit_id", "variants", "n_variants", "best_rank", "snippet"]].values.tolist() == [
        ["b", "v,w", 2, 2, "v:b"],
        ["c", "w", 1, 1, "w:c"],
    ]


def _analyse(dp):
    a = analyse.run(
        dp, {"ks": [1, 3], "final_k": 3, "pool_k": 3, "n_boot": 50, "n_perm": 50, "verify_with": []}, load_settings()
    )
    analyse.write(dp, a)
    return a


def test_a_recorded_grade_reaches_the_next_runs_qrels_and_the_manifest(tmp_path):
    dp = _dataset(tmp_path)
    before = _analyse(dp)
    assert before.qrels["q1"] == {UNITS[0]: 2}
    assert before.summary.judging["judged_at_k"]["hybrid"] == pytest.approx((1 / 3 + 1 / 3) / 2)
    review = pd.read_csv(dp.unjudged_review, sep="\t")
    row = review[(review.qid == "q1") & (review.unit_id == UNITS[1])]
    assert len(row) == 1 and row.snippet.iloc[0] == "page 2 about topic 1" and row.variants.iloc[0] == "bm25,hybrid"
    # issue 34: the review is in the judging queue's order (weight descending) and 05 wrote the holes record
    assert list(review.columns[-2:]) == ["weight", "moves"] and review.weight.is_monotonic_decreasing
    from rerankeval.evaluate import holes

    rec = holes.read(dp)
    assert rec["baseline"] in before.runs and {c["status"] for c in rec["comparisons"]} <= {
        "decided",
        "undecided",
        "tied",
        "identical",
    }

    assert judgments.record(dp, "q1", UNITS[1], 1) == "recorded"
    assert judgments.record(dp, "q3", UNITS[4], 2) == "recorded"  # a query the qrels did not judge yet
    assert judgments.record(dp, "q1", UNITS[1], 1) == "unchanged"
    assert dp.judgments("test").is_file() and dp.judgments("test").parent == dp.source / "qrels"

    after = _analyse(dp)
    assert after.qrels["q1"] == {UNITS[0]: 2, UNITS[1]: 1} and after.qrels["q3"] == {UNITS[4]: 2}
    assert after.summary.judging["judged_at_k"]["hybrid"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    man = json.loads(dp.manifest.read_text())
    assert man["judgments"]["merged"] == 2 and man["judgments"]["file"].endswith("qrels/judgments-test.tsv")
    assert len(man["judgments"]["sha256"]) == 64


def test_a_conflicting_grade_is_refused_and_says_how_to_resolve(tmp_path):
    dp = _dataset(tmp_path)
    with pytest.raises(judgments.JudgmentConflict, match=r"already judged 2 .*qrels/test.tsv.*edit"):
        judgments.record(dp, "q1", UNITS[0], 0)
    assert not dp.judgments("test").exists()
    judgments.record(dp, "q1", UNITS[2], 1)
    with pytest.raises(judgments.JudgmentConflict, match=r"already judged 1 in .*replace=True"):
        judgments.record(dp, "q1", UNITS[2], 2)
    assert judgments.record(dp, "q1", UNITS[2], 2, replace=True) == "replaced"
    assert judgments.read_judgments(dp.judgments("test")) == [("q1", UNITS[2], 2, 2)]
    with pytest.raises(ValueError, match="not in the corpus"):
        judgments.record(dp, "q1", "nope.pdf#p9", 1)
    with pytest.raises(ValueError, match="queries.jsonl"):
        judgments.record(dp, "free text", UNITS[0], 1)


def test_a_judgments_file_that_disagrees_with_the_qrels_stops_the_merge(tmp_path):
    dp = _dataset(tmp_path)
    dp.judgments("test").write_text(f"query-id\tcorpus-id\tscore\nq2\t{UNITS[1]}\t0\n", encoding="utf-8")
    with pytest.raises(judgments.JudgmentConflict, match=r"judgments-test.tsv:2 grades q2 .* as 0, but the qrels"):
        _analyse(dp)
