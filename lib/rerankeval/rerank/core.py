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
(``fallback``). Nothing is silent: the ledger has one row per query and pass.
"""

from __future__ import annotations

import math
import random
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd
from pydantic import BaseModel

from .. import runs as runs_mod
from ..ioutil import sha256_text
from ..settings import Settings, load_settings, redact
from . import prompts, schemas
from .cache import LLMCache
from .client import FORMATS, LLMCallError, LLMClient, Reply
from .ledger import to_frame
from .repair import Counts, Unusable, order_by_scores, parse, repair_order, repair_scores

MODES = ("listwise", "pointwise", "yesno")
STABILITY = ("none", "reversed", "shuffled")
VARIANT = "hybrid_rerank"
CACHE_VERSION = 1


@dataclass(frozen=True)
class RerankConfig:
    mode: str = "yesno"
    alpha: float = 0.1  # weight of the LLM score in the blend; 1 = LLM order only (see bench/rerank_modes.py)
    window: int = 20  # listwise: passages per call
    step: int = 10  # listwise: window stride
    batch_size: int = 1  # pointwise: candidates per call
    max_passage_chars: int = 600  # passage text is clipped to this many characters (0 = whole text)
    seed: int = 0
    top_logprobs: int = 10  # yesno
    yesno_json: bool = True  # yesno: constrain the reply to {"relevant": "yes"|"no"}
    content_retries: int = 1  # re-asks after an unreadable reply (transport retries are the client's)
    concurrency: int = 1  # queries reranked in parallel
    price_per_mtok: tuple[float, float] = (0.0, 0.0)  # USD per 1M (prompt, completion) tokens

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.window < 2 or not 1 <= self.step <= self.window:
            raise ValueError(f"need window >= 2 and 1 <= step <= window, got {self.window}/{self.step}")
        if self.batch_size < 1 or self.concurrency < 1 or self.content_retries < 0:
            raise ValueError("batch_size and concurrency must be >= 1, content_retries >= 0")


@dataclass(frozen=True)
class Candidate:
    docid: str
    text: str
    fused: float  # first-stage score
    fused_rank: int  # 0-based position in the fused list


@dataclass
class CallStats:
    llm_calls: int = 0
    cache_hits: int = 0
    requests: int = 0
    retries: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    saved_prompt_tokens: int = 0
    saved_completion_tokens: int = 0
    errors: list[str] = field(default_factory=list)
    format_level: int = 0

    def error(self, cls: str) -> None:
        if cls not in self.errors:
            self.errors.append(cls)


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


BREAKER_THRESHOLD = 8  # consecutive unreachable-endpoint failures before the remaining calls are skipped
UNREACHABLE = frozenset({"APIConnectionError", "APITimeoutError"})


class Reranker:
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
        self.cache = cache if cache is not None else LLMCache()
        self._own_client = client is None
        self.client = client or LLMClient(self.settings, max_connections=max(2, config.concurrency))
        self.model = self.client.model
        self.endpoint = self.settings.cache_endpoint
        # circuit breaker: after BREAKER_THRESHOLD consecutive calls failed to reach the endpoint, the rest
        # fall back without calling (a dead endpoint would otherwise cost every call its full retries)
        self._consecutive_unreachable = 0
        self._unreachable_class: str | None = None

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __enter__(self) -> Reranker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one LLM call, cached, with re-asks after unreadable replies --
    def _call(
        self,
        stats: CallStats,
        *,
        kind: str,
        messages: list[dict[str, str]],
        strict: type[BaseModel] | None,
        schema_name: str,
        query: str,
        cands: list[Candidate],
        texts: list[str],
        max_tokens: int,
        top_logprobs: int,
        read: Callable[[Reply], Any],
    ) -> Any | None:
        cfg = self.config
        stats.llm_calls += 1
        rf = schemas.response_format(strict, schema_name) if strict is not None else None
        base = {
            "v": CACHE_VERSION,
            "model": self.model,
            "endpoint": self.endpoint,
            "template": prompts.template_hash(kind),
            "schema": schemas.schema_hash(strict),
            "gen": {
                "temperature": 0,
                "seed": cfg.seed,
                "max_tokens": max_tokens,
                "top_logprobs": top_logprobs,
            },
            "query": query,
            "candidates": [[c.docid, sha256_text(t)] for c, t in zip(cands, texts, strict=True)],
        }
        for attempt in range(cfg.content_retries + 1):
            material = base if attempt == 0 else {**base, "attempt": attempt}
            key = self.cache.key(material)
            cached = self.cache.get(key)
            if cached is not None:
                try:
                    reply = Reply.from_cache(cached)
                except (TypeError, KeyError):
                    reply = None
            else:
                reply = None
            if reply is not None:
                stats.cache_hits += 1
                stats.saved_prompt_tokens += reply.prompt_tokens
                stats.saved_completion_tokens += reply.completion_tokens
            elif self._unreachable_class and self._consecutive_unreachable >= BREAKER_THRESHOLD:
                stats.failed += 1
                stats.error(self._unreachable_class)
                return None
            else:
                try:
                    reply = self.client.chat(
                        messages,
                        response_format=rf,
                        max_tokens=max_tokens,
                        seed=cfg.seed,
                        top_logprobs=top_logprobs,
                    )
                except LLMCallError as exc:
                    if exc.error_class in UNREACHABLE:
                        self._consecutive_unreachable += 1
                        self._unreachable_class = exc.error_class
                    stats.requests += 1 + exc.retries
                    stats.retries += exc.retries
                    stats.failed += 1
                    stats.error(exc.error_class)
                    return None
                self._consecutive_unreachable = 0
                stats.requests += 1 + reply.retries
                stats.retries += reply.retries
                stats.prompt_tokens += reply.prompt_tokens
                stats.completion_tokens += reply.completion_tokens
                self.cache.put(key, material, reply.to_cache())
            stats.format_level = max(stats.format_level, FORMATS.index(reply.response_format))
            try:
                return read(reply)
            except Unusable as exc:
                stats.error(exc.error_class)
                if attempt < cfg.content_retries:
                    stats.retries += 1
        stats.failed += 1
        return None

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
            strict = schemas.listwise_model(m)

            def read(reply: Reply, m: int = m):
                obj, _ = parse(reply.content, schemas.ListwiseReply, array_key="ranking")
                return obj.ranking

            got = self._call(
                stats,
                kind="listwise",
                messages=prompts.listwise(query, [texts[i] for i in sub]),
                strict=strict,
                schema_name="listwise_ranking",
                query=query,
                cands=[pool[i] for i in sub],
                texts=[texts[i] for i in sub],
                max_tokens=5 * m + 24,
                top_logprobs=0,
                read=read,
            )
            if got is None:
                continue
            perm, c = repair_order(got, m)
            counts += c
            if c.n_missing < m:
                informative = True
            else:
                stats.error("EmptyRanking")
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

            def read(reply: Reply, m: int = m):
                if m == 1:
                    obj, _ = parse(reply.content, schemas.PointwiseSingleReply)
                    return [(1, obj.score)]
                obj, _ = parse(reply.content, schemas.PointwiseBatchReply, array_key="scores")
                return [(it.id, it.score) for it in obj.scores]

            got = self._call(
                stats,
                kind="pointwise",
                messages=prompts.pointwise(query, [texts[i] for i in idx]),
                strict=schemas.pointwise_model(m),
                schema_name="pointwise_grades",
                query=query,
                cands=[pool[i] for i in idx],
                texts=[texts[i] for i in idx],
                max_tokens=12 if m == 1 else 14 * m + 24,
                top_logprobs=0,
                read=read,
            )
            if got is None:
                continue
            vals, c = repair_scores(got, m)
            counts += c
            for j, v in zip(idx, vals, strict=True):
                scores[j] = v
        return scores, counts

    def _yesno(self, query: str, pool: list[Candidate], texts: list[str], stats: CallStats):
        cfg = self.config
        kind = "yesno" if cfg.yesno_json else "yesno-plain"
        scores: list[float | None] = [None] * len(pool)
        counts = Counts()
        for i, (c, t) in enumerate(zip(pool, texts, strict=True)):
            got = self._call(
                stats,
                kind=kind,
                messages=prompts.yesno(query, t, cfg.yesno_json),
                strict=schemas.YesNoStrict if cfg.yesno_json else None,
                schema_name="relevance_answer",
                query=query,
                cands=[c],
                texts=[t],
                max_tokens=12 if cfg.yesno_json else 1,
                top_logprobs=cfg.top_logprobs,
                read=lambda r: yes_prob(r, cfg.yesno_json),
            )
            scores[i] = got  # a failed call leaves None: the candidate keeps its fused place (n_failed)
        return scores, counts

    # -- one query --
    def rerank_query(self, qid: str, query: str, pool: list[Candidate], pass_name: str = "main") -> QueryResult:
        """Rerank one pool (given in the order the LLM should see it). Never raises."""
        cfg = self.config
        t0 = time.perf_counter()
        stats = CallStats()
        texts = [prompts.clip(c.text, cfg.max_passage_chars) for c in pool]
        fused = sorted(pool, key=lambda c: c.fused_rank)
        n = len(pool)
        counts = Counts()
        scores: list[float | None] | None = None
        try:
            if n:
                fn = {"listwise": self._listwise, "pointwise": self._pointwise, "yesno": self._yesno}[cfg.mode]
                scores, counts = fn(query, pool, texts, stats)
        except Exception as exc:  # a bug must not lose the run: fall back, and say so in the ledger
            stats.error(f"{type(exc).__name__}: {redact(exc)[:200]}")
            scores = None
        if scores is not None and all(s is None for s in scores):
            scores = None
        by_doc = {c.docid: s for c, s in zip(pool, scores or [None] * n, strict=True)}
        if scores is None:
            status = "fallback"
            order = [c.docid for c in fused]
        else:
            status = "repaired" if (counts.repaired or stats.failed) else "ok"
            order = self._final_order(pool, scores, fused)
        cost = (stats.prompt_tokens * cfg.price_per_mtok[0] + stats.completion_tokens * cfg.price_per_mtok[1]) / 1e6
        row = {
            "qid": qid,
            "pass": pass_name,
            "variant": VARIANT if pass_name == "main" else f"{VARIANT}@{pass_name}",
            "mode": cfg.mode,
            "alpha": cfg.alpha,
            "model": self.model,
            "status": status,
            "n_pool": n,
            "n_invalid": counts.n_invalid,
            "n_duplicate": counts.n_duplicate,
            "n_missing": counts.n_missing,
            "n_failed": stats.failed,
            "retries": stats.retries,
            "error": ";".join(stats.errors),
            "llm_calls": stats.llm_calls,
            "cache_hits": stats.cache_hits,
            "cache_hit": bool(stats.llm_calls) and stats.cache_hits == stats.llm_calls,
            "requests": stats.requests,
            "latency_s": round(time.perf_counter() - t0, 4),
            "prompt_tokens": stats.prompt_tokens,
            "completion_tokens": stats.completion_tokens,
            "saved_prompt_tokens": stats.saved_prompt_tokens,
            "saved_completion_tokens": stats.saved_completion_tokens,
            "cost": cost,
            "response_format": FORMATS[stats.format_level] if stats.llm_calls else "",
        }
        return QueryResult(qid, pass_name, order, by_doc, [c.docid for c in pool], row)

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

    # -- many queries --
    def rerank_pools(
        self,
        queries: Mapping[str, str],
        pools: Mapping[str, list[Candidate]],
        stability: str = "none",
        progress: bool = True,
    ) -> list[QueryResult]:
        """All queries (sorted qid), main pass then the optional stability pass, ``concurrency`` at a time.

        Results do not depend on the concurrency: each query is independent and outputs are assembled
        in a fixed order.
        """
        if stability not in STABILITY:
            raise ValueError(f"stability must be one of {STABILITY}, got {stability!r}")
        tasks: list[tuple[str, str, list[Candidate]]] = []
        for qid in sorted(pools):
            tasks.append((qid, "main", pools[qid]))
        if stability != "none":
            for qid in sorted(pools):
                tasks.append((qid, stability, perturb(pools[qid], stability, self.config.seed, qid)))
        results: dict[tuple[str, str], QueryResult] = {}
        bar = _progress(len(tasks), progress, f"rerank {self.config.mode}")
        lock = threading.Lock()

        def work(t: tuple[str, str, list[Candidate]]) -> QueryResult:
            return self.rerank_query(t[0], queries[t[0]], t[2], t[1])

        try:
            if self.config.concurrency == 1:
                for t in tasks:
                    results[(t[0], t[1])] = work(t)
                    bar.update(1)
            else:
                with ThreadPoolExecutor(max_workers=self.config.concurrency, thread_name_prefix="rerank") as ex:
                    futs = {ex.submit(work, t): (t[0], t[1]) for t in tasks}
                    for f in as_completed(futs):
                        res = f.result()
                        with lock:
                            results[futs[f]] = res
                        bar.update(1)
        finally:
            bar.close()
        return [results[(t[0], t[1])] for t in tasks]


def perturb(pool: list[Candidate], how: str, seed: int, qid: str) -> list[Candidate]:
    if how == "reversed":
        return list(reversed(pool))
    out = list(pool)
    random.Random(f"{seed}:{qid}").shuffle(out)
    return out


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool, desc: str):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm  # not tqdm.auto: the report's kernels have no ipywidgets

    return tqdm(total=total, desc=desc, unit="query", mininterval=2.0, file=sys.stderr)


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
    """Rerank the top ``pool_k`` of ``fused`` for the selected queries; see the module docstring."""
    if pool_k < 1:
        raise ValueError(f"pool_k must be >= 1, got {pool_k}")
    t0 = time.perf_counter()
    qids = select_queries(fused, queries, max_queries)
    pools = build_pools(fused, texts, qids, pool_k)
    with Reranker(config, settings=settings, cache=cache, client=client) as rr:
        results = rr.rerank_pools(queries, pools, stability=stability, progress=progress)
        model = rr.model
    run: runs_mod.Run = {}
    main = {r.qid: r for r in results if r.pass_name == "main"}
    for q in qids:
        rest = [d for d, _ in runs_mod.ranked(fused[q])[pool_k:]]
        run[q] = {d: 1.0 / (i + 1) for i, d in enumerate(main[q].order + rest)}
    cand_rows = []
    for r in results:
        fused_rank = {c.docid: c.fused_rank for c in pools[r.qid]}
        final = {d: i for i, d in enumerate(r.order)}
        for i, d in enumerate(r.presented):
            cand_rows.append(
                {
                    "qid": r.qid,
                    "pass": r.pass_name,
                    "docid": d,
                    "fused_rank": fused_rank[d] + 1,
                    "presented_rank": i + 1,
                    "llm_score": r.llm_scores.get(d),
                    "final_rank": final[d] + 1,
                }
            )
    stab = None
    if stability != "none":
        other = {r.qid: r for r in results if r.pass_name == stability}
        stab = pd.DataFrame(
            [
                {
                    "qid": q,
                    "kendall_tau": kendall_tau(main[q].order, other[q].order),
                    "top1_agree": bool(main[q].order[:1] == other[q].order[:1]),
                }
                for q in qids
            ],
            columns=["qid", "kendall_tau", "top1_agree"],
        )
    return RerankResult(
        run=run,
        ledger=to_frame([r.row for r in results]),
        candidates=pd.DataFrame(
            cand_rows,
            columns=["qid", "pass", "docid", "fused_rank", "presented_rank", "llm_score", "final_rank"],
        ),
        stability=stab,
        model=model,
        config=config,
        wall_s=time.perf_counter() - t0,
    )


def with_alpha(config: RerankConfig, alpha: float) -> RerankConfig:
    return replace(config, alpha=alpha)
