"""Stage 04 (rerank): read the hybrid run and passage texts, rerank the pool with the LLM, write the reranked run,
ledger and details.

The stage (notebook 04)::

    params = RerankParams(pool_k=10, mode="yesno")
    inputs = load(dp, params)                                   # the fused run, texts, the queries to rerank
    with llm_server.ensure_endpoint() as env:
        settings = load_settings(env)
        result = run(dp, params, settings=settings, inputs=inputs)
    write(dp, result, settings)                                 # run file, ledger, candidates, summary

and the neighbour-expansion arm, :func:`rerankeval.rerank.expand.run_stage`, with ``params.config()``.

Reads (stages 01 and 03): ``dp.run_file("hybrid")``, ``dp.chunk_run_file("hybrid")`` (to find the best
chunk of each unit), ``dp.chunks``, ``dp.queries``.
Writes: ``dp.run_file("hybrid_rerank")``, ``dp.ledger`` and, under ``dp.stage_dir("rerank")``,
``candidates.csv`` (LLM score and ranks per candidate), ``stability.csv`` (when a stability pass ran) and
``summary.json`` (model, endpoint kind, mode, parameters, rates, the plan printed before the first call,
original vs this run's LLM seconds, why queries fell back) for the analysis and the report. Their text is
redacted (:mod:`.scrub`). The ``describe_*`` functions and the ledger tables are what notebook 04 shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.names import HYBRID
from rerankeval.core.paths import DEFAULT_DATASET, DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.contract import StageMissing
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.scrub import redact_frame, redact_tree
from rerankeval.rerank.core import VARIANT, RerankConfig, RerankResult, rerank_run, select_queries
from rerankeval.rerank.ledger import summarize, write_ledger

SOURCE_VARIANT = HYBRID
LOCAL_ENDPOINT = "local llama-server"


# -- the stage: load(dp, params) -> RerankInputs, run(dp, params, settings) -> RerankResult, write(dp, result) --
@dataclass(frozen=True)
class RerankParams:
    """Stage 04's parameters: notebook 04's parameters cell has the same names and defaults (a test checks)."""

    dataset: str = DEFAULT_DATASET  # the caller resolves it to the DatasetPaths given to load() and run()
    pool_k: int = 10  # fused candidates per query the LLM reorders (the rest keep their fused order)
    mode: str = "yesno"  # listwise, pointwise, yesno or setwise (rerank.core)
    alpha: float = 0.1  # LLM weight in the blend with the fused score
    window: int = 20  # listwise: passages per call
    step: int = 10  # listwise: window stride
    batch_size: int = 1  # pointwise: candidates graded per call
    yesno_json: bool = False  # yesno: False asks for one plain token; True constrains the reply to JSON
    set_size: int = 4  # setwise: candidates per call (a heap node and its set_size - 1 children)
    setwise_k: int = 0  # setwise: top places the heap sort settles; 0: the whole pool
    max_passage_chars: int = 200  # candidate text sent to the LLM is clipped to this many characters
    max_queries: int = 0  # 0: all queries; else the first N by qid
    concurrency: int = 1  # queries reranked in parallel
    stability: str = "none"  # none, reversed or shuffled: rerank again with the pool in that order, compare
    seed: int = 0  # generation seed (and the shuffle seed of the stability pass)
    price_per_mtok: Sequence[float] = (0.0, 0.0)  # USD per 1M prompt and completion tokens
    max_calls: int = 0  # budget: LLM requests this run may send; 0: no limit
    max_cost: float = 0.0  # budget: USD this run may spend at price_per_mtok; 0: no limit
    use_cache: bool = True  # re-use cached LLM replies; False asks afresh and refreshes the cache
    expand_n: int = 2  # neighbour expansion: chunks of the same page added around each candidate (0: none)
    expand_chars: int = 300  # neighbour expansion: at most this many characters added per candidate
    expand_compare: bool = False  # True: rerank the same pool again with expansion (hybrid_rerank_expand)

    def config(self) -> RerankConfig:
        """The reranker's configuration (every field of it the notebook sets)."""
        return RerankConfig(
            mode=self.mode, alpha=self.alpha, window=self.window, step=self.step, batch_size=self.batch_size,
            yesno_json=self.yesno_json, set_size=self.set_size, setwise_k=self.setwise_k,
            max_passage_chars=self.max_passage_chars, seed=self.seed,
            concurrency=self.concurrency, price_per_mtok=(float(self.price_per_mtok[0]), float(self.price_per_mtok[1])),
            max_calls=self.max_calls, max_cost=self.max_cost)


@dataclass(frozen=True)
class RerankInputs:
    """What stage 04 reads: the fused run, the query texts, each pool unit's best chunk text, the queries it reranks."""

    fused: runs.Run
    queries: Mapping[str, str]
    texts: Mapping[str, Mapping[str, str]]
    qids: list[str]  # sorted by qid, the first max_queries when > 0

    def describe(self, dp: DatasetPaths, p: RerankParams) -> str:
        """What will be reranked, with which mode and weight."""
        which = "all" if not p.max_queries else f"first {p.max_queries} by query id"
        return (f"Dataset {dp.name}: reranking the top {p.pool_k} of the hybrid run for {len(self.qids)} of "
                f"{len(self.fused)} queries ({which}); mode {p.mode}, alpha {p.alpha}.")


def load(dp: DatasetPaths, params: RerankParams) -> RerankInputs:
    """Read stage 03's hybrid run and the pool's texts (:func:`load_inputs`), and select the queries to rerank."""
    fused, queries, texts = load_inputs(dp, pool_k=params.pool_k)
    return RerankInputs(fused, queries, texts, select_queries(fused, queries, params.max_queries))


def run(dp: DatasetPaths, params: RerankParams, *, settings: Settings, inputs: RerankInputs | None = None,
        progress: bool = True) -> RerankResult:
    """Rerank the pool of every selected query with the LLM of ``settings``; writes nothing (:func:`write`)."""
    i = load(dp, params) if inputs is None else inputs
    return rerank_run(i.fused, i.queries, i.texts, params.config(), pool_k=params.pool_k,
                      max_queries=params.max_queries, stability=params.stability, settings=settings,
                      cache=LLMCache(enabled=params.use_cache), progress=progress)


def load_inputs(
    dp: DatasetPaths, pool_k: int, variant: str = SOURCE_VARIANT
) -> tuple[runs.Run, dict[str, str], dict[str, dict[str, str]]]:
    """(fused unit-level run, qid -> query text, qid -> unit -> text of its best chunk, for the pool)."""
    fused, queries, chunk_ids = pool_chunks(dp, pool_k, variant)
    chunk_text = corpus.chunk_texts(dp)
    return fused, queries, {q: {d: chunk_text[c] for d, c in units.items()} for q, units in chunk_ids.items()}


def pool_chunks(
    dp: DatasetPaths, pool_k: int, variant: str = SOURCE_VARIANT
) -> tuple[runs.Run, dict[str, str], dict[str, dict[str, str]]]:
    """(fused unit-level run, qid -> query text, qid -> unit -> id of its best chunk, for the pool)."""
    run_path = dp.run_file(variant)
    if not run_path.exists():
        raise StageMissing(f"{run_path} is missing: run the retrieval stage first (notebook 03-retrieve).")
    fused = runs.read_trec(run_path)
    queries = corpus.load_queries(dp)
    unit_of = corpus.unit_of(dp)
    chunk_path = dp.chunk_run_file(variant)
    best: dict[str, dict[str, str]] = {}
    if chunk_path.exists():
        best = runs.best_chunks(runs.read_trec(chunk_path), unit_of)
    chunk_ids: dict[str, dict[str, str]] = {}
    for q, docs in fused.items():
        chunk_ids[q] = {}
        for d, _ in runs.ranked(docs)[:pool_k]:
            cid = best.get(q, {}).get(d)
            if cid is None:
                if d in unit_of:  # BEIR: chunk == document
                    cid = d
                else:
                    raise KeyError(f"no chunk for unit {d!r} of query {q!r}: {chunk_path} is missing or lacks it")
            chunk_ids[q][d] = cid
    return fused, queries, chunk_ids


def write(dp: DatasetPaths, result: RerankResult, settings: Settings | None = None) -> dict[str, Path]:
    """Write the reranked run, the ledger, ``candidates.csv``, ``stability.csv`` and ``summary.json``; name -> path."""
    out = {
        "run": runs.write_trec(result.run, dp.run_file(VARIANT), tag=VARIANT),
        "ledger": write_ledger(result.ledger, dp.ledger),
    }
    stage = dp.stage_dir("rerank")
    out["candidates"] = atomic_write_text(stage / "candidates.csv", redact_frame(result.candidates).to_csv(index=False))
    if result.stability is not None:
        out["stability"] = atomic_write_text(stage / "stability.csv", result.stability.to_csv(index=False))
    out["summary"] = atomic_write_json(stage / "summary.json", redact_tree(summary_dict(result, settings)))
    return out


write_outputs = write  # the name earlier callers use


def summary_dict(result: RerankResult, settings: Settings | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {
        "variant": VARIANT,
        "model": result.model,
        "endpoint": endpoint_kind(settings),
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(result.config).items()},
        "pool_k": result.pool_k,  # checked against the analysis's pool_k (funnel.recorded_pool_k)
        "wall_s": round(result.wall_s, 2),
        "main": summarize(result.ledger, "main"),
        "plan": result.plan,
    }
    s["main"]["fallback_cause"] = result.fallback_cause
    main = result.ledger[result.ledger["pass"] == "main"] if len(result.ledger) else result.ledger
    if "llm_seconds" in main:
        # what the LLM stage costs (cached replies count their original seconds) vs what this run spent
        s["main"]["llm_seconds"] = round(float(main["llm_seconds"].sum()), 2)
        s["main"]["fresh_llm_seconds"] = round(float(main["fresh_seconds"].sum()), 2)
        s["main"]["budget_skipped"] = int(main["budget_skipped"].astype(bool).sum())
    if result.stability is not None and len(result.stability):
        s["stability"] = {
            "kendall_tau_mean": float(result.stability["kendall_tau"].mean()),
            "top1_agreement": float(result.stability["top1_agree"].mean()),
        }
    return s


def endpoint_kind(settings: Settings | None) -> str:
    """``local llama-server`` or the endpoint's host (never the key, never a path with tokens)."""
    if settings is None or not settings.base_url:
        return "unknown"
    if (settings.endpoint_id or "").startswith("llama-server"):
        return LOCAL_ENDPOINT
    from urllib.parse import urlsplit

    return urlsplit(settings.base_url).hostname or "custom"


# -- what notebook 04 shows --
LOCAL_NOTE = ("Note: this is a small local model (LOCAL_MODEL), plumbing-grade, that checks the pipeline end to end; "
              "its ranking judgement is weak. For real conclusions set OPENAI_BASE_URL, OPENAI_API_KEY and "
              "RERANK_MODEL in .env (see .env.example) to a stronger OpenAI-compatible endpoint and re-run.")
PROBLEM_COLUMNS = ["qid", "pass", "status", "n_invalid", "n_duplicate", "n_missing", "n_failed", "retries", "error"]


def describe_run(result: RerankResult, params: RerankParams, settings: Settings | None,
                 written: Mapping[str, Path]) -> str:
    """The model and endpoint, the time spent (now and when the calls were first made), the files written."""
    endpoint = endpoint_kind(settings)
    llm_s, fresh_s = result.ledger.llm_seconds.sum(), result.ledger.fresh_seconds.sum()
    lines = [f"Reranker: {result.model} ({endpoint}), mode {params.mode}, alpha {params.alpha}; {result.wall_s:.0f} s "
             f"in all, {fresh_s:.0f} s of LLM calls now; the stage's LLM calls took {llm_s:.0f} s when first made."]
    if endpoint == LOCAL_ENDPOINT:
        lines.append(LOCAL_NOTE)
    return "\n".join([*lines, *(f"wrote {name}: {path}" for name, path in written.items())])


def describe_ledger(ledger: pd.DataFrame) -> str:
    """The main pass's fallback and repair rates, calls and seconds per query, requests, cache hits, tokens, cost."""
    s = summarize(ledger, "main")
    return (f"Fallback rate {s['fallback_rate']:.1%} and repair rate {s['repaired_rate']:.1%} over {s['queries']} "
            f"queries; {s['calls_per_query']:.1f} LLM calls and {s['seconds_per_query']:.2f} s per query.\n"
            f"Calls made to the endpoint: {s['requests']} (retries included); cache hits: {s['cache_hits']} of "
            f"{s['llm_calls']} calls; tokens saved by the cache: {s['tokens_saved']:,}; tokens spent: "
            f"{s['prompt_tokens'] + s['completion_tokens']:,}; cost: ${s['cost_usd']:.4f}.")


def ledger_by_status(ledger: pd.DataFrame) -> pd.DataFrame:
    """Queries, repairs, failed calls, retries and seconds per pass and status."""
    return ledger.groupby(["pass", "status"]).agg(
        queries=("qid", "count"), invalid=("n_invalid", "sum"), duplicate=("n_duplicate", "sum"),
        missing=("n_missing", "sum"), failed_calls=("n_failed", "sum"), retries=("retries", "sum"),
        seconds=("latency_s", "sum"))


def ledger_problems(ledger: pd.DataFrame, n: int = 20) -> pd.DataFrame:
    """The first ``n`` rows of the ledger whose status is not ok (repaired, fallback ...)."""
    return ledger[ledger.status != "ok"][PROBLEM_COLUMNS].head(n)


def describe_stability(result: RerankResult, stability: str) -> str:
    """The stability pass's mean Kendall tau and top-1 agreement, or how to ask for one."""
    st = result.stability
    if st is None or not len(st):
        return 'No stability pass (set stability = "reversed" or "shuffled").'
    return (f"{stability} pass: mean Kendall tau {st.kendall_tau.mean():.3f}, top-1 agreement "
            f"{st.top1_agree.mean():.1%} over {len(st)} queries.")
