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
5. **cache put**: a reply that read is cached (with its original ``latency_s``). An unusable one is asked again
   by the next run, unless the :class:`CachedLLM` keeps failures (``keep_failures``, a stage's choice): at
   temperature 0 and a fixed seed the same prompt fails the same way, so the unusable reply is recorded under its
   attempt key with its error and how many times it was asked (:meth:`.cache.LLMCache.put_outcome`, never served
   as a good reply) and the next run reads the recorded reply instead of asking: the re-ask's key is the same, so
   a reply repaired from it by the caller (07's salvaged answers) or a later attempt's good reply comes without a
   request, and a call that failed fails again (:attr:`CallStats.kept_failures`, :func:`kept_note`).
   ``retry_failed`` asks every recorded call again (a reply that now reads replaces the record).

Every request sent is measured by the endpoint's :class:`.rates.Meter` (the revised time of the plan in force,
and the rates the next run's plan uses); :meth:`CachedLLM.probe` measures the local server when no rate is known.

Every step is counted in one :class:`CallStats` (the caller decides its scope: one query, one run). The
estimate printed before a run (:class:`.budget.Plan`) is a forecast, not a count, and stays separate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Self, TypeVar

from rerankeval.core import progress as progress_mod
from rerankeval.core.paths import Roots
from rerankeval.core.settings import Settings, redact, secrets_of
from rerankeval.llm import budget as budget_mod
from rerankeval.llm import rates as rates_mod
from rerankeval.llm.breaker import Breaker
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.client import FORMATS, LLMCallError, LLMClient, Reply
from rerankeval.llm.rates import Meter, Rates, Replies, Sample, Tally
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
    kept_failures: int = 0  # failed calls served from failure records, not asked again (keep_failures)
    label: str = ""  # what the heartbeat names while a call waits ("query q12")

    def error(self, cls: str) -> None:
        if cls not in self.errors:
            self.errors.append(cls)

    @property
    def saved_tokens(self) -> int:
        """Prompt and completion tokens the cache saved."""
        return self.saved_prompt_tokens + self.saved_completion_tokens

    def summary(self) -> dict[str, Any]:
        """The counts a stage's ``summary.json`` records (08's and 09's ``calls``)."""
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "requests": self.requests,
            "failed": self.failed,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "llm_seconds": round(self.llm_seconds, 2),
            "errors": list(self.errors),
        }

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
    task: str = ""  # what its replies are like is measured per task for the next plan (:class:`.rates.Replies`)

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
    kept: bool = False  # an unusable reply came from a failure record of an earlier run, not asked again
    sent: bool = False  # a request was sent (the call counts toward the plan's revised time)


Reask = Callable[[Call, Reply], Call]  # the next attempt after an unusable fresh reply


class CachedLLM:
    """One endpoint and its reply cache, with the breaker, the budget, the meter and the heartbeat of a run.

    ``endpoint`` is the endpoint's identity in keys and rates (never a credential), ``local`` True for the
    local llama-server; :meth:`open` makes both from the settings. ``probe`` (default: ``local``) lets a plan
    measure the endpoint when no rate is known (:meth:`probe`); ``keep_failures`` / ``retry_failed``: the module
    docstring (``retry_failed`` records too)."""

    def __init__(
        self,
        client: LLMClient,
        cache: LLMCache,
        *,
        endpoint: str = "",
        local: bool = False,
        own_client: bool = False,
        breaker: Breaker | None = None,
        budget: budget_mod.Budget | None = None,
        price: tuple[float, float] = (0.0, 0.0),
        keep_failures: bool = False,
        retry_failed: bool = False,
        probe: bool | None = None,
    ) -> None:
        self.client, self.cache, self.endpoint, self.local, self.breaker = client, cache, endpoint, local, breaker
        self._own_client = own_client
        self.budget = budget if budget is not None else budget_mod.Budget()
        self.price = budget_mod.check_price(price)  # USD per 1M (prompt, completion) tokens, each >= 0
        self.keep_failures, self.retry_failed = keep_failures or retry_failed, retry_failed
        self.heartbeat: progress_mod.Heartbeat = progress_mod.QUIET
        self.messages: dict[str, str] = {}  # error class -> the first message of that class (for the summary)
        own = getattr(client, "settings", None)  # its secrets, even when a copy of settings (the judge's) holds them
        self._secrets = sorted(secrets_of(own)) if isinstance(own, Settings) else []
        self._tallies: dict[str, Tally] = {}  # task -> its replies in this run (kept at close for the next plan)
        limited = bool(self.budget.max_calls or self.budget.max_cost)  # then nothing unplanned is sent
        self.meter = Meter(
            self._keep_rates,
            local=local,
            probe=self.probe if (local if probe is None else probe) and not limited else None,
        )

    @classmethod
    def open(
        cls,
        settings: Settings,
        cache: LLMCache | None = None,
        client: LLMClient | None = None,
        *,
        timeout: float | None = None,
        max_connections: int = 2,
        **kw: Any,
    ) -> CachedLLM:
        """On ``client``, or on a client of ``settings`` that :meth:`close` closes; ``kw`` as in the constructor."""
        own = client is None
        client = client or LLMClient(settings, timeout=timeout, max_connections=max_connections)
        return cls(
            client,
            cache if cache is not None else LLMCache.under(Roots.of(settings).cache),
            endpoint=endpoint_identity(settings),
            local=(settings.endpoint_id or "").startswith("llama-server"),
            own_client=own,
            **kw,
        )

    def close(self) -> None:
        """Keep the rates and the replies this run measured (for the next run's plan), then close the client if
        it is ours."""
        self.meter.finish()
        self._keep_replies()
        if self._own_client:
            self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def model(self) -> str:
        return self.client.model

    def measured_rate(self) -> tuple[Rates, str]:
        """(the endpoint's rates, where they come from) for :func:`.budget.plan`: see :mod:`.rates`."""
        return budget_mod.measured_rate(self.cache.read_rates, self.endpoint, self.model, self.local, self.meter)

    def _keep_rates(self, rates: Rates) -> None:
        self.cache.record_rates(self.endpoint, self.model, rates.to_record())

    def _rates_record(self) -> dict[str, Any]:
        got = (self.cache.read_rates() or {}).get(f"{self.endpoint}|{self.model}")
        return got if isinstance(got, dict) else {}

    def replies(self, task: str) -> Replies | None:
        """What the last run's replies of ``task`` were like on this endpoint and model (None: not measured)."""
        tasks = self._rates_record().get("tasks")
        return Replies.from_record(tasks.get(task)) if isinstance(tasks, dict) else None

    def _keep_replies(self) -> None:
        got = {t: r.merged(self.replies(t)).to_record() for t, tally in self._tallies.items() if (r := tally.replies())}
        if got:
            tasks = self._rates_record().get("tasks")
            self.cache.record_rates(
                self.endpoint, self.model, {"tasks": {**(tasks if isinstance(tasks, dict) else {}), **got}}
            )

    def cost(self, prompt_tokens: float, completion_tokens: float) -> float:
        return (prompt_tokens * self.price[0] + completion_tokens * self.price[1]) / 1e6

    def cached(self, material: dict[str, Any]) -> bool:
        """True when the first ask of a call with this ``material`` (:attr:`Call.material`) is served without a
        request: a cached reply, or a recorded failure that is kept (what a plan counts as a cache hit)."""
        key = self.cache.key(material)
        if self.cache.get(key) is not None:
            return True
        return self.keep_failures and not self.retry_failed and self.cache.get_outcome(key) is not None

    def call(
        self,
        call: Call,
        read: Callable[[Reply], T],
        stats: CallStats,
        *,
        retries: int = 0,
        label: str = "",
        reask: Reask | None = None,
    ) -> Outcome[T]:
        """``read(reply)`` of a cached or fresh reply, re-asked ``retries`` times after an unusable one;
        a fresh reply is cached once it read, an unusable one recorded when failures are kept (module docstring)."""
        stats.calls += 1
        out: Outcome[T] = Outcome()
        try:
            return self._attempts(call, read, stats, out, retries, label, reask)
        finally:
            if out.sent:
                self.meter.call_done()

    def _attempts(
        self,
        call: Call,
        read: Callable[[Reply], T],
        stats: CallStats,
        out: Outcome[T],
        retries: int,
        label: str,
        reask: Reask | None,
    ) -> Outcome[T]:
        """:meth:`call`'s attempts (``out.sent``: a request was sent)."""
        for attempt in range(retries + 1):
            material = call.material_for(attempt)
            key = self.cache.key(material)
            stats.attempts += 1
            if self._from_cache(key, read, stats, out):
                return out
            reply, count = self._kept(key, stats, out), 0
            replayed = reply is not None
            if reply is None:
                count = self._count(key)
                reply, out.sent = self._send(call, stats, out, label or stats.label, again=attempt > 0), True
                if reply is None:
                    return out
                if call.task:
                    self._tallies.setdefault(call.task, Tally()).add(attempt, reply)
                reply.content = redact(reply.content, self._secrets)  # an echoed key is never read, cached or written
                out.reply, out.cached = reply, False
            try:
                out.value = read(reply)
            except Unusable as exc:
                self._unusable(exc, stats, out, more=attempt < retries and not replayed)
                if not replayed and self.keep_failures:
                    self._record(key, reply, exc, count + 1)
                call = reask(call, reply) if reask is not None and attempt < retries else call
                continue
            stats.cache_hits += replayed  # a recorded reply a newer reader reads: served, and cached as good now
            self.cache.put(key, material, {**reply.to_cache(), "latency_s": round(reply.latency_s, 4)})
            out.ok = True
            return out
        stats.failed += 1
        if not out.sent and out.kept:  # every attempt came from a record: no request
            stats.cache_hits += 1
            stats.kept_failures += 1
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
        self._served(reply, seconds, stats)
        stats.cache_hits += 1
        out.ok, out.cached, out.reply = True, True, reply
        return True

    def _served(self, reply: Reply, seconds: float, stats: CallStats) -> None:
        """Count a reply served by the cache (or a record): what it saved, with its original seconds."""
        stats.saved_prompt_tokens += reply.prompt_tokens
        stats.saved_completion_tokens += reply.completion_tokens
        stats.llm_seconds += seconds
        stats._format(reply)

    def _kept(self, key: str, stats: CallStats, out: Outcome[Any]) -> Reply | None:
        """The recorded unusable reply under ``key`` when failures are kept (read again: a newer reader may
        use it), else None (asked)."""
        if not self.keep_failures or self.retry_failed:
            return None
        got = self.cache.get_outcome(key)
        if got is None:
            return None
        data, _ = got
        try:
            reply = Reply.from_cache(data)
            reply.content = redact(reply.content, self._secrets)
            reply.latency_s = float(data.get("latency_s") or 0.0)
        except (TypeError, KeyError, ValueError):
            return None
        self._served(reply, reply.latency_s, stats)
        out.reply, out.cached, out.kept = reply, True, True
        return reply

    def _count(self, key: str) -> int:
        """How many times the call under ``key`` was asked and came back unusable (0: no record)."""
        got = self.cache.get_outcome(key) if self.keep_failures else None
        try:
            return int(got[1].get("count") or 0) if got is not None else 0
        except (TypeError, ValueError):
            return 0

    def _record(self, key: str, reply: Reply, exc: Unusable, count: int) -> None:
        """Record a fresh unusable reply under its key (never served as good: :meth:`.cache.LLMCache.get_outcome`)."""
        outcome = {"status": "failed", "error": exc.error_class, "message": redact(exc)[:300], "count": count}
        self.cache.put_outcome(key, {**reply.to_cache(), "latency_s": round(reply.latency_s, 4)}, outcome)

    def probe(self) -> list[Sample]:
        """:func:`.rates.probe` of the endpoint (through the client, never the reply cache); nothing when a limit is
        set (``max_calls`` / ``max_cost``: nothing unplanned is sent; the plan's meter then has no probe) or the
        breaker is open."""
        if self.budget.max_calls or self.budget.max_cost or (self.breaker is not None and self.breaker.open):
            return []
        return rates_mod.probe(self.client.chat)

    def _send(self, call: Call, stats: CallStats, out: Outcome[Any], label: str, *, again: bool) -> Reply | None:
        """The fresh reply (if the breaker and the budget allow), counted and measured; None on failure (in ``out``)."""
        down = self.breaker.open if self.breaker is not None else None
        est = self.cost(budget_mod.prompt_tokens(call.prompt), call.max_tokens)
        if down or not self.budget.reserve(est):
            stats.failed += 1
            stats.error(down or BUDGET_EXCEEDED)
            out.failure = LLMCallError(
                down or BUDGET_EXCEEDED, "not sent: the endpoint is down" if down else "not sent: the budget is spent"
            )
            return None
        try:
            with self.heartbeat.waiting(label, again=again):
                reply = self.client.chat(
                    call.messages,
                    response_format=call.response_format,
                    max_tokens=call.max_tokens,
                    seed=call.seed,
                    top_logprobs=call.top_logprobs,
                )
        except LLMCallError as exc:
            self._failed(exc, est, stats, out)
            return None
        if self.breaker is not None:
            self.breaker.success()
        self.meter.observe(reply)
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
        """A reply that did not read (``more``: it is asked again)."""
        stats.error(exc.error_class)
        out.errors.append(exc.error_class)
        self.messages.setdefault(exc.error_class, redact(exc)[:300])  # it may quote the reply
        if more:
            stats.retries += 1


def kept_note(stats: CallStats) -> str | None:
    """What a stage says when recorded failures were served instead of asked again (None when none were)."""
    if not stats.kept_failures:
        return None
    return (
        f"{stats.kept_failures} call(s) that failed the same way in an earlier run were not asked again (the "
        "reply cache records them); set retry_failed=true to ask them again."
    )


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
