"""How fast an endpoint is, for the time a plan prints: prompt and generation rates, measured per call.

A call's time is ``processed prompt tokens x prompt_s + completion tokens x gen_s + call_s`` (:class:`Rates`).
The rates come from, in this order:

1. **the last run on this endpoint and model**: :class:`Meter` measures every request a :class:`~.call.CachedLLM`
   sends and keeps the rates in the reply cache's ``llm.rates.json`` (:meth:`.cache.LLMCache.record_rates`);
2. **a probe** (the local llama-server only, when no rate is known and the plan has calls to send): four tiny
   requests sent through the client, never the reply cache (:meth:`.call.CachedLLM.probe`);
3. **nothing**: the plan prints a range (:data:`UNKNOWN_LOCAL`, :data:`UNKNOWN_REMOTE`), never one made-up figure.

The rates of a request come from llama-server's ``timings`` (prompt tokens processed after its prefix cache, tokens
generated, and the milliseconds of each) when the server sends them, else from a non-negative least-squares fit of
the requests' seconds on their prompt and completion tokens (scipy's ``nnls``).

Once the first calls of a plan are done (a tenth of the plan, at least 3 and at most 5 calls: one call's time is too
noisy to scale a whole plan by), the meter prints, once, the revised time of the whole plan at the throughput
measured so far: ``rerank: revised: ~640 s (measured 110 prompt tok/s, 12 gen tok/s after 5 calls; planned 120-600
s)``. A call is done with its re-asks (a cut-off answer asked again with more tokens), so the revision counts them
at the rate they happened. Time lost to a request the client sent again (a timeout, a 5xx) is left out of both the
rates and the revision: it is an accident of one moment, not the endpoint's speed.

What a task's replies are like (:class:`Replies`: completion tokens of a first ask and of a re-ask, and the share
of calls re-asked) is measured the same way and kept beside the rates, per task, for the next plan of that task.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from rerankeval.core import progress
from rerankeval.llm.client import LLMCallError, Reply

# (prompt, generation) tokens/s bounds while nothing is measured. Local: the default 0.5B model on llama-server,
# 2 CPU cores: 100-145 prompt tokens/s idle (bench/rerank.py), 11-16 prompt and 1.2-3 generated tokens/s beside a
# load of 8 (this module's probe on this machine); remote: small hosted models to a GPU server.
UNKNOWN_LOCAL = ((10.0, 150.0), (1.0, 30.0))
UNKNOWN_REMOTE = ((300.0, 5000.0), (20.0, 200.0))
MIN_GEN_TOKENS = 8  # timed tokens (after each reply's first) a generation rate needs
REVISE_AFTER = 5  # calls done before the revised line (or a tenth of the plan, whichever comes first) ...
MIN_REVISE = 3  # ... but never fewer than this many
PROBE_TEXT = " ".join(
    [
        "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike november oscar "
        "papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
    ]
    * 4
)


@dataclass(frozen=True)
class Sample:
    """One request measured: tokens and seconds (``prompt_s``/``gen_s``: the server's split, when it sent it)."""

    prompt_n: float
    gen_n: float
    seconds: float
    prompt_s: float | None = None
    gen_s: float | None = None

    @classmethod
    def of(cls, reply: Reply) -> Sample:
        """The sample of a reply: llama-server's first token comes out of the prompt pass (``predicted_ms`` of a
        one-token reply is about 0), so the generation rate is over the tokens after it. Its seconds are those of
        the request that was answered: a request the client sent again after a timeout is not the endpoint's
        speed (:func:`lost`)."""
        seconds = reply.latency_s - lost(reply)
        t = reply.timings
        if t:
            split = t["prompt_ms"] / 1000, t["predicted_ms"] / 1000
            return cls(t["prompt_n"], max(0.0, t["predicted_n"] - 1), seconds, *split)
        return cls(float(reply.prompt_tokens), float(reply.completion_tokens), seconds)


def lost(reply: Reply) -> float:
    """Seconds of a reply's call spent before the request that was answered (the client's retries), else 0."""
    if reply.answered_s is None:
        return 0.0
    return max(0.0, reply.latency_s - reply.answered_s)


@dataclass(frozen=True)
class Replies:
    """What one task's replies were like on an endpoint and model: completion tokens of a first ask
    (``first_tokens``) and of a re-ask (``reask_tokens``), and re-asks per call (``reask_share``), over ``calls``
    calls sent. Kept per task beside the rates (:meth:`.call.CachedLLM.replies`); a plan of that task counts
    completion tokens and re-asks at these figures instead of a range."""

    first_tokens: float
    reask_tokens: float
    reask_share: float
    calls: int

    @classmethod
    def from_record(cls, rec: Any) -> Replies | None:
        try:
            got = cls(
                float(rec["first_tokens"]), float(rec["reask_tokens"]), float(rec["reask_share"]), int(rec["calls"])
            )
        except (KeyError, TypeError, ValueError):
            return None
        nums = (got.first_tokens, got.reask_tokens, got.reask_share)
        return got if got.calls > 0 and all(math.isfinite(v) and v >= 0 for v in nums) else None

    def merged(self, before: Replies | None, keep: int = 50) -> Replies:
        """These figures averaged with ``before`` (an earlier run's), weighted by their calls (the earlier ones at
        most ``keep``): a warm run that sends one call does not replace what eight measured."""
        if before is None:
            return self
        w0, w1 = min(before.calls, keep), self.calls
        avg = [(a * w0 + b * w1) / (w0 + w1) for a, b in zip(before.numbers(), self.numbers(), strict=True)]
        return Replies(*avg, calls=w0 + w1)

    def numbers(self) -> tuple[float, float, float]:
        return self.first_tokens, self.reask_tokens, self.reask_share

    def to_record(self) -> dict[str, Any]:
        return {
            "first_tokens": round(self.first_tokens, 2),
            "reask_tokens": round(self.reask_tokens, 2),
            "reask_share": round(self.reask_share, 4),
            "calls": self.calls,
        }


class Tally:
    """Counts of one run's calls of one task: first asks and re-asks sent, and their completion tokens."""

    def __init__(self) -> None:
        self.calls = self.reasks = 0
        self.first_tokens = self.reask_tokens = 0
        self._lock = threading.Lock()

    def add(self, attempt: int, reply: Reply) -> None:
        with self._lock:
            if attempt == 0:
                self.calls += 1
                self.first_tokens += reply.completion_tokens
            else:
                self.reasks += 1
                self.reask_tokens += reply.completion_tokens

    def replies(self) -> Replies | None:
        """The figures, or None when no first ask was sent."""
        if not self.calls:
            return None
        reask = self.reask_tokens / self.reasks if self.reasks else 0.0
        return Replies(self.first_tokens / self.calls, reask, self.reasks / self.calls, self.calls)


@dataclass(frozen=True)
class Rates:
    """Seconds per processed prompt token, per completion token and per call; ``calls`` = 0: not measured.

    ``origin`` says where the rates come from; ``local`` picks the range printed while they are unknown;
    ``meter`` is the :class:`Meter` of the endpoint they belong to (the plan hands it to ``budget.announce``)."""

    prompt_s: float = 0.0
    gen_s: float = 0.0
    call_s: float = 0.0
    calls: int = 0
    origin: str = ""
    local: bool = False
    meter: Meter | None = field(default=None, compare=False, repr=False)

    @property
    def known(self) -> bool:
        return self.calls > 0

    def seconds(self, processed: float, completion: float, calls: int) -> float:
        return processed * self.prompt_s + completion * self.gen_s + calls * self.call_s

    def describe(self) -> str:
        """``110 prompt tok/s, 12 gen tok/s`` (a part the measurements could not separate is left out)."""
        parts = [
            f"{_tps(self.prompt_s)} prompt tok/s" if self.prompt_s > 0 else "",
            f"{_tps(self.gen_s)} gen tok/s" if self.gen_s > 0 else "",
            f"{self.call_s:.2f} s per call" if self.call_s > 0.005 or not (self.prompt_s or self.gen_s) else "",
        ]
        return ", ".join(p for p in parts if p)

    def source(self) -> str:
        if self.known:
            return f"{self.describe()}, measured by {self.origin}"
        (plo, phi), (glo, ghi) = UNKNOWN_LOCAL if self.local else UNKNOWN_REMOTE
        what = "the local model on a CPU" if self.local else "a hosted or GPU endpoint"
        return (
            f"no rate measured yet for this endpoint: {plo:g}-{phi:g} prompt tok/s and {glo:g}-{ghi:g} gen "
            f"tok/s, the range of {what}; a revised time follows after the first calls"
        )

    def span(self, processed: float, completion: float) -> tuple[float, float]:
        """(fastest, slowest) seconds of the tokens at the range of an unknown endpoint."""
        (plo, phi), (glo, ghi) = UNKNOWN_LOCAL if self.local else UNKNOWN_REMOTE
        return processed / phi + completion / ghi, processed / plo + completion / glo

    def to_record(self) -> dict[str, Any]:
        """What ``llm.rates.json`` keeps: a rate these calls did not measure (0: e.g. no reply longer than one
        token) is left out, so the one measured before stays (``s_per_token``: what older versions read)."""
        rec = {k: v for k, v in (("prompt_s", self.prompt_s), ("gen_s", self.gen_s)) if v > 0}
        return {
            **rec,
            "call_s": self.call_s,
            "calls": self.calls,
            "s_per_token": self.prompt_s or self.gen_s or self.call_s,
        }

    @classmethod
    def from_record(cls, rec: Any, *, local: bool, meter: Meter | None) -> Rates:
        """The rates a record keeps, or unknown ones (an old record held only ``s_per_token``: measured again)."""
        try:
            got = [float(rec.get(k) or 0.0) for k in ("prompt_s", "gen_s", "call_s")]
            calls = int(rec["calls"])
        except (AttributeError, KeyError, TypeError, ValueError):
            return cls(local=local, meter=meter)
        if calls < 1 or not all(math.isfinite(v) and v >= 0 for v in got) or not any(got):
            return cls(local=local, meter=meter)
        return cls(*got, calls=calls, origin="the last run on this endpoint", local=local, meter=meter)


def _tps(s_per_token: float) -> str:
    return f"{1 / s_per_token:,.0f}" if 1 / s_per_token >= 10 else f"{1 / s_per_token:.1f}"


def fit(samples: Sequence[Sample], origin: str) -> Rates | None:
    """The rates of ``samples``: from the server's timings when every sample has them, else a non-negative
    least-squares fit of seconds on (prompt tokens, completion tokens, 1); None without a sample. A generation
    rate over fewer than :data:`MIN_GEN_TOKENS` timed tokens is not measured (0)."""
    if not samples:
        return None
    n = len(samples)
    if all(s.prompt_s is not None and s.gen_s is not None for s in samples):
        pn, gn = sum(s.prompt_n for s in samples), sum(s.gen_n for s in samples)
        ps, gs = sum(s.prompt_s or 0.0 for s in samples), sum(s.gen_s or 0.0 for s in samples)
        rest = max(0.0, sum(s.seconds for s in samples) - ps - gs) / n
        return Rates(ps / pn if pn else 0.0, gs / gn if gn >= MIN_GEN_TOKENS else 0.0, rest, n, origin)
    import numpy as np
    from scipy.optimize import nnls

    a = np.array([[s.prompt_n, s.gen_n, 1.0] for s in samples])
    coef, _ = nnls(a, np.array([s.seconds for s in samples]))
    return Rates(float(coef[0]), float(coef[1]), float(coef[2]), n, origin)


COUNT_SCHEMA = {  # the generation probe's reply format: the stages' requests are schema-constrained too, and
    "type": "json_schema",  # llama-server's grammar sampling makes each generated token slower than free text
    "json_schema": {
        "name": "count",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"numbers": {"type": "array", "items": {"type": "integer"}}},
            "required": ["numbers"],
            "additionalProperties": False,
        },
    },
}


def probe(chat: Callable[..., Reply]) -> list[Sample]:
    """Four tiny requests to ``chat`` (an ``LLMClient.chat``): a warm-up, a one-token reply to a short and to a
    ~150-token prompt, and 32 tokens generated in a JSON schema (as the stages ask) after a ~150-token prompt (12
    tokens after a short one measured 32-45 tokens/s where the stages' replies ran at 30-39, bench/plan_accuracy.py);
    their samples without the warm-up's ([] when one fails). About 3 s on the local 0.5B model on 2 idle cores (41 s
    for a ~200-token one at a load of 8 on them)."""
    nonce = uuid.uuid4().hex[:12]  # a new head: the server's prompt cache serves none of it
    asks = [
        ("Reply with OK.", 1, None),
        ("Reply with OK.", 1, None),
        (f"Reply with OK after reading: {PROBE_TEXT}", 1, None),
        (f'After reading: {PROBE_TEXT}\nCount from 1 to 200 as JSON: {{"numbers": [1, 2, ...]}}.', 32, COUNT_SCHEMA),
    ]
    samples = []
    try:
        for i, (text, max_tokens, fmt) in enumerate(asks):
            reply = chat(
                [{"role": "user", "content": f"{nonce}-{i} {text}"}], response_format=fmt, max_tokens=max_tokens, seed=0
            )
            samples.append(Sample.of(reply))
    except LLMCallError:
        return []
    return samples[1:]


class PlanLike(Protocol):
    fresh_calls: int

    def eta(self) -> str: ...

    def seconds_at(self, rates: Rates) -> float: ...


class Meter:
    """The requests one endpoint answered in a run: their samples, the plan in force and its revised time.

    ``keep(rates)`` stores measured rates (the reply cache's ``record_rates``); ``clock`` and ``say`` are
    replaceable in tests. Thread-safe: the reranker sends from several threads."""

    def __init__(
        self,
        keep: Callable[[Rates], None],
        *,
        probe: Callable[[], list[Sample]] | None = None,
        local: bool = False,
        say: Callable[[str], None] = progress.say,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keep, self.probe, self.local, self.say, self.clock = keep, probe, local, say, clock
        self.samples: list[Sample] = []
        self.plan: PlanLike | None = None
        self.stage = ""
        self.revised: float | None = None
        self.done = 0  # calls that sent a request, finished (with their re-asks)
        self.lost = 0.0  # seconds lost to requests the client sent again
        self._t0, self._n0, self._done0, self._lost0, self._after = 0.0, 0, 0, 0.0, 0
        self._lock = threading.Lock()

    def probe_rates(self) -> Rates | None:
        """The rates a probe measures now (kept for the next run), or None (no probe, or it got no reply)."""
        samples = self.probe() if self.probe is not None else []
        rates = fit(samples, "a probe just now")
        if rates is None:
            return None
        with self._lock:
            self.samples.extend(samples)
        self.keep(rates)
        return replace(rates, local=self.local, meter=self)

    def start(self, plan: PlanLike, stage: str = "") -> None:
        """Follow ``plan`` from now: its revised time is printed once after its first calls are done."""
        with self._lock:
            self.plan, self.stage, self.revised = plan, stage, None
            self._t0, self._n0, self._done0, self._lost0 = self.clock(), len(self.samples), self.done, self.lost
            self._after = max(MIN_REVISE, min(REVISE_AFTER, math.ceil(plan.fresh_calls / 10)))

    def observe(self, reply: Reply) -> None:
        """A request got ``reply``: measure it (without the time its call lost to the client's retries)."""
        with self._lock:
            if self.plan is not None and len(self.samples) == self._n0:  # the clock starts with the first request
                self._t0 = max(self._t0, self.clock() - reply.latency_s)  # (not with the client's first import)
            self.samples.append(Sample.of(reply))
            self.lost += lost(reply)

    def call_done(self) -> None:
        """A call that sent a request is done (its re-asks too): the first time enough calls of the plan are, say
        the revised time."""
        with self._lock:
            self.done += 1
            line = self._revise()
        if line:
            self.say(line)

    def _revise(self) -> str | None:
        """The revised line when it is due (once per plan, while calls remain), else None; under the lock."""
        plan, done = self.plan, self.done - self._done0
        if plan is None or self.revised is not None or done < self._after or done >= plan.fresh_calls:
            return None
        elapsed = max(self.clock() - self._t0 - (self.lost - self._lost0), 1e-9)
        samples = self.samples[self._n0 :]
        rates = fit(samples, "the first calls")
        self.revised = plan.fresh_calls * elapsed / done  # the pace so far ...
        if rates is not None:
            self.keep(rates)
            # ... or the rest of the plan at the rates measured so far (its re-asks at the middle of their range;
            # requests that overlapped in time share it), whichever is longer: a few first calls may be the quick
            # ones (07's first answers not cut off), and a plan may not count every re-ask
            overlap = max(1.0, sum(s.seconds for s in samples) / elapsed)
            rest = (1 - done / plan.fresh_calls) * plan.seconds_at(rates) / overlap
            self.revised = max(self.revised, elapsed + rest)
        measured = f"measured {rates.describe()} after {done} calls" if rates else f"after {done} calls"
        head = f"{self.stage}: " if self.stage else ""
        return f"{head}revised: ~{self.revised:,.0f} s ({measured}; planned {plan.eta()})"

    def finish(self) -> Rates | None:
        """Keep the rates of every request measured (at the end of a run); None when nothing was sent."""
        with self._lock:
            rates = fit(self.samples, "the last run on this endpoint")
            self.plan = None
        if rates is not None:
            self.keep(rates)
        return rates
