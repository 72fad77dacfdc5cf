"""The first screen with holes in the judgments (issue 34) and verdicts that never overstate (issue 35 items 1, 2
and 7's index side): built runs, qrels, comparisons and ledgers whose answers are known in closed form."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from handmade import dataset_in
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.evaluate import holes, judgments, stats, verdict
from rerankeval.report import render

# One query, k = 3, grades 0..2. "vector" (the baseline) ranks three judged non-relevant units: no hole, nDCG 0.
# "good" ranks the one relevant unit first and an unjudged unit second: better whatever u1 is (decided with holes).
# "bad" ranks an unjudged unit third: as good as 0 (u2 not relevant) or better (u2 relevant): undecided.
QRELS = {"q1": {"d1": 2, "d2": 0, "d3": 0, "d4": 0}}
RUNS = {
    "vector": {"q1": {"d2": 3.0, "d3": 2.0, "d4": 1.0}},
    "good": {"q1": {"d1": 3.0, "u1": 2.0, "d2": 1.0}},
    "bad": {"q1": {"d2": 3.0, "d3": 2.0, "u2": 1.0}},
}
# good's worst grading: u1 not relevant and u2 (in the pool, through bad) top-graded, so the ideal holds two 2s
GOOD_WORST = 2.0 / (2.0 + 2.0 / math.log2(3))


@pytest.fixture
def dp(tmp_path, monkeypatch):
    return dataset_in(tmp_path, monkeypatch, root=True)


def _record():
    return holes.analyse(RUNS, QRELS, ["q1"], "vector", k=3, n_sim=2)


def test_decided_with_holes_undecided_and_a_run_without_holes():
    rec = _record()
    comps = {(c["a"], c["b"]): c for c in rec["comparisons"]}
    good, bad = comps[("good", "vector")], comps[("bad", "vector")]
    assert good["status"] == "decided" and good["better"] == "good" and good["n_unjudged"] == 1
    assert good["worst"] == pytest.approx(GOOD_WORST) and good["best"] == pytest.approx(1.0)
    assert bad["status"] == "undecided" and bad["worst"] == pytest.approx(0.0) and bad["best"] > 0
    assert "undecided" in bad["sentence"] and "judge them first" in bad["sentence"]
    var = {v["variant"]: v for v in rec["variants"]}
    assert var["vector"]["unjudged_in_top_k"] == 0 and var["vector"]["worst"] == var["vector"]["best"] == 0.0
    assert var["good"]["zero_fill"] == pytest.approx(1.0) and var["good"]["condensed"] == pytest.approx(1.0)
    assert var["good"]["bpref"] == pytest.approx(1.0) and var["bad"]["condensed"] == pytest.approx(0.0)
    assert rec["baseline"] == "vector" and rec["queue"][0]["unit_id"] == "u2"  # the unit that decides bad


def test_the_expected_judgments_are_simulated_within_the_time_budget():
    done = _record()["comparisons"]
    bad = next(c for c in done if c["a"] == "bad")
    assert bad["expected"] is not None and "the queue expects about" in bad["sentence"]
    late = holes.analyse(RUNS, QRELS, ["q1"], "vector", k=3, n_sim=2, budget_s=-1.0)
    bad = next(c for c in late["comparisons"] if c["a"] == "bad")
    assert bad["expected"] is None and late["expected_skipped"] == 1
    assert "at most 1 judgment decides it" in bad["sentence"] and "expects" not in bad["sentence"]


def test_the_index_shows_the_word_the_interval_and_the_assumptions(dp):
    holes.write(dp, _record())
    pd.DataFrame({"variant": list(RUNS), "n_queries": [1, 1, 1], "ndcg@3": [0.0, 1.0, 0.0]}).to_csv(
        dp.metrics_csv, index=False
    )
    atomic_write_json(dp.analyse_summary, {"headline_metric": "ndcg@3", "baseline": "vector"})
    body = render.write_index(dp, []).read_text()
    table = body.split('<table class="holes">', 1)[1].split("</table>", 1)[0]
    assert "<b>decided</b>" in table and "<b>undecided</b>" in table
    assert f"[{GOOD_WORST:+.3f}, +1.000]" in table and "+1.000" in table  # interval and zero-fill difference
    assert "judge them first" in table
    assert "zero-fill</b>: an unjudged unit counts as not relevant" in body and "condensed</b>:" in body
    assert "nDCG@3 (zero-fill)" in body  # the headline number says what it rests on


def test_the_review_file_is_in_the_queues_order_with_the_weight():
    pool = judgments.unjudged_pool(RUNS, QRELS, ["q1"], 3)
    assert list(pool.unit_id) == ["u1", "u2"]  # the pool's order: rank within the query
    weights = holes.review_weights(RUNS, QRELS, ["q1"], _record())
    out = judgments.queue_order(pool, weights)
    assert list(out.unit_id) == ["u2", "u1"] and out.weight.iloc[0] > 0 == out.weight.iloc[1]
    assert "bad vs vector" in out.moves.iloc[0]


# --------------------------------------------------------------------------- verdicts that never overstate
def _per_query(values: dict[str, list[float]], metric: str = "ndcg@10") -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"variant": v, "qid": f"q{i}", "metric": metric, "value": x}
            for v, xs in values.items()
            for i, x in enumerate(xs)
        ]
    )


def _tables(values: dict[str, list[float]]):
    pq = _per_query(values)
    comps = stats.compare(pq, "ndcg@10", n_resamples=200, n_boot=200)
    table = pd.DataFrame(
        [
            {
                "variant": v,
                "n_queries": len(xs),
                "ndcg@10": sum(xs) / len(xs),
                "ndcg@10_ci_low": min(xs),
                "ndcg@10_ci_high": max(xs),
            }
            for v, xs in values.items()
        ]
    )
    return table, comps


def test_identical_runs_are_a_degenerate_comparison_not_a_win():
    xs = [0.2, 0.5, 0.9, 0.4, 0.7, 0.3, 0.8, 0.6] * 3
    table, comps = _tables({"vector": [x / 2 for x in xs], "hybrid": xs, "hybrid_reformulate": xs})
    lines = verdict.verdict_lines(table, comps, "ndcg@10")
    text = " ".join(lines)
    assert "hybrid_reformulate wins" not in text and "hybrid wins" not in text
    assert "degenerate comparison" in text and "about 0.000" not in text
    assert verdict.clear_winner(table, comps) is None
    head = render.headline_table(table, "ndcg@10", None, comps, "vector")
    assert not any(c.get("bold") for r in head["rows"] for c in r["cells"])


def test_a_tie_at_the_shown_precision_is_said_as_a_tie_even_when_the_test_says_significant():
    table = pd.DataFrame(
        {
            "variant": ["bm25", "vector"],
            "n_queries": [30, 30],
            "ndcg@10": [0.6004, 0.6],
            "ndcg@10_ci_low": [0.5, 0.5],
            "ndcg@10_ci_high": [0.7, 0.7],
        }
    )
    comps = pd.DataFrame(
        [
            {
                "metric": "ndcg@10",
                "a": "bm25",
                "b": "vector",
                "n": 30,
                "mean_a": 0.6004,
                "mean_b": 0.6,
                "diff": 0.0004,
                "diff_ci_low": 0.0001,
                "diff_ci_high": 0.0007,
                "wins": 9,
                "ties": 20,
                "losses": 1,
                "p": 0.01,
                "p_holm": 0.01,
                "significant": True,
                "sd_diff": 0.0,
                "mdd": 0.0001,
                "n_left_out": 0,
            }
        ]
    )
    lines = verdict.verdict_lines(table, comps, "ndcg@10")
    assert lines[0].startswith("No winner on nDCG@10: bm25, vector tie at 0.600")
    assert "No variant is distinguishable from the baseline" in " ".join(lines)
    assert "wins" not in " ".join(lines) and "about 0.000" not in " ".join(lines)
    assert verdict.versus(comps, "ndcg@10", "bm25", "vector")["mark"] == ""
    assert verdict.baseline_reason(table, "ndcg@10") == "the single retrievers tie on nDCG@10, so bm25 is taken"


def test_a_significant_difference_still_wins_and_is_bold():
    table = pd.DataFrame({"variant": ["vector", "hybrid"], "n_queries": [30, 30], "ndcg@10": [0.5, 0.6]})
    comps = pd.DataFrame(
        [
            {
                "metric": "ndcg@10",
                "a": "hybrid",
                "b": "vector",
                "n": 30,
                "mean_a": 0.6,
                "mean_b": 0.5,
                "diff": 0.1,
                "diff_ci_low": 0.05,
                "diff_ci_high": 0.15,
                "wins": 20,
                "ties": 5,
                "losses": 5,
                "p": 0.001,
                "p_holm": 0.001,
                "significant": True,
                "sd_diff": 0.1,
                "mdd": 0.05,
                "n_left_out": 0,
            }
        ]
    )
    assert verdict.verdict_lines(table, comps, "ndcg@10")[1].startswith("hybrid wins on nDCG@10")
    head = render.headline_table(table, "ndcg@10", None, comps, "vector")
    bold = [r["variant"] for r in head["rows"] for c in r["cells"] if c.get("bold")]
    assert bold == ["hybrid"]


def test_a_saturated_set_of_five_questions_is_said_with_the_next_step():
    table, comps = _tables({"bm25": [1.0] * 5, "vector": [1.0] * 5, "hybrid": [1.0] * 5})
    table["success@10"] = 1.0
    lines = verdict.verdict_lines(table, comps, "ndcg@10")
    text = " ".join(lines)
    sat = next(s for s in lines if s.startswith("The questions cannot separate the variants"))
    assert "nDCG@10 at its maximum (1.000)" in sat and "Success@10 at its maximum" in sat
    assert "harder questions" in sat and "paraphrase=true" in sat
    power = next(s for s in lines if s.startswith("Too few questions"))
    assert "n = 5" in power and "Next step" in power
    assert " wins" not in text and "about 0.000" not in text


def test_too_few_questions_for_the_differences_that_matter_names_the_detectable_difference():
    xs = [0.1, 0.9, 0.3, 0.8, 0.2, 0.7, 0.4, 0.95, 0.05, 0.6] * 3
    table, comps = _tables({"vector": xs, "hybrid": list(reversed(xs))})
    mdd = float(verdict.pair_row(comps, "ndcg@10", "hybrid", "vector")["mdd"])
    assert mdd > verdict.MATTERS
    line = verdict.power_line(table.set_index("variant"), comps, "ndcg@10", 30, "vector")
    assert line.startswith("Too few questions to detect the differences that matter") and verdict.fmt(mdd) in line


# --------------------------------------------------------------------------- failures look like failures
def test_a_stage_whose_every_query_fell_back_with_http_404_gets_a_red_banner(dp):
    from rerankeval.rerank import ledger

    rows = [
        {
            "qid": f"q{i}",
            "pass": "main",
            "variant": "hybrid_rerank",
            "status": "fallback",
            "error": "NotFoundError",
            "llm_calls": 1,
            "requests": 1,
            "cache_hits": 0,
        }
        for i in range(4)
    ]
    ledger.write_ledger(rows, dp.ledger)
    pd.DataFrame(
        {
            "variant": ["hybrid", "hybrid_rerank"],
            "n_queries": [4, 4],
            "ndcg@10": [0.5, 0.5],
            "fallback_rate": [float("nan"), 1.0],
        }
    ).to_csv(dp.metrics_csv, index=False)
    pages = [
        {
            "name": "04-rerank",
            "href": "04-rerank.html",
            "status": "ok",
            "seconds": 1.0,
            "llm_problem": {"text": "4 of 4 queries fell back", "endpoint": True},
        }
    ]
    body = render.write_index(dp, pages).read_text()
    banner = body.split('<div class="banner-failed" role="alert">', 1)[1].split("</div>", 1)[0]
    assert "04-rerank failed" in banner and "HTTP 404" in banner and "4 of 4 queries fell back" in banner
    assert "nan" not in banner.lower()
    assert body.count('class="banner-failed"') == 1  # the chain's record and the ledger say it once
    lines = verdict.verdict_lines(pd.read_csv(dp.metrics_csv), None, "ndcg@10")
    assert any("hybrid_rerank fell back to the fused order on every query (a failed stage)" in s for s in lines)


def test_a_bare_folders_drafts_one_judged_page_each_get_bounds_from_the_first_run():
    # a drafted set: each question judged on its one source page (grade 2), every other page unknown, not 0
    qrels = {f"q{i}": {f"m.pdf#p{i}": 2} for i in range(1, 4)}
    runs = {
        "bm25": {f"q{i}": {f"m.pdf#p{i}": 2.0, f"m.pdf#p{i + 3}": 1.0} for i in range(1, 4)},
        "vector": {f"q{i}": {f"m.pdf#p{i + 3}": 2.0, f"m.pdf#p{i}": 1.0} for i in range(1, 4)},
    }
    rec = holes.analyse(runs, qrels, list(qrels), "vector", k=3, n_sim=1)
    var = {v["variant"]: v for v in rec["variants"]}
    assert var["bm25"]["zero_fill"] == pytest.approx(1.0) and var["bm25"]["unjudged_in_top_k"] == 3
    # vector ranks the drafted page second: 1/log2(3) zero-fill, but 1.0 if its first page answers too
    assert var["vector"]["zero_fill"] == pytest.approx(1 / math.log2(3))
    assert var["vector"]["best"] == pytest.approx(1.0) and var["vector"]["worst"] == pytest.approx(1 / math.log2(3))
    # bm25 - vector: +0.369 zero-fill, but 0 when the other page is top-graded too (both then rank both first)
    (c,) = rec["comparisons"]
    assert (c["a"], c["b"], c["status"]) == ("bm25", "vector", "undecided")
    assert c["worst"] == pytest.approx(0.0, abs=1e-12) and c["best"] == pytest.approx(1 - 1 / math.log2(3))


def test_winner_json_says_whether_the_best_mean_is_a_winner(dp):
    import json

    from rerankeval.evaluate import analyse
    from rerankeval.evaluate.analysis_records import Summary

    xs = [0.2, 0.5, 0.9, 0.4, 0.7, 0.3, 0.8, 0.6] * 3
    table, comps = _tables({"vector": xs, "hybrid": xs})
    analyse.write_summary(dp, Summary(headline_metric="ndcg@10"), comps, table)
    got = json.loads(dp.analyse_winner.read_text())
    assert got["variant"] in ("vector", "hybrid") and got["distinguishable"] is False
