"""The one cached LLM call (rerankeval.llm.call, issue 20): its cache keys are those the callers wrote before it
existed (warm caches still hit), and each step of material -> key -> get -> chat -> read -> put is counted."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fakellm import FakeLLM
from rerankeval.apps.ask.answers import Asker
from rerankeval.apps.ask.inputs import Passage
from rerankeval.apps.ask.params import Params as AskParams
from rerankeval.core.settings import Settings
from rerankeval.llm.breaker import Breaker
from rerankeval.llm.budget import Budget
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import CACHED_UNUSABLE, CachedLLM, Call, CallStats
from rerankeval.llm.client import LLMClient, Reply
from rerankeval.llm.repair import Unusable
from rerankeval.rerank.config import Candidate, Params
from rerankeval.rerank.reranker import Reranker
from rerankeval.retrieve import reformulate

pytestmark = pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")

SETTINGS = Settings(base_url="http://127.0.0.1:9/v1", api_key="k", model="fake", timeout=2, max_retries=0)
POOL = [
    Candidate("d1", "alpha text", 0.5, 0),
    Candidate("d2", "beta GOLD text", 0.4, 1),
    Candidate("d3", "gamma text", 0.3, 2),
]

# (mode, yesno_json, first-attempt key, attempt-1 key) of each call, computed before llm.call existed
RERANK_KEYS = {
    ("yesno", True): [
        (
            "d9508d6f05cefa07ebba291d97fcab38c663517b9106dc56997903e26989659a",
            "f1eae4d7fe2a79cd7618131509714528a64bb85d8de72e3c859a719f8d7e4a0a",
        ),
        (
            "a0c8a15a3ebeb51da44b7cb8a84a827ba95a846f244633183be4701f375bc8a4",
            "4eb817da775c2b47bf69a6acfbe452df12ddf8122cd4503a5baffc9c85ea24a1",
        ),
        (
            "1683ba41a5841fb864db5cda47115ecd63ad7bc3a088356693cdd9f38bb22067",
            "a83962938b6d8cd2498460fcd9813ac35b11d0617055e35f5f2ef6a57e1eea78",
        ),
    ],
    ("yesno", False): [
        (
            "8d10db69745b2a0db6f3cc66bd1324f6a8b222d2061bf9499c89deea2624c117",
            "05352d8278bf5eab3a806f4227735d1a7dcae11f2c56c0b57500f431923fc642",
        ),
        (
            "d6336114e981c6249e1945bb0d74d3ffc59af72da13b6b71b2d7f2041aa265bb",
            "0de5079bfcf2f9c74b0730049462bcba4ca4b4d308f5ba269a2cc57aca8bfbcd",
        ),
        (
            "d2f6f3fabadc8c98f5690f1aba4562c80f2a8c7f08e6aeb06d08eac7578cc8f9",
            "4a00fef49ace9a9620441798fc8c3da6a9bb27144b23fd672a2de1128a08dc01",
        ),
    ],
    ("pointwise", True): [
        (
            "a6d16a202d91f10e80a105a07f5d5fbc076fc4e058c1acefad5124c50c7a70ad",
            "b1a4c5fe9b1cf2657bdd17722352efce6a974fc8427ec8d048ce1d1492c894c5",
        ),
        (
            "ded01f42072da1115acfadf008d097b49913eab0296cd7734a232428f6997344",
            "2a838485c53f63429799875e7e120c891fec99176c6113e43ff387ed73dbb5d0",
        ),
    ],
    ("listwise", True): [
        (
            "888af5192bac766e5350584568eb4a2c73236ff4dca715a471eedefab6996d63",
            "6e72f476f2a8ddc993caf54c13aa8952aa2edad8c09bab7ad2a036cf2a5ce421",
        ),
        (
            "1ad0da72be8cee48721d80f16359e98fb1d4e13d8c359eb81021ed658de85251",
            "15b3c02465a496f394cb03fc507d3d46d5bc135b050b1cdde4cd9d0c70b4e312",
        ),
    ],
}
CONFIGS = {
    ("yesno", True): {},
    ("yesno", False): {"yesno_json": False},
    ("pointwise", True): {"batch_size": 2},
    ("listwise", True): {"window": 2, "step": 1},
}
ASK_KEYS = {
    256: (
        "6b2491f328fefc1a3937003de92fd51b2bdb4eb7fa3440dd7050777b2c3108d8",
        "ce866536e0c6e6f369cf1adecff442dee9aa9fe7e1c95fce73fea566104e9126",
    ),
    512: (
        "bdb974be3c50f76131a16d92602290d656a99e592a417fc9312888b51f32cc7c",
        "e6bf05f431ecc773f9535a1ccd39de54e6a59783aead1c00f152910d3b774c2c",
    ),
}
REWRITE_KEY = "b8335c1ee0d57f885b5fcf71a62d9addc8d9ac415b4d030ac34153c4fdadacf5"


def _keys(call: Call) -> tuple[str, str]:
    return LLMCache.key(call.material_for(0)), LLMCache.key(call.material_for(1))


@pytest.mark.parametrize("which", sorted(RERANK_KEYS))
def test_the_rerank_cache_keys_are_unchanged(tmp_path, which):
    mode, _ = which
    config = replace(Params(mode=mode, yesno_json=True).config(), **CONFIGS[which])  # the keys' configuration
    with Reranker(config, SETTINGS, cache=LLMCache(tmp_path)) as rr:
        specs = rr.calls.specs("what is alpha", POOL, [c.text for c in POOL])
        got = [_keys(Call(s.messages, rr.calls.material(s, "what is alpha"), s.max_tokens)) for s in specs]
    assert got == RERANK_KEYS[which]


def test_the_ask_and_rewrite_cache_keys_are_unchanged(tmp_path):
    passages = [Passage("a.pdf p.1", "a.pdf#p1", "alpha text"), Passage("b", "b", "beta")]
    with Asker(SETTINGS, AskParams(), LLMCache(tmp_path)) as asker:
        assert {n: _keys(asker.call("where is alpha", passages, n)) for n in ASK_KEYS} == ASK_KEYS

    class Client:
        model = "fake"

    rewriter = reformulate.Rewriter(Client(), LLMCache(tmp_path), "127.0.0.1:9")
    assert LLMCache.key(rewriter.material("q text")) == REWRITE_KEY


def test_a_warm_cache_of_an_older_run_is_hit(tmp_path):
    """An entry stored under the pre-refactor key of the first yes/no call serves that call: nothing is sent."""
    cache = LLMCache(tmp_path)
    for key, _ in RERANK_KEYS[("yesno", True)]:
        cache.put(
            key, {}, {"content": '{"relevant": "yes"}', "prompt_tokens": 5, "completion_tokens": 3, "latency_s": 0.5}
        )
    with FakeLLM() as fake:
        settings = Settings(
            base_url=fake.base_url,
            api_key="k",
            model="fake",
            timeout=2,
            max_retries=0,
            endpoint_id=SETTINGS.cache_endpoint,
        )  # the identity of the older run's endpoint
        with Reranker(Params(mode="yesno", yesno_json=True).config(), settings, cache=cache) as rr:
            res = rr.rerank_query("q1", "what is alpha", POOL)
        assert fake.count == 0
    assert (res.row["cache_hits"], res.row["requests"], res.row["llm_seconds"]) == (3, 0, 1.5)


# --------------------------------------------------------------------------- the call itself
def _read(reply: Reply) -> str:
    try:
        return json.loads(reply.content)["answer"]
    except (ValueError, KeyError, TypeError) as exc:
        raise Unusable("InvalidJSON", str(exc)) from None


def _call(max_tokens: int = 16) -> Call:
    material = {"v": 1, "gen": {"max_tokens": max_tokens}, "question": "q"}
    return Call([{"role": "user", "content": "say it"}], material, max_tokens)


GOOD = {"content": json.dumps({"answer": "yes"})}


def _llm(fake: FakeLLM, cache: LLMCache, **kw) -> CachedLLM:
    client = LLMClient(Settings(base_url=fake.base_url, api_key="k", model="fake", timeout=2, max_retries=0))
    return CachedLLM(client, cache, **kw)


def test_a_miss_is_sent_and_cached_then_served_from_the_cache(tmp_path):
    cache, stats = LLMCache(tmp_path), CallStats()
    with FakeLLM(script=[GOOD]) as fake:
        llm = _llm(fake, cache)
        first = llm.call(_call(), _read, stats)
        second = llm.call(_call(), _read, stats)
        assert fake.count == 1
    assert (first.ok, first.value, first.cached, second.value, second.cached) == (True, "yes", False, "yes", True)
    assert [p.stem for p in tmp_path.rglob("*.json")] == [LLMCache.key(_call().material)]
    assert (stats.calls, stats.attempts, stats.cache_hits, stats.requests, stats.failed) == (2, 2, 1, 1, 0)
    assert stats.saved_prompt_tokens == stats.prompt_tokens > 0 and stats.saved_tokens > 0
    assert stats.llm_seconds == pytest.approx(2 * stats.fresh_seconds)


def test_an_unusable_reply_is_re_asked_under_the_attempt_key_and_not_cached(tmp_path):
    cache, stats = LLMCache(tmp_path), CallStats()
    cut = {"content": '{"answer": "ye', "finish_reason": "length"}

    def reask(call: Call, reply: Reply) -> Call:
        return _call(call.max_tokens * 2) if reply.finish_reason == "length" else call

    with FakeLLM(script=[cut, GOOD]) as fake:
        got = _llm(fake, cache).call(_call(), _read, stats, retries=1, reask=reask)
        assert [b["max_tokens"] for _, _, b in fake.requests] == [16, 32]
    assert (got.ok, got.value, got.errors) == (True, "yes", ["InvalidJSON"])
    assert [p.stem for p in tmp_path.rglob("*.json")] == [LLMCache.key(_call(32).material_for(1))]
    assert (stats.calls, stats.attempts, stats.requests, stats.retries, stats.errors) == (1, 2, 2, 1, ["InvalidJSON"])


def test_a_cached_unusable_reply_is_never_served_and_is_replaced(tmp_path):
    cache, stats = LLMCache(tmp_path), CallStats()
    key = LLMCache.key(_call().material)
    cache.put(key, {}, {"content": "prose"})
    with FakeLLM(script=[GOOD]) as fake:
        got = _llm(fake, cache).call(_call(), _read, stats)
        assert fake.count == 1
    assert (got.ok, got.cached, got.errors, stats.errors) == (True, False, [CACHED_UNUSABLE], [CACHED_UNUSABLE])
    assert json.loads(cache.get(key)["content"]) == {"answer": "yes"}


def test_every_attempt_unusable_fails_the_call_with_the_last_reply_to_salvage(tmp_path):
    stats = CallStats()
    with FakeLLM(rule=lambda n, b: {"content": f"prose {n}"}) as fake:
        got = _llm(fake, LLMCache(tmp_path)).call(_call(), _read, stats, retries=2)
    assert (got.ok, got.reply.content, got.errors, got.failure) == (False, "prose 2", ["InvalidJSON"] * 3, None)
    assert (stats.failed, stats.retries, stats.requests) == (1, 2, 3)
    assert not list(tmp_path.rglob("*.json"))


def test_the_breaker_stops_sending_to_a_dead_endpoint(tmp_path):
    stats = CallStats()
    with FakeLLM(rule=lambda n, b: {"drop": True}) as fake:
        llm = _llm(fake, LLMCache(tmp_path), breaker=Breaker(2))
        got = [llm.call(_call(), _read, stats) for _ in range(4)]
        assert fake.count == 2
    assert [g.failure.error_class for g in got] == ["APIConnectionError"] * 4
    assert (stats.failed, stats.requests, stats.errors) == (4, 2, ["APIConnectionError"])
    assert "did not answer" in llm.messages["APIConnectionError"]


def test_the_budget_refuses_calls_past_it(tmp_path):
    stats = CallStats()
    with FakeLLM(rule=lambda n, b: GOOD) as fake:
        llm = _llm(fake, LLMCache(tmp_path), budget=Budget(max_calls=1))
        first = llm.call(_call(), _read, stats)
        second = llm.call(_call(8), _read, stats)
        assert fake.count == 1
    assert first.ok and not second.ok and second.failure.error_class == "BudgetExceeded"
    assert (stats.failed, stats.errors) == (1, ["BudgetExceeded"])
