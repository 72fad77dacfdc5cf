"""Plans that are right (issue 35 item 3, issue 36 item 2): the printed time counts completion tokens at the generation
rate, is a range while no rate is known, is revised once after the first calls, and comes from a probe of the local
server on a fresh machine; failures a stage keeps are not asked again, and a repaired answer (07) is warm."""

from __future__ import annotations

import json
import re
import time

import pytest

from builders import Console
from fakellm import FakeLLM
from rerankeval.apps.ask.answers import Asker
from rerankeval.apps.ask.inputs import Passage, Question
from rerankeval.apps.ask.params import Params as AskParams
from rerankeval.core import progress
from rerankeval.core.settings import Settings
from rerankeval.llm import budget, rates
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import CachedLLM, Call, CallStats, kept_note
from rerankeval.llm.client import LLMClient, Reply
from rerankeval.llm.repair import Unusable

pytestmark = pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
RANGE = re.compile(r"expected time ([\d,]+)-([\d,]+) s")
REVISED = re.compile(r"revised: ~([\d,]+) s \(measured (.*) after (\d+) calls; planned (.*)\)")


@pytest.fixture
def console(monkeypatch) -> Console:
    c = Console()
    monkeypatch.setattr(progress, "terminal", lambda: c)
    monkeypatch.setenv(progress.MODE_ENV, "plain")
    return c


def _settings(fake: FakeLLM, **kw) -> Settings:
    return Settings(base_url=fake.base_url, api_key="k", model="fake", timeout=5, max_retries=0, **kw)


def _question(i: int) -> Call:
    text = f"Question {i}: is passage {i} about pumps? Passage {i}: " + "the pump is started with the red switch " * 5
    return Call([{"role": "user", "content": text}], {"task": "plan-test", "i": i}, 8)


def _yes(reply: Reply) -> str:
    return reply.content


def _stage(fake: FakeLLM, cache: LLMCache, n: int, **settings) -> tuple[budget.Plan, float]:
    """A stage as every LLM stage runs one: its plan (hits, tokens, the endpoint's rates), the plan announced,
    then its ``n`` calls through the one cached call; (the plan, the seconds the calls took)."""
    llm = CachedLLM.open(_settings(fake, **settings), cache)
    try:
        calls = [_question(i) for i in range(n)]
        hits = [llm.cache.get(llm.cache.key(c.material)) is not None for c in calls]
        estimates = [budget.call_estimate(hit, c.prompt, "", c.max_tokens) for hit, c in zip(hits, calls, strict=True)]
        known, source = llm.measured_rate()
        plan = budget.plan(
            [(f"q{i}", "main", [e]) for i, e in enumerate(estimates)],
            price=(0.0, 0.0),
            max_calls=0,
            max_cost=0.0,
            s_per_token=known,
            rate_source=source,
        )
        budget.announce(plan, (0.0, 0.0), fake.base_url, stage="test")
        t0 = time.perf_counter()
        stats = CallStats()
        for c in calls:
            assert llm.call(c, _yes, stats).ok
        return plan, time.perf_counter() - t0
    finally:
        llm.close()


def _number(text: str) -> float:
    return float(text.replace(",", ""))


# -- the first plan ----------------------------------------------------------------------------------------
def test_the_time_counts_completion_tokens_at_the_generation_rate():
    tasks = [
        (
            "q1",
            "main",
            [budget.CallEstimate(hit=False, prompt_tokens=400, processed_tokens=300, completion_tokens=20)] * 3,
        )
    ]
    known = rates.Rates(prompt_s=1 / 100, gen_s=1 / 10, call_s=0.05, calls=7, origin="the last run")
    p = budget.plan(tasks, price=(0.0, 0.0), max_calls=0, max_cost=0.0, s_per_token=known, rate_source="")
    assert p.expected_s == pytest.approx(900 / 100 + 60 / 10 + 3 * 0.05)  # generation is not left out
    assert p.expected_low_s is None and "~15 s" in p.message(priced=False)
    assert "100 prompt tok/s, 10 gen tok/s" in p.rate_source and "up to ~60 completion tokens" in p.message(False)


@pytest.mark.parametrize("local", [True, False])
def test_no_known_rate_gives_a_range_never_one_assumed_figure(local):
    tasks = [
        (
            "q1",
            "main",
            [budget.CallEstimate(hit=False, prompt_tokens=400, processed_tokens=300, completion_tokens=20)] * 3,
        )
    ]
    p = budget.plan(tasks, price=(0.0, 0.0), max_calls=0, max_cost=0.0, s_per_token=rates.Rates(local=local))
    (plo, phi), (glo, ghi) = rates.UNKNOWN_LOCAL if local else rates.UNKNOWN_REMOTE
    assert p.expected_low_s == pytest.approx(900 / phi + 60 / ghi)
    assert p.expected_high_s == pytest.approx(900 / plo + 60 / glo)
    text = p.message(priced=False)
    assert RANGE.search(text) and "assumed" not in text and "no rate measured yet" in text


def test_a_fresh_remote_endpoint_prints_a_range_then_the_revised_time_once(tmp_path, console):
    delay, n = 0.1, 20  # a fake whose every answer takes ``delay`` s
    with FakeLLM(rule=lambda i, body: {"delay": delay}) as fake:
        plan, wall = _stage(fake, LLMCache(tmp_path / "llm"), n)
        assert fake.count == n
    lines = [line for _, line in console.lines if "Plan:" in line]
    assert len(lines) == 1 and RANGE.search(lines[0]) and "assumed" not in lines[0]
    revised = [line for _, line in console.lines if "revised:" in line]
    assert len(revised) == 1, console.lines  # once, not per call
    m = REVISED.search(revised[0])
    assert m and int(m.group(3)) == 2 and m.group(4) == plan.eta()  # a tenth of 20 calls
    seconds = _number(m.group(1))
    assert n * delay <= seconds <= 1.5 * wall  # at least the injected latency; within 1.5x of the calls' time
    assert console.first("revised:") > console.first("Plan:")


def test_the_next_run_plans_with_the_rates_this_one_measured(tmp_path, console):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM(rule=lambda i, body: {"delay": 0.05}) as fake:
        _stage(fake, cache, 10)
        second, _ = _stage(fake, cache, 20)  # ten more calls to send
    record = next(iter(json.loads(cache.rates_path.read_text()).values()))
    assert record["calls"] >= 10 and sum(record.get(k, 0) for k in ("prompt_s", "gen_s", "call_s")) > 0
    assert second.expected_low_s is None and second.fresh_calls == 10 and second.cache_hits == 10
    assert "measured by the last run on this endpoint" in second.rate_source
    assert second.expected_s >= 0.5 * 10 * 0.05  # the delay is in the rates


# -- the probe of the local server -------------------------------------------------------------------------
def test_the_local_server_is_probed_before_the_plan_without_touching_the_reply_cache(tmp_path, console):
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM(rule=lambda i, body: {"delay": 0.05}) as fake:
        cold, _ = _stage(fake, cache, 20, endpoint_id="llama-server:fake-sha")
        probes = [b for _, _, b in fake.requests[:4]]
        assert fake.count == 4 + 20
        cache.rates_path.unlink()  # no rate known, but nothing to send: no probe
        fake.requests.clear()
        warm, _ = _stage(fake, cache, 20, endpoint_id="llama-server:fake-sha")
        assert fake.count == 0 and warm.fresh_calls == 0
    assert all(b["max_tokens"] <= 32 and "response_format" not in b for b in probes)
    assert "measured by a probe just now" in cold.rate_source and cold.expected_low_s is None
    assert len(list((tmp_path / "llm").rglob("*.json"))) == 20  # the probe's replies are not cached
    assert console.first("timing 4 tiny requests") < console.first("Plan:") < console.first("revised:")


def test_no_probe_when_a_budget_limit_is_set(tmp_path):
    with FakeLLM() as fake:
        client = LLMClient(_settings(fake))
        llm = CachedLLM(client, LLMCache(tmp_path), local=True, budget=budget.Budget(max_calls=3))
        assert llm.probe() == [] and llm.meter.probe is None and fake.count == 0
        assert len(CachedLLM(client, LLMCache(tmp_path), local=True).probe()) == 3 and fake.count == 4


# -- failures kept, and 07's repaired answers ---------------------------------------------------------------
def _call(max_tokens: int = 16) -> Call:
    return Call([{"role": "user", "content": "is it?"}], {"task": "t", "max_tokens": max_tokens}, max_tokens)


def _read(reply: Reply) -> str:
    try:
        return json.loads(reply.content)["answer"]
    except (ValueError, KeyError, TypeError):
        raise Unusable("InvalidJSON", "not the JSON asked for") from None


def _llm(fake: FakeLLM, cache: LLMCache, **kw) -> CachedLLM:
    return CachedLLM(LLMClient(_settings(fake)), cache, **kw)


def _reask(call: Call, reply: Reply) -> Call:
    return _call(call.max_tokens * 2)


def test_a_kept_failure_is_not_asked_again_and_retry_failed_asks_it(tmp_path):
    cache = LLMCache(tmp_path)
    with FakeLLM(rule=lambda i, body: {"content": "prose, not JSON"}) as fake:
        cold_stats, warm_stats, retry_stats = CallStats(), CallStats(), CallStats()
        cold = _llm(fake, cache, keep_failures=True).call(_call(), _read, cold_stats, retries=1, reask=_reask)
        assert fake.count == 2 and not cold.ok and cold.errors == ["InvalidJSON"] * 2
        material = _call().material  # what a plan counts as a hit: a kept failure, not one asked again
        assert _llm(fake, cache, keep_failures=True).cached(material)
        assert not _llm(fake, cache).cached(material) and not _llm(fake, cache, retry_failed=True).cached(material)
        warm = _llm(fake, cache, keep_failures=True).call(_call(), _read, warm_stats, retries=1, reask=_reask)
        assert fake.count == 2  # 0 requests: the same prompt at temperature 0 fails the same way
        retry = _llm(fake, cache, retry_failed=True).call(_call(), _read, retry_stats, retries=1, reask=_reask)
        assert fake.count == 4
    assert (warm.ok, warm.kept, warm.cached, warm.errors, warm.reply.content) == (
        False,
        True,
        True,
        ["InvalidJSON"] * 2,
        cold.reply.content,
    )
    assert (warm_stats.requests, warm_stats.cache_hits, warm_stats.kept_failures, warm_stats.failed) == (0, 1, 1, 1)
    assert "retry_failed=true" in kept_note(warm_stats) and kept_note(cold_stats) is None
    assert not retry.kept and retry_stats.requests == 2
    outcome = cache.get_outcome(LLMCache.key(_call().material))
    assert outcome is not None and outcome[1]["count"] == 2 and outcome[1]["error"] == "InvalidJSON"
    assert cache.get(LLMCache.key(_call().material)) is None  # a record is never served as a good reply


def test_without_keep_failures_a_failure_is_asked_again_and_not_recorded(tmp_path):
    with FakeLLM(rule=lambda i, body: {"content": "prose"}) as fake:
        for _ in range(2):
            _llm(fake, LLMCache(tmp_path)).call(_call(), _read, CallStats())
        assert fake.count == 2
    assert not list(tmp_path.rglob("*.json"))


def test_a_retried_failure_that_now_reads_replaces_its_record(tmp_path):
    cache = LLMCache(tmp_path)
    with FakeLLM(script=[{"content": "prose"}, {"content": json.dumps({"answer": "yes"})}]) as fake:
        _llm(fake, cache, keep_failures=True).call(_call(), _read, CallStats())
        got = _llm(fake, cache, retry_failed=True).call(_call(), _read, CallStats())
        again = _llm(fake, cache, keep_failures=True).call(_call(), _read, CallStats())
        assert fake.count == 2
    assert got.ok and again.ok and again.cached and again.value == "yes"


def test_a_repaired_answer_is_served_from_the_cache_on_the_second_run(tmp_path):
    """07's dm-060: an answer in prose (never the JSON asked for) is salvaged; with failures kept (Asker's
    CachedLLM, see the report), the second run repairs the recorded reply again without a request."""
    passages = [Passage("a p.1", "a#p1", "the pump is started with the red switch")]
    prose = "The pump is started with the red switch [a p.1]."
    got = []
    with FakeLLM(rule=lambda i, body: {"content": prose}) as fake:
        for _ in range(2):
            with Asker(_settings(fake), AskParams(), LLMCache(tmp_path / "llm")) as asker:
                asker.llm.keep_failures = True
                got.append(
                    (asker.ask(Question("how is the pump started", "q1"), passages, {}), fake.count, asker.stats)
                )
    (first, n1, _), (second, n2, stats) = got
    assert first.status == second.status == "repaired" and n1 == 2 and n2 == n1  # 0 requests the second time
    assert second.answer == first.answer and second.citations == first.citations and second.cached
    assert stats.requests == 0 and stats.cache_hits == 1


def test_a_recorded_reply_that_a_newer_reader_reads_is_served_and_cached_as_good(tmp_path):
    cache = LLMCache(tmp_path)
    with FakeLLM(rule=lambda i, body: {"content": "yes, it is"}) as fake:
        _llm(fake, cache, keep_failures=True).call(_call(), _read, CallStats())
        stats = CallStats()
        got = _llm(fake, cache, keep_failures=True).call(_call(), lambda r: r.content, stats)  # a lenient reader
        assert fake.count == 1
    assert (got.ok, got.value, stats.cache_hits, stats.requests) == (True, "yes, it is", 1, 0)
    assert cache.get(LLMCache.key(_call().material))["content"] == "yes, it is"


def _completion(timings: dict[str, float]) -> dict:
    """A llama-server chat completion: an OpenAI one plus the server's ``timings``."""
    return {
        "json": {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 11, "total_tokens": 131},
            "timings": timings,
        }
    }


def test_llama_server_timings_split_prompt_and_generation_and_a_one_token_run_keeps_the_generation_rate(tmp_path):
    cache = LLMCache(tmp_path / "llm")
    long = {"prompt_n": 100, "prompt_ms": 1000.0, "predicted_n": 11, "predicted_ms": 500.0}
    one = {"prompt_n": 50, "prompt_ms": 250.0, "predicted_n": 1, "predicted_ms": 0.001}  # a yes/no reply
    with FakeLLM(rule=lambda i, body: _completion(long if i < 3 else one)) as fake:
        llm = _llm(fake, cache, endpoint="e")
        for i in range(3):
            assert llm.call(Call([{"role": "user", "content": f"q{i}"}], {"i": i}, 16), _yes, CallStats()).ok
        first = llm.meter.finish()
        other = _llm(fake, cache, endpoint="e")
        for i in range(3, 6):
            assert other.call(Call([{"role": "user", "content": f"q{i}"}], {"i": i}, 1), _yes, CallStats()).ok
        second = other.meter.finish()
    assert llm.meter.samples[0].prompt_n == 100 and llm.meter.samples[0].gen_n == 10  # after the first token
    assert first.describe().startswith("100 prompt tok/s, 20 gen tok/s")
    assert second.gen_s == 0 and second.prompt_s == pytest.approx(1 / 200)  # 1-token replies time no generation
    kept, _ = other.measured_rate()
    assert kept.prompt_s == pytest.approx(1 / 200) and kept.gen_s == pytest.approx(1 / 20)  # the earlier one stays
