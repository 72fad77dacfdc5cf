"""Issue 14: what can be checked before the expensive stages is checked before any notebook runs.

Parameters that must agree (``pool_k >= final_k``), the dataset's required files, and the LLM endpoint's
reachability (a dead endpoint names its URL, secrets redacted, says how to fix it, and stops the run with
a non-zero status unless fallbacks were asked for).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rerankeval.apps.chain import params as chain_params
from rerankeval.apps.chain import preflight as chain_preflight
from rerankeval.apps.chain import runner as chain
from rerankeval.core.settings import Settings, load_settings

SENTINEL = "sk-" + "SENTINEL-preflight-0123456789"
PASSWORD = "hunter2-url-password"


def run(
    dataset: Path, results: Path, *args: str, env_extra: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(
        {
            "RERANKEVAL_RESULTS": str(results),
            "RERANKEVAL_QDRANT_PATH": str(results / "qdrant"),
            "OPENAI_API_KEY": SENTINEL,
            **(env_extra or {}),
        }
    )
    cmd = [sys.executable, "-m", "rerankeval.apps.chain", "--dataset", str(dataset), "--kernel", "python3", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def executed(results: Path, name: str) -> list[str]:
    return sorted(p.name for p in (results / name / "executed").glob("*.ipynb"))


def test_pool_smaller_than_final_k_stops_before_any_notebook(tmp_path, tiny_pdf):
    r = run(tiny_pdf, tmp_path / "res", "--set", "pool_k=5", env_extra={"OPENAI_BASE_URL": dead_url()})
    assert r.returncode == chain.EXIT_PREFLIGHT, r.stderr[-2000:]
    assert "pool_k (5) must be >= final_k (10)" in r.stderr and 'P="pool_k=10"' in r.stderr
    assert executed(tmp_path / "res", "tiny-pdf") == []


def test_parameters_are_checked_as_each_notebook_will_see_them():
    nbs = chain_params.notebooks(["05"])
    chain_preflight.check_parameters(nbs, {"pool_k": 10, "final_k": 10})
    with pytest.raises(chain_params.PreflightError, match=r"pool_k \(3\) must be >= final_k \(10\).*05-analyse"):
        chain_preflight.check_parameters(nbs, {"pool_k": 3})  # final_k from the notebook's own default
    with pytest.raises(chain_params.PreflightError, match="leg_k = 0 must be a whole number >= 1"):
        chain_preflight.check_parameters(chain_params.notebooks(["03"]), {"leg_k": 0})
    chain_preflight.check_parameters(chain_params.notebooks(["01"]), {"pool_k": 3})  # 01 has neither: nothing to check


def test_a_dataset_without_queries_stops_before_any_extraction(tmp_path, tiny_pdf):
    (tiny_pdf / "queries.jsonl").unlink()
    r = run(tiny_pdf, tmp_path / "res", "--only", "01")
    assert r.returncode == chain.EXIT_PREFLIGHT, r.stderr[-2000:]
    assert "missing: queries.jsonl" in r.stderr and "Nothing was extracted" in r.stderr
    assert executed(tmp_path / "res", "tiny-pdf") == []


def test_a_dead_endpoint_stops_the_run_naming_its_url_without_secrets(tmp_path, tiny_pdf):
    url = dead_url()
    with_password = url.replace("http://", f"http://reranker:{PASSWORD}@")
    r = run(tiny_pdf, tmp_path / "res", env_extra={"OPENAI_BASE_URL": with_password})
    assert r.returncode == chain.EXIT_PREFLIGHT, r.stderr[-2000:]
    assert url.removeprefix("http://") in r.stderr and "cannot be reached" in r.stderr
    assert 'P="allow_fallback=true"' in r.stderr and "OPENAI_BASE_URL" in r.stderr
    assert PASSWORD not in r.stdout + r.stderr and SENTINEL not in r.stdout + r.stderr
    assert executed(tmp_path / "res", "tiny-pdf") == []


def test_allow_fallback_continues_past_a_dead_endpoint(tmp_path, tiny_pdf):
    r = run(
        tiny_pdf,
        tmp_path / "res",
        "--only",
        "04",
        "--set",
        "allow_fallback=true",
        env_extra={"OPENAI_BASE_URL": dead_url()},
    )
    assert "continuing because allow_fallback is set" in r.stderr, r.stderr[-2000:]
    assert "allow_fallback; they are ignored" not in r.stderr  # a chain option, not a notebook parameter
    assert executed(tmp_path / "res", "tiny-pdf") == ["04-rerank.ipynb"]  # it ran (and failed: no 01-03)
    assert r.returncode == chain.EXIT_FAILED


def test_an_endpoint_that_fails_during_the_run_makes_the_run_fail(tmp_path, capsys):
    """The check before the run passed, but every reranked query fell back: exit 1 unless allowed."""
    import time

    import pandas as pd

    from rerankeval.core.paths import resolve_dataset

    (tmp_path / "src" / "mid").mkdir(parents=True)
    dp = resolve_dataset(str(tmp_path / "src" / "mid"), load_settings())
    dp.root.mkdir(parents=True)
    ledger = pd.DataFrame(
        {
            "qid": ["q1", "q2", "q1"],
            "pass": ["main", "main", "reversed"],
            "status": ["fallback", "fallback", "ok"],
            "requests": [3, 3, 1],
            "cache_hits": [0, 0, 0],
            "llm_calls": [1, 1, 1],
            "error": ["APIConnectionError", "APIConnectionError", ""],
        }
    )
    ledger.to_csv(dp.ledger, index=False)
    msg = chain_preflight.llm_fell_back(dp)
    assert msg and msg["endpoint"] and "2 of 2 queries fell back" in msg["text"]
    assert "could not be reached" in msg["text"]
    (dp.executed_dir).mkdir(parents=True)
    page = {
        "name": "04-rerank",
        "href": "04-rerank.html",
        "status": "ok",
        "seconds": 1.0,
        "error": None,
        "llm_problem": msg,
    }
    assert chain._finish(dp, [page], False, time.perf_counter(), Settings()) == chain.EXIT_FAILED
    err = capsys.readouterr().err
    assert "fell back to the fused order" in err and "allow_fallback=true" in err
    # replies served from the cache alone (no request sent): the message blames the cache, not OPENAI_BASE_URL
    ledger[["requests", "cache_hits", "error"]] = [[0, 1, "ValidationError"], [0, 1, "ValidationError"], [0, 1, ""]]
    ledger.to_csv(dp.ledger, index=False)
    msg = chain_preflight.llm_fell_back(dp)
    assert msg and not msg["endpoint"] and "use_cache=false" in msg["text"]
    page["llm_problem"] = msg
    assert chain._finish(dp, [page], False, time.perf_counter(), Settings()) == chain.EXIT_FAILED
    err = capsys.readouterr().err
    assert "reply cache" in err and "OPENAI_BASE_URL" not in err
    # a query that fell back only partly is not a failed run
    ledger.loc[0, "status"], ledger.loc[1, "status"] = "partial_fallback", "fallback"
    ledger.to_csv(dp.ledger, index=False)
    assert chain_preflight.llm_fell_back(dp) is None
    ledger.loc[1, "status"] = "ok"
    ledger.to_csv(dp.ledger, index=False)
    assert chain_preflight.llm_fell_back(dp) is None


# -- issue 35 item 7: one tiny real request of each kind the run sends, before any notebook --------------------------
def _settings(tmp_path: Path, base_url: str):
    from rerankeval.core.settings import load_settings

    return load_settings(
        environ={"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-fake-probe"}, env_file=tmp_path / "absent.env"
    )


def test_the_request_kinds_follow_what_each_notebook_will_send():
    from rerankeval.apps.chain.preflight import RequestKind, request_kinds

    nbs = chain_params.notebooks
    rerank, retrieve, questions = nbs(["04"]), nbs(["03"]), nbs(["08"])
    assert request_kinds(rerank, {}) == [RequestKind(schema=False, top_logprobs=10)]  # yes/no: one token, logprobs
    assert request_kinds(rerank, {"yesno_json": True}) == [RequestKind(schema=True, top_logprobs=10)]
    assert request_kinds(rerank, {"mode": "listwise"}) == [RequestKind(schema=True)]
    assert request_kinds(retrieve, {"variants": ["hybrid"]}) == []
    assert request_kinds(retrieve, {"variants": ["hybrid", "hybrid_reformulate"]}) == [RequestKind(schema=True)]
    assert request_kinds(questions, {"draft": "never"}) == []
    assert request_kinds([*rerank, *questions], {}) == [RequestKind(False, 10), RequestKind(True, 0)]
    assert request_kinds(chain_params.notebooks(["01", "02", "05"]), {}) == []


def test_the_probe_sends_one_tiny_request_of_each_kind(tmp_path):
    from fakellm import FakeLLM, no_json_schema
    from rerankeval.apps.chain.preflight import RequestKind, probe_chat

    kinds = [RequestKind(False, 10), RequestKind(True, 0)]
    with FakeLLM() as fake:
        assert probe_chat(_settings(tmp_path, fake.base_url), kinds) is None
        sent = [body for _, path, body in fake.requests if path.endswith("/chat/completions")]
    assert [b["max_tokens"] for b in sent] == [1, 1]
    assert sent[0].get("logprobs") is True and sent[0]["top_logprobs"] == 10 and "response_format" not in sent[0]
    assert sent[1]["response_format"]["type"] == "json_schema" and not sent[1].get("logprobs")
    with FakeLLM(rule=no_json_schema()) as fake:  # no structured outputs: the client downgrades, as the run would
        assert probe_chat(_settings(tmp_path, fake.base_url), [RequestKind(True, 0)]) is None
    with FakeLLM() as fake:
        assert probe_chat(_settings(tmp_path, fake.base_url), []) is None and fake.count == 0


def test_an_endpoint_answering_404_on_chat_stops_the_run_before_01(tmp_path, tiny_pdf):
    """Issue 35 item 8: /models answered 200, chat 404; the reachability check passed and every call fell back."""
    from fakellm import FakeLLM

    with FakeLLM(rule=lambda n, body: {"status": 404, "message": "no such route"}) as fake:
        t0 = __import__("time").monotonic()
        r = run(tiny_pdf, tmp_path / "res", env_extra={"OPENAI_BASE_URL": fake.base_url})
        took = __import__("time").monotonic() - t0
        sent = [body for _, path, body in fake.requests if path.endswith("/chat/completions")]
    assert r.returncode == chain.EXIT_PREFLIGHT, r.stderr[-2000:]
    assert "HTTP 404" in r.stderr and "/v1 root" in r.stderr and 'P="allow_fallback=true"' in r.stderr
    assert SENTINEL not in r.stdout + r.stderr
    assert executed(tmp_path / "res", "tiny-pdf") == []  # stopped before 01
    assert len(sent) == 1 and sent[0]["max_tokens"] == 1  # one tiny request: 404 is not retried
    assert took < 60, took
