"""The index's "since the previous run" line compares like with like (issue 35 items 4/5, issue 32's weak spot): it
names what changed besides the systems and shows no difference over different question sets
(rerankeval.report.history, fed by 05's analyse/inputs.json)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from handmade import dataset_in, write_documents
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl
from rerankeval.core.settings import load_settings
from rerankeval.evaluate import analyse
from rerankeval.evaluate.analysis_records import INPUTS_FILE, read_inputs, write_inputs
from rerankeval.report import history

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

QS = {"q1": "h1", "q2": "h2", "q3": "h3"}
GRADES = {"q1": "g1", "q2": "g2", "q3": "g3"}
PARAMS = {"analyse.final_k": 10, "retrieve.hybrid.rrf_k": 60, "rerank.alpha": 0.1}


def _inputs(questions=QS, grades=GRADES, parameters=PARAMS, merged=0, source="human"):
    return {
        "questions": dict(questions),
        "grades": dict(grades),
        "judgments_merged": merged,
        "qrels_source": source,
        "parameters": dict(parameters),
    }


@pytest.fixture
def dp(tmp_path, monkeypatch):
    return dataset_in(tmp_path, monkeypatch, root=True)


def _analysis(dp, when: str, bm25: float, inputs: dict | None, n: int = 3) -> str | None:
    """An analysis as 05 leaves it (metrics.csv, analyse/inputs.json and questions.csv), then the index's line."""
    pd.DataFrame({"variant": ["bm25", "hybrid"], "n_queries": [n, n], "ndcg@10": [bm25, 0.7]}).to_csv(
        dp.metrics_csv, index=False
    )
    if inputs is None:
        (dp.stage_dir("analyse") / INPUTS_FILE).unlink(missing_ok=True)
    else:
        write_inputs(dp, inputs)
    return history.since_previous(dp, {"created_utc": when}, "ndcg@10")


def test_the_inputs_record_reads_back_as_written(dp):
    record = _inputs({"q,1": "h1", "NA": "h2", '"q3"': "h3"}, {"q,1": "g1", "NA": "g2", '"q3"': "g3"})
    write_inputs(dp, record)
    assert read_inputs(dp) == record
    assert "questions" not in json.loads((dp.stage_dir("analyse") / INPUTS_FILE).read_text())  # kept out of the
    # manifest, which copies the analysis's small JSON files: one row per question is a CSV's job


def test_edited_added_or_removed_questions_show_no_difference_and_say_why(dp):
    assert _analysis(dp, "2026-12-01T10:00:00+00:00", 1.0, _inputs()) == history.FIRST_RUN
    edited = {**QS, "q3": "h3-edited", "q4": "h4"}
    del edited["q1"]
    line = _analysis(dp, "2026-12-02T12:49:00+00:00", 0.908, _inputs(edited, {**GRADES, "q4": "g4"}))
    assert line.startswith(
        "nDCG@10 is not compared with the run of 2026-12-01 10:00 UTC: the question set changed "
        "(1 added (q4); 1 edited (q3); 1 removed (q1))"
    )
    assert "1.000" not in line and "0.908" not in line and "\u2192 0.908" not in line
    assert "says nothing about the systems" in line


def test_a_merged_grade_is_named_as_the_cause_beside_the_difference(dp):
    _analysis(dp, "2026-12-01T10:00:00+00:00", 0.642, _inputs())
    line = _analysis(dp, "2026-12-01T11:00:00+00:00", 0.643, _inputs(grades={**GRADES, "q2": "g2-new"}, merged=1))
    assert "bm25 0.642 \u2192 0.643 (+0.001)" in line
    assert (
        "Same questions, but the grades of 1 question(s) changed (q2), judgments merged 0 \u2192 1: part of each "
        "difference may come from these, not from the systems."
    ) in line


def test_changed_parameters_are_named_and_an_unchanged_setup_says_so(dp):
    _analysis(dp, "2026-12-01T10:00:00+00:00", 0.60, _inputs())
    line = _analysis(dp, "2026-12-01T11:00:00+00:00", 0.65, _inputs(parameters={**PARAMS, "rerank.alpha": 0.3}))
    assert "parameters changed: rerank.alpha 0.1 \u2192 0.3" in line and "bm25 0.600 \u2192 0.650" in line
    line = _analysis(dp, "2026-12-01T12:00:00+00:00", 0.65, _inputs(parameters={**PARAMS, "rerank.alpha": 0.3}))
    assert line.startswith("nDCG@10 unchanged since the run of 2026-12-01 11:00 UTC") and line.endswith(
        "Same questions, grades and parameters."
    )


def test_runs_that_recorded_nothing_are_refused_when_their_question_counts_differ(dp):
    _analysis(dp, "2026-12-01T10:00:00+00:00", 1.0, None, n=60)
    line = _analysis(dp, "2026-12-01T11:00:00+00:00", 0.9, None, n=58)
    assert "is not compared" in line and "the number of evaluated questions changed (60 \u2192 58)" in line


def _mini(tmp_path, monkeypatch):
    """Three judged queries (chunk = unit), bm25 and hybrid runs, as 01-03 leave them."""
    dp = dataset_in(tmp_path, monkeypatch, "mini")
    units = ["d1", "d2", "d3"]
    write_documents(
        dp, units, {f"q{i}": f"question {i}" for i in (1, 2, 3)}, {f"q{i}": {f"d{i}": 1} for i in (1, 2, 3)}
    )
    for v, shift in (("bm25", 1), ("hybrid", 0)):
        run = {f"q{i}": {units[(i - 1 + shift + j) % 3]: 3.0 - j for j in range(3)} for i in (1, 2, 3)}
        runs.write_trec(run, dp.run_file(v), v)
        atomic_write_json(dp.stage_dir("retrieve") / f"{v}.json", {"variant": v, "pool_k": 3, "queries": 3})
    return dp


def test_an_edited_question_between_two_real_analyses_is_named_on_the_index_line(tmp_path, monkeypatch):
    dp = _mini(tmp_path, monkeypatch)
    fast = {"ks": [1, 3], "final_k": 3, "n_boot": 100, "n_perm": 100, "verify_with": []}
    analyse.write(dp, analyse.run(dp, fast, load_settings()))
    assert history.since_previous(dp, {"created_utc": "2026-12-01T10:00:00+00:00"}, "ndcg@3") == history.FIRST_RUN
    rows = [json.loads(x) for x in dp.queries.read_text().splitlines()]
    rows[1]["text"] = "question 2, as a reviewer edited it"
    atomic_write_jsonl(dp.queries, rows)
    analyse.write(dp, analyse.run(dp, fast, load_settings()))
    line = history.since_previous(dp, {"created_utc": "2026-12-01T11:00:00+00:00"}, "ndcg@3")
    assert "not compared" in line and "1 edited (q2)" in line
    # the same questions again: the difference is shown, nothing else moved
    analyse.write(dp, analyse.run(dp, fast, load_settings()))
    line = history.since_previous(dp, {"created_utc": "2026-12-01T12:00:00+00:00"}, "ndcg@3")
    assert "unchanged since the run of 2026-12-01 11:00 UTC" in line and line.endswith(
        "Same questions, grades and parameters."
    )
