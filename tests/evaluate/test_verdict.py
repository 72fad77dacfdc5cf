"""The index's first screen is built around a baseline: hybrid against the better single retriever, a difference
column with its CI and Holm mark, and a warning when most of the top k is unjudged (issue 23)."""

from __future__ import annotations

import pandas as pd
import pytest

from comparison_rows import comparison
from handmade import dataset_in
from rerankeval.evaluate import verdict
from rerankeval.evaluate.analysis_records import Summary
from rerankeval.report import judged, render

METRICS = pd.DataFrame(
    {
        "variant": ["bm25", "vector", "hybrid"],
        "n_queries": [20, 20, 20],
        "ndcg@10": [0.50, 0.60, 0.66],
        "ndcg@10_ci_low": [0.4, 0.5, 0.56],
        "ndcg@10_ci_high": [0.6, 0.7, 0.76],
    }
)


COMPARISONS = pd.DataFrame(
    [
        comparison("vector", "hybrid", -0.06, 0.03, 5, 3, 12),
        comparison("bm25", "vector", -0.10, 0.20, 12, 3, 5),
        comparison("bm25", "hybrid", -0.16, 0.01, 12, 3, 5),
    ]
)


def test_the_baseline_is_the_better_single_retriever_unless_named():
    assert verdict.baseline_of(METRICS) == "vector"
    assert verdict.baseline_of(METRICS, baseline="bm25") == "bm25"
    with pytest.raises(verdict.UnknownBaseline, match="names no evaluated variant"):  # never a silent fall-back
        verdict.baseline_of(METRICS, baseline="nope")
    assert verdict.baseline_of(METRICS[METRICS.variant == "hybrid"]) is None


def test_versus_is_oriented_variant_minus_baseline():
    v = verdict.versus(COMPARISONS, "ndcg@10", "hybrid", "vector")  # stored as vector - hybrid
    assert v["diff"] == pytest.approx(0.06) and (v["low"], v["high"]) == (pytest.approx(0.01), pytest.approx(0.11))
    assert (v["wins"], v["ties"], v["losses"], v["mark"]) == (12, 3, 5, "*")
    assert verdict.versus(COMPARISONS, "ndcg@10", "bm25", "vector")["mark"] == ""  # p_holm .20


def test_the_first_sentence_compares_hybrid_with_the_baseline():
    lines = verdict.verdict_lines(METRICS, COMPARISONS)
    assert lines[0].startswith("Against the baseline, vector (the better single retriever), hybrid")
    assert "+0.060 (95% CI +0.010 to +0.110); 12 queries better, 5 worse, 3 tied" in lines[0]
    assert "survives Holm correction" in lines[0]
    assert "runner-up" in lines[1]  # the winner line stays, second


def test_the_headline_table_has_a_difference_column_with_ci_and_mark():
    t = render.headline_table(METRICS, comparisons=COMPARISONS)
    assert t["baseline"] == "vector" and "nDCG@10 vs vector (baseline)" in t["head"]
    col = t["head"].index("nDCG@10 vs vector (baseline)") - 1  # cells start after the variant column
    cells = {r["variant"]: r["cells"][col] for r in t["rows"]}
    assert cells["vector"]["text"] == "baseline"
    assert cells["hybrid"]["text"] == "+0.060*" and cells["hybrid"]["ci"] == "[+0.010, +0.110] 12/3/5"
    assert cells["bm25"]["text"] == "-0.100"


def test_a_mostly_unjudged_top_k_is_warned_about_with_the_next_step():
    low = Summary(judging={"k": 10, "judged_at_k": {"hybrid": 0.27, "vector": 0.31}})
    text = judged.judged_warning(low)
    assert "only 27% of hybrid's top 10 has a judgment" in text and "00-explore" in text and "assess" in text
    assert judged.judged_warning(Summary(judging={"k": 10, "judged_at_k": {"hybrid": 0.8}})) is None
    assert judged.judged_warning(None) is None


def test_an_id_like_string_that_is_no_id_gets_a_did_you_mean():
    from rerankeval.apps.explore.engine import Explorer

    ex = Explorer.__new__(Explorer)  # only the query table and the dataset name are needed
    ex.table = {f"dm-{i:03d}": f"question {i}" for i in range(1, 61)}
    ex.dp = type("DP", (), {"name": "debian-manuals"})()
    assert ex.did_you_mean("q12") == (
        "'q12' is not a query id of debian-manuals (did you mean dm-012?); searched as free text instead."
    )
    assert ex.did_you_mean("dm-012") == "" and ex.did_you_mean("how do I upgrade") == ""
    assert "did you mean dm-061" not in ex.did_you_mean("x999") and "ids look like dm-001" in ex.did_you_mean("x999")


def test_the_index_shows_the_llm_assessor_and_which_grades_the_tables_use():
    grades = {
        "qrels_source": "human",
        "llm_file": "qrels/llm-fake.tsv",
        "llm_added": 0,
        "agreement": {
            "n_pairs": 4,
            "kappa_binary": 0.0,
            "kappa_graded": 0.1,
            "warning": "this judge agrees with your judgments little better than chance",
            "confusion_graded": {
                "labels": [0, 1, 2, 3],
                "counts": [[1, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0]],
            },
        },
    }
    parts = judged.assessor(Summary(grades=grades))
    assert parts["assessor"]["warning"] and parts["assessor"]["rows"][0] == [1, 0, 0, 1]
    assert parts["grades_caption"] and judged.assessor(None) == {"assessor": None, "grades_caption": ""}


def test_a_baseline_the_user_chose_is_said_to_be_chosen():
    lines = verdict.verdict_lines(METRICS, COMPARISONS, baseline="bm25")
    assert lines[0].startswith("Against the baseline, bm25 (chosen: baseline=bm25), hybrid retrieval (hybrid)")
    assert "+0.160" in lines[0]
    assert verdict.baseline_reason(METRICS, baseline="bm25") == "chosen: baseline=bm25"
    assert verdict.baseline_reason(METRICS, baseline="vector") == "the better single retriever"  # the same leg
    assert verdict.baseline_reason(METRICS) == "the better single retriever"


def test_the_index_defines_every_variant_and_says_which_baseline_and_why(tmp_path, monkeypatch):
    from rerankeval.report import glossary

    dp = dataset_in(tmp_path, monkeypatch, root=True)
    METRICS.assign(variant=["bm25", "vector", "hybrid"]).to_csv(dp.metrics_csv, index=False)
    text = render.write_index(dp, []).read_text()
    assert "<b>hybrid</b>: " + glossary.DEFINITIONS["hybrid"].replace("'", "&#39;") in text
    assert "Cormack" in text and "(the baseline: the better single retriever)" in text
    assert "The difference from the baseline (vector, the better single retriever)" in text
    assert glossary.define("my_system").startswith("a run file from another system (runs/my_system.trec)")


def test_the_judged_warning_follows_the_baseline_sentence_and_the_exports_sit_under_the_table(tmp_path, monkeypatch):
    from rerankeval.evaluate import analyse

    dp = dataset_in(tmp_path, monkeypatch, root=True)
    METRICS.to_csv(dp.metrics_csv, index=False)
    analyse.write_summary(dp, Summary(judging={"k": 10, "judged_at_k": {"hybrid": 0.27, "vector": 0.31}}), COMPARISONS)
    body = render.write_index(dp, []).read_text().split("<h2>Headline</h2>", 1)[1]
    base, low = body.index("Against the baseline, vector"), body.index('<p class="judged-low">Judged@10 is low')
    assert body.index("</table>") < body.index('href="headline.md"') < base < low < body.index("runner-up")
