"""What the index says of an LLM judge's grades (issue 32 defect 5 and weak spots): grades of 1 ("related, does not
answer") are not relevant, a judge's grades are never labelled human, a judge grading the questions its own model
drafted is said so, and "one grade for nearly everything" reaches the index, not only assess/summary.json."""

from __future__ import annotations

import json
import warnings

import pytest

from fakellm import FakeLLM
from handmade import dataset_at, write_documents
from rerankeval.core import judge_grades, runs
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.settings import Settings, load_settings
from rerankeval.evaluate import analyse
from rerankeval.llm.cache import LLMCache
from rerankeval.questions import assess
from rerankeval.report import render

DRAFTER = "acme/drafter-7b"
QIDS = [f"q{i}" for i in range(1, 9)]
UNITS = [f"d{i}" for i in range(1, 11)]
FAST = {"ks": [1, 3, 5], "final_k": 5, "n_boot": 50, "n_perm": 50, "verify_with": ["pytrec_eval"]}


def _drafted(tmp_path):
    """A dataset whose questions ``DRAFTER`` drafted (each from its own unit ``d<i>``), with stage 01-03 outputs
    written by hand: every query's hybrid run holds its source unit third among six units."""
    dp = dataset_at(tmp_path / "src" / "mini", qrels=True)
    source = {q: UNITS[i] for i, q in enumerate(QIDS)}
    dp.source_draft_queries.write_text(
        "".join(
            json.dumps(
                {"_id": q, "text": f"question {q}", "metadata": {"source_unit": u, "model": DRAFTER, "status": "draft"}}
            )
            + "\n"
            for q, u in source.items()
        )
    )
    dp.source_draft_qrels.write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{u}\t1\n" for q, u in source.items())
    )
    write_documents(dp, UNITS, QIDS, {q: {u: 1} for q, u in source.items()})
    others = {q: [u for u in reversed(UNITS) if u != source[q]] for q in QIDS}
    run = {q: {u: float(10 - j) for j, u in enumerate(others[q][:2] + [source[q]] + others[q][2:5])} for q in QIDS}
    runs.write_trec(run, dp.run_file("hybrid"), "hybrid")
    atomic_write_json(
        dp.stage_dir("retrieve") / "hybrid.json",
        {"variant": "hybrid", "pool_k": 5, "seconds": 0.1, "queries": len(QIDS)},
    )
    return dp


def _judge(dp, tmp_path, model: str, grade: int) -> dict:
    """09 with ``model`` grading every pair ``grade``; its summary."""
    settings = Settings(base_url="", api_key="test-key-not-a-secret-0001", model=model, timeout=2, max_retries=0)
    with FakeLLM(rule=lambda n, body: {"content": json.dumps({"score": grade})}) as f:
        res = assess.run(
            dp,
            assess.AssessParams(assess=True, k=5),
            Settings(**{**settings.model_dump(), "base_url": f.base_url}),
            LLMCache(tmp_path / "llm"),
        )
    written = assess.write(dp, res)
    return json.loads((dp.stage_dir("assess") / "summary.json").read_text()) | {
        "describe": assess.describe(res),
        **written,
    }


def _index(dp, source: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = analyse.run(dp, FAST | {"qrels_source": source}, load_settings())
    analyse.write(dp, a)
    return a, render.write_index(dp, []).read_text(encoding="utf-8")


def test_a_judge_grading_its_own_models_drafts_is_said_so_and_never_labelled_human(tmp_path):
    dp = _drafted(tmp_path)
    summary = _judge(dp, tmp_path, DRAFTER, 3)
    base, _ = _index(dp, "human")
    a, page = _index(dp, "human+llm")
    assert a.table.set_index("variant").at["hybrid", "ndcg@5"] > base.table.set_index("variant").at["hybrid", "ndcg@5"]
    assert "Grades: human" not in page and "human+llm grades" not in page  # no human grade anywhere here
    assert a.summary.qrels_source == "drafts+llm" and set(a.table["qrels"]) == {"drafts+llm"}
    assert "The same runs with drafts grades" in page and "no human grade" in page
    assert "graded questions its own model wrote" in page and DRAFTER in page
    assert summary["self_judged"] and "graded questions its own model wrote" in summary["warning"]
    assert "its own model wrote" in summary["describe"]


def test_another_judge_is_not_said_to_grade_its_own_drafts(tmp_path):
    dp = _drafted(tmp_path)
    summary = _judge(dp, tmp_path, "other/judge", 3)
    assert not summary["self_judged"] and "own model" not in summary["warning"]
    _, page = _index(dp, "human+llm")
    assert "own model wrote" not in page and "Grades: human" not in page


def test_a_judge_grading_every_pair_1_changes_no_metric_and_its_warning_reaches_the_index(tmp_path):
    dp = _drafted(tmp_path)
    summary = _judge(dp, tmp_path, "other/judge", 1)
    assert summary["graded"] >= 20 and summary["grades"]["1"] == summary["graded"]
    base, _ = _index(dp, "human")
    a, page = _index(dp, "human+llm")
    assert a.summary.grades["llm_added"] == summary["graded"]
    for col in ("precision@5", "ndcg@5", "success@5"):  # a 1 is "related, does not answer": not relevant
        assert a.table.set_index("variant").at["hybrid", col] == pytest.approx(
            base.table.set_index("variant").at["hybrid", col]
        )
    assert "LLM grades (100%) are 1 (not relevant" in page.replace("&#39;", "'")
    assert "are 1 (not relevant" in summary["warning"]


def test_the_scale_maps_to_qrels_grades_as_umbrela_reads_it():
    assert [judge_grades.to_qrels_grade(g, 1) for g in range(4)] == [0, 0, 1, 1]
    assert [judge_grades.to_qrels_grade(g, 2) for g in range(4)] == [0, 0, 1, 2]
    assert [judge_grades.to_qrels_grade(g, 3) for g in range(4)] == [0, 0, 2, 3]
    assert [judge_grades.is_relevant(g) for g in range(4)] == [False, False, True, True]
