"""The one cached LLM call every stage that asks a model uses (reranking, answers, query rewriting).

:meth:`CachedLLM.call` does, for one :class:`Call`:

1. **material -> key**: the call's ``material`` (everything the reply depends on, built by the caller) is the
   cache key of the first attempt; a re-ask adds ``"attempt": n`` to it (:meth:`Call.material_for`), so the
   keys are those the callers wrote before this module existed and warm caches still hit.
2. **cache get**: a cached reply is used only when ``read(reply)`` accepts it. One that does not read
   (written by an older version) is counted as :data:`CACHED_UNUSABLE` and asked again: never served as if good.
3. **chat**: unless the circuit breaker is open (:mod:`.breaker`) or the budget refuses it (:mod:`.budget`),
   the call is sent with the heartbeat marking it (:class:`rerankeval.core.progress.Heartbeat`).
4. **redact, then read**: the reply's text goes through :func:`rerankeval.core.settings.redact` first (a model
   may echo a key, a URL password or its ``Basic`` token), so no caller can use, cache or write it: drafted
   questions, answers, judge replies and the reply cache are clean at the source. ``read(reply)`` parses and
   validates; it raises :class:`~.repair.Unusable` for a reply that
   cannot be used, which is then re-asked up to ``retries`` times (``reask`` may change the next attempt,
   e.g. more tokens after a cut-off reply).
5. **cache put**: only a reply that read is cached (with its original ``latency_s``), so an unusable one is
   asked again by the next run.

Every step is counted in one :class:`CallStats` (the caller decides its scope: one query, one run). The
estimate printed before a run (:class:`.budget.Plan`) is a forecast, not a count, and stays separate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

from rerankeval.core import progress as progress_mod
from rerankeval.core.settings import Settings, redact, secrets_of
from rerankeval.llm import budget as budget_mod
from rerankeval.llm.breaker import Breaker
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.client import FORMATS, LLMCallError, LLMClient, Reply
from rerankeval.llm.repair import Unusable
from rerankeval.llm.scrub import endpoint_identity

T = TypeVar("T")
CACHED_UNUSABLE = "CachedUnusable"  # a cached reply that did not read, asked again
BUDGET_EXCEEDED = "BudgetExceeded"  # a call the budget refused


@dataclass
class CallStats:
    """Counters of LLM calls, for whatever scope the caller gives them (one query, one run)."""

    calls: int = 0  # calls made (one per :meth:`CachedLLM.call`, re-asks not counted)
    attempts: int = 0  # first asks and re-asks: each was served by the cache or sent
    cache_hits: int = 0
    requests: int = 0  # HTTP requests sent, the client's transport retries included
    retries: int = 0  # transport retries and re-asks after an unusable reply
    failed: int = 0  # calls that ended without a usable reply
    prompt_tokens: int = 0  # of the requests sent in this run
    completion_tokens: int = 0
    saved_prompt_tokens: int = 0  # of the replies served by the cache
    saved_completion_tokens: int = 0
    llm_seconds: float = 0.0  # of every call as first made (a cached reply keeps its original latency)
    fresh_seconds: float = 0.0  # of the calls sent in this run
    errors: list[str] = field(default_factory=list)  # error classes, each once, in the order first seen
    format_level: int = 0  # index in client.FORMATS of the weakest response format a reply came with
    label: str = ""  # what the heartbeat names while a call waits ("query q12")

    def error(self, cls: str) -> None:
        if cls not in self.errors:
            self.errors.append(cls)

    @property
    def saved_tokens(self) -> int:
        """Prompt and completion tokens the cache saved."""
        return self.saved_prompt_tokens + self.saved_completion_tokens

    @property
    def fresh_calls(self) -> int:
        """Requests sent (the name notebook 07 prints)."""
        return self.requests

    def _format(self, reply: Reply) -> None:
        level = FORMATS.index(reply.response_format) if reply.response_format in FORMATS else 0
        self.format_level = max(self.format_level, level)


@dataclass(frozen=True)
class Call:
    """One call: what is sent, and ``material``, everything the reply depends on (its cache key)."""

    messages: list[dict[str, str]]
    material: dict[str, Any]
    max_tokens: int
    response_format: dict[str, Any] | None = None
    seed: int | None = 0
    top_logprobs: int = 0

    @property
    def prompt(self) -> str:
        return "\n".join(m["content"] for m in self.messages)

    def material_for(self, attempt: int) -> dict[str, Any]:
        """The key material of attempt ``attempt`` (0 = the first ask)."""
        return self.material if attempt == 0 else {**self.material, "attempt": attempt}


@dataclass
class Outcome(Generic[T]):
    """What :meth:`CachedLLM.call` got: ``value`` when ``ok``; else why not."""

    value: T | None = None
    ok: bool = False
    cached: bool = False  # the value was read from a cached reply
    reply: Reply | None = None  # the last reply seen, usable or not (what a caller may salvage)
    errors: list[str] = field(default_factory=list)  # in order: CACHED_UNUSABLE and each unusable reply's class
    failure: LLMCallError | None = None  # what ended the call without a reply (endpoint, breaker, budget)


Reask = Callable[[Call, Reply], Call]  # the next attempt after an unusable fresh reply


class CachedLLM:
    """One endpoint and its reply cache, with the breaker, the budget and the heartbeat of a run.

    ``endpoint`` is the endpoint's identity in keys and rates (never a credential), ``local`` True for the
    local llama-server; :meth:`open` makes both from the settings."""

    def __init__(self, client: LLMClient, cache: LLMCache, *, endpoint: str = "", local: bool = False,
                 own_client: bool = False, breaker: Breaker | None = None, budget: budget_mod.Budget | None = None,
                 price: tuple[float, float] = (0.0, 0.0)) -> None:
        self.client, self.cache, self.endpoint, self.local, self.breaker = client, cache, endpoint, local, breaker
        self._own_client = own_client
        self.budget = budget if budget is not None else budget_mod.Budget()
        self.price = budget_mod.check_price(price)  # USD per 1M (prompt, completion) tokens, each >= 0
        self.heartbeat: progress_mod.Heartbeat = progress_mod.QUIET
        self.messages: dict[str, str] = {}  # error class -> the first message of that class (for the summary)
        own = getattr(client, "settings", None)  # its secrets, even when a copy of settings (the judge's) holds them
        self._secrets = sorted(secrets_of(own)) if isinstance(own, Settings) else []

    @classmethod
    def open(cls, settings: Settings, cache: LLMCache | None = None, client: LLMClient | None = None, *,
             timeout: float | None = None, max_connections: int = 2, **kw: Any) -> CachedLLM:
        """On ``client``, or on a client of ``settings`` that :meth:`close` closes; ``kw`` as in the constructor."""
        own = client is None
        client = client or LLMClient(settings, timeout=timeout, max_connections=max_connections)
        return cls(client, cache if cache is not None else LLMCache(), endpoint=endpoint_identity(settings),
                   local=(settings.endpoint_id or "").startswith("llama-server"), own_client=own, **kw)

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    @property
    def model(self) -> str:
        return self.client.model

    def measured_rate(self) -> tuple[float | None, str]:
        """(seconds per processed prompt token, where it comes from): see :func:`.budget.measured_rate`."""
        return budget_mod.measured_rate(self.cache.read_rates, self.endpoint, self.model, self.local)

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.price[0] + completion_tokens * self.price[1]) / 1e6

    def call(self, call: Call, read: Callable[[Reply], T], stats: CallStats, *, retries: int = 0,
             label: str = "", reask: Reask | None = None) -> Outcome[T]:
        """``read(reply)`` of a cached or fresh reply, re-asked ``retries`` times after an unusable one;
        a fresh reply is cached only once it read (see the module docstring)."""
        stats.calls += 1
        out: Outcome[T] = Outcome()
        for attempt in range(retries + 1):
            material = call.material_for(attempt)
            key = self.cache.key(material)
            stats.attempts += 1
            if self._from_cache(key, read, stats, out):
                return out
            reply = self._send(call, stats, out, label or stats.label)
            if reply is None:
                return out
            reply.content = redact(reply.content, self._secrets)  # an echoed key is never read, cached or written
            out.reply, out.cached = reply, False
            try:
                out.value = read(reply)
            except Unusable as exc:
                self._unusable(exc, stats, out, more=attempt < retries)
                call = reask(call, reply) if reask is not None and attempt < retries else call
                continue
            self.cache.put(key, material, {**reply.to_cache(), "latency_s": round(reply.latency_s, 4)})
            out.ok = True
            return out
        stats.failed += 1
        return out

    def _from_cache(self, key: str, read: Callable[[Reply], T], stats: CallStats, out: Outcome[T]) -> bool:
        """True when the cached reply read (``out`` then holds it, counted as a hit)."""
        cached = self.cache.get(key)
        if cached is None:
            return False
        try:
            reply = Reply.from_cache(cached)
            reply.content = redact(reply.content, self._secrets)  # an entry cached before replies were redacted
            seconds = float(cached.get("latency_s") or 0.0)
        except (TypeError, KeyError, ValueError):
            return False
        try:
            out.value = read(reply)
        except Unusable:
            stats.error(CACHED_UNUSABLE)
            out.errors.append(CACHED_UNUSABLE)
            out.reply = reply
            return False
        stats.cache_hits += 1
        stats.saved_prompt_tokens += reply.prompt_tokens
        stats.saved_completion_tokens += reply.completion_tokens
        stats.llm_seconds += seconds
        stats._format(reply)
        out.ok, out.cached, out.reply = True, True, reply
        return True

    def _send(self, call: Call, stats: CallStats, out: Outcome[Any], label: str) -> Reply | None:
        """The fresh reply (if the breaker and the budget allow), counted; None on failure (in ``out``)."""
        down = self.breaker.open if self.breaker is not None else None
        est = self.cost(budget_mod.prompt_tokens(call.prompt), call.max_tokens)
        if down or not self.budget.reserve(est):
            stats.failed += 1
            stats.error(down or BUDGET_EXCEEDED)
            out.failure = LLMCallError(down or BUDGET_EXCEEDED, "not sent: the endpoint is down" if down
                                       else "not sent: the budget is spent")
            return None
        try:
            with self.heartbeat.waiting(label):
                reply = self.client.chat(call.messages, response_format=call.response_format,
                                         max_tokens=call.max_tokens, seed=call.seed, top_logprobs=call.top_logprobs)
        except LLMCallError as exc:
            self._failed(exc, est, stats, out)
            return None
        if self.breaker is not None:
            self.breaker.success()
        self.budget.settle(est, self.cost(reply.prompt_tokens, reply.completion_tokens))
        stats.requests += 1 + reply.retries
        stats.retries += reply.retries
        stats.prompt_tokens += reply.prompt_tokens
        stats.completion_tokens += reply.completion_tokens
        seconds = round(reply.latency_s, 4)  # as stored: a cached re-run adds up the same figures
        stats.llm_seconds += seconds
        stats.fresh_seconds += seconds
        stats._format(reply)
        return reply

    def _failed(self, exc: LLMCallError, est: float, stats: CallStats, out: Outcome[Any]) -> None:
        """A request that got no reply after the client's retries."""
        self.budget.settle(est, 0.0)
        if self.breaker is not None:
            self.breaker.failure(exc.error_class)
        stats.requests += 1 + exc.retries
        stats.retries += exc.retries
        stats.failed += 1
        stats.error(exc.error_class)
        self.messages.setdefault(exc.error_class, str(exc))
        out.failure = exc

    def _unusable(self, exc: Unusable, stats: CallStats, out: Outcome[Any], more: bool) -> None:
        """A fresh reply that did not read (``more``: it is asked again)."""
        stats.error(exc.error_class)
        out.errors.append(exc.error_class)
        self.messages.setdefault(exc.error_class, redact(exc)[:300])  # it may quote the reply
        if more:
            stats.retries += 1


class AsksLLM:
    """Base of a class asking through ``self.llm``: a context manager that closes the client it opened."""

    llm: CachedLLM

    @property
    def heartbeat(self) -> progress_mod.Heartbeat:
        """What marks each call while it waits (:class:`rerankeval.core.progress.Heartbeat`)."""
        return self.llm.heartbeat

    @heartbeat.setter
    def heartbeat(self, beat: progress_mod.Heartbeat) -> None:
        self.llm.heartbeat = beat

    def close(self) -> None:
        self.llm.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
