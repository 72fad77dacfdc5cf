"""The reranker: one query's pool reranked (with the fused order as fallback), many queries, the estimate first."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, TypeVar

from rerankeval.core import progress as progress_mod
from rerankeval.core.names import HYBRID_RERANK
from rerankeval.core.settings import Settings, redact
from rerankeval.llm import budget
from rerankeval.llm.breaker import BREAKER_THRESHOLD, Breaker
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import AsksLLM, CachedLLM, CallStats
from rerankeval.llm.client import FORMATS, LLMClient
from rerankeval.llm.repair import Counts, order_by_scores
from rerankeval.rerank import prompts
from rerankeval.rerank.config import MAIN_PASS, NO_STABILITY, STABILITY, Candidate, QueryResult, RerankConfig, Task
from rerankeval.rerank.modes import ModeCalls
from rerankeval.rerank.scores import minmax, perturb

T = TypeVar("T")


class Reranker(AsksLLM):
    """Reranks candidate pools with the endpoint of ``settings``; use as a context manager (closes the HTTP client).

    Its :class:`~.modes.ModeCalls` (``calls``) asks the model; this class orders, falls back, keeps the ledger."""

    def __init__(
        self,
        config: RerankConfig,
        settings: Settings,
        cache: LLMCache | None = None,
        client: LLMClient | None = None,
    ):
        self.config = config
        self.settings = settings
        # after BREAKER_THRESHOLD consecutive calls failed to reach the endpoint, the rest fall back without calling
        self.llm = CachedLLM.open(
            self.settings,
            cache,
            client,
            max_connections=max(2, config.concurrency),
            breaker=Breaker(BREAKER_THRESHOLD),
            price=config.price_per_mtok,
            budget=budget.Budget(config.max_calls, config.max_cost),
        )
        self.cache, self.client, self.model = self.llm.cache, self.llm.client, self.llm.model
        self.endpoint = self.llm.endpoint  # never a credential: it is part of stored keys
        self.calls = ModeCalls(config, self.llm)

    @property
    def messages(self) -> dict[str, str]:
        """Error class -> the first message of that class (for the summary)."""
        return self.llm.messages

    # -- one query --
    def rerank_query(self, qid: str, query: str, pool: list[Candidate], pass_name: str = MAIN_PASS) -> QueryResult:
        """Rerank one pool (given in the order the LLM should see it). Never raises."""
        cfg = self.config
        t0 = time.perf_counter()
        stats = CallStats(label=f"query {qid}" + (f", {pass_name} pass" if pass_name != MAIN_PASS else ""))
        texts = [prompts.clip(c.text, cfg.max_passage_chars) for c in pool]
        fused = sorted(pool, key=lambda c: c.fused_rank)
        counts = Counts()
        scores: list[float | None] | None = None
        try:
            if pool:
                scores, counts = self.calls.scores(query, pool, texts, stats)
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
            "variant": HYBRID_RERANK if pass_name == MAIN_PASS else f"{HYBRID_RERANK}@{pass_name}",
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
        for i, spec in enumerate(self.calls.specs(query, pool, texts)):
            later_window = self.config.mode == "listwise" and i > 0
            if later_window:  # its contents depend on the first window's reply: cached together or not at all
                hit = bool(first_hit)
            else:
                key = self.cache.key(self.calls.material(spec, query))
                hit = key in planned or self.llm.cached(self.calls.material(spec, query))
                planned.add(key)
            first_hit = hit if first_hit is None else first_hit
            out.append(budget.call_estimate(hit, spec.prompt, previous, spec.max_tokens))
            previous = spec.prompt
        return out

    # -- many queries --
    def tasks(self, pools: Mapping[str, list[Candidate]], stability: str) -> list[Task]:
        """All queries (sorted qid), main pass then the optional stability pass."""
        if stability not in STABILITY:
            raise ValueError(f"stability must be one of {STABILITY}, got {stability!r}")
        tasks: list[Task] = [(qid, MAIN_PASS, pools[qid]) for qid in sorted(pools)]
        if stability != NO_STABILITY:
            tasks += [(qid, stability, perturb(pools[qid], stability, self.config.seed, qid)) for qid in sorted(pools)]
        return tasks

    def rerank_pools(
        self,
        queries: Mapping[str, str],
        pools: Mapping[str, list[Candidate]],
        *,
        stability: str,
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


def _track(items: Iterable[T], enabled: bool, desc: str, total: int | None = None) -> Iterable[T]:
    return progress_mod.track(items, total=total, desc=desc, unit="query") if enabled else items
