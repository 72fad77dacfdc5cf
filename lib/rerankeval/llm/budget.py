"""No cost surprises: what a run of an LLM stage will cost, and how long it takes, before it calls the LLM, and a
budget that stops it.

:func:`plan` walks every call the run needs, looks each up in the reply cache, and estimates for the
misses the prompt tokens, the tokens the server must process (a prompt's head shared with the previous call
of the same query is served from llama-server's prompt cache), the completion tokens, the cost at the price
table and the time at the endpoint's measured prompt and generation rates (:mod:`.rates`: measured by the last
run, or by a probe of the local server; while no rate is known, a range). With ``max_calls`` / ``max_cost`` set,
the queries whose fresh calls would pass the budget are skipped before anything is sent: they keep their fused
order and the ledger marks them (``budget_skipped``).
:class:`Budget` also holds the limits while the run goes (a listwise run's later windows can miss the
cache where the plan expected hits): a call past the budget is refused and counted as failed.
:func:`announce` says the plan on the user's console (and returns it for the notebook page) before an LLM stage
spends, with :func:`price_warning` when a non-local endpoint has no price: every LLM stage calls it. It also
starts the endpoint's :class:`.rates.Meter` on the plan, which prints the revised time once after the first calls.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlparse

from rerankeval.core import progress
from rerankeval.core.errors import ReRankEvalError
from rerankeval.llm.rates import Meter, Rates, Replies

CHARS_PER_TOKEN = 4.0  # rough BPE average for estimates before any reply is cached; the ledger has real counts
TEMPLATE_TOKENS = 12  # chat-template tokens around the messages


class BadPrice(ReRankEvalError, ValueError):
    """A price or a budget limit that would make costs meaningless (negative, not a number)."""


def check_price(price: Sequence[float]) -> tuple[float, float]:
    """``price`` as (prompt, completion) USD per 1M tokens, each a finite number >= 0; else :class:`BadPrice`
    (a negative price made a negative cost, which also let ``max_cost`` admit any number of calls)."""
    try:
        got = tuple(float(p) for p in price)
    except (TypeError, ValueError):
        got = ()
    if len(got) != 2 or not all(math.isfinite(p) and p >= 0 for p in got):
        raise BadPrice(
            f"price_per_mtok={list(price) if isinstance(price, Sequence) else price!r} is not a price: "
            "it is two numbers >= 0, USD per 1M prompt and completion tokens (0: unpriced, e.g. a local "
            'model). Fix the notebook\'s parameter or P="price_per_mtok=[0.15,0.6]".'
        )
    return got[0], got[1]


def _limit(name: str, value: float) -> float:
    if not (math.isfinite(float(value)) and float(value) >= 0):
        raise BadPrice(
            f"{name}={value!r} is not a budget: it is a number >= 0 (0: no limit). Fix the notebook's "
            f'parameter or P="{name}=...".'
        )
    return float(value)


class Budget:
    """Thread-safe counters of fresh calls and cost against ``max_calls`` / ``max_cost`` (0 = no limit; a
    negative limit is refused with :class:`BadPrice`)."""

    def __init__(self, max_calls: int = 0, max_cost: float = 0.0):
        self.max_calls, self.max_cost = int(_limit("max_calls", max_calls)), _limit("max_cost", max_cost)
        self.calls, self.cost = 0, 0.0
        self._lock = threading.Lock()

    def reserve(self, est_cost: float) -> bool:
        """Reserve one call costing about ``est_cost``; False when it would pass a limit."""
        with self._lock:
            if self.max_calls and self.calls + 1 > self.max_calls:
                return False
            if self.max_cost and self.cost + est_cost > self.max_cost:
                return False
            self.calls += 1
            self.cost += est_cost
            return True

    def settle(self, est_cost: float, cost: float) -> None:
        """Replace a reserved call's estimate by its real cost."""
        with self._lock:
            self.cost += cost - est_cost


@dataclass
class CallEstimate:
    """One call the run needs: cached or not, and for a miss its estimated tokens.

    ``completion_tokens`` is what its reply may take (the most, or what this task's replies took in the last run);
    ``completion_low_tokens`` the fewest while that is unknown (None: known). ``reasks`` is how many times it may be
    asked again (an unreadable or cut-off reply), each taking up to ``reask_tokens`` and processing
    ``reask_processed_tokens`` (its prompt again, after the server's prefix cache). An ``optional`` call may not be
    sent: the run stops once it has enough (08 asks until enough drafts are kept)."""

    hit: bool
    prompt_tokens: float = 0.0
    processed_tokens: float = 0.0  # prompt tokens the server must process after its prefix cache
    completion_tokens: float = 0.0
    completion_low_tokens: float | None = None
    reasks: int = 0
    reask_tokens: float = 0.0
    reask_processed_tokens: float = 0.0
    optional: bool = False

    @property
    def fewest_tokens(self) -> float:
        """The fewest completion tokens its reply may take."""
        return self.completion_tokens if self.completion_low_tokens is None else self.completion_low_tokens


@dataclass
class Plan:
    """What the run will do, printed before the first call and kept in the stage summary."""

    queries: int = 0
    calls: int = 0
    cache_hits: int = 0
    fresh_calls: int = 0
    prompt_tokens: int = 0
    processed_tokens: int = 0
    completion_tokens: int = 0
    completion_low_tokens: int | None = None  # the fewest while the task's reply length is unknown (None: known)
    reask_requests: int = 0  # re-asks the fresh calls may need at most ...
    reask_processed_tokens: int = 0  # ... the prompt tokens they process and ...
    reask_completion_tokens: int = 0  # ... the completion tokens they take, all of them sent (a range: none to all)
    optional_calls: int = 0  # fresh calls the run may stop before (counted in the totals above; a range: none to all)
    optional_processed_tokens: int = 0
    optional_completion_tokens: int = 0  # their fewest completion tokens
    cost_usd: float = 0.0
    expected_s: float | None = None  # the fresh calls' seconds at known rates (the middle of the range else)
    expected_low_s: float | None = None  # the range while no rate is known (None when one is)
    expected_high_s: float | None = None
    rate_source: str = ""
    skipped: list[list[str]] = field(default_factory=list)  # [qid, pass] of tasks the budget skips
    skip_reason: str = ""
    what: str = "queries"  # what the tasks are ("queries"; "units" for the questions stage)

    meter: ClassVar[Meter | None] = None  # the endpoint's meter (set per plan by :func:`plan`), not a field

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def work(self, high: bool) -> tuple[float, float, float]:
        """(processed prompt tokens, completion tokens, requests) of the fresh calls: the most (``high``: every
        possible re-ask sent) or the fewest (none). A task whose replies were measured has its re-asks in its calls'
        tokens (:func:`call_estimate`) and no re-ask left here."""
        share = float(high)
        low = self.completion_low_tokens
        completion = self.completion_tokens if high or low is None else low
        skip = 1.0 - share  # the optional calls: all sent at the most, none at the fewest
        return (
            self.processed_tokens + share * self.reask_processed_tokens - skip * self.optional_processed_tokens,
            completion + share * self.reask_completion_tokens - skip * self.optional_completion_tokens,
            self.fresh_calls + share * self.reask_requests - skip * self.optional_calls,
        )

    def seconds_at(self, rates: Rates) -> float:
        """The fresh calls' seconds at ``rates``, the middle of their range when the work is not certain."""
        return (rates.seconds(*self.work(False)) + rates.seconds(*self.work(True))) / 2

    @property
    def certain(self) -> bool:
        """True when the work is known (replies' length and re-asks measured, or none possible)."""
        return self.work(False) == self.work(True)

    def time_at(self, rates: Rates) -> None:
        """Set the expected time of the fresh calls at ``rates``: a range while the rates or the replies' length and
        re-asks are unknown (its middle is ``expected_s``)."""
        self.rate_source, self.meter = rates.source(), rates.meter
        low, high = self.work(False), self.work(True)
        if not self.fresh_calls or (rates.known and low == high):
            self.expected_s = rates.seconds(*low)
            self.expected_low_s = self.expected_high_s = None
            return
        if rates.known:
            self.expected_low_s, self.expected_high_s = rates.seconds(*low), rates.seconds(*high)
        else:
            self.expected_low_s, self.expected_high_s = rates.span(*low[:2])[0], rates.span(*high[:2])[1]
        self.expected_s = (self.expected_low_s + self.expected_high_s) / 2

    def eta(self) -> str:
        """``~165 s``, or ``120-600 s`` while no rate is known."""
        if self.expected_low_s is not None and self.expected_high_s is not None:
            return f"{self.expected_low_s:,.0f}-{self.expected_high_s:,.0f} s"
        return "unknown" if self.expected_s is None else f"~{self.expected_s:,.0f} s"

    def message(self, priced: bool) -> str:
        hit = self.cache_hits / self.calls if self.calls else 0.0
        text = (
            f"Plan: {self.queries} {self.what}, {self.calls:,} LLM calls, {self.cache_hits:,} from the cache "
            f"({hit:.0%}); {self.fresh_calls:,} to send, ~{self.prompt_tokens:,} prompt tokens "
            f"(~{self.processed_tokens:,} to process after prefix caching) and up to ~{self.completion_tokens:,} "
            f"completion tokens{self._reasks()}; expected time {self.eta()} ({self.rate_source}"
            f"{self._unknowns()})"
        )
        if priced:
            text += f"; expected cost ${self.cost_usd:.4f}"
        if self.skipped:
            text += f". Budget: {len(self.skipped)} {self.what} skipped ({self.skip_reason})" + (
                "; they keep the fused order and are marked budget_skipped in the ledger"
                if self.what == "queries"
                else ""
            )
        return text + "."

    def _unknowns(self) -> str:
        """What the range spans besides the rates: the parts of the work not measured yet."""
        parts = [
            "the replies' length" if self.completion_low_tokens not in (None, self.completion_tokens) else "",
            "their re-asks" if self.reask_requests else "",
            "how many are asked before enough are kept" if self.optional_calls else "",
        ]
        told = " and ".join(p for p in parts if p)
        return f"; the range also spans what is not measured yet: {told}" if told else ""

    def _reasks(self) -> str:
        if not self.reask_requests:
            return ""
        return f", and up to {self.reask_requests:,} re-asks of unreadable or cut-off replies"


def shared_prefix(a: str, b: str) -> int:
    """Length of the common head of two prompts (what a one-slot prompt cache re-uses)."""
    return len(os.path.commonprefix([a, b]))


def prompt_tokens(prompt: str) -> float:
    """The estimated prompt tokens of a call (its messages' text joined, plus the chat template)."""
    return len(prompt) / CHARS_PER_TOKEN + TEMPLATE_TOKENS


def call_estimate(hit: bool, prompt: str, previous: str, completion_tokens: float) -> CallEstimate:
    """One call's estimate; the tokens to process are those after the head it shares with ``previous``."""
    new_chars = len(prompt) - shared_prefix(previous, prompt)
    return CallEstimate(
        hit, prompt_tokens(prompt), new_chars / CHARS_PER_TOKEN + TEMPLATE_TOKENS / 2, completion_tokens
    )


def task_estimate(
    hit: bool,
    prompt: str,
    previous: str,
    replies: Replies | None,
    *,
    most: float,
    fewest: float | None = None,
    reasks: int = 0,
    reask_most: float = 0.0,
) -> CallEstimate:
    """One call of a task whose replies the last run measured (``replies``): its completion tokens are theirs, its
    re-asks at their share. Not measured yet: from ``fewest`` (None: ``most``) to ``most`` completion tokens and up
    to ``reasks`` re-asks of up to ``reask_most`` tokens each, a range the plan's time spans. A re-ask repeats the
    prompt, which the server's prefix cache serves."""
    est = call_estimate(hit, prompt, previous, most)
    again = TEMPLATE_TOKENS / 2
    if replies is not None:
        est.completion_tokens = replies.first_tokens + replies.reask_share * replies.reask_tokens
        est.processed_tokens += replies.reask_share * again
        return est
    est.completion_low_tokens = fewest
    est.reasks, est.reask_tokens, est.reask_processed_tokens = reasks, reask_most, again
    return est


def plan(
    tasks: Sequence[tuple[str, str, list[CallEstimate]]],
    *,
    price: tuple[float, float],
    max_calls: int,
    max_cost: float,
    s_per_token: Rates | float | None = None,
    rate_source: str = "",
    rates: Rates | None = None,
) -> Plan:
    """Totals over ``tasks`` ((qid, pass, call estimates) in run order), skipping what the budget forbids,
    and their time at ``rates`` (what ``CachedLLM.measured_rate()`` gives; ``s_per_token`` takes them too, or,
    as before, one number: seconds per processed prompt token, generation included, from ``rate_source``).

    Tasks are admitted in order while their fresh calls and cost fit; the first one that does not, and
    every later one, is skipped (a run stops, it does not cherry-pick cheap queries).
    """
    price = check_price(price)
    rates = rates or _rates(s_per_token, rate_source)
    p = Plan()
    calls_used, cost_used, stopped = 0, 0.0, False
    processed = low = 0.0
    low_known = False
    for qid, pass_name, calls in tasks:
        fresh = [c for c in calls if not c.hit]
        cost = sum(c.prompt_tokens * price[0] + c.completion_tokens * price[1] for c in fresh) / 1e6
        over_calls = bool(max_calls) and calls_used + len(fresh) > max_calls
        over_cost = bool(max_cost) and cost_used + cost > max_cost
        if fresh and (stopped or over_calls or over_cost):
            stopped = True
            p.skipped.append([qid, pass_name])
            p.skip_reason = p.skip_reason or (f"max_calls={max_calls}" if over_calls else f"max_cost=${max_cost:g}")
            continue
        calls_used += len(fresh)
        cost_used += cost
        p.queries += 1
        p.calls += len(calls)
        p.cache_hits += len(calls) - len(fresh)
        p.fresh_calls += len(fresh)
        p.prompt_tokens += round(sum(c.prompt_tokens for c in fresh))
        processed += sum(c.processed_tokens for c in fresh)
        p.completion_tokens += round(sum(c.completion_tokens for c in fresh))
        low_known |= any(c.completion_low_tokens is not None for c in fresh)
        low += sum(c.fewest_tokens for c in fresh)
        p.reask_requests += sum(c.reasks for c in fresh)
        p.reask_processed_tokens += round(sum(c.reasks * c.reask_processed_tokens for c in fresh))
        p.reask_completion_tokens += round(sum(c.reasks * c.reask_tokens for c in fresh))
        optional = [c for c in fresh if c.optional]
        p.optional_calls += len(optional)
        p.optional_processed_tokens += round(sum(c.processed_tokens for c in optional))
        p.optional_completion_tokens += round(sum(c.fewest_tokens for c in optional))
    p.processed_tokens = round(processed)
    p.completion_low_tokens = round(low) if low_known else None
    p.cost_usd = cost_used
    p.time_at(rates)
    if rate_source and not isinstance(s_per_token, Rates):  # the caller's own figure says where it comes from
        p.rate_source = rate_source
    return p


def _rates(s_per_token: Rates | float | None, source: str) -> Rates:
    if isinstance(s_per_token, Rates):
        return s_per_token
    if s_per_token is not None and s_per_token > 0:
        return Rates(prompt_s=float(s_per_token), calls=1, origin=source or "the caller")
    return Rates()


def measured_rate(
    read: Callable[[], dict[str, Any] | None], endpoint: str, model: str, local: bool, meter: Meter | None = None
) -> tuple[Rates, str]:
    """(the rates, where they come from) for this endpoint and model: those the last run kept, or unknown."""
    rates = Rates.from_record((read() or {}).get(f"{endpoint}|{model}"), local=local, meter=meter)
    return rates, rates.source()


LOCAL_HOSTS = ("localhost", "::1")


def is_local_endpoint(base_url: str | None, endpoint_id: str | None = None) -> bool:
    """True for the local llama-server the project starts (its endpoint id starts with ``llama-server``), no
    endpoint at all (the project starts one), or a URL whose host is ``localhost``, ``127.x.x.x`` or ``::1``;
    any other host (a LAN address, a hostname alias of this machine) counts as non-local."""
    if (endpoint_id or "").startswith("llama-server") or not base_url:
        return True
    host = (urlparse(base_url if "//" in base_url else f"//{base_url}").hostname or "").lower()
    return host in LOCAL_HOSTS or host.startswith("127.")


def price_warning(base_url: str | None, endpoint_id: str | None, price: Sequence[float]) -> str | None:
    """The warning for a non-local endpoint with no price set (None when priced or local)."""
    if any(float(p) for p in price) or is_local_endpoint(base_url, endpoint_id):
        return None
    return (
        "Warning: costs are shown as $0 because no price is set: set price_per_mtok=[in, out] (USD per 1M "
        'prompt and completion tokens), e.g. make report P="price_per_mtok=[0.15,0.6] max_cost=1", or the '
        "notebook's parameter; max_calls / max_cost cap the spend (see .env.example)."
    )


def announce(
    plan: Plan,
    price: Sequence[float],
    base_url: str | None = None,
    endpoint_id: str | None = None,
    *,
    stage: str = "",
    warn: bool = True,
) -> str:
    """Say the plan (and, with ``warn``, the missing-price warning) on the console before the first call;
    returns the text (for the notebook page). A plan with nothing to send (all from the cache) stays off the
    console, so a warm run prints no plan line. With calls to send and no rate known, the endpoint's meter first
    probes it (the local server only, see :mod:`.rates`), and then follows the plan for the revised time."""
    head = f"{stage}: " if stage else ""
    if plan.meter is not None and plan.fresh_calls:  # calls to send: measure the endpoint if need be, then follow
        if plan.expected_low_s is not None and plan.meter.probe is not None:
            progress.say(f"{head}no rate is known for this endpoint yet: timing 4 tiny requests before the plan")
            probed = plan.meter.probe_rates()
            if probed is not None:
                plan.time_at(probed)
        plan.meter.start(plan, stage)
    lines = [head + plan.message(priced=any(float(p) for p in price))]
    warning = price_warning(base_url, endpoint_id, price) if warn else None
    if warning:
        lines.append(warning)
    if plan.fresh_calls or plan.skipped:
        for line in lines:
            progress.say(line)
    return "\n".join(lines)
