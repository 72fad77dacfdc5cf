"""Fault injection: every fault leaves a permutation of the pool and an honest ledger row."""

from __future__ import annotations

import socket
import time

import pytest

from fakellm import FakeLLM, make_inputs, no_json_schema
from rerank_data import rerank_made
from rerankeval.core.settings import Settings
from rerankeval.llm import server as llm_server
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.client import LLMCallError, LLMClient
from rerankeval.llm.repair import repair_order
from rerankeval.rerank.config import Params
from rerankeval.rerank.ledger import summarize

POOL = 5


def settings_for(url: str, **kw) -> Settings:
    base = {"api_key": "sk-" + "test-SECRET-123", "model": "fake-reranker", "timeout": 0.4, "max_retries": 1}
    return Settings(base_url=url, **{**base, **kw})


def run_one(tmp_path, fake_or_url, mode="listwise", n_queries=1, pool_k=POOL, **cfg):
    url = fake_or_url if isinstance(fake_or_url, str) else fake_or_url.base_url
    skw = {k: cfg.pop(k) for k in ("timeout", "max_retries") if k in cfg}
    fused, queries, texts = make_inputs(n_queries=n_queries, n_docs=8, gold=(3,))
    params = Params(mode=mode, alpha=1.0, window=POOL, step=POOL, pool_k=pool_k, **{"yesno_json": True, **cfg})
    res = rerank_made(
        tmp_path / "ds", fused, queries, texts, params, settings_for(url, **skw), LLMCache(tmp_path / "llm")
    )
    for q in fused:  # always a permutation of the fused list, pool first
        assert sorted(res.run[q]) == sorted(fused[q])
        assert set(list(res.run[q])[:pool_k]) == set(list(fused[q])[:pool_k])
        assert list(res.run[q])[pool_k:] == list(fused[q])[pool_k:]
    return res, res.ledger.iloc[0].to_dict(), list(res.run["q0000"])[:pool_k]


FUSED = ["d00", "d01", "d02", "d03", "d04"]
BEHAVED = ["d03", "d00", "d01", "d02", "d04"]  # the fake ranks GOLD (d03) first, then text order


def test_behaves(tmp_path):
    with FakeLLM() as f:
        _, row, order = run_one(tmp_path, f)
    assert row["status"] == "ok" and order == BEHAVED
    assert (row["n_invalid"], row["n_duplicate"], row["n_missing"], row["retries"]) == (0, 0, 0, 0)
    assert row["requests"] == 1 and row["llm_calls"] == 1 and row["response_format"] == "json_schema"


def test_timeout_then_ok(tmp_path):
    with FakeLLM(script=[{"delay": 1.0}]) as f:
        _, row, order = run_one(tmp_path, f, timeout=0.3)
    assert row["status"] == "ok" and row["retries"] == 1 and row["requests"] == 2 and order == BEHAVED


def test_timeout_always_falls_back(tmp_path):
    with FakeLLM(rule=lambda n, b: {"delay": 1.0}) as f:
        _, row, order = run_one(tmp_path, f, timeout=0.3)
    assert row["status"] == "fallback" and order == FUSED
    assert row["error"] == "APITimeoutError" and row["retries"] == 1 and row["n_failed"] == 1


def test_connection_refused(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, row, order = run_one(tmp_path, f"http://127.0.0.1:{port}/v1")
    assert row["status"] == "fallback" and order == FUSED
    assert row["error"] == "APIConnectionError" and row["retries"] == 1


def test_dropped_connection(tmp_path):
    with FakeLLM(rule=lambda n, b: {"drop": True}) as f:
        _, row, order = run_one(tmp_path, f)
    assert row["status"] == "fallback" and row["error"] == "APIConnectionError" and order == FUSED


def test_429_honours_retry_after(tmp_path):
    with FakeLLM(script=[{"status": 429, "headers": {"Retry-After": "1"}}]) as f:
        _, row, order = run_one(tmp_path, f)
        t = [ts for ts, p, _ in f.requests if p.endswith("/chat/completions")]
    assert row["status"] == "ok" and row["retries"] == 1 and order == BEHAVED
    # the client's own backoff would wait <= 0.5 s before the first retry: 1 s means Retry-After won
    assert 1.0 <= t[1] - t[0] < 3.0


def test_429_always(tmp_path):
    with FakeLLM(rule=lambda n, b: {"status": 429, "headers": {"retry-after-ms": "20"}}) as f:
        _, row, order = run_one(tmp_path, f)
    assert row["status"] == "fallback" and row["error"] == "RateLimitError" and row["requests"] == 2


def test_500_then_ok(tmp_path):
    with FakeLLM(script=[{"status": 500}]) as f:
        _, row, order = run_one(tmp_path, f)
    assert row["status"] == "ok" and row["retries"] == 1 and order == BEHAVED


def test_500_always(tmp_path):
    with FakeLLM(rule=lambda n, b: {"status": 500, "headers": {"retry-after-ms": "20"}}) as f:
        _, row, order = run_one(tmp_path, f, max_retries=2)
    assert row["status"] == "fallback" and row["error"] == "InternalServerError"
    assert row["retries"] == 2 and row["requests"] == 3 and order == FUSED


def _no_json_schema(n, body):
    if (body.get("response_format") or {}).get("type") == "json_schema":
        return {"status": 400, "message": "response_format type json_schema is not supported"}
    return None


def test_400_unsupported_response_format_downgrades(tmp_path):
    with FakeLLM(rule=_no_json_schema) as f:
        _, row, order = run_one(tmp_path, f)
        kinds = [(b.get("response_format") or {}).get("type") for _, p, b in f.requests if p.endswith("completions")]
    assert kinds == ["json_schema", "json_object"]
    assert row["status"] == "ok" and row["response_format"] == "json_object" and order == BEHAVED


@pytest.mark.parametrize("status", [500, 422, 400])
def test_unsupported_response_format_downgrades_once_whatever_the_status(tmp_path, status):
    # llama-cpp-python's server answers 500 "Input should be 'text' or 'json_object'": recognised by the
    # message, not retried, and the client stays on json_object for the later calls (one downgrade per run)
    with FakeLLM(rule=no_json_schema(status)) as f:
        res, _, order = run_one(tmp_path, f, n_queries=3, max_retries=2)
        kinds = [(b.get("response_format") or {}).get("type") for _, p, b in f.requests if p.endswith("completions")]
    assert kinds == ["json_schema", "json_object", "json_object", "json_object"]
    assert list(res.ledger["status"]) == ["ok"] * 3 and set(res.ledger["response_format"]) == {"json_object"}
    assert order == BEHAVED


def test_unreachable_endpoint_error_names_url_and_fix():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = settings_for(f"http://user:pw-SECRET-456@127.0.0.1:{port}/v1", max_retries=0)
    with LLMClient(settings) as client, pytest.raises(LLMCallError) as err:
        client.chat([{"role": "user", "content": "hi"}], response_format=None, max_tokens=1)
    msg = str(err.value)
    assert err.value.error_class == "APIConnectionError" and f"http://127.0.0.1:{port}/v1" in msg
    assert "OPENAI_BASE_URL" in msg and "SECRET" not in msg
    problem = llm_server.check_endpoint(settings)
    assert f"http://127.0.0.1:{port}/v1" in problem and "OPENAI_BASE_URL" in problem and "SECRET" not in problem


def test_check_endpoint(tmp_path):
    assert llm_server.check_endpoint(Settings()) is None  # nothing configured: the local server starts on demand
    with FakeLLM(key="sk-" + "right-key-0001") as f:
        assert llm_server.check_endpoint(settings_for(f.base_url, api_key="sk-" + "right-key-0001")) is None
        problem = llm_server.check_endpoint(settings_for(f.base_url, api_key="sk-" + "wrong-key-0002"))
    assert "OPENAI_API_KEY" in problem and "401" in problem and "wrong-key" not in problem


def test_400_always(tmp_path):
    with FakeLLM(rule=lambda n, b: {"status": 400, "message": "bad request"}) as f:
        _, row, order = run_one(tmp_path, f)
    assert row["status"] == "fallback" and row["error"] == "BadRequestError" and row["retries"] == 0
    assert f.count == 1 and order == FUSED


@pytest.mark.parametrize(
    "content, status, counts, error, order",
    [
        ("The most relevant passage is [4], then [1].", "fallback", (0, 0, 0), "InvalidJSON", FUSED),
        ('{"ranking": [4, 1, ', "repaired", (0, 0, 3), "", ["d03", "d01", "d02", "d00", "d04"]),
        ('{"ranking": [4, 1, 2', "repaired", (0, 0, 3), "", ["d03", "d01", "d02", "d00", "d04"]),
        ('{"order": [1, 2, 3, 4, 5]}', "fallback", (0, 0, 0), "WrongShape", FUSED),
        ('{"ranking": "4 > 1"}', "fallback", (0, 0, 0), "WrongShape", FUSED),
        (
            '{"ranking": [9, 4, 0, 1, 2, 3, 5]}',
            "repaired",
            (2, 0, 0),
            "",
            ["d03", "d00", "d01", "d02", "d04"],
        ),
        (
            '{"ranking": [4, 4, 1, 2, 3, 5, 1]}',
            "repaired",
            (0, 2, 0),
            "",
            ["d03", "d00", "d01", "d02", "d04"],
        ),
        ('{"ranking": []}', "fallback", (0, 0, 0), "EmptyRanking", FUSED),
        ('{"ranking": [5, 3]}', "repaired", (0, 0, 3), "", ["d00", "d01", "d04", "d03", "d02"]),
        ('```json\n{"ranking": [4, 1, 2, 3, 5]}\n```', "ok", (0, 0, 0), "", BEHAVED),
    ],
    ids=[
        "prose",
        "truncated",
        "truncated-mid-number",
        "wrong-shape",
        "wrong-type",
        "unknown-ids",
        "duplicate-ids",
        "empty-list",
        "partial-list",
        "fenced",
    ],
)
def test_bad_replies(tmp_path, content, status, counts, error, order):
    with FakeLLM(rule=lambda n, b: {"content": content}) as f:
        _, row, got = run_one(tmp_path, f)
        n_requests = f.count
    assert row["status"] == status
    assert (row["n_invalid"], row["n_duplicate"], row["n_missing"]) == counts
    assert row["error"] == error
    assert got == order
    # unusable replies (unreadable, or naming no passage) are asked again once (content_retries=1), others are not
    assert n_requests == (2 if error in ("InvalidJSON", "WrongShape", "EmptyRanking") else 1)


def test_partial_list_positions():
    # missing candidates go back to their fused positions, in fused order
    order, c = repair_order([3, 1], 5)
    assert order == [2, 1, 0, 3, 4] and c.n_missing == 3


def test_prose_then_valid_recovers(tmp_path):
    with FakeLLM(script=[{"content": "Sure! Here is the ranking."}]) as f:
        _, row, order = run_one(tmp_path, f)
    assert row["status"] == "ok" and row["retries"] == 1 and row["error"] == "InvalidJSON" and order == BEHAVED


# -- pointwise and yes/no --
def test_pointwise_batch_repairs(tmp_path):
    bad = {
        "scores": [
            {"id": 1, "score": 3},
            {"id": 1, "score": 9},
            {"id": 7, "score": 5},
            {"id": 2, "score": 11},
            {"id": 4, "score": 8},
        ]
    }
    with FakeLLM(rule=lambda n, b: bad) as f:
        _, row, order = run_one(tmp_path, f, mode="pointwise", batch_size=POOL)
    # id 1 kept once (dup), id 7 unknown and score 11 out of range (invalid); 2, 3, 5 missing
    assert row["status"] == "repaired" and (row["n_invalid"], row["n_duplicate"], row["n_missing"]) == (
        2,
        1,
        3,
    )
    assert order == ["d03", "d01", "d02", "d00", "d04"]


def test_pointwise_single_ok(tmp_path):
    with FakeLLM() as f:
        _, row, order = run_one(tmp_path, f, mode="pointwise")
    assert row["status"] == "ok" and row["llm_calls"] == POOL and order == BEHAVED


def test_yesno_logprobs_and_partial_failure(tmp_path):
    script = [None, {"status": 400, "message": "nope"}, None, None, None]
    with FakeLLM(script=script) as f:
        res, row, order = run_one(tmp_path, f, mode="yesno")
    # one call failed: its candidate kept its fused place, a partial fallback (counted in the fallback rate)
    assert row["status"] == "partial_fallback" and row["n_failed"] == 1 and row["error"] == "BadRequestError"
    assert summarize(res.ledger)["fallback_rate"] == 1.0
    assert order[0] == "d03"
    scores = res.candidates.set_index("docid")["llm_score"]
    assert scores["d03"] == pytest.approx(0.9) and scores["d00"] == pytest.approx(0.2)
    assert scores.isna().sum() == 1  # d01 was never scored, and kept its fused place
    assert order.index("d01") == 1


def test_yesno_without_logprobs_uses_answer(tmp_path):
    with FakeLLM(rule=lambda n, b: {"no_logprobs": True}) as f:
        res, row, order = run_one(tmp_path, f, mode="yesno")
    assert row["status"] == "ok" and order == BEHAVED
    assert sorted(res.candidates["llm_score"].tolist()) == [0.0, 0.0, 0.0, 0.0, 1.0]


def test_yesno_plain_mode(tmp_path):
    with FakeLLM() as f:
        _, row, order = run_one(tmp_path, f, mode="yesno", yesno_json=False)
        rf = [b.get("response_format") for _, p, b in f.requests if p.endswith("completions")]
    assert row["status"] == "ok" and order == BEHAVED and rf == [None] * POOL


def test_yesno_prose_everywhere_falls_back(tmp_path):
    with FakeLLM(rule=lambda n, b: {"content": "I cannot tell."}) as f:
        _, row, order = run_one(tmp_path, f, mode="yesno")
    assert row["status"] == "fallback" and row["n_failed"] == POOL and order == FUSED


def test_api_key_never_in_ledger(tmp_path):
    msg = "invalid key sk-test-SECRET-123"
    with FakeLLM(rule=lambda n, b: {"status": 401, "message": msg}) as f:
        res, row, _ = run_one(tmp_path, f)
    assert row["status"] == "fallback" and row["error"] == "AuthenticationError"
    assert "SECRET" not in res.ledger.to_csv()


def test_fast_enough(tmp_path):
    t0 = time.perf_counter()
    with FakeLLM() as f:
        run_one(tmp_path, f, n_queries=5)
    assert time.perf_counter() - t0 < 5
