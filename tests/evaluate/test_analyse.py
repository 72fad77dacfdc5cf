"""The analysis stage as a library (rerankeval.evaluate.analyse) on small hand-built datasets, including the messy
inputs of issue 14 (empty runs, a reranker run on fewer queries) and issue 9 (run files from other systems); what
notebook 05 shows of it (rerankeval.evaluate.views).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from handmade import dataset_in, write_documents
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.settings import load_settings
from rerankeval.evaluate import analyse, analysis_records, views
from rerankeval.report import render as report
from rerankeval.rerank import ledger

QIDS = ["q1", "q2", "q3", "q4", "q5"]
UNITS = [f"d{i}" for i in range(1, 7)]
GOLD = {q: UNITS[i] for i, q in enumerate(QIDS)}  # q1 -> d1, ..., q5 -> d5
FAST = {"ks": [1, 3, 5], "final_k": 5, "n_boot": 200, "n_perm": 200, "verify_with": ["pytrec_eval"]}


def _ranking(q: str, gold_rank: int) -> dict[str, float]:
    """All units, the query's gold unit at ``gold_rank`` (1-based), scores strictly decreasing."""
    others = [u for u in UNITS if u != GOLD[q]]
    order = others[: gold_rank - 1] + [GOLD[q]] + others[gold_rank - 1 :]
    return {u: float(len(order) - i) for i, u in enumerate(order)}


def _dataset(tmp_path, monkeypatch, pool_k: int | None = 5, **variants: runs.Run):
    """A five-query dataset (chunk = unit) with the given unit-level runs and stage records."""
    dp = dataset_in(tmp_path, monkeypatch, "mini")
    write_documents(dp, UNITS, QIDS, {q: {GOLD[q]: 1} for q in QIDS})
    for v, run in variants.items():
        runs.write_trec(run, dp.run_file(v), v)
        if pool_k is not None and v != "hybrid_rerank":
            atomic_write_json(
                dp.stage_dir("retrieve") / f"{v}.json",
                {"variant": v, "pool_k": pool_k, "seconds": 0.1, "queries": len(QIDS)},
            )
    return dp


def _good(rank: int = 1) -> runs.Run:
    return {q: _ranking(q, rank) for q in QIDS}


# --------------------------------------------------------------------------- issue 14: degenerate runs
def test_an_empty_run_scores_zero_with_a_warning_and_no_crash(tmp_path, monkeypatch):
    """BM25 matched nothing: bm25.trec is empty. Today ranx crashes (max() of an empty sequence)."""
    dp = _dataset(tmp_path, monkeypatch, bm25={}, vector=_good(2), hybrid=_good(1))
    assert dp.run_file("bm25").read_text() == ""
    for policy in ("zero", "common"):
        with pytest.warns(analyse.AnalysisWarning, match="bm25 returned nothing"):
            a = analyse.run(
                dp, FAST | {"missing_queries": policy, "verify_with": ["ranx", "pytrec_eval"]}, load_settings()
            )
        assert a.query_set.qids == QIDS and a.query_set.empty == ["bm25"]
        bm25 = a.per_query[a.per_query.variant == "bm25"]
        assert len(bm25) == len(QIDS) * len(a.columns) and (bm25.value == 0).all()
        assert a.table.set_index("variant").at["hybrid", "ndcg@5"] == 1.0
        assert a.conformance.max_abs_diff.max() == 0.0
        assert any("bm25" in w for w in a.summary.warnings)
    analyse.write(dp, a)
    assert pd.read_csv(dp.metrics_csv).set_index("variant").at["bm25", "ndcg@5"] == 0.0


def test_a_run_empty_for_some_queries_scores_zero_there(tmp_path, monkeypatch):
    part = {q: d for q, d in _good(1).items() if q in ("q1", "q2")}
    dp = _dataset(tmp_path, monkeypatch, bm25=part, hybrid=_good(1))
    with pytest.warns(analyse.AnalysisWarning, match="bm25 has no result for 3 of 5"):
        a = analyse.run(dp, FAST, load_settings())
    assert a.table.set_index("variant").at["bm25", "success@1"] == pytest.approx(0.4)
    # stage 03 recorded running all five queries: the three empty ones are real zeros in the comparison
    row = a.comparisons[(a.comparisons.metric == "ndcg@5")].iloc[0]
    assert row.n == 5 and row.n_left_out == 0 and row["diff"] == pytest.approx(-0.6)


# --------------------------------------------------------------------------- issue 14: comparable verdicts
def _reranked_two_of_five(tmp_path, monkeypatch):
    """04 with max_queries=2: hybrid_rerank lists q1, q2 only (and improves them), the ledger says so."""
    hybrid = _good(2)
    rr = {q: _ranking(q, 1) for q in ("q1", "q2")}
    dp = _dataset(tmp_path, monkeypatch, hybrid=hybrid, hybrid_rerank=rr)
    rows = [
        {c: 0 for c in ledger.COLUMNS}
        | {"qid": q, "pass": "main", "variant": "hybrid_rerank", "status": "ok", "error": "", "cache_hit": False}
        for q in ("q1", "q2")
    ]
    ledger.write_ledger(rows, dp.ledger)
    return dp


def test_a_variant_run_on_fewer_queries_is_compared_on_the_common_ones(tmp_path, monkeypatch):
    """Today: the three queries never reranked score 0 and the verdict says reranking lowered nDCG@5."""
    dp = _reranked_two_of_five(tmp_path, monkeypatch)
    with pytest.warns(analyse.AnalysisWarning):
        a = analyse.run(dp, FAST, load_settings())
    assert a.answered["hybrid_rerank"] == {"q1", "q2"} and a.summary.missing == {"hybrid": 0, "hybrid_rerank": 3}
    row = a.comparisons[a.comparisons.metric == "ndcg@5"].iloc[0]
    assert (row.a, row.b, row.n, row.n_left_out) == ("hybrid", "hybrid_rerank", 2, 3)
    assert row["diff"] < 0  # hybrid_rerank is better on the queries it answered
    text = " ".join(a.verdict)
    assert "lowered" not in text
    assert "raised nDCG@5" in text and "on the 2 queries both answered (3 queries" in text
    assert "hybrid_rerank lacks 3 of 5" in text
    assert a.verdict[0].startswith("hybrid is the only variant that answered every query")
    # the report page says the same
    analyse.write(dp, a)
    page = report.write_index(dp, []).read_text(encoding="utf-8")
    assert "on the 2 queries both answered" in page and "lowered" not in page


# --------------------------------------------------------------------------- stage records: pool_k
def test_pool_k_comes_from_what_the_stages_recorded(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, pool_k=7, hybrid=_good(1), vector=_good(2))
    a = analyse.run(dp, FAST | {"pool_k": 0}, load_settings())
    assert a.pool_k == 7 and "recall@7" in a.columns
    with pytest.warns(analyse.AnalysisWarning, match="pool_k = 9 here, but the stages recorded"):
        assert analyse.run(dp, FAST | {"pool_k": 9}, load_settings()).pool_k == 9
    atomic_write_json(dp.stage_dir("retrieve") / "vector.json", {"pool_k": 6, "queries": 5, "seconds": 1})
    with pytest.raises(ValueError, match="recorded different pool_k"):
        analyse.run(dp, FAST | {"pool_k": None}, load_settings())
    # a record of a variant left out of the analysis does not count
    assert analyse.run(dp, FAST | {"eval_variants": ["hybrid"]}, load_settings()).pool_k == 7


def test_a_ledger_with_larger_pools_than_pool_k_is_warned_about():
    led = pd.DataFrame({"qid": ["q1", "q2"], "n_pool": [8, 3]})
    assert analyse.ledger_pool_warnings(led, 8) == [] and analyse.ledger_pool_warnings(None, 5) == []
    assert "pools of up to 8 candidates, but pool_k = 5" in analyse.ledger_pool_warnings(led, 5)[0]


def test_no_record_and_no_pool_k_is_a_clear_error(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, pool_k=None, hybrid=_good(1))
    with pytest.raises(ValueError, match="no stage recorded pool_k.*pass pool_k"):
        analyse.run(dp, FAST, load_settings())


def test_summary_round_trip_and_writer(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, hybrid=_good(1), vector=_good(3))
    a = analyse.run(dp, FAST, load_settings())
    written = analyse.write(dp, a)
    assert set(written) == {
        "metrics",
        "per_query",
        "summary",
        "comparisons",
        "winner",
        "manifest",
        "review",
        "injection",
        "inputs",
        "incomplete",
    }
    assert analysis_records.read_winner(dp) == analysis_records.winner(a.table, a.summary) == "hybrid"  # relevant first
    back = analysis_records.read_summary(dp)
    assert back == a.summary and back.pool_k == 5 and back.variants == ["vector", "hybrid"]
    assert json.loads(dp.manifest.read_text())["analysis"]["verdict"] == a.verdict
    assert list(pd.read_csv(dp.per_query_csv).columns) == ["variant", "qid", "metric", "value"]


def test_the_diff_view_of_an_analysis_is_rendered_by_report(tmp_path, monkeypatch):
    """Stage 05 picks the pair and the queries (Analysis.diff_view); report.fragments renders the HTML."""
    from rerankeval.report import fragments

    dp = _dataset(tmp_path, monkeypatch, hybrid=_good(3), hybrid_rerank=_good(1))
    a = analyse.run(dp, FAST | {"diff_n": 2, "diff_top_k": 3}, load_settings())
    pair, chosen = a.diff_view()
    assert pair == ["hybrid", "hybrid_rerank"] and len(chosen) == 2
    html = fragments.analysis_diff_html(a)
    assert html.count('class="rre-q"') == 2 and "nDCG@5" in html and "m.pdf \u00b7 p.1" in html
    assert html.count('class="gold"') == 2 * 2  # each query's gold unit, in both top 3 lists
    assert not hasattr(a, "diff_view_html")  # evaluate builds no HTML


# --------------------------------------------------------------------------- issue 9: external run files
EXTERNAL = """\
q1 Q0 d3 1 2.5 other
q1 Q0 d1 2 2.5 other
q1 Q0 d2 3 9.0 other
q2 Q0 d2 7 1 other
q2 Q0 d6 1 1 other
q2 Q0 d4 2 1 other
q9 Q0 d1 1 5.0 other
q3 Q0 d3 1 3.0 other
q3 Q0 d5 2 1e-3 other
"""


def test_external_run_is_read_the_trec_eval_way(tmp_path, monkeypatch):
    import pytrec_eval

    dp = _dataset(tmp_path, monkeypatch, hybrid=_good(1))
    dp.run_file("pyserini").write_text(EXTERNAL)
    with pytest.warns(analyse.AnalysisWarning):
        a = analyse.run(dp, FAST | {"verify_with": ["ranx", "pytrec_eval"]}, load_settings())
    note = a.external[0]
    assert note.variant == "pyserini" and note.unknown_queries == ["q9"] and note.n_queries == 3
    assert note.n_ties == 1 + 2 and note.resorted == 2  # q1: one tie; q2: three lines, one score
    assert list(a.runs["pyserini"]["q1"]) == ["d2", "d3", "d1"]  # score desc, ties by docid desc
    assert list(a.runs["pyserini"]["q2"]) == ["d6", "d4", "d2"]
    assert "re-sorted" in a.summary.external[0] and "q9" in a.summary.external[0]
    analyse.write(dp, a)
    page = report.write_index(dp, []).read_text(encoding="utf-8")
    assert "pyserini is a run file from another system" in page and "2 of 3 queries were re-sorted" in page
    assert "3 lines had tied scores" in page
    # every metric equals pytrec_eval (trec_eval's code) on the raw file
    qrels = runs.read_qrels(dp.qrels)
    raw: dict[str, dict[str, float]] = {}
    for line in EXTERNAL.splitlines():
        q, _, d, _, s, _ = line.split()
        raw.setdefault(q, {})[d] = float(s)
    ev = pytrec_eval.RelevanceEvaluator({q: qrels[q] for q in ("q1", "q2", "q3")}, {"ndcg_cut.5", "P.1", "map"})
    ref = ev.evaluate({q: raw[q] for q in ("q1", "q2", "q3")})
    mine = a.per_query[a.per_query.variant == "pyserini"].set_index(["qid", "metric"]).value
    for q in ("q1", "q2", "q3"):
        assert mine[(q, "ndcg@5")] == pytest.approx(ref[q]["ndcg_cut_5"], abs=1e-9)
        assert mine[(q, "precision@1")] == pytest.approx(ref[q]["P_1"], abs=1e-9)
        assert mine[(q, "map")] == pytest.approx(ref[q]["map"], abs=1e-9)


@pytest.mark.parametrize(
    "line, what",
    [
        ("q1 Q0 d1 1 2.5", "expected 6 columns"),
        ("q1 Q0 d1 1 high other", "must be an integer and score 'high' a number"),
        ("q1 Q0 d1 1 nan other", "is not finite"),
    ],
)
def test_a_broken_external_line_names_file_and_line(tmp_path, monkeypatch, line, what):
    dp = _dataset(tmp_path, monkeypatch, hybrid=_good(1))
    dp.run_file("pyserini").write_text(EXTERNAL + line + "\n")
    with pytest.raises(ValueError, match=f"pyserini.trec:10: .*{what}"):
        analyse.run(dp, FAST, load_settings())


def test_a_chain_variant_is_still_held_to_the_run_contract(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, hybrid=_good(1))
    dp.run_file("bm25").write_text(EXTERNAL)
    with pytest.raises(runs.RunContractError, match="bm25"):
        analyse.run(dp, FAST, load_settings())


# --------------------------------------------------------------------------- what notebook 05 shows
def test_the_views_say_what_the_analysis_found(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, bm25={}, vector=_good(6), hybrid=_good(5))
    dp.run_file("pyserini").write_text(EXTERNAL)
    with pytest.warns(analyse.AnalysisWarning):
        a = analyse.run(dp, FAST | {"final_k": 3}, load_settings())
    written = analyse.write(dp, a)
    head = views.inputs_header(a).splitlines()
    assert head[0] == "Dataset mini: 5 queries, 5 with judgements; relevance unit = document; pool_k = 5."
    assert head[1].startswith("Dedupe policy: ") and head[-1] == "Variants: bm25, vector, hybrid, pyserini"
    assert list(views.checks_table(a).index) == ["bm25", "vector", "hybrid"]  # chain variants only
    notes = views.input_notes(a)
    assert notes[0].startswith("pyserini is a run file from another system")
    assert a.unit_mapping == {}  # no chunk runs: nothing to check them against
    assert notes[-2:] == [f"WARNING: {w}" for w in a.warnings[-2:]] and len(a.warnings) >= 2
    assert views.written_note(a, written).splitlines() == [
        "No rerank ledger: no fallback, token or LLM latency figures.",
        f"Wrote {', '.join(str(p) for p in written.values())}.",
    ]
    assert views.bar_metrics(a) == ["success@3", "mrr@3", "ndcg@3", "recall@3", "recall@5", "map"]
    assert list(views.metric_table(a).index) == list(a.runs) and "ndcg@3" in views.metric_table(a)
    assert views.comparison_note(a).splitlines()[-1].startswith("Test: randomization; Holm family")
    assert views.funnel_note(a).startswith("Funnel at k = 3, pool = 5 (vector -> bm25 -> hybrid)")
    counts, misses = views.funnel_tables(a)  # every gold unit is at rank 5 or 6: all five queries missed at 3
    assert counts.queries.sum() == 5 and counts.share.sum() == pytest.approx(1.0)
    assert list(misses.index) == QIDS and misses["query"].tolist() == [f"question {q}" for q in QIDS]
    assert list(views.ceiling_table(a).columns) == ["nDCG@3", "Recall@3", "Recall@5 (pool ceiling)"]
    assert views.evaluation_note(a).splitlines()[0] == a.query_set.describe()
    assert list(json.loads(views.manifest_excerpt(dp))) == list(views.MANIFEST_KEYS)


def test_a_fused_run_missing_means_no_funnel(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, vector=_good(1))
    a = analyse.run(dp, FAST, load_settings())
    assert views.funnel_note(a) == "No funnel: the fused variant (hybrid) has no run file."
    assert views.funnel_tables(a) == []


# --------------------------------------------------------------------------- issue 22: the reranker's discrimination
def _with_candidates(tmp_path, monkeypatch, score):
    """hybrid (gold at rank 2) and hybrid_rerank (gold at 1), stage 04's candidates scored by ``score(gold: bool,
    i)`` and its summary naming the model; the qrels judge only the gold units (like debian-manuals)."""
    dp = _dataset(tmp_path, monkeypatch, hybrid=_good(2), hybrid_rerank=_good(1))
    rows = []
    for q in QIDS:
        for i, (u, _) in enumerate(runs.ranked(_ranking(q, 2))):
            rows.append(
                {
                    "qid": q,
                    "pass": "main",
                    "docid": u,
                    "fused_rank": i + 1,
                    "presented_rank": i + 1,
                    "llm_score": score(u == GOLD[q], i),
                    "final_rank": 1 if u == GOLD[q] else i + 1 + (i < 1),
                }
            )
    dp.rerank_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(dp.rerank_candidates, index=False)
    atomic_write_json(dp.rerank_summary, {"model": "fake-0.5b", "variant": "hybrid_rerank"})
    return dp


def test_the_analysis_measures_the_rerankers_model_and_the_verdict_says_so(tmp_path, monkeypatch):
    dp = _with_candidates(tmp_path, monkeypatch, lambda gold, i: 0.9 if gold else 0.1 * i)
    a = analyse.run(dp, FAST, load_settings())
    d = a.discrimination
    assert (d.model, d.auc, d.status, d.n_defined, d.negatives) == ("fake-0.5b", 1.0, "informative", 5, "unjudged")
    assert d.n_unjudged == 25 and d.shift["relevant"] == {
        "n": 5,
        "mean_abs_change": 1.0,
        "up": 1.0,
        "down": 0.0,
        "same": 0.0,
    }
    auc_line = next(s for s in a.verdict if "ROC AUC" in s)
    rerank_line = next(s for s in a.verdict if s.startswith("Reranking ("))
    assert a.verdict.index(auc_line) == a.verdict.index(rerank_line) + 1  # right after the rerank line
    assert "(fake-0.5b) separates relevant" in auc_line
    assert a.summary.discrimination["auc"] == 1.0
    written = analyse.write(dp, a)
    assert pd.read_csv(written["discrimination"]).auc.tolist() == [1.0] * 5
    assert analysis_records.read_summary(dp).discrimination == a.summary.discrimination
    note = views.discrimination_note(a).splitlines()
    assert note[0] == auc_line and "25 unjudged counted as non-relevant" in note[1] and "rank shift" in note[2]
    assert list(views.discrimination_table(a).columns) == ["n_relevant", "n_non_relevant", "auc", "constant"]


def test_a_model_at_chance_makes_the_verdict_say_no_gain_can_be_expected(tmp_path, monkeypatch):
    dp = _with_candidates(tmp_path, monkeypatch, lambda gold, i: 0.5)  # one score for everything
    a = analyse.run(dp, FAST, load_settings())
    assert a.discrimination.status == "undefined" and "same score (0.5)" in a.discrimination.reason
    text = " ".join(a.verdict)
    assert "(fake-0.5b) gave all 30 judged candidates the same score" in text
    assert "no reranking gain can be expected from it" in text and "LOCAL_MODEL=qwen2.5-coder-1.5b" in text
    analyse.write(dp, a)
    page = report.write_index(dp, []).read_text(encoding="utf-8")
    assert 'class="auc undefined"' in page and "no reranking gain can be expected" in page


def test_no_candidates_file_means_no_discrimination_line(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, hybrid=_good(2), vector=_good(1))
    a = analyse.run(dp, FAST, load_settings())
    assert a.discrimination is None and a.summary.discrimination == {}
    assert not any("ROC AUC" in s for s in a.verdict)
    assert views.discrimination_note(a).startswith("No rerank candidates file")
    assert views.discrimination_table(a).empty
    kt = views.key_table(a)  # moved from Analysis.key_table: gold at rank 2 everywhere, nDCG@5 = 1 / log2(3)
    assert kt.at["hybrid", "nDCG@5"] == "0.631 [0.631, 0.631]" and kt.at["vector", "nDCG@5"] == "1.000 [1.000, 1.000]"


# --------------------------------------------------------------------------- issue 21: LLM grades (09-assess)
def _llm_file(dp, lines: str):
    (dp.source / "qrels").mkdir(exist_ok=True)
    (dp.source / "qrels" / "llm-m.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)


def test_human_grades_by_default_and_the_llm_file_only_measured(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, hybrid=_good(1))
    base = analyse.run(dp, FAST, load_settings()).table.set_index("variant").at["hybrid", "precision@3"]
    _llm_file(dp, "q1\td1\t3\nq1\td2\t3\nq2\td2\t0\n")
    a = analyse.run(dp, FAST, load_settings())
    assert a.table.set_index("variant").at["hybrid", "precision@3"] == base == pytest.approx(1 / 3)
    assert a.summary.qrels_source == "human" and set(a.table["qrels"]) == {"human"}
    got = a.summary.grades["agreement"]
    assert got["n_pairs"] == 2 and got["source"] == "llm-m.tsv" and "cannot measure" in got["note"]


def test_human_plus_llm_fills_holes_only_and_every_table_says_so(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, bm25=_good(2), hybrid=_good(1))
    _llm_file(dp, "q1\td1\t0\nq1\td2\t3\n")  # d1 is q1's gold unit (human grade 1): never replaced
    a = analyse.run(dp, FAST | {"qrels_source": "human+llm"}, load_settings())
    assert a.qrels["q1"] == {"d1": 1, "d2": 1}  # the LLM's 3 capped at the human scale's top grade (1)
    # q1's top 3 now holds two relevant units: mean P@3 over five queries (2/3 + 4 * 1/3) / 5
    assert a.table.set_index("variant").at["hybrid", "precision@3"] == pytest.approx(0.4)
    assert a.summary.qrels_source == "human+llm" and a.summary.grades["llm_added"] == 1
    analyse.write(dp, a)
    assert set(pd.read_csv(dp.metrics_csv)["qrels"]) == {"human+llm"}
    assert set(pd.read_csv(dp.analyse_comparisons)["qrels"]) == {"human+llm"}
    summary = json.loads(dp.analyse_summary.read_text())
    assert summary["qrels_source"] == "human+llm" and summary["grades"]["llm_file"] == "llm-m.tsv"
    assert "LLM grades" in analyse.agree.caption(summary["grades"])
    review = pd.read_csv(dp.unjudged_review, sep="\t", dtype=str, keep_default_na=False)
    assert ((review.qid == "q1") & (review.unit_id == "d2")).any()  # graded by the LLM only: still a human's to judge


def test_with_llm_grades_the_index_shows_the_headline_table_under_both_grades(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, bm25=_good(2), hybrid=_good(1))
    _llm_file(dp, "q1\td1\t0\nq1\td2\t3\n")
    a = analyse.run(dp, FAST, load_settings())  # human grades by default; the other table under human+llm
    assert a.table.set_index("variant").at["hybrid", "precision@3"] == pytest.approx(1 / 3)
    table, comparisons, rec = a.other
    assert table.set_index("variant").at["hybrid", "precision@3"] == pytest.approx(0.4)  # as under human+llm
    assert set(table["qrels"]) == set(comparisons["qrels"]) == {"human+llm"} and rec["llm_added"] == 1
    analyse.write(dp, a)
    page = report.write_index(dp, []).read_text(encoding="utf-8")
    assert page.count('<table class="headline">') == 2 and "The same runs with human+llm grades" in page
    assert "plus 1 LLM grades (llm-m.tsv)" in page
    (dp.source / "qrels" / "llm-m.tsv").unlink()  # no LLM grades any more: one table, the other files gone
    analyse.write(dp, analyse.run(dp, FAST, load_settings()))
    assert not (dp.stage_dir("analyse") / "other_metrics.csv").exists()
    assert report.write_index(dp, []).read_text(encoding="utf-8").count('<table class="headline">') == 1


def test_human_plus_llm_without_llm_grades_warns_and_uses_human_grades(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, hybrid=_good(1))
    with pytest.warns(analyse.AnalysisWarning, match="no LLM grades"):
        a = analyse.run(dp, FAST | {"qrels_source": "human+llm"}, load_settings())
    assert a.summary.qrels_source == "human" and set(a.table["qrels"]) == {"human"}
    with pytest.raises(ValueError, match="qrels_source"):
        analyse.run(dp, FAST | {"qrels_source": "llm"}, load_settings())


def test_a_judge_that_disagrees_gets_the_low_kappa_warning(tmp_path, monkeypatch):
    dp = _dataset(tmp_path, monkeypatch, hybrid=_good(1))
    (dp.source / "qrels").mkdir(exist_ok=True)
    dp.judgments("test").write_text("query-id\tcorpus-id\tscore\nq1\td4\t0\nq1\td5\t0\n")
    _llm_file(dp, "q1\td1\t3\nq1\td4\t3\nq1\td5\t3\nq2\td2\t0\nq3\td3\t3\n")
    with pytest.warns(analyse.AnalysisWarning, match="little better than chance"):
        a = analyse.run(dp, FAST, load_settings())
    got = a.summary.grades["agreement"]
    # human 1 0 0 1 1, LLM 1 1 1 0 1: observed 2/5, chance .6 * .8 + .4 * .2 = .56
    assert got["n_pairs"] == 5 and got["kappa_binary"] == pytest.approx((0.4 - 0.56) / 0.44, abs=1e-4)
    assert any("little better than chance" in w for w in a.summary.warnings)


# --------------------------------------------------------------------------- issue 24: the analysis' CPU seconds
def _bootstrap_table_per_group(per_query, n_boot, seed):
    """The per-(variant, metric) loop bootstrap_table ran before it resampled blocks of columns at once."""
    import numpy as np

    from rerankeval.evaluate import stats

    qids = sorted(set(per_query.qid))
    idx = stats.bootstrap_indices(len(qids), n_boot, seed)
    rows = []
    for (v, m), g in per_query.groupby(["variant", "metric"], sort=False):
        vals = g.set_index("qid")["value"].reindex(qids).to_numpy()
        rows.append((v, m, len(qids), *stats.bootstrap_ci(np.asarray(vals), n_boot, 0.95, seed, indices=idx)))
    return pd.DataFrame(rows, columns=["variant", "metric", "n", "mean", "ci_low", "ci_high"])


@pytest.mark.parametrize("n_queries, n_columns, n_boot", [(1, 3, 50), (7, 40, 300), (60, 50, 2000), (300, 9, 1000)])
def test_the_bootstrap_table_is_the_per_group_bootstrap_to_the_last_bit(n_queries, n_columns, n_boot):
    """bootstrap_table resamples many columns at once (issue 24) and gives exactly the per-group figures: the
    same draws, the same summation order per resample, the same quantiles (compared with ==, not approx)."""
    import numpy as np

    from rerankeval.evaluate import stats

    rng = np.random.default_rng(n_queries)
    rows = [
        (f"v{c % 7}", f"m{c}", f"q{q:03d}", float(rng.choice([0.0, 1.0, 0.5, rng.random()])))
        for c in range(n_columns)
        for q in rng.permutation(n_queries)
    ]
    per_query = pd.DataFrame(rows, columns=["variant", "metric", "qid", "value"])
    got = stats.bootstrap_table(per_query, n_boot=n_boot, seed=3)
    want = _bootstrap_table_per_group(per_query, n_boot, 3)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    if n_queries > 1:  # a group without one of the queries is refused, naming it, as before
        with pytest.raises(ValueError, match="v1 m1: per-query values missing"):
            stats.bootstrap_table(per_query.drop(index=per_query.index[per_query.metric == "m1"][:1]), n_boot=10)


def test_the_rerankers_discrimination_is_read_back_while_its_inputs_are_unchanged(tmp_path, monkeypatch):
    """A follow-up that changes neither 04's candidates nor the grades (a new rrf_k) reads the reranker's AUC back
    from the cache (issue 24: no scipy.stats and sklearn imports, ~2 CPU-s); new grades, other candidates or an entry
    that does not read are measured again."""
    from rerankeval.evaluate import discrimination

    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))
    dp = _with_candidates(tmp_path, monkeypatch, lambda gold, i: 0.9 if gold else 0.1 * i)
    first = analyse.run(dp, FAST, load_settings())
    measured = []
    real = discrimination.measure
    monkeypatch.setattr(discrimination, "measure", lambda *a, **k: measured.append(1) or real(*a, **k))
    again = analyse.run(dp, FAST, load_settings())
    assert measured == [] and again.discrimination.to_dict() == first.discrimination.to_dict()
    pd.testing.assert_frame_equal(again.discrimination.per_query, first.discrimination.per_query)
    pd.testing.assert_frame_equal(again.discrimination.scores, first.discrimination.scores)
    assert again.summary.to_dict() == first.summary.to_dict()
    entry = next((tmp_path / "cache" / "analysis").glob("discrimination-*.pkl"))
    entry.write_bytes(b"\x80\x04 truncated")  # corrupted on disk: ignored, measured, rewritten
    again = analyse.run(dp, FAST, load_settings())
    assert again.discrimination.to_dict() == first.discrimination.to_dict() and measured == [1]
    runs.write_qrels({q: {GOLD[q]: 2} for q in QIDS}, dp.qrels)  # other grades: measured again
    analyse.run(dp, FAST, load_settings())
    assert measured == [1, 1]
