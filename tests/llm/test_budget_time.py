"""Plans that are right (issue 35 item 3, issue 36 item 2): the printed time counts completion tokens at the generation
rate, is a range while no rate is known, is revised once after the first calls, and comes from a probe of the local
server on a fresh machine; failures a stage keeps are not asked again, and a repaired answer (07) is warm."""

from __future__ import annotations

import json
import re
import time

import pytest

from fakellm import FakeLLM
from rerankeval.apps.ask.answers import Asker
from rerankeval.apps.ask.inputs import Passage, Question
from rerankeval.apps.ask.params import Params as AskParams
from rerankeval.core.settings import Settings
from rerankeval.llm import budget, rates
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import CachedLLM, Call, CallStats, kept_note
from rerankeval.llm.client import LLMClient, Reply
from rerankeval.llm.repair import Unusable

pytestmark = pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
RANGE = re.compile(r"expected time ([\d,]+)-([\d,]+) s")
REVISED = re.compile(r"revised: ~([\d,]+) s \(measured (.*) after (\d+) calls; planned (.*)\)")


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
    assert m and int(m.group(3)) == rates.MIN_REVISE and m.group(4) == plan.eta()  # a tenth of 20 is too few
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
    assert all(b["max_tokens"] <= 32 for b in probes)
    assert [b.get("response_format", {}).get("type") for b in probes] == [None, None, None, "json_schema"]
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


# -- re-asks, replies' length and lost time (issue 35 item 3, the causes bench/plan_accuracy.py found) ----------
def test_re_asks_the_replies_may_need_widen_the_plan_to_a_range_from_none_to_all():
    known = rates.Rates(prompt_s=1 / 100, gen_s=1 / 10, call_s=0.0, calls=7, origin="the last run")
    est = budget.task_estimate(False, "x" * 400, "", None, most=20, reasks=1, reask_most=40)
    p = budget.plan([("q1", "ask", [est])] * 4, price=(0.0, 0.0), max_calls=0, max_cost=0.0, s_per_token=known)
    processed = 4 * est.processed_tokens
    assert p.expected_low_s == pytest.approx(processed / 100 + 80 / 10)  # no re-ask
    assert p.expected_high_s == pytest.approx((processed + 4 * 6) / 100 + (80 + 160) / 10)  # every one re-asked
    assert p.expected_s == pytest.approx((p.expected_low_s + p.expected_high_s) / 2) and not p.certain
    assert "up to 4 re-asks" in p.message(False) and "not measured yet: their re-asks" in p.message(False)


def test_replies_measured_by_the_last_run_make_the_plan_one_figure_again():
    known = rates.Rates(prompt_s=1 / 100, gen_s=1 / 10, call_s=0.0, calls=7, origin="the last run")
    replies = rates.Replies(first_tokens=30, reask_tokens=50, reask_share=0.5, calls=8)
    est = budget.task_estimate(False, "x" * 400, "", replies, most=160, fewest=60, reasks=1, reask_most=320)
    p = budget.plan([("q1", "ask", [est])] * 2, price=(0.0, 0.0), max_calls=0, max_cost=0.0, s_per_token=known)
    assert p.certain and p.expected_low_s is None and p.completion_tokens == 2 * (30 + 0.5 * 50)
    assert "re-asks" not in p.message(False)


def _cut_then_whole(i, body):
    """07 on a small model: the first ask is cut off at its token budget, the re-ask with twice that reads."""
    if body["max_tokens"] == AskParams().max_answer_tokens:
        return {"content": '{"answer": "The pump is started', "finish_reason": "length", "delay": 0.05}
    answer = {"answer": "With the red switch [a p.1].", "citations": [], "not_in_documents": False}
    return {"content": json.dumps(answer), "delay": 0.1}


def test_an_answer_run_measures_its_re_asks_and_the_next_plan_counts_them(tmp_path, console):
    passages = [Passage("a p.1", "a#p1", "the pump is started with the red switch")]
    cache = LLMCache(tmp_path / "llm")
    with FakeLLM(rule=_cut_then_whole) as fake:
        with Asker(_settings(fake), AskParams(), cache) as asker:
            cold = asker.estimate([Question("how?", "q0")], [passages])
            assert cold.reask_requests == 1 and not cold.certain
            for i in range(4):
                assert asker.ask(Question(f"how is pump {i} started", f"q{i}"), passages, {}).status == "ok"
        assert fake.count == 8
        with Asker(_settings(fake), AskParams(), cache) as asker:
            replies = asker.llm.replies("ask")
            warm = asker.estimate([Question("a new one", "q9")], [passages])
    assert replies is not None and (replies.calls, replies.reask_share) == (4, 1.0)
    assert warm.certain and warm.reask_requests == 0
    assert warm.completion_tokens == round(replies.first_tokens + replies.reask_tokens)


def test_the_revision_waits_for_whole_calls_with_their_re_asks(tmp_path, console):
    """Each call is asked twice (its first reply does not read): the revised time counts calls, not requests,
    so it is not half the plan's time."""
    with FakeLLM(script=[{"content": "prose", "delay": 0.05}, {"content": "yes", "delay": 0.05}] * 10) as fake:
        llm = _llm(fake, LLMCache(tmp_path / "llm"))
        plan = budget.Plan(fresh_calls=10, expected_s=1.0)
        llm.meter.start(plan, "t")
        for i in range(10):
            call = Call([{"role": "user", "content": f"q{i}"}], {"i": i}, 8)
            assert llm.call(call, lambda r: _read_yes(r), CallStats(), retries=1).ok
        llm.close()
    line = next(line for _, line in console.lines if "revised:" in line)
    m = REVISED.search(line)
    assert m and int(m.group(3)) == rates.MIN_REVISE and _number(m.group(1)) >= 10 * 2 * 0.05


def _read_yes(reply: Reply) -> str:
    if reply.content != "yes":
        raise Unusable("InvalidJSON", "not yes")
    return reply.content


def test_time_lost_to_a_retried_request_is_left_out_of_the_rates_and_the_revision(tmp_path):
    """The first request times out and the client sends it again: the call took over the timeout, but the endpoint
    answered the second request quickly; neither the rates kept nor the meter count the lost second."""
    script = [{"delay": 1.5}] + [{"delay": 0.02}] * 3
    with FakeLLM(script=script) as fake:
        settings = Settings(base_url=fake.base_url, api_key="k", model="fake", timeout=0.5, max_retries=1)
        llm = CachedLLM(LLMClient(settings), LLMCache(tmp_path))
        reply = llm.client.chat([{"role": "user", "content": "q"}], response_format=None, max_tokens=4)
    assert reply.retries == 1 and reply.latency_s >= 0.5
    sample = rates.Sample.of(reply)
    assert sample.seconds < 0.45 and rates.lost(reply) >= 0.5
    meter = rates.Meter(lambda r: None, say=lambda s: None)
    meter.observe(reply)
    assert meter.lost == pytest.approx(rates.lost(reply)) and meter.samples[0].seconds == sample.seconds


def test_quick_first_calls_do_not_shrink_the_revision_below_the_rest_of_the_plan_at_their_rates():
    """07 on the small local model: the first answers ended early, the later ones were cut off and asked again. The
    revision is the longer of the pace so far and the rest of the plan at the rates measured (its re-asks at the
    middle of their range)."""
    clock, lines = [0.0], []
    meter = rates.Meter(lambda r: None, say=lines.append, clock=lambda: clock[0])
    plan = budget.Plan(
        fresh_calls=8,
        processed_tokens=800,
        completion_tokens=8 * 256,
        reask_requests=8,
        reask_completion_tokens=8 * 512,
    )
    plan.time_at(rates.Rates(prompt_s=0.01, gen_s=0.025, calls=1, origin="t"))
    meter.start(plan, "answers")
    timings = {"prompt_n": 100, "prompt_ms": 1000.0, "predicted_n": 101, "predicted_ms": 2500.0}
    for _ in range(3):
        clock[0] += 3.5
        meter.observe(
            Reply("{}", prompt_tokens=100, completion_tokens=101, latency_s=3.5, answered_s=3.5, timings=timings)
        )
        meter.call_done()
    fitted = rates.fit(meter.samples, "t")
    pace = 8 * 10.5 / 3
    rest = 10.5 + 5 / 8 * plan.seconds_at(fitted)
    assert rest > pace and meter.revised == pytest.approx(rest)
    assert len(lines) == 1 and f"revised: ~{rest:,.0f} s" in lines[0]


def test_calls_the_run_may_stop_before_make_the_low_end_of_the_range():
    """08 asks up to 3 units per missing question and stops once enough are kept: 1 needed, 3 planned."""
    known = rates.Rates(prompt_s=1 / 100, gen_s=1 / 10, call_s=0.0, calls=7, origin="the last run")
    ests = [budget.task_estimate(False, "x" * 400, "", None, most=160, fewest=60) for _ in range(3)]
    for e in ests[1:]:
        e.optional = True
    p = budget.plan([("u", "draft", [e]) for e in ests], price=(0.0, 0.0), max_calls=0, max_cost=0.0, s_per_token=known)
    one = ests[0].processed_tokens
    assert p.expected_low_s == pytest.approx(one / 100 + 60 / 10)  # the first unit kept, its reply the shortest
    assert p.expected_high_s == pytest.approx(3 * one / 100 + 3 * 160 / 10)  # every unit asked, the longest replies
    assert "how many are asked before enough are kept" in p.message(False)


def test_a_warm_run_of_one_call_does_not_replace_what_eight_measured():
    eight = rates.Replies(first_tokens=200, reask_tokens=512, reask_share=0.75, calls=8)
    one = rates.Replies(first_tokens=256, reask_tokens=512, reask_share=1.0, calls=1)
    got = one.merged(eight)
    assert got.calls == 9 and got.reask_share == pytest.approx((0.75 * 8 + 1.0) / 9)
    assert got.first_tokens == pytest.approx((200 * 8 + 256) / 9) and one.merged(None) == one
    many = rates.Replies(first_tokens=100, reask_tokens=0, reask_share=0.0, calls=500)
    assert one.merged(many).reask_share == pytest.approx(1 / 51)  # the past weighs at most 50 calls
