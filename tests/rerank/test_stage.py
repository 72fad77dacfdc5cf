"""Stage 04 end to end on a tiny hand-made dataset: run files in, reranked run + ledger out; what the notebook shows;
the notebook."""

from __future__ import annotations

import json
import math

import pytest

from fakellm import FakeLLM
from rerank_data import make_dataset
from rerankeval import rerank
from rerankeval.core import runs
from rerankeval.core.paths import resolve_dataset
from rerankeval.core.settings import Settings, load_settings
from rerankeval.evaluate.quick import quick_check
from rerankeval.rerank import ledger, stage
from rerankeval.rerank.config import Params


def test_stage_end_to_end(tmp_path, monkeypatch):
    src, dp = make_dataset(tmp_path)
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path))
    params = Params(
        dataset=str(src), pool_k=3, mode="yesno", yesno_json=True, alpha=1.0, max_queries=2, stability="reversed"
    )
    inputs = stage.load(dp, params)
    fused = inputs.fused
    assert inputs.texts["q1"]["a.pdf#p1"] == "alpha GOLD answer"  # best chunk, not the first chunk of the page
    assert list(fused["q1"]) == ["b.pdf#p1", "a.pdf#p1", "b.pdf#p2", "a.pdf#p2", "c.pdf#p1"]
    with FakeLLM() as f:
        s = Settings(base_url=f.base_url, api_key="k", model="fake-reranker", timeout=2, max_retries=0)
        res = rerank.run(dp, params, s, progress=False)
    out = rerank.write(dp, res)
    assert res.inputs.fused == fused and res.expanded is None
    got = runs.read_trec(dp.run_file("hybrid_rerank"))
    assert sorted(got) == ["q1", "q2"]  # max_queries: only the first 2 by qid
    assert list(got["q1"]) == ["a.pdf#p1", "b.pdf#p1", "b.pdf#p2", "a.pdf#p2", "c.pdf#p1"]
    # the rest keeps its fused order, strictly below the pool
    assert list(got["q2"])[3:] == ["a.pdf#p2", "c.pdf#p1"]
    led = rerank.read_ledger(dp.ledger)
    assert list(led.columns) == ledger.COLUMNS
    assert led["pass"].tolist() == ["main", "main", "reversed", "reversed"]
    assert led["variant"].tolist()[:2] == ["hybrid_rerank"] * 2
    assert set(led.status) == {"ok"} and (led.model == "fake-reranker").all()
    summary = json.loads(out["summary"].read_text())
    assert summary["model"] == "fake-reranker" and summary["main"]["fallback_rate"] == 0.0
    assert summary["stability"]["kendall_tau_mean"] == 1.0
    # the plan printed before the first call is kept: 2 queries x 3 candidates in the main pass; the
    # reversed pass asks the same yes/no questions, served by the cache
    assert summary["plan"]["calls"] == 12 and summary["plan"]["fresh_calls"] == 6
    assert summary["main"]["llm_seconds"] == summary["main"]["fresh_llm_seconds"] > 0
    assert summary["main"]["budget_skipped"] == 0 and summary["pool_k"] == 3
    assert (dp.stage_dir("rerank") / "candidates.csv").exists()
    # 04's quick look: q1's gold page moves from rank 2 to 1; q2's gold page stays 5th (outside the pool of 3)
    table, by_relevance = quick_check(dp, fused, res, ["q1", "q2"])
    assert table.loc["hybrid", "mrr@10"] == pytest.approx((1 / 2 + 1 / 5) / 2)
    assert table.loc["hybrid_rerank", "mrr@10"] == pytest.approx((1 + 1 / 5) / 2)
    assert table.loc["hybrid_rerank", "ndcg@10"] == pytest.approx((1 + 1 / math.log2(6)) / 2)
    assert by_relevance.loc[True, "count"] == 1 and by_relevance.loc[False, "count"] == 5
    assert quick_check(dp, fused, res, ["q9"]) is None


def test_the_stage_shape_and_what_notebook_04_shows(tmp_path, monkeypatch):
    src, dp = make_dataset(tmp_path)
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path))
    params = Params.of(
        {
            "dataset": str(src),
            "pool_k": 3,
            "alpha": 1.0,
            "max_queries": 2,
            "stability": "reversed",
            "dp": dp,
            "other": 1,
        }
    )  # a notebook's globals: the parameters are taken, the rest ignored
    inputs = stage.load(dp, params)
    assert inputs.qids == ["q1", "q2"] and inputs.texts["q1"]["a.pdf#p1"] == "alpha GOLD answer"
    assert inputs.describe(dp, params) == (
        "Dataset tinyds: reranking the top 3 of the hybrid run for 2 of 3 queries "
        "(first 2 by query id); mode yesno, alpha 1.0."
    )
    assert params.config().yesno_json is False  # the notebook's default
    with FakeLLM(script=[{"status": 500}]) as f:  # the first call fails (no retries): q1 keeps one fused place
        s = Settings(base_url=f.base_url, api_key="k", model="fake-reranker", timeout=2, max_retries=0)
        res = rerank.run(dp, params, s, progress=False)
    written = rerank.write(dp, res)
    assert set(written) == {"run", "ledger", "candidates", "stability", "summary"}
    said = stage.describe_run(res, params, written).splitlines()
    assert said[0].startswith("Reranker: fake-reranker (127.0.0.1), mode yesno, alpha 1.0; ")
    assert said[1:] == [f"wrote {k}: {v}" for k, v in written.items()]  # not the local server: no note
    res.endpoint = stage.endpoint_kind(s.model_copy(update={"endpoint_id": "llama-server qwen"}))
    assert stage.describe_run(res, params, {}).splitlines()[1:] == [stage.LOCAL_NOTE]
    assert stage.describe_ledger(res.ledger).startswith("Fallback rate 50.0% and repair rate 0.0% over 2 queries; ")
    by_status = stage.ledger_by_status(res.ledger)
    assert by_status.index.names == ["pass", "status"] and by_status.queries.sum() == 4
    problems = stage.ledger_problems(res.ledger)
    assert list(problems.columns) == stage.PROBLEM_COLUMNS and set(problems.status) == {"partial_fallback"}
    assert stage.describe_stability(res, "reversed").startswith("reversed pass: mean Kendall tau ")
    res.stability = None
    assert stage.describe_stability(res, "none") == 'No stability pass (set stability = "reversed" or "shuffled").'


def test_missing_run_says_which_stage(tmp_path):
    src = tmp_path / "empty"
    src.mkdir()
    with pytest.raises(FileNotFoundError, match="03-retrieve"):
        stage.load(resolve_dataset(str(src), load_settings()), Params(pool_k=5))


@pytest.mark.slow
def test_notebook_runs_against_fake_endpoint(tmp_path, monkeypatch):
    papermill = pytest.importorskip("papermill")
    from rerankeval.core.paths import NOTEBOOKS_DIR

    src, dp = make_dataset(tmp_path)
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))
    with FakeLLM() as f:
        monkeypatch.setenv("OPENAI_BASE_URL", f.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
        monkeypatch.setenv("RERANK_MODEL", "fake-reranker")
        out = tmp_path / "04.ipynb"
        papermill.execute_notebook(
            str(NOTEBOOKS_DIR / "04-rerank.ipynb"),
            str(out),
            kernel_name="python3",
            parameters={"dataset": str(src), "pool_k": 3, "stability": "reversed"},
            progress_bar=False,
        )
        n = f.count
        papermill.execute_notebook(
            str(NOTEBOOKS_DIR / "04-rerank.ipynb"),
            str(tmp_path / "again.ipynb"),
            kernel_name="python3",
            parameters={"dataset": str(src), "pool_k": 3},
            progress_bar=False,
        )
        assert f.count == n  # the re-run is served by the cache
    text = out.read_text()
    assert "Reranker: fake-reranker" in text and "Fallback rate 0.0%" in text
    assert dp.run_file("hybrid_rerank").exists() and dp.ledger.exists()
