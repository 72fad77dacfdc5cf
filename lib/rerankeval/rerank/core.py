"""LLM reranking of a fused run's top candidates: prompt modes, repair, fallback, cache, ledger.

Modes (``RerankConfig.mode``):

- ``listwise``: RankGPT. Passages get short ids ``[1]..[n]``; the model returns ``{"ranking": [ids]}``.
  More candidates than ``window`` are ranked with a sliding window from the bottom of the list up
  (``window`` passages per call, moving by ``step``), so the best ones bubble to the top.
- ``pointwise``: a 0-10 grade per candidate, ``batch_size`` candidates per call (1 = one call each).
  Ties keep the fused order.
- ``yesno``: one short call per candidate; score = p(yes) / (p(yes) + p(no)) from the top_logprobs of the
  answer token. With ``yesno_json=True`` (default) the reply is constrained to ``{"relevant": "yes"|"no"}``:
  the answer is the first generated token that reads yes/no (the tokens before it are the fixed JSON
  prefix), and its top_logprobs give the probabilities. With ``yesno_json=False`` no schema is sent and
  the first token of a one-token plain answer is used (for endpoints that reject logprobs with schemas).
  Without logprobs in the reply, the parsed answer gives 1.0 / 0.0.

``alpha`` blends any mode with the first stage, per query:
``final = alpha * minmax(LLM score) + (1 - alpha) * minmax(fused score)``; listwise's LLM score is its rank
(linear from 1 at the top to 0). ``alpha = 1`` ranks by the LLM alone (ties in fused order).

Every reply goes through :mod:`.repair`; a query whose calls all fail keeps its fused order
(``fallback``); one where some failed keeps the fused places of those candidates (``partial_fallback``;
both count in the fallback rate). Each call goes through the one cached call, :mod:`rerankeval.llm.call`
(cache, re-asks, budget, circuit breaker, heartbeat, counters): only replies that could be used are cached, an
unusable one is asked again next time, and a cached entry that does not read (written by an older version) is
replaced by a fresh reply. Nothing is silent: the ledger has one row per query and pass, and the end of
a run says why queries fell back (:func:`.ledger.fallback_cause`).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, TypeVar

import pandas as pd
from pydantic import BaseModel

from rerankeval.core import progress as progress_mod
from rerankeval.core import runs as runs_mod
from rerankeval.core.ioutil import sha256_text
from rerankeval.core.names import HYBRID_RERANK
from rerankeval.core.settings import Settings, load_settings, redact
from rerankeval.llm import budget, schemas
from rerankeval.llm.breaker import BREAKER, BREAKER_THRESHOLD, UNREACHABLE, Breaker  # noqa: F401 (re-exported)
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import AsksLLM, CachedLLM, Call, CallStats
from rerankeval.llm.client import FORMATS, LLMClient, Reply
from rerankeval.llm.repair import Counts, Unusable, order_by_scores, parse, repair_order, repair_scores
from rerankeval.rerank import prompts
from rerankeval.rerank.ledger import fallback_cause, to_frame

MODES = ("listwise", "pointwise", "yesno")
STABILITY = ("none", "reversed", "shuffled")
VARIANT = HYBRID_RERANK
CACHE_VERSION = 1
T = TypeVar("T")


@dataclass(frozen=True)
class RerankConfig:
    mode: str = "yesno"
    alpha: float = 0.1  # weight of the LLM score in the blend; 1 = LLM order only (see bench/rerank_modes.py)
    window: int = 20  # listwise: passages per call
    step: int = 10  # listwise: window stride
    batch_size: int = 1  # pointwise: candidates per call
    max_passage_chars: int = 200  # passage text is clipped to this many characters (0 = whole text); bench/rerank.py
    seed: int = 0
    top_logprobs: int = 10  # yesno
    yesno_json: bool = True  # yesno: constrain the reply to {"relevant": "yes"|"no"}
    content_retries: int = 1  # re-asks after an unreadable reply (transport retries are the client's)
    concurrency: int = 1  # queries reranked in parallel
    price_per_mtok: tuple[float, float] = (0.0, 0.0)  # USD per 1M (prompt, completion) tokens
    max_calls: int = 0  # budget: LLM requests this run may send (cache hits are free); 0 = no limit
    max_cost: float = 0.0  # budget: USD this run may spend at price_per_mtok; 0 = no limit

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.window < 2 or not 1 <= self.step <= self.window:
            raise ValueError(f"need window >= 2 and 1 <= step <= window, got {self.window}/{self.step}")
        if self.batch_size < 1 or self.concurrency < 1 or self.content_retries < 0:
            raise ValueError("batch_size and concurrency must be >= 1, content_retries >= 0")
        if self.max_calls < 0 or self.max_cost < 0:
            raise ValueError(
                f"max_calls and max_cost must be >= 0 (0 = no limit), got {self.max_calls}/{self.max_cost}"
            )


@dataclass(frozen=True)
class Candidate:
    docid: str
    text: str
    fused: float  # first-stage score
    fused_rank: int  # 0-based position in the fused list


@dataclass
class QueryResult:
    qid: str
    pass_name: str
    order: list[str]  # the pool, reranked
    llm_scores: dict[str, float | None]
    presented: list[str]
    row: dict[str, Any]


def sliding_windows(n: int, window: int, step: int) -> list[tuple[int, int]]:
    """RankGPT's windows ``(start, end)`` from the bottom of the list to the top."""
    if n <= window:
        return [(0, n)] if n else []
    out = []
    end = n
    while True:
        start = max(0, end - window)
        out.append((start, end))
        if start == 0:
            return out
        end -= step


def minmax(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [(v - lo) / (hi - lo) if hi > lo else 0.0 for v in values]


def kendall_tau(a: list[str], b: list[str]) -> float:
    """Kendall's tau between two orderings of the same items (1 = same order, -1 = reversed)."""
    pos = {d: i for i, d in enumerate(b)}
    n = len(a)
    if n < 2:
        return 1.0
    conc = disc = 0
    for i in range(n):
        for j in range(i + 1, n):
            if pos[a[i]] < pos[a[j]]:
                conc += 1
            else:
                disc += 1
    return (conc - disc) / (n * (n - 1) / 2)


_YES, _NO = {"yes"}, {"no"}


def _norm_token(tok: str) -> str:
    return tok.strip().strip("\"'`.,:;!{}[] \n\t").lower()


def yes_prob(reply: Reply, json_reply: bool) -> float:
    """p(yes) / (p(yes) + p(no)) at the first yes/no token of the reply; raises Unusable."""
    for t in reply.logprobs or []:
        norm = _norm_token(t["token"])
        if norm in _YES or norm in _NO:
            p_yes = sum(math.exp(lp) for tok, lp in t["top"] if _norm_token(tok) in _YES)
            p_no = sum(math.exp(lp) for tok, lp in t["top"] if _norm_token(tok) in _NO)
            if p_yes + p_no > 0:
                return p_yes / (p_yes + p_no)
            return 1.0 if norm in _YES else 0.0
    # no logprobs (or no yes/no token in them): read the answer itself
    if json_reply:
        answer = parse(reply.content, schemas.YesNoReply)[0].relevant
    else:
        answer = (reply.content or "").split()[0] if (reply.content or "").split() else ""
    norm = _norm_token(answer)
    if norm in _YES:
        return 1.0
    if norm in _NO:
        return 0.0
    raise Unusable("NoYesNo", f"no yes/no answer in {reply.content[:80]!r}")


@dataclass
class CallSpec:
    """One LLM call: the prompt, the reply schema and the candidates it is about."""

    kind: str  # prompt template (see prompts.TEMPLATES)
    messages: list[dict[str, str]]
    strict: type[BaseModel] | None
    schema_name: str
    cands: list[Candidate]
    texts: list[str]
    max_tokens: int
    top_logprobs: int

    @property
    def prompt(self) -> str:
        return "\n".join(m["content"] for m in self.messages)


Task = tuple[str, str, list[Candidate]]  # (qid, pass, pool in the order the LLM sees it)


class Reranker(AsksLLM):
    """Reranks candidate pools with one endpoint; use as a context manager (closes the HTTP client)."""

    def __init__(
        self,
        config: RerankConfig,
        settings: Settings | None = None,
        cache: LLMCache | None = None,
        client: LLMClient | None = None,
    ):
        self.config = config
        self.settings = settings or load_settings()
        # after BREAKER_THRESHOLD consecutive calls failed to reach the endpoint, the rest fall back without calling
        self.llm = CachedLLM.open(self.settings, cache, client, max_connections=max(2, config.concurrency),
                                  breaker=Breaker(BREAKER_THRESHOLD), price=config.price_per_mtok,
                                  budget=budget.Budget(config.max_calls, config.max_cost))
        self.cache, self.client, self.model = self.llm.cache, self.llm.client, self.llm.model
        self.endpoint = self.llm.endpoint  # never a credential: it is part of stored keys

    @property
    def messages(self) -> dict[str, str]:
        """Error class -> the first message of that class (for the summary)."""
        return self.llm.messages

    # -- the calls each mode makes --
    def _yesno_spec(self, query: str, cand: Candidate, text: str) -> CallSpec:
        j = self.config.yesno_json
        return CallSpec("yesno" if j else "yesno-plain", prompts.yesno(query, text, j),
                        schemas.YesNoStrict if j else None, "relevance_answer", [cand], [text],
                        max_tokens=12 if j else 1, top_logprobs=self.config.top_logprobs)

    def _pointwise_spec(self, query: str, cands: list[Candidate], texts: list[str]) -> CallSpec:
        m = len(cands)
        return CallSpec("pointwise", prompts.pointwise(query, texts), schemas.pointwise_model(m), "pointwise_grades",
                        cands, texts, max_tokens=12 if m == 1 else 14 * m + 24, top_logprobs=0)

    def _listwise_spec(self, query: str, cands: list[Candidate], texts: list[str]) -> CallSpec:
        m = len(cands)
        return CallSpec("listwise", prompts.listwise(query, texts), schemas.listwise_model(m), "listwise_ranking",
                        cands, texts, max_tokens=5 * m + 24, top_logprobs=0)

    def specs(self, query: str, pool: list[Candidate], texts: list[str]) -> list[CallSpec]:
        """Every call one pool needs, in order. Listwise windows after the first are shown on the input
        order (their real contents depend on the earlier windows' replies): good for estimates only."""
        cfg = self.config
        if cfg.mode == "yesno":
            return [self._yesno_spec(query, c, t) for c, t in zip(pool, texts, strict=True)]
        if cfg.mode == "pointwise":
            starts = range(0, len(pool), cfg.batch_size)
            return [
                self._pointwise_spec(query, pool[s : s + cfg.batch_size], texts[s : s + cfg.batch_size]) for s in starts
            ]
        return [
            self._listwise_spec(query, pool[s:e], texts[s:e])
            for s, e in sliding_windows(len(pool), cfg.window, cfg.step)
        ]

    # -- one LLM call, cached, with re-asks after unreadable replies --
    def _material(self, spec: CallSpec, query: str) -> dict[str, Any]:
        """Everything the reply depends on: its cache key."""
        return {
            "v": CACHE_VERSION,
            "model": self.model,
            "endpoint": self.endpoint,
            "template": prompts.template_hash(spec.kind),
            "schema": schemas.schema_hash(spec.strict),
            "gen": {
                "temperature": 0,
                "seed": self.config.seed,
                "max_tokens": spec.max_tokens,
                "top_logprobs": spec.top_logprobs,
            },
            "query": query,
            "candidates": [[c.docid, sha256_text(t)] for c, t in zip(spec.cands, spec.texts, strict=True)],
        }

    def _call(self, stats: CallStats, spec: CallSpec, query: str, read: Callable[[Reply], Any]) -> Any | None:
        """``read(reply)`` of a cached or fresh reply (:meth:`.CachedLLM.call`); None on failure."""
        rf = schemas.response_format(spec.strict, spec.schema_name) if spec.strict is not None else None
        call = Call(spec.messages, self._material(spec, query), spec.max_tokens, response_format=rf,
                    seed=self.config.seed, top_logprobs=spec.top_logprobs)
        got = self.llm.call(call, read, stats, retries=self.config.content_retries)
        return got.value if got.ok else None

    def _repaired_call(self, stats: CallStats, spec: CallSpec, query: str,
                       read: Callable[[Reply], tuple[T, Counts]], counts: Counts) -> T | None:
        """:meth:`_call` of a reply read as (value, repair counts): the counts are added to ``counts``."""
        got = self._call(stats, spec, query, read)
        if got is None:
            return None
        counts += got[1]
        return got[0]

    # -- the modes: each returns LLM scores by presented index (None = not scored) and repair counts --
    def _listwise(self, query: str, pool: list[Candidate], texts: list[str], stats: CallStats):
        cfg = self.config
        n = len(pool)
        cur = list(range(n))
        counts = Counts()
        informative = False
        for s, e in sliding_windows(n, cfg.window, cfg.step):
            sub = cur[s:e]
            m = len(sub)

            def read(reply: Reply, m: int = m) -> tuple[list[int], Counts]:
                obj, _ = parse(reply.content, schemas.ListwiseReply, array_key="ranking")
                perm, c = repair_order(obj.ranking, m)
                if c.n_missing >= m:
                    raise Unusable("EmptyRanking", f"the ranking names none of the {m} passages: {obj.ranking!r}"[:200])
                return perm, c

            spec = self._listwise_spec(query, [pool[i] for i in sub], [texts[i] for i in sub])
            perm = self._repaired_call(stats, spec, query, read, counts)
            if perm is None:
                continue
            informative = True
            cur[s:e] = [sub[j] for j in perm]
        if not informative:
            return None, counts
        # rank-derived LLM score: 1 at the top, 0 at the bottom
        scores: list[float | None] = [0.0] * n
        for pos, i in enumerate(cur):
            scores[i] = (n - 1 - pos) / (n - 1) if n > 1 else 1.0
        return scores, counts

    def _pointwise(self, query: str, pool: list[Candidate], texts: list[str], stats: CallStats):
        cfg = self.config
        n = len(pool)
        scores: list[float | None] = [None] * n
        counts = Counts()
        for s in range(0, n, cfg.batch_size):
            idx = list(range(s, min(n, s + cfg.batch_size)))
            m = len(idx)

            def read(reply: Reply, m: int = m) -> tuple[list[float | None], Counts]:
                if m == 1:
                    obj, _ = parse(reply.content, schemas.PointwiseSingleReply)
                    items = [(1, obj.score)]
                else:
                    obj, _ = parse(reply.content, schemas.PointwiseBatchReply, array_key="scores")
                    items = [(it.id, it.score) for it in obj.scores]
                vals, c = repair_scores(items, m)
                if all(v is None for v in vals):
                    raise Unusable("NoValidScore", f"no grade from 0 to 10 for any of the {m} passages")
                return vals, c

            spec = self._pointwise_spec(query, [pool[i] for i in idx], [texts[i] for i in idx])
            vals = self._repaired_call(stats, spec, query, read, counts)
            for j, v in zip(idx, vals or [None] * m, strict=True):
                scores[j] = v
        return scores, counts

    def _yesno(self, query: str, pool: list[Candidate], texts: list[str], stats: CallStats):
        json_reply = self.config.yesno_json
        scores: list[float | None] = [None] * len(pool)
        for i, (c, t) in enumerate(zip(pool, texts, strict=True)):
            # a failed call leaves None: the candidate keeps its fused place (n_failed)
            scores[i] = self._call(stats, self._yesno_spec(query, c, t), query, lambda r: yes_prob(r, json_reply))
        return scores, Counts()

    # -- one query --
    def rerank_query(self, qid: str, query: str, pool: list[Candidate], pass_name: str = "main") -> QueryResult:
        """Rerank one pool (given in the order the LLM should see it). Never raises."""
        cfg = self.config
        t0 = time.perf_counter()
        stats = CallStats(label=f"query {qid}" + (f", {pass_name} pass" if pass_name != "main" else ""))
        texts = [prompts.clip(c.text, cfg.max_passage_chars) for c in pool]
        fused = sorted(pool, key=lambda c: c.fused_rank)
        counts = Counts()
        scores: list[float | None] | None = None
        try:
            if pool:
                fn = {"listwise": self._listwise, "pointwise": self._pointwise, "yesno": self._yesno}[cfg.mode]
                scores, counts = fn(query, pool, texts, stats)
        except Exception as exc:  # a bug must not lose the run: fall back, and say so in the ledger
            stats.error(f"{type(exc).__name__}: {redact(exc)[:200]}")
            scores = None
        if scores is not None and all(s is None for s in scores):
            scores = None
        by_doc = {c.docid: s for c, s in zip(pool, scores or [None] * len(pool), strict=True)}
        if scores is None:
            status = "fallback"
            order = [c.docid for c in fused]
        else:
            # some calls failed: their candidates kept their fused places (a fallback for that part)
            status = "partial_fallback" if stats.failed else "repaired" if counts.repaired else "ok"
            order = self._final_order(pool, scores, fused)
        row = self._row(qid, pass_name, status, len(pool), counts, stats, time.perf_counter() - t0)
        return QueryResult(qid, pass_name, order, by_doc, [c.docid for c in pool], row)

    def skipped_query(self, qid: str, pool: list[Candidate], pass_name: str, reason: str) -> QueryResult:
        """A query the budget skipped: fused order, no call, marked in the ledger."""
        stats = CallStats()
        stats.error(f"BudgetSkipped({reason})")
        fused = sorted(pool, key=lambda c: c.fused_rank)
        row = self._row(qid, pass_name, "fallback", len(pool), Counts(), stats, 0.0)
        row["budget_skipped"] = True
        return QueryResult(
            qid, pass_name, [c.docid for c in fused], {c.docid: None for c in pool}, [c.docid for c in pool], row
        )

    def _row(
        self, qid: str, pass_name: str, status: str, n: int, counts: Counts, stats: CallStats, seconds: float
    ) -> dict[str, Any]:
        """The query's ledger row (see :mod:`.ledger` and ``EXTRA_LEDGER_COLUMNS``)."""
        return {
            "qid": qid,
            "pass": pass_name,
            "variant": VARIANT if pass_name == "main" else f"{VARIANT}@{pass_name}",
            "mode": self.config.mode,
            "alpha": self.config.alpha,
            "model": self.model,
            "status": status,
            "n_pool": n,
            "n_invalid": counts.n_invalid,
            "n_duplicate": counts.n_duplicate,
            "n_missing": counts.n_missing,
            "n_failed": stats.failed,
            "retries": stats.retries,
            "error": ";".join(stats.errors),
            "llm_calls": stats.calls,
            "cache_hits": stats.cache_hits,
            "cache_hit": bool(stats.calls) and stats.cache_hits == stats.calls,
            "requests": stats.requests,
            "latency_s": round(seconds, 4),
            "prompt_tokens": stats.prompt_tokens,
            "completion_tokens": stats.completion_tokens,
            "saved_prompt_tokens": stats.saved_prompt_tokens,
            "saved_completion_tokens": stats.saved_completion_tokens,
            "cost": self.llm.cost(stats.prompt_tokens, stats.completion_tokens),
            "response_format": FORMATS[stats.format_level] if stats.calls else "",
            "llm_seconds": round(stats.llm_seconds, 4),
            "fresh_seconds": round(stats.fresh_seconds, 4),
            "budget_skipped": False,
        }

    def _final_order(self, pool: list[Candidate], scores: list[float | None], fused: list[Candidate]) -> list[str]:
        """Blend with the fused score and order; unscored candidates keep their fused positions."""
        a = self.config.alpha
        by_rank: list[float | None] = [None] * len(pool)
        pos = {c.docid: i for i, c in enumerate(fused)}
        for c, s in zip(pool, scores, strict=True):
            by_rank[pos[c.docid]] = s
        scored = [i for i, s in enumerate(by_rank) if s is not None]
        llm = dict(zip(scored, minmax([by_rank[i] for i in scored]), strict=True))
        fz = dict(zip(scored, minmax([fused[i].fused for i in scored]), strict=True))
        blended: list[float | None] = [(a * llm[i] + (1 - a) * fz[i]) if i in llm else None for i in range(len(fused))]
        return [fused[i].docid for i in order_by_scores(blended)]

    # -- the estimate before any call --
    def estimate(self, queries: Mapping[str, str], tasks: list[Task]) -> budget.Plan:
        """Calls, cache hits, tokens, time and cost of ``tasks``; the budget's skips (see :mod:`.budget`)."""
        cfg = self.config
        s_per_token, source = self.llm.measured_rate()
        per_task = []
        planned: set[str] = set()  # keys an earlier task sends: cached by the time a later one asks
        for qid, pass_name, pool in tasks:
            texts = [prompts.clip(c.text, cfg.max_passage_chars) for c in pool]
            per_task.append((qid, pass_name, self._estimate_calls(queries[qid], pool, texts, planned)))
        return budget.plan(
            per_task,
            price=cfg.price_per_mtok,
            max_calls=cfg.max_calls,
            max_cost=cfg.max_cost,
            s_per_token=s_per_token,
            rate_source=source,
        )

    def _estimate_calls(
        self, query: str, pool: list[Candidate], texts: list[str], planned: set[str]
    ) -> list[budget.CallEstimate]:
        out: list[budget.CallEstimate] = []
        previous = ""
        first_hit = None
        for i, spec in enumerate(self.specs(query, pool, texts)):
            later_window = self.config.mode == "listwise" and i > 0
            if later_window:  # its contents depend on the first window's reply: cached together or not at all
                hit = bool(first_hit)
            else:
                key = self.cache.key(self._material(spec, query))
                hit = key in planned or self.cache.get(key) is not None
                planned.add(key)
            first_hit = hit if first_hit is None else first_hit
            out.append(budget.call_estimate(hit, spec.prompt, previous, spec.max_tokens))
            previous = spec.prompt
        return out

    # -- many queries --
    def tasks(self, pools: Mapping[str, list[Candidate]], stability: str = "none") -> list[Task]:
        """All queries (sorted qid), main pass then the optional stability pass."""
        if stability not in STABILITY:
            raise ValueError(f"stability must be one of {STABILITY}, got {stability!r}")
        tasks: list[Task] = [(qid, "main", pools[qid]) for qid in sorted(pools)]
        if stability != "none":
            tasks += [(qid, stability, perturb(pools[qid], stability, self.config.seed, qid)) for qid in sorted(pools)]
        return tasks

    def rerank_pools(
        self,
        queries: Mapping[str, str],
        pools: Mapping[str, list[Candidate]],
        stability: str = "none",
        progress: bool = True,
        plan: budget.Plan | None = None,
    ) -> list[QueryResult]:
        """All tasks (see :meth:`tasks`), ``concurrency`` at a time; the ``plan``'s skipped ones are not sent.

        Results do not depend on the concurrency: each query is independent and outputs are assembled
        in a fixed order.
        """
        tasks = self.tasks(pools, stability)
        skipped = {(q, p) for q, p in (plan.skipped if plan else [])}
        reason = plan.skip_reason if plan else ""

        def work(t: Task) -> QueryResult:
            if (t[0], t[1]) in skipped:
                return self.skipped_query(t[0], t[2], t[1], reason)
            return self.rerank_query(t[0], queries[t[0]], t[2], t[1])

        desc = f"rerank {self.config.mode}"
        beat = progress_mod.Heartbeat(total=plan.fresh_calls if plan else None) if progress else progress_mod.QUIET
        self.heartbeat = beat
        try:
            with beat:
                if self.config.concurrency == 1:
                    return [work(t) for t in _track(tasks, progress, desc)]
                results: dict[tuple[str, str], QueryResult] = {}
                with ThreadPoolExecutor(max_workers=self.config.concurrency, thread_name_prefix="rerank") as ex:
                    futs = {ex.submit(work, t): (t[0], t[1]) for t in tasks}
                    for f in _track(as_completed(futs), progress, desc, total=len(futs)):
                        results[futs[f]] = f.result()
                return [results[(t[0], t[1])] for t in tasks]
        finally:
            self.heartbeat = progress_mod.QUIET

    def record_rate(self, results: list[QueryResult], plan: budget.Plan) -> None:
        """Keep this run's seconds per processed prompt token for the next run's estimate."""
        fresh_s = sum(r.row["fresh_seconds"] for r in results)
        sent = sum(r.row["requests"] for r in results)
        if fresh_s > 0 and sent and plan.fresh_calls and plan.processed_tokens:
            per_call_tokens = plan.processed_tokens / plan.fresh_calls
            self.cache.record_rate(self.endpoint, self.model, fresh_s / (per_call_tokens * sent))


def perturb(pool: list[Candidate], how: str, seed: int, qid: str) -> list[Candidate]:
    if how == "reversed":
        return list(reversed(pool))
    out = list(pool)
    random.Random(f"{seed}:{qid}").shuffle(out)
    return out


def _track(items: Iterable[T], enabled: bool, desc: str, total: int | None = None) -> Iterable[T]:
    return progress_mod.track(items, total=total, desc=desc, unit="query") if enabled else items


# -- from run files to results --
@dataclass
class RerankResult:
    run: runs_mod.Run  # main pass: reranked pool, then the rest of the fused list
    ledger: pd.DataFrame
    candidates: pd.DataFrame  # qid, pass, docid, fused_rank, presented_rank, llm_score, final_rank
    stability: pd.DataFrame | None  # qid, kendall_tau, top1_agree
    model: str
    config: RerankConfig
    wall_s: float
    plan: dict[str, Any] | None = None  # budget.Plan.to_dict(): the estimate printed before the first call
    pool_k: int | None = None  # candidates per query given to the LLM (the rest keep their fused order)
    fallback_cause: str | None = None  # why queries of the main pass fell back (None when none did)


def select_queries(fused: runs_mod.Run, queries: Mapping[str, str], max_queries: int = 0) -> list[str]:
    """Queries with a fused list and a text, sorted by qid; the first ``max_queries`` if > 0."""
    qids = sorted(q for q in fused if q in queries)
    return qids[:max_queries] if max_queries and max_queries > 0 else qids


def build_pools(
    fused: runs_mod.Run,
    texts: Mapping[str, Mapping[str, str]],
    qids: list[str],
    pool_k: int,
) -> dict[str, list[Candidate]]:
    """The top ``pool_k`` of each query's fused list with their passage texts."""
    pools: dict[str, list[Candidate]] = {}
    for q in qids:
        items = runs_mod.ranked(fused[q])[:pool_k]
        pools[q] = [Candidate(d, texts[q][d], float(s), i) for i, (d, s) in enumerate(items)]
    return pools


def rerank_run(
    fused: runs_mod.Run,
    queries: Mapping[str, str],
    texts: Mapping[str, Mapping[str, str]],
    config: RerankConfig,
    *,
    pool_k: int = 20,
    max_queries: int = 0,
    stability: str = "none",
    settings: Settings | None = None,
    cache: LLMCache | None = None,
    client: LLMClient | None = None,
    progress: bool = True,
) -> RerankResult:
    """Rerank the top ``pool_k`` of ``fused`` for the selected queries; see the module docstring.

    Before the first call it prints the plan (calls, cache hits, tokens, expected time and cost; with
    ``progress``) and skips what the budget (``max_calls`` / ``max_cost``) does not allow.
    """
    if pool_k < 1:
        raise ValueError(f"pool_k must be >= 1, got {pool_k}")
    t0 = time.perf_counter()
    qids = select_queries(fused, queries, max_queries)
    pools = build_pools(fused, texts, qids, pool_k)
    with Reranker(config, settings=settings, cache=cache, client=client) as rr:
        plan = rr.estimate(queries, rr.tasks(pools, stability))
        if progress:
            print(plan.message(priced=any(config.price_per_mtok)), flush=True)
        results = rr.rerank_pools(queries, pools, stability=stability, progress=progress, plan=plan)
        rr.record_rate(results, plan)
        model, messages = rr.model, dict(rr.messages)
    ledger = ledger_frame([r.row for r in results])
    cause = fallback_cause(ledger, messages)
    if progress and cause is not None:
        print(f"Fallback: {cause.text}", flush=True)
    return RerankResult(
        run=reranked_run(fused, results, qids, pool_k),
        ledger=ledger,
        candidates=candidates_frame(results, pools),
        stability=stability_frame(results, qids, stability),
        model=model,
        config=config,
        wall_s=time.perf_counter() - t0,
        plan=plan.to_dict(),
        pool_k=pool_k,
        fallback_cause=cause.text if cause else None,
    )


def reranked_run(fused: runs_mod.Run, results: list[QueryResult], qids: list[str], pool_k: int) -> runs_mod.Run:
    """The main pass: each query's reranked pool, then the rest of its fused list (scores 1/rank)."""
    main = {r.qid: r for r in results if r.pass_name == "main"}
    run: runs_mod.Run = {}
    for q in qids:
        rest = [d for d, _ in runs_mod.ranked(fused[q])[pool_k:]]
        run[q] = {d: 1.0 / (i + 1) for i, d in enumerate(main[q].order + rest)}
    return run


def ledger_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The ledger (:data:`.ledger.COLUMNS`) of these rows."""
    return to_frame(rows)


CANDIDATE_COLUMNS = ["qid", "pass", "docid", "fused_rank", "presented_rank", "llm_score", "final_rank"]


def candidates_frame(results: list[QueryResult], pools: Mapping[str, list[Candidate]]) -> pd.DataFrame:
    rows = []
    for r in results:
        fused_rank = {c.docid: c.fused_rank for c in pools[r.qid]}
        final = {d: i for i, d in enumerate(r.order)}
        for i, d in enumerate(r.presented):
            rows.append([r.qid, r.pass_name, d, fused_rank[d] + 1, i + 1, r.llm_scores.get(d), final[d] + 1])
    return pd.DataFrame(rows, columns=CANDIDATE_COLUMNS)


def stability_frame(results: list[QueryResult], qids: list[str], stability: str) -> pd.DataFrame | None:
    """Per query: Kendall tau and top-1 agreement of the main pass and the stability pass."""
    if stability == "none":
        return None
    main = {r.qid: r for r in results if r.pass_name == "main"}
    other = {r.qid: r for r in results if r.pass_name == stability}
    rows = [
        [q, kendall_tau(main[q].order, other[q].order), bool(main[q].order[:1] == other[q].order[:1])] for q in qids
    ]
    return pd.DataFrame(rows, columns=["qid", "kendall_tau", "top1_agree"])

