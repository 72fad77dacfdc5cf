"""Issue 19, the LLM calls: the red team's inputs for secrets, the reply cache, replies that are not chat
completions, partial fallbacks and a silent slow endpoint, each as a fixture that failed before the fix.

The target test (:func:`test_no_canary_on_disk_after_rerank_ask_and_reformulate`) runs the rerank stage,
ask and the query rewriter against the fake server with a canary API key and a canary URL password that
the server echoes back, then greps every file under the results and the cache folders for both.
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pandas as pd
import pytest

from builders import hand_made_stages
from fakellm import FakeLLM, make_inputs
from rerank_data import run_cached, stage03
from rerankeval import rerank
from rerankeval.apps import ask
from rerankeval.apps.ask.answers import Asker
from rerankeval.apps.ask.inputs import Passage, Question
from rerankeval.core import progress
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import resolve_dataset
from rerankeval.core.settings import Settings, load_settings
from rerankeval.llm.breaker import BREAKER_THRESHOLD
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.client import LLMCallError, LLMClient
from rerankeval.llm.scrub import endpoint_identity, redact_frame, redact_tree
from rerankeval.rerank import core, ledger
from rerankeval.rerank.config import Params
from rerankeval.rerank.reranker import Reranker
from rerankeval.retrieve import reformulate

pytestmark = pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")

QIDS = ["q1", "q2", "q3"]
UNITS = [f"m.pdf#p{p}" for p in range(1, 5)]
POOL_K = 3


def _dataset(root: Path):
    """Stage 01-03 outputs by hand: one chunk per page, three judged queries, a hybrid run."""
    return hand_made_stages(
        root / "ds", {u: [f"page {i + 1} text" + (" GOLD" if i == 1 else "")] for i, u in enumerate(UNITS)}, QIDS
    )


def _settings(url: str, **kw) -> Settings:
    return Settings(base_url=url, **{"api_key": "k", "model": "fake", "timeout": 2, "max_retries": 0, **kw})


def _rerank(
    url: str,
    cache: LLMCache,
    mode: str = "listwise",
    n_queries: int = 2,
    progress_: bool = False,
    endpoint_id: str | None = None,
    pool_k: int = 5,
    window: int = 5,
):
    """Stage 04 (``rerank.run``) on a hand-made hybrid run, with ``cache``'s folder and ``use_cache``."""
    fused, queries, texts = make_inputs(n_queries=n_queries, n_docs=max(6, pool_k + 2), gold=(2,))
    dp = stage03(cache.root.parent / f"ds-{n_queries}", fused, queries, texts)
    params = Params(mode=mode, alpha=1.0, window=window, step=window, pool_k=pool_k)
    return run_cached(dp, params, _settings(url, endpoint_id=endpoint_id), cache, progress=progress_)


def _files_with(roots: list[Path], needles: list[str]) -> dict[str, list[str]]:
    """``file -> needles found in it`` for every file under ``roots`` (bytes, so nothing is skipped)."""
    found: dict[str, list[str]] = {}
    for root in roots:
        for p in sorted(root.rglob("*")) if root.exists() else []:
            if p.is_file():
                data = p.read_bytes()
                hits = [n for n in needles if n.encode() in data]
                if hits:
                    found[str(p)] = hits
    return found


# --------------------------------------------------------------------------- the target: no canary on disk
def test_no_canary_on_disk_after_rerank_ask_and_reformulate(tmp_path, monkeypatch):
    tag = uuid.uuid4().hex[:10]
    key, password = f"sk-canary-{tag}", f"pw-canary-{tag}"
    results, cache_root = tmp_path / "results", tmp_path / "cache"
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(results))
    monkeypatch.setenv("RERANKEVAL_CACHE", str(cache_root))
    dp = _dataset(tmp_path / "src")
    echo = f"my key is {key} and the password {password}"

    def rule(n, body):
        if body.get("response_format", {}).get("json_schema", {}).get("name") == "cited_answer":
            answer = {
                "answer": f"page 2 says so; {echo}",
                "citations": [{"label": "m.pdf p.2", "quote": "page 2"}],
                "not_in_documents": False,
            }
            return {"content": json.dumps(answer)}
        if "rewrite search queries" in json.dumps(body):
            return {"content": json.dumps({"query": f"page two {echo}"})}
        return {"echo": echo}

    with FakeLLM(rule=rule) as fake:
        url = fake.base_url
        monkeypatch.setenv("OPENAI_BASE_URL", url.replace("http://", f"http://alice:{password}@"))
        monkeypatch.setenv("OPENAI_API_KEY", key)
        monkeypatch.setenv("RERANK_MODEL", "fake-reranker")
        settings = load_settings()
        # stage 04 (listwise and yes/no, so both reply kinds and the rates file are written)
        for mode in ("listwise", "yesno"):
            res = rerank.run(dp, Params(mode=mode, alpha=1.0, pool_k=POOL_K, yesno_json=True), settings, progress=False)
            rerank.write(dp, res)
            assert set(res.ledger.status) == {"ok"}, res.ledger.to_dict("records")
        # stage 07
        answered = ask.run(dp, ask.Params(k=2), settings, progress=False)
        ask.write(dp, answered)
        assert {a.status for a in answered.answers} == {"ok"}
        # stage 03's rewriter
        with reformulate.open_rewriter(settings, LLMCache.under(dp.roots.cache)) as (rewriter, problem):
            assert not problem
            rewrite = rewriter.rewrite("question q1")
        assert rewrite[0] and rewrite[2] == ""
        row = {"qid": "q1", "query": "question q1", "status": reformulate.KEPT, "rewrite": rewrite[0]}
        reformulate.write_ledger(dp, pd.DataFrame([row]).reindex(columns=reformulate.LEDGER_COLUMNS))
        assert fake.count > 0
    written = [p for p in (cache_root / "llm").rglob("*.json")]
    assert written and (cache_root / "llm.rates.json").exists(), "the run cached nothing: the check proves nothing"
    assert list(results.rglob("answers.jsonl")) and list(results.rglob("*ledger*.csv"))
    assert _files_with([results, cache_root, tmp_path / "src"], [key, password]) == {}
    # the cache identity keeps the host, without the password
    rates = json.loads((cache_root / "llm.rates.json").read_text())
    assert any(k.startswith(f"{url}|") for k in rates), rates


# --------------------------------------------------------------------------- bug 6: an echoed key
def test_an_echoed_key_is_redacted_in_answers_jsonl_and_the_cache(tmp_path):
    key = f"canary-{uuid.uuid4().hex}"  # no well-known key shape: only knowing the configured key catches it
    body = {
        "answer": f"the key is {key}",
        "citations": [{"label": "a p.1", "quote": f"key {key}"}],
        "not_in_documents": False,
    }
    passages = [Passage("a p.1", "a#p1", f"the key {key} is here")]
    with FakeLLM(rule=lambda n, b: {"content": json.dumps(body)}) as fake:
        with Asker(_settings(fake.base_url, api_key=key), ask.Params(), LLMCache(tmp_path / "llm")) as asker:
            got = asker.ask(Question("what is the key"), passages, {})
    res = ask.Result([got], "hybrid", 1, [], "fake", "127.0.0.1", {}, asker.stats)
    (tmp_path / "ds").mkdir()
    written = ask.write(resolve_dataset(str(tmp_path / "ds"), load_settings()), res)
    assert key not in got.answer and "[REDACTED]" in got.answer  # the one cached call redacts it before reading
    text = written["answers"].read_text()
    assert key not in text and "[REDACTED]" in text
    assert _files_with([tmp_path / "llm"], [key]) == {}


def test_redact_tree_and_frame_keep_shape_and_types():
    key = f"canary-{uuid.uuid4().hex}"
    Settings(api_key=key)  # a Settings built in code: its key is known to redact()
    tree = {"a": [f"x {key}", 1, None, (key, 2.5)], "b": {"c": "clean\ntext", "d": True}, key: "keys are kept"}
    out = redact_tree(tree)
    assert out == {
        "a": ["x [REDACTED]", 1, None, ("[REDACTED]", 2.5)],
        "b": {"c": "clean\ntext", "d": True},
        key: "keys are kept",
    }
    df = pd.DataFrame({"qid": ["1", "2"], "error": [f"bad {key}", ""], "n": [1, 2]})
    clean = redact_frame(df)
    assert list(clean.error) == ["bad [REDACTED]", ""] and list(clean.n) == [1, 2] and df.error[0].endswith(key)


# --------------------------------------------------------------------------- bug 7: a password in the URL
def test_a_url_password_is_in_no_cache_file_and_no_rates_key(tmp_path):
    password = f"pw-{uuid.uuid4().hex}"
    with FakeLLM() as fake:
        url = fake.base_url.replace("http://", f"http://alice:{password}@")
        first = _rerank(url, LLMCache(tmp_path / "llm"))
        n = fake.count
        # the same endpoint without the password is the same cache identity: no new request
        second = _rerank(fake.base_url, LLMCache(tmp_path / "llm"))
        assert fake.count == n
    assert set(first.ledger.status) == set(second.ledger.status) == {"ok"}
    assert (tmp_path / "llm.rates.json").exists()
    assert _files_with([tmp_path], [password, "alice"]) == {}


def test_the_identity_of_a_url_without_credentials_is_unchanged():
    """Cache keys of endpoints without a credential are what they were before (the raw base URL)."""
    for url in ("http://127.0.0.1:8080/v1", "https://api.openai.com/v1/", "https://h.test/v1?api-version=2024-06-01"):
        s = Settings(base_url=url, api_key="test-key-not-a-secret-0001")
        assert endpoint_identity(s) == s.cache_endpoint
    s = Settings(base_url="https://h.test/v1?api-key=SECRET1234&api-version=1", api_key="x")
    assert "SECRET1234" not in endpoint_identity(s) and "api-version=1" in endpoint_identity(s)
    s = Settings(base_url="http://u:p4ssw0rd@h.test/v1", endpoint_id="http://u:p4ssw0rd@h.test/v1")
    assert endpoint_identity(s) == "http://h.test/v1"


def test_an_old_rates_key_with_a_password_is_dropped(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    cache.rates_path.write_text(
        json.dumps({"http://alice:pw-OLD-secret@h/v1|m": {"s_per_token": 0.1}, "http://h/v1|m": {"s_per_token": 0.2}})
    )
    cache.record_rate("http://h2/v1", "m", 0.3)
    rates = json.loads(cache.rates_path.read_text())
    assert rates == {"http://h/v1|m": {"s_per_token": 0.2}, "http://h2/v1|m": {"s_per_token": 0.3}}


# --------------------------------------------------------------------------- bug 8: unusable replies cached
def test_an_unusable_reply_is_not_cached_so_fixing_the_endpoint_helps(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM(rule=lambda n, b: {"content": "Sure! Passage 3 is the best."}) as broken:
        bad = _rerank(broken.base_url, cache, endpoint_id="my-endpoint")
    assert set(bad.ledger.status) == {"fallback"} and set(bad.ledger.error) == {"InvalidJSON"}
    assert not list((tmp_path / "llm").rglob("*.json"))
    with FakeLLM() as fixed:
        good = _rerank(fixed.base_url, cache, endpoint_id="my-endpoint")  # the same endpoint, fixed
        assert fixed.count > 0
    assert set(good.ledger.status) == {"ok"}


def _poison(cache: LLMCache, url: str, mode: str = "listwise") -> int:
    """Entries as an older version wrote them: the keys of this run's calls, with an unusable reply."""
    fused, queries, texts = make_inputs(n_queries=2, n_docs=6, gold=(2,))
    config = Params(mode=mode, alpha=1.0, window=5, step=5).config()
    pools = core.build_pools(fused, texts, sorted(fused), 5)
    n = 0
    with Reranker(config, _settings(url), cache=cache) as rr:
        for q, pool in pools.items():
            for spec in rr.calls.specs(queries[q], pool, [c.text for c in pool]):
                for attempt in range(config.content_retries + 1):
                    base = rr.calls.material(spec, queries[q])
                    key = cache.key(base if attempt == 0 else {**base, "attempt": attempt})
                    atomic_write_json(
                        cache.path(key),
                        {
                            "key": key,
                            "material": base,
                            "reply": {
                                "content": "I cannot rank these.",
                                "logprobs": None,
                                "prompt_tokens": 5,
                                "completion_tokens": 3,
                                "finish_reason": "stop",
                                "response_format": "json_schema",
                                "latency_s": 0.1,
                            },
                        },
                    )
                    n += 1
    return n


def test_a_cached_unusable_reply_is_asked_again_and_replaced(tmp_path):
    with FakeLLM() as f:
        assert _poison(LLMCache(tmp_path / "llm"), f.base_url) == 4
        first = _rerank(f.base_url, LLMCache(tmp_path / "llm"))
        sent = f.count
        second = _rerank(f.base_url, LLMCache(tmp_path / "llm"))
        assert f.count == sent == 2  # the first run asked again; the second is served by the fresh replies
    assert set(first.ledger.status) == set(second.ledger.status) == {"ok"}
    assert set(first.ledger.error) == {"CachedUnusable"} and set(second.ledger.error) == {""}
    assert ledger.summarize(second.ledger)["cache_hits"] == 2


def test_use_cache_false_refreshes_the_cache(tmp_path):
    with FakeLLM() as f:
        _poison(LLMCache(tmp_path / "llm"), f.base_url)
        fresh = _rerank(f.base_url, LLMCache(tmp_path / "llm", enabled=False))
        sent = f.count
        again = _rerank(f.base_url, LLMCache(tmp_path / "llm"))
        assert f.count == sent  # the refreshed replies serve the next normal run
    assert set(fresh.ledger.status) == set(again.ledger.status) == {"ok"}
    assert set(again.ledger.error) == {""} and ledger.summarize(again.ledger)["requests"] == 0


def test_ask_does_not_cache_an_unusable_reply_and_replaces_a_cached_one(tmp_path):
    q, passages = Question("where"), [Passage("a p.1", "a#p1", "alpha")]
    good = {"content": json.dumps({"answer": "alpha", "citations": [], "not_in_documents": False})}
    with FakeLLM(rule=lambda n, b: {"content": '{"relevant": "no"}'}) as f:
        with Asker(_settings(f.base_url), ask.Params(content_retries=0), LLMCache(tmp_path / "llm")) as asker:
            assert asker.ask(q, passages, {}).status == "failed"
            key = asker.cache.key(asker.material(q.text, passages, asker.max_tokens))
            assert asker.cache.get(key) is None  # kept only as a failure record (issue 35 item 3), never as good
    with FakeLLM(rule=lambda n, b: good) as f:  # retry_failed asks again; the good reply replaces the record
        params = ask.Params(content_retries=0, retry_failed=True)
        with Asker(_settings(f.base_url), params, LLMCache(tmp_path / "llm")) as asker:
            key = asker.cache.key(asker.material(q.text, passages, asker.max_tokens))
            atomic_write_json(asker.cache.path(key), {"key": key, "reply": {"content": "prose, no JSON"}})
            a = asker.ask(q, passages, {})
            assert (a.status, a.answer, a.cached, f.count) == ("ok", "alpha", False, 1)
            assert asker.ask(q, passages, {}).cached and f.count == 1


def test_reformulate_does_not_serve_a_cached_unusable_rewrite(tmp_path):
    with FakeLLM(rule=lambda n, b: {"content": json.dumps({"query": "the rewrite"})}) as f:
        with reformulate.open_rewriter(_settings(f.base_url), LLMCache(tmp_path)) as (rw, _):
            key = rw.cache.key(rw.material("q text"))
            atomic_write_json(rw.cache.path(key), {"key": key, "reply": {"content": "not json"}})
            assert rw.rewrite("q text") == ("the rewrite", False, "")
            assert rw.rewrite("q text") == ("the rewrite", True, "") and f.count == 1


def test_the_end_of_run_message_names_the_cause_not_the_endpoint(tmp_path, capsys):
    with FakeLLM(rule=lambda n, b: {"content": "Passage 3."}) as f:
        res = _rerank(f.base_url, LLMCache(tmp_path / "llm"), progress_=True)
    out = capsys.readouterr().out
    assert "Fallback: 2 of 2 queries fell back" in out and "replies could not be used (InvalidJSON" in out
    assert "OPENAI_BASE_URL" not in out
    cause = ledger.fallback_cause(res.ledger)
    assert cause is not None and not cause.endpoint and not cause.cached
    # a ledger of replies served from the cache alone (what an older version did): the cache is named
    cached = res.ledger.assign(requests=0, cache_hits=res.ledger.llm_calls)
    cause = ledger.fallback_cause(cached)
    assert cause.cached and "the cached replies, not the endpoint, caused it" in cause.text
    assert "use_cache=false" in cause.text
    down = res.ledger.assign(error="APIConnectionError")
    assert ledger.fallback_cause(down).endpoint and "OPENAI_BASE_URL" in ledger.fallback_cause(down).text
    assert ledger.fallback_cause(res.ledger.assign(status="ok")) is None


# --------------------------------------------------------------------------- weak: a 200 that is no completion
NOT_CHAT = [
    {"body": "<html><head><title>Welcome to nginx!</title></head></html>"},
    {
        "body": 'data: {"choices": [{"delta": {"content": "yes"}}]}\n\ndata: [DONE]\n\n',
        "content_type": "text/event-stream",
    },
    {"json": {"status": "ok", "result": "yes"}},
    {"json": {"choices": [{"text": "yes"}]}},
]


@pytest.mark.parametrize("action", NOT_CHAT, ids=["html", "sse", "wrong-shape", "completions-api"])
def test_a_200_that_is_not_a_chat_completion_is_a_clear_failure(tmp_path, action):
    with FakeLLM(rule=lambda n, b: action) as f:
        url = f.base_url
        with LLMClient(_settings(url)) as client, pytest.raises(LLMCallError) as err:
            client.chat([{"role": "user", "content": "hi"}], response_format=None, max_tokens=1)
        res = _rerank(url, LLMCache(tmp_path / "llm"), n_queries=1, progress_=False)
    msg = str(err.value)
    assert err.value.error_class == "NotChatCompletion"
    assert f"the endpoint at {url} answered HTTP 200 but not with an OpenAI chat completion" in msg
    head = (action.get("body") or json.dumps(action["json"]))[:5]
    assert f"(body starts '{head}" in msg and "is OPENAI_BASE_URL the /v1 root" in msg
    row = res.ledger.iloc[0]
    assert (row.status, row.error, row.n_failed) == ("fallback", "NotChatCompletion", 1)
    assert "not with an OpenAI chat completion" in res.fallback_cause and ledger.fallback_cause(res.ledger).endpoint


def test_ask_reports_a_200_that_is_not_a_chat_completion(tmp_path):
    with FakeLLM(rule=lambda n, b: NOT_CHAT[0]) as f:
        with Asker(_settings(f.base_url), ask.Params(), LLMCache(tmp_path / "llm")) as asker:
            a = asker.ask(Question("where"), [Passage("a p.1", "a#p1", "alpha")], {})
    assert a.status == "failed" and a.error.startswith("NotChatCompletion: the endpoint at")
    assert "body starts '<html" in a.error


def test_a_non_chat_endpoint_trips_the_breaker(tmp_path):
    with FakeLLM(rule=lambda n, b: NOT_CHAT[0]) as f:
        res = _rerank(f.base_url, LLMCache(tmp_path / "llm"), mode="yesno", n_queries=3)
        assert f.count == BREAKER_THRESHOLD < 3 * 5
    assert set(res.ledger.status) == {"fallback"} and res.ledger.n_failed.sum() == 15


# --------------------------------------------------------------------------- weak: partial fallbacks
def test_a_query_with_failed_calls_is_a_partial_fallback_in_the_rate(tmp_path):
    # listwise, 6 candidates in windows of 3: the second call of the query fails, the first is used
    script = [None, {"status": 400, "message": "no"}]
    with FakeLLM(script=script) as f:
        res = _rerank(f.base_url, LLMCache(tmp_path / "llm"), n_queries=1, pool_k=6, window=3)
    row = res.ledger.iloc[0]
    assert (row.status, row.n_failed) == ("partial_fallback", 1)
    assert ledger.summarize(res.ledger)["fallback_rate"] == 1.0
    assert ledger.ledger_summary(res.ledger).fallback_rate.iloc[0] == 1.0
    assert ledger.fallback_queries(res.ledger) == {"q0000"}
    assert "1 of 1 queries fell back to the fused order (1 of them partly)" in res.fallback_cause


# --------------------------------------------------------------------------- weak: a slow endpoint is not silent
class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_heartbeat_says_what_it_waits_for_at_a_bounded_interval(monkeypatch):
    monkeypatch.delenv(progress.STAGE_ENV, raising=False)
    clock, out = Clock(), io.StringIO()
    hb = progress.Heartbeat(total=10, interval=60, file=out, mode="plain", clock=clock)
    assert hb.beat() is None  # nothing in flight
    with hb.waiting("query q1"):
        pass
    with hb.waiting("query q2"):
        with hb.waiting("query q3"):
            for t, due in ((30, False), (61, True), (90, False), (125, True), (150, False), (185, True)):
                clock.t = 1000.0 + t
                assert (hb.beat() is not None) == due, t
    lines = out.getvalue().splitlines()
    assert lines == [
        "waiting for the endpoint: 61 s on call 2 of 10 (query q2, 1 more in flight)",
        "waiting for the endpoint: 125 s on call 2 of 10 (query q2, 1 more in flight)",
        "waiting for the endpoint: 185 s on call 2 of 10 (query q2, 1 more in flight)",
    ]
    clock.t += 1000
    assert hb.beat() is None  # the calls are done: silence is fine
    assert progress.Heartbeat(mode="off", clock=clock).beat() is None


def test_the_reranker_marks_each_call_for_the_heartbeat(tmp_path, monkeypatch):
    """While the fake server holds a request, the heartbeat (its clock moved on) names the waiting call."""
    monkeypatch.delenv(progress.STAGE_ENV, raising=False)
    clock, out = Clock(), io.StringIO()
    hb = progress.Heartbeat(total=5, interval=60, file=out, mode="plain", clock=clock)
    seen: list[str | None] = []

    def rule(n, body):
        clock.t += 120  # the endpoint takes two minutes (on the injected clock)
        seen.append(hb.beat())
        return None

    fused, queries, texts = make_inputs(n_queries=1, n_docs=6, gold=(2,))
    pool = core.build_pools(fused, texts, ["q0000"], 5)["q0000"]
    with FakeLLM(rule=rule) as f:
        with Reranker(
            Params(mode="yesno", yesno_json=True).config(), _settings(f.base_url), cache=LLMCache(tmp_path / "llm")
        ) as rr:
            rr.heartbeat = hb
            res = rr.rerank_query("q0000", queries["q0000"], pool)
    assert res.row["status"] == "ok" and len(seen) == 5
    assert seen[0] == "waiting for the endpoint: 120 s on call 1 of 5 (query q0000)"
    assert seen[-1] == "waiting for the endpoint: 120 s on call 5 of 5 (query q0000)"
    assert out.getvalue().count("waiting for the endpoint") == 5


def test_ask_marks_each_answer_for_the_heartbeat(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.STAGE_ENV, raising=False)
    clock = Clock()
    hb = progress.Heartbeat(total=1, unit="answer", interval=60, file=io.StringIO(), mode="plain", clock=clock)
    seen: list[str | None] = []
    good = {"content": json.dumps({"answer": "alpha", "citations": [], "not_in_documents": False})}

    def rule(n, body):
        clock.t += 61
        seen.append(hb.beat())
        return good

    with FakeLLM(rule=rule) as f:
        with Asker(_settings(f.base_url), ask.Params(), LLMCache(tmp_path / "llm")) as asker:
            asker.heartbeat = hb
            asker.ask(Question("where", "t1"), [Passage("a p.1", "a#p1", "alpha")], {})
    assert seen == ["waiting for the endpoint: 61 s on answer 1 of 1 (question t1)"]


def test_a_re_ask_past_the_planned_total_is_not_counted_as_answer_6_of_5(monkeypatch):
    monkeypatch.delenv(progress.STAGE_ENV, raising=False)
    clock = Clock()
    hb = progress.Heartbeat(total=2, unit="answer", interval=60, file=io.StringIO(), mode="plain", clock=clock)
    with hb.waiting("question a"):
        pass
    with hb.waiting("question a", again=True):  # the same answer asked again after an unusable reply keeps its number
        clock.t = 1061.0
        assert hb.beat() == "waiting for the endpoint: 61 s on answer 1 of 2 (question a, asked again)"
    with hb.waiting("question b"):  # the next question is answer 2, not 3
        clock.t = 2122.0
        assert hb.beat().endswith("s on answer 2 of 2 (question b)")
    with hb.waiting("question b"), hb.waiting("question b"):  # calls past the total are said to be beyond it
        clock.t = 3183.0
        assert "answer 3, a re-ask beyond the 2 planned" in hb.beat()
