"""Whose grades a grades file holds, and which judge 09 asks (issue 32 defects 4 and 6): one file per exact model
id with the id recorded beside it, 05 reading one judge's grades, and JUDGE_MODEL / JUDGE_BASE_URL used by 09 (never
the reranker's endpoint in their place)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from assess_data import _dataset, gold_judge
from fakellm import FakeLLM
from rerankeval.core import judge_grades
from rerankeval.core.settings import Settings
from rerankeval.evaluate import agreement
from rerankeval.llm.cache import LLMCache
from rerankeval.questions import assess

KEY = "test-key-not-a-secret-0001"


def _settings(url: str, model: str) -> Settings:
    return Settings(base_url=url, api_key=KEY, model=model, timeout=2, max_retries=0)


def _grade(dp, tmp_path, model: str, rule) -> dict[str, str]:
    with FakeLLM(rule=rule) as f:
        res = assess.run(
            dp, assess.AssessParams(assess=True, k=2), _settings(f.base_url, model), LLMCache(tmp_path / "llm")
        )
    return assess.write(dp, res)


def _zero_judge(n: int, body: dict) -> dict:
    return {"content": json.dumps({"score": 0})}


def test_two_models_whose_names_differ_only_in_punctuation_write_two_files(tmp_path):
    dp = _dataset(tmp_path)
    one = _grade(dp, tmp_path, "acme/judge-large", gold_judge)["llm_qrels"]
    two = _grade(dp, tmp_path, "acme_judge-large", _zero_judge)["llm_qrels"]
    assert one != two
    first, second = agreement.read_llm_qrels(Path(one)), agreement.read_llm_qrels(Path(two))
    assert 3 in {g for rel in first.values() for g in rel.values()}  # the first judge's grades are still its own
    assert {g for rel in second.values() for g in rel.values()} == {0}
    assert judge_grades.judge_of(Path(one)) == "acme/judge-large"
    assert judge_grades.judge_of(Path(two)) == "acme_judge-large"


def test_long_gguf_paths_that_differ_only_in_the_quantisation_suffix_do_not_collide(tmp_path):
    dp = _dataset(tmp_path)
    base = "/home/someone/.cache/models/" + "qwen2.5-coder-7b-instruct-" * 3
    a, b = assess.llm_qrels_path(dp, base + "Q4_K_M.gguf"), assess.llm_qrels_path(dp, base + "Q8_0.gguf")
    assert a != b and a.name.startswith("llm-home_someone_.cache_models_qwen") and len(a.name) < 90


def test_05_reads_one_judge_and_names_it(tmp_path):
    dp = _dataset(tmp_path)
    _grade(dp, tmp_path, "acme/judge-large", gold_judge)
    newest = _grade(dp, tmp_path, "acme_judge-large", _zero_judge)["llm_qrels"]
    human = assess.human_qrels(dp)
    merged, rec = agreement.analysis_qrels(dp, human, "human+llm")
    assert rec["llm_file"] == Path(newest).name and rec["judge_model"] == "acme_judge-large"
    assert all(g == 0 for q, rel in merged.items() for u, g in rel.items() if u not in human.get(q, {}))
    assert "other LLM grades files left out" in rec["judge_warning"] and "(acme_judge-large)" in agreement.describe(rec)


def test_a_grades_file_of_the_earlier_naming_is_still_read_with_a_note(tmp_path):
    dp = _dataset(tmp_path)
    (dp.source / "qrels" / "llm-acme_judge-large.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tm.pdf#p3\t3\n")
    merged, rec = agreement.analysis_qrels(dp, assess.human_qrels(dp), "human+llm")
    assert merged["q1"]["m.pdf#p3"] == 1 and rec["llm_file"] == "llm-acme_judge-large.tsv"  # the human top: 1
    assert "has no record of the model that wrote it" in rec["judge_warning"] and rec["judge_model"] == ""
    written = _grade(dp, tmp_path, "acme/judge-large", _zero_judge)  # a recorded file is read before the old one
    assert agreement.llm_qrels_files(dp)[0] == Path(written["llm_qrels"])
    saved = json.loads(Path(written["summary"]).read_text())
    assert "llm-acme_judge-large.tsv has no record" in saved["warning"]  # the old file of this judge's name


def test_a_grades_file_recorded_for_another_model_is_never_written_into(tmp_path):
    dp = _dataset(tmp_path)
    path = assess.llm_qrels_path(dp, "acme/judge-large")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("query-id\tcorpus-id\tscore\nq1\tm.pdf#p3\t3\n")
    path.with_suffix(".json").write_text(json.dumps({"model": "someone/else"}))
    with pytest.raises(ValueError, match="holds the grades of the judge 'someone/else'"):
        _grade(dp, tmp_path, "acme/judge-large", _zero_judge)
    assert path.read_text().endswith("m.pdf#p3\t3\n")


# -- defect 4: JUDGE_MODEL / JUDGE_BASE_URL are what 09 uses -------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_judge_endpoint_asks_the_judge_and_refuses_a_judge_that_is_down(tmp_path):
    dp = _dataset(tmp_path)
    with FakeLLM(rule=gold_judge) as rerank, FakeLLM(rule=gold_judge) as judge:
        settings = Settings(
            **{
                **_settings(rerank.base_url, "reranker-model").model_dump(),
                "judge_base_url": judge.base_url,
                "judge_model": "judge-model",
            }
        )
        with assess.judge_endpoint(settings) as js:
            res = assess.run(dp, assess.AssessParams(assess=True, k=2), js, LLMCache(tmp_path / "llm"))
        assert rerank.count == 0 and judge.count == len(res.pairs) > 0 and res.model == "judge-model"
        down = Settings(**{**settings.model_dump(), "judge_base_url": f"http://127.0.0.1:{_closed_port()}/v1"})
        with pytest.raises(assess.JudgeEndpointError, match="JUDGE_BASE_URL"), assess.judge_endpoint(down):
            pytest.fail("judged although the judge's endpoint is down")
        assert rerank.count == 0


def _run_09(tmp_path, dp, **params):
    papermill = pytest.importorskip("papermill")
    from rerankeval.core.paths import NOTEBOOKS_DIR

    out = tmp_path / "09.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOKS_DIR / "09-assess.ipynb"),
        str(out),
        kernel_name="python3",
        parameters={"dataset": str(dp.source), **params},
        progress_bar=False,
    )
    return out


@pytest.mark.slow
def test_notebook_09_judges_with_judge_model_on_judge_base_url_and_the_fingerprint_says_so(tmp_path, monkeypatch):
    from rerankeval.apps.chain import files as chain_files
    from rerankeval.core.paths import NOTEBOOKS_DIR
    from rerankeval.core.settings import load_settings

    dp = _dataset(tmp_path)
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path / "cache"))
    with FakeLLM(rule=gold_judge) as rerank, FakeLLM(rule=gold_judge) as judge:
        env = {
            "OPENAI_BASE_URL": rerank.base_url,
            "OPENAI_API_KEY": KEY,
            "RERANK_MODEL": "reranker-model",
            "JUDGE_BASE_URL": judge.base_url,
            "JUDGE_API_KEY": KEY,
            "JUDGE_MODEL": "judge-model",
        }
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        _run_09(tmp_path, dp, assess=True, k=2)
        assert rerank.count == 0 and judge.count == 10
        assert {b["model"] for _, p, b in judge.requests if p.endswith("/chat/completions")} == {"judge-model"}
        summary = json.loads((dp.stage_dir("assess") / "summary.json").read_text())
        nb = NOTEBOOKS_DIR / "09-assess.ipynb"
        key = chain_files.notebook_key(nb, {"assess": True}, "code", {}, load_settings())
        assert summary["model"] == key["settings"]["judge_model"] == "judge-model"  # what ran is what is recorded

        monkeypatch.setenv("JUDGE_BASE_URL", f"http://127.0.0.1:{_closed_port()}/v1")
        with pytest.raises(Exception, match="JUDGE_BASE_URL") as err:
            _run_09(tmp_path, dp, assess=True, k=2)
        assert "JudgeEndpointError" in str(err.value) and rerank.count == 0  # never the reranker in its place
