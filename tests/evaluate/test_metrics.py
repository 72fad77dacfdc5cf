"""Metrics with answers known in closed form, the query set, run-file checks and the second-opinion checks."""

from __future__ import annotations

import math

import ir_measures
import pandas as pd
import pytest

from handmade import dataset_in
from rerankeval.core import runs as R
from rerankeval.evaluate import conformance as C
from rerankeval.evaluate import metrics as M
from rerankeval.evaluate import stats

LOG2 = math.log2


def _one(run, qrels, col, policy="common"):
    qs = M.query_set({"v": run}, qrels, policy=policy)
    df = M.evaluate({"v": run}, qrels, qs, [col])
    return dict(zip(df.qid, df.value, strict=True))


def test_column_names_say_what_they_are():
    cols = M.metric_columns([10, 5])
    assert cols[:2] == ["success@5", "success@10"]
    assert {"mrr@10", "ndcg@10", "recall@5", "precision@5"} <= set(cols) and cols[-1] == "map"
    assert M.parse_column("ndcg@10") == ("ndcg", 10) and M.parse_column("map") == ("map", None)
    assert M.label("success@5") == "Success@5" and M.ranx_metric("success@5") == "hit_rate@5"
    with pytest.raises(ValueError):
        M.parse_column("ndcg10")


def test_ideal_dcg_comes_from_qrels_not_from_the_run():
    qrels = {"q": {"a": 2, "b": 1, "c": 1, "n": 0}}
    run = {"q": {"a": 3.0, "x": 2.0, "y": 1.0}}  # finds 1 of 3 gold units, at rank 1
    idcg = 2 + 1 / LOG2(3) + 1 / LOG2(4)
    got = _one(run, qrels, "ndcg@10")["q"]
    assert got == pytest.approx(2 / idcg, abs=1e-12)
    assert got < 0.65  # not 1.0


def test_graded_gains_are_linear():
    qrels = {"q": {"a": 2, "b": 1}}
    run = {"q": {"b": 2.0, "a": 1.0}}  # the less relevant unit first
    expected = (1 + 2 / LOG2(3)) / (2 + 1 / LOG2(3))
    assert _one(run, qrels, "ndcg@2")["q"] == pytest.approx(expected, abs=1e-12)
    assert _one(run, qrels, "ndcg@1")["q"] == pytest.approx(1 / 2, abs=1e-12)


def test_rank_metrics_closed_form():
    qrels = {"q": {"a": 1, "b": 1, "c": 1, "z": 0}}
    run = {"q": {"x": 5.0, "a": 4.0, "z": 3.0, "b": 2.0}}  # relevant at ranks 2 and 4; c never retrieved
    vals = {
        c: _one(run, qrels, c)["q"]
        for c in [
            "success@1",
            "success@2",
            "mrr@1",
            "mrr@10",
            "recall@2",
            "recall@4",
            "precision@2",
            "precision@10",
            "map",
        ]
    }
    assert vals["success@1"] == 0 and vals["success@2"] == 1
    assert vals["mrr@1"] == 0 and vals["mrr@10"] == pytest.approx(0.5)
    assert vals["recall@2"] == pytest.approx(1 / 3) and vals["recall@4"] == pytest.approx(2 / 3)
    assert vals["precision@2"] == pytest.approx(0.5)
    assert vals["precision@10"] == pytest.approx(0.2)  # divides by k even when the run is shorter
    assert vals["map"] == pytest.approx((1 / 2 + 2 / 4) / 3)  # over all 3 relevant units


def test_ties_keep_the_order_the_variant_produced():
    qrels = {"q": {"z": 1}}
    run = {"q": {"a": 1.0, "z": 1.0}}  # tie; the variant ranked a first
    assert _one(run, qrels, "mrr@10")["q"] == pytest.approx(0.5)
    assert _one(run, qrels, "precision@1")["q"] == 0.0
    assert _one(run, qrels, "ndcg@1")["q"] == 0.0
    # evaluated raw, pytrec_eval breaks the tie by document id (z first) while ir_measures' RR@k provider
    # keeps another order: the two disagree, which is why runs are put in strict order first
    raw = {str(m.measure): m.value for m in ir_measures.iter_calc([ir_measures.P @ 1, ir_measures.RR @ 10], qrels, run)}
    assert raw["P@1"] == pytest.approx(1.0) and raw["RR@10"] == pytest.approx(0.5)


def test_duplicate_chunks_of_one_unit_count_once():
    unit_of = {"p1#c0": "p1", "p1#c1": "p1", "p2#c0": "p2", "p3#c0": "p3"}
    chunk_run = {"q": {"p1#c0": 0.9, "p1#c1": 0.8, "p3#c0": 0.7, "p2#c0": 0.6}}
    qrels = {"q": {"p1": 1, "p2": 1}}
    units = R.to_units(chunk_run, unit_of)
    assert list(units["q"]) == ["p1", "p3", "p2"]
    assert _one(units, qrels, "precision@2")["q"] == pytest.approx(0.5)
    assert _one(units, qrels, "recall@2")["q"] == pytest.approx(0.5)
    assert _one(units, qrels, "recall@3")["q"] == pytest.approx(1.0)


def test_run_file_contract_checks(tmp_path):
    good = tmp_path / "good.trec"
    R.write_trec({"q1": {"a": 1.0, "b": 1.0, "c": 0.5}}, good, "good")
    run, chk = R.read_run_checked(good)
    assert chk.ok and list(run["q1"]) == ["a", "b", "c"]
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 a 1 3.0 t\nq1 Q0 b 2 2.0 t\nq1 Q0 a 3 1.0 t\nq1 Q0 c 4 1.0 t\n")
    run, chk = R.read_run_checked(bad, "bad")
    assert chk.n_duplicate == 1 and chk.n_ties == 1 and not chk.ok
    assert list(run["q1"]) == ["a", "b", "c"]  # first occurrence wins
    with pytest.raises(R.RunContractError, match="bad"):
        R.assert_run_contract([chk])


def test_query_set_no_relevant_and_missing_queries():
    qrels = {"q1": {"a": 1}, "q2": {"x": 0}, "q3": {"b": 2}, "q4": {"c": 1}}
    runs = {
        "v": {"q1": {"a": 1.0}, "q2": {"x": 1.0}, "q3": {"b": 1.0}},
        "w": {"q1": {"z": 1.0}, "q3": {"b": 1.0}, "q4": {}},
    }
    qs = M.query_set(runs, qrels, queries=["q1", "q2", "q3", "q4"])
    assert qs.qids == ["q1", "q3"] and qs.no_relevant == ["q2"]
    assert qs.missing_by_variant == {"v": ["q4"], "w": ["q4"]}  # an empty ranking counts as missing
    assert qs.limited_by == ["v", "w"] and "2 queries evaluated" in qs.describe()
    zero = M.query_set(runs, qrels, policy="zero")
    assert zero.qids == ["q1", "q3", "q4"]
    df = M.evaluate(runs, qrels, zero, ["success@1"])
    got = df.set_index(["variant", "qid"]).value
    assert got[("v", "q4")] == 0 and got[("w", "q1")] == 0 and got[("v", "q1")] == 1
    assert M.query_set(runs, qrels, queries=["q1"]).not_in_queries == ["q3", "q4"]


def _fixture_runs():
    qrels = {"q1": {"a": 2, "b": 1, "n": 0}, "q2": {"c": 1}, "q3": {"d": 1, "e": 3}, "q4": {"x": 0}}
    runs = {
        "bm25": {
            "q1": {"b": 3.0, "n": 2.0, "a": 1.0},
            "q2": {"z": 2.0, "c": 1.0},
            "q3": {"y": 1.0},
            "q4": {"x": 1.0},
        },
        "hybrid": {
            "q1": {"a": 0.5, "b": 0.5, "m": 0.1},
            "q2": {"c": 0.9},
            "q3": {"e": 0.3, "d": 0.2, "y": 0.1},
        },
    }
    return qrels, runs


def test_metrics_csv_matches_ir_measures_on_trec_files(tmp_path):
    qrels, runs = _fixture_runs()
    files = {}
    for v, r in runs.items():
        files[v] = R.write_trec(r, tmp_path / f"{v}.trec", v)
    loaded = {v: R.read_run_checked(p, v)[0] for v, p in files.items()}
    qs = M.query_set(loaded, qrels)
    assert qs.qids == ["q1", "q2", "q3"]
    cols = M.metric_columns([1, 3, 5, 10])
    per_query = M.evaluate(loaded, qrels, qs, cols)
    table = M.summary_table(stats.bootstrap_table(per_query, n_boot=200, seed=1))
    csv = tmp_path / "metrics.csv"
    table.to_csv(csv, index=False)
    back = pd.read_csv(csv).set_index("variant")
    sub_qrels = {q: qrels[q] for q in qs.qids}
    for v, p in files.items():
        run = [r for r in ir_measures.read_trec_run(str(p)) if r.query_id in qs.qids]
        agg = ir_measures.calc_aggregate([M.ir_measure(c) for c in cols], sub_qrels, run)
        for c in cols:
            assert abs(back.at[v, c] - agg[M.ir_measure(c)]) <= 1e-9, (v, c)
            assert back.at[v, f"{c}_ci_low"] <= back.at[v, c] + 1e-12 <= back.at[v, f"{c}_ci_high"] + 2e-12


def test_conformance_check_agrees_and_catches_differences(tmp_path):
    qrels, runs = _fixture_runs()
    files = {v: R.write_trec(r, tmp_path / f"{v}.trec", v) for v, r in runs.items()}
    loaded = {v: R.read_run_checked(p, v)[0] for v, p in files.items()}
    qs = M.query_set(loaded, qrels)
    cols = M.metric_columns([1, 2, 10])
    per_query = M.evaluate(loaded, qrels, qs, cols)
    out = C.conformance_check(files, qrels, per_query, qs, checkers=("pytrec_eval",))
    assert len(out) == len(cols) * 2 and out.max_abs_diff.max() <= 1e-12
    broken = per_query.copy()
    broken.loc[(broken.variant == "hybrid") & (broken.metric == "ndcg@10") & (broken.qid == "q3"), "value"] += 1e-6
    with pytest.raises(C.ConformanceError, match="hybrid ndcg@10"):
        C.conformance_check(files, qrels, broken, qs, checkers=("pytrec_eval",))


def test_conformance_cache_reuses_checker_values_only_for_identical_inputs(tmp_path, monkeypatch):
    qrels, runs = _fixture_runs()
    files = {v: R.write_trec(r, tmp_path / f"{v}.trec", v) for v, r in runs.items()}
    loaded = {v: R.read_run_checked(p, v)[0] for v, p in files.items()}
    qs = M.query_set(loaded, qrels)
    per_query = M.evaluate(loaded, qrels, qs, M.metric_columns([1, 10]))
    calls = []
    real = C.CHECKERS["pytrec_eval"]
    monkeypatch.setitem(C.CHECKERS, "pytrec_eval", lambda *a: calls.append(a[0].name) or real(*a))
    check = lambda pq: C.conformance_check(files, qrels, pq, qs, checkers=("pytrec_eval",), cache=tmp_path / "c")  # noqa: E731
    first = check(per_query)
    assert sorted(calls) == sorted(p.name for p in files.values())
    assert check(per_query).equals(first) and len(calls) == len(files)  # identical inputs: no recomputation
    # a cached checker value still catches a disagreement of ir_measures' values
    broken = per_query.copy()
    broken.loc[(broken.variant == "hybrid") & (broken.metric == "ndcg@10") & (broken.qid == "q3"), "value"] += 1e-6
    with pytest.raises(C.ConformanceError, match="hybrid ndcg@10"):
        check(broken)
    assert len(calls) == len(files)
    # another run file (other bytes) or other judgments: computed again
    R.write_trec({**runs["hybrid"], "q3": {"d": 0.3, "e": 0.2, "y": 0.1}}, files["hybrid"], "hybrid")
    loaded["hybrid"] = R.read_run_checked(files["hybrid"], "hybrid")[0]
    check(M.evaluate(loaded, qrels, qs, M.metric_columns([1, 10])))
    assert calls[-1] == files["hybrid"].name and len(calls) == len(files) + 1


@pytest.mark.slow
def test_conformance_with_ranx(tmp_path):
    pytest.importorskip("ranx")
    qrels, runs = _fixture_runs()
    files = {v: R.write_trec(r, tmp_path / f"{v}.trec", v) for v, r in runs.items()}
    loaded = {v: R.read_run_checked(p, v)[0] for v, p in files.items()}
    qs = M.query_set(loaded, qrels)
    per_query = M.evaluate(loaded, qrels, qs, M.metric_columns([1, 3, 10]))
    out = C.conformance_check(files, qrels, per_query, qs, checkers=("ranx",))
    assert out.max_abs_diff.max() <= 1e-9


def test_unit_mapping_check():
    unit_of = {"a1": "A", "a2": "A", "b1": "B"}
    chunk = {"q": {"a1": 3.0, "b1": 2.0, "a2": 1.0}}
    assert R.unit_mapping_check({"q": {"A": 3.0, "B": 2.0}}, chunk, unit_of) == 0
    assert R.unit_mapping_check({"q": {"A": 3.0}}, chunk, unit_of) == 0  # truncated is fine
    assert R.unit_mapping_check({"q": {"B": 3.0, "A": 2.0}}, chunk, unit_of) == 1


def test_slice_table():
    per_query = pd.DataFrame(
        {
            "variant": ["v", "v", "w", "w"],
            "qid": ["q1", "q2", "q1", "q2"],
            "metric": ["ndcg@10"] * 4,
            "value": [1.0, 0.0, 0.5, 0.5],
        }
    )
    t = M.slice_table(per_query, {"q1": {"type": "lexical"}, "q2": {"type": "paraphrase"}}, ["ndcg@10"])
    got = t.set_index(["value", "variant"])["ndcg@10"]
    assert got[("lexical", "v")] == 1.0 and got[("paraphrase", "w")] == 0.5 and set(t.n) == {1}
    assert M.slice_table(per_query, {}, ["ndcg@10"]).empty


def test_discover_runs_orders_variants(tmp_path):
    for v in ("hybrid_rerank", "zzz", "bm25", "vector"):
        (tmp_path / f"{v}.trec").write_text("")
    assert list(R.discover_runs(tmp_path)) == ["bm25", "vector", "hybrid_rerank", "zzz"]
    with pytest.raises(FileNotFoundError):
        R.discover_runs(tmp_path, ["hybrid"])


def test_stage_04s_quick_check_lives_in_evaluate(tmp_path, monkeypatch):
    """04's quick look (evaluate.quick, the reranker never imports evaluate): q1's gold unit moves from rank 2
    to 1; q3 is reranked but not judged; the LLM scored the relevant candidate above the others."""
    from rerankeval.evaluate.quick import quick_check
    from rerankeval.rerank.config import Params
    from rerankeval.rerank.core import Inputs
    from rerankeval.rerank.core import Result as RerankResult

    dp = dataset_in(tmp_path, monkeypatch)
    R.write_qrels({"q1": {"b": 1}, "q2": {"x": 1}}, dp.qrels)
    fused = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"a": 2.0, "c": 1.0}, "q3": {"a": 1.0}}
    reranked = {"q1": {"b": 3.0, "a": 2.0, "c": 1.0}, "q3": {"a": 1.0}}
    cands = pd.DataFrame(
        {
            "qid": ["q1"] * 4,
            "pass": ["main"] * 3 + ["reversed"],
            "docid": ["a", "b", "c", "b"],
            "llm_score": [0.2, 0.9, 0.1, 0.5],
        }
    )
    inputs = Inputs(fused, {}, {}, sorted(reranked), {})
    res = RerankResult(reranked, pd.DataFrame(), cands, None, "m", Params().config(), 0.0, {}, 10, None, inputs)
    table, by_relevance = quick_check(dp, fused, res, ["q1", "q3"])
    assert list(table.index) == ["hybrid", "hybrid_rerank"] and set(table.columns) == {"ndcg@10", "mrr@10"}
    assert table.loc["hybrid", "mrr@10"] == pytest.approx(1 / 2) and table.loc["hybrid_rerank", "mrr@10"] == 1.0
    assert by_relevance.loc[True, "mean"] == pytest.approx(0.9) and by_relevance.loc[False, "count"] == 2
    assert quick_check(dp, fused, res, ["q3"]) is None
