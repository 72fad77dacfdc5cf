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

Where things are: the parameters and per-query records in :mod:`.config`, the scoring arithmetic in
:mod:`.scores`, each mode's calls and reply reading in :mod:`.modes`, the reranker in :mod:`.reranker`; this
module runs it over a fused run (:func:`rerank`, what :func:`rerankeval.rerank.run` calls for each arm).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from rerankeval.core import progress as progress_mod
from rerankeval.core import runs as runs_mod
from rerankeval.core.log import get_logger
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.llm import budget
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank.config import MAIN_PASS, NO_STABILITY, Candidate, Params, QueryResult, RerankConfig
from rerankeval.rerank.ledger import fallback_cause, to_frame
from rerankeval.rerank.reranker import Reranker
from rerankeval.rerank.scores import kendall_tau

log = get_logger(__name__)


# -- from run files to results --
@dataclass(frozen=True)
class Inputs:
    """What stage 04 reads: the fused run, the query texts, each pool unit's text, the queries it reranks."""

    fused: runs_mod.Run
    queries: Mapping[str, str]
    texts: Mapping[str, Mapping[str, str]]  # qid -> unit -> the text the LLM is shown (its best chunk's)
    qids: list[str]  # sorted by qid, the first max_queries when > 0
    chunk_ids: Mapping[str, Mapping[str, str]]  # qid -> unit -> the chunk that represents it in the pool

    def describe(self, dp: DatasetPaths, p: Params) -> str:
        """What will be reranked, with which mode and weight."""
        which = "all" if not p.max_queries else f"first {p.max_queries} by query id"
        return (
            f"Dataset {dp.name}: reranking the top {p.pool_k} of the hybrid run for {len(self.qids)} of "
            f"{len(self.fused)} queries ({which}); mode {p.mode}, alpha {p.alpha}."
        )


@dataclass
class Result:
    """One arm of stage 04 (the main rerank; the expansion arm in ``expanded``), as :func:`rerankeval.rerank.write`
    writes it."""

    run: runs_mod.Run  # main pass: reranked pool, then the rest of the fused list
    ledger: pd.DataFrame
    candidates: pd.DataFrame  # qid, pass, docid, fused_rank, presented_rank, llm_score, final_rank
    stability: pd.DataFrame | None  # qid, kendall_tau, top1_agree
    model: str
    config: RerankConfig
    wall_s: float
    plan: dict[str, Any]  # budget.Plan.to_dict(): the estimate printed before the first call
    pool_k: int  # candidates per query given to the LLM (the rest keep their fused order)
    fallback_cause: str | None  # why queries of the main pass fell back (None when none did)
    inputs: Inputs  # what was reranked (the quick check reads the fused run and the queries)
    endpoint: str = "unknown"  # the endpoint's kind (rerank.stage.endpoint_kind), set by rerank.run
    expanded: Expansion | None = None  # the neighbour-expansion arm, when params.expand_compare


@dataclass
class Expansion:
    """The neighbour-expansion arm: its result, the texts the LLM was shown (:data:`.expand.EXPANDED_COLUMNS`)."""

    result: Result
    shown: pd.DataFrame
    expand_n: int
    expand_chars: int


def select_queries(fused: runs_mod.Run, queries: Mapping[str, str], max_queries: int) -> list[str]:
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


def rerank(
    inputs: Inputs,
    config: RerankConfig,
    *,
    pool_k: int,
    stability: str,
    settings: Settings,
    cache: LLMCache,
    progress: bool,
) -> Result:
    """Rerank the top ``pool_k`` of ``inputs.fused`` for ``inputs.qids``; see the module docstring.

    Before the first call it logs the plan (calls, cache hits, tokens, expected time and cost; with
    ``progress``) and skips what the budget (``max_calls`` / ``max_cost``) does not allow.
    """
    t0 = time.perf_counter()
    qids = inputs.qids
    pools = build_pools(inputs.fused, inputs.texts, qids, pool_k)
    with Reranker(config, settings, cache=cache) as rr:
        plan = rr.estimate(inputs.queries, rr.tasks(pools, stability))
        if progress:  # on the console (the chain's terminal) before the first call, and on the page
            log.info(
                budget.announce(
                    plan, config.price_per_mtok, rr.settings.base_url, rr.settings.endpoint_id, stage="rerank"
                )
            )
        results = rr.rerank_pools(inputs.queries, pools, stability=stability, progress=progress, plan=plan)
        model, messages = rr.model, dict(rr.messages)
    ledger = to_frame([r.row for r in results])
    cause = fallback_cause(ledger, messages)
    if progress and cause is not None:
        log.info(f"Fallback: {cause.text}")
        progress_mod.say(f"rerank: fallback: {cause.text}")
    return Result(
        run=reranked_run(inputs.fused, results, qids, pool_k),
        ledger=ledger,
        candidates=candidates_frame(results, pools),
        stability=stability_frame(results, qids, stability),
        model=model,
        config=config,
        wall_s=time.perf_counter() - t0,
        plan=plan.to_dict(),
        pool_k=pool_k,
        fallback_cause=cause.text if cause else None,
        inputs=inputs,
    )


def reranked_run(fused: runs_mod.Run, results: list[QueryResult], qids: list[str], pool_k: int) -> runs_mod.Run:
    """The main pass: each query's reranked pool, then the rest of its fused list (scores 1/rank)."""
    main = {r.qid: r for r in results if r.pass_name == MAIN_PASS}
    run: runs_mod.Run = {}
    for q in qids:
        rest = [d for d, _ in runs_mod.ranked(fused[q])[pool_k:]]
        run[q] = {d: 1.0 / (i + 1) for i, d in enumerate(main[q].order + rest)}
    return run


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
    if stability == NO_STABILITY:
        return None
    main = {r.qid: r for r in results if r.pass_name == MAIN_PASS}
    other = {r.qid: r for r in results if r.pass_name == stability}
    rows = [
        [q, kendall_tau(main[q].order, other[q].order), bool(main[q].order[:1] == other[q].order[:1])] for q in qids
    ]
    return pd.DataFrame(rows, columns=["qid", "kendall_tau", "top1_agree"])
