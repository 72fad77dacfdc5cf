"""Stage 04: LLM reranking of the hybrid run's top candidates (see :mod:`.core` for the modes).

Typical use (what notebooks/04-rerank.ipynb does)::

    from rerankeval import rerank
    from rerankeval.core import paths
    from rerankeval.llm import server as llm_server
    dp = paths.resolve_dataset("scifact")
    fused, queries, texts = rerank.load_inputs(dp, pool_k=20)
    with llm_server.ensure_endpoint() as env:
        result = rerank.rerank_run(fused, queries, texts, rerank.RerankConfig(mode="yesno", alpha=0.1),
                                   pool_k=20, settings=rerank.load_settings(env))
    rerank.write_outputs(dp, result)

Owns stage 04 (the LLM reranking of the hybrid run, its ledger and neighbour expansion); may import
llm, index, corpus and core, never retrieve (they meet only through run files).
"""

from rerankeval.core.settings import Settings, load_settings, redact
from rerankeval.llm.budget import Budget, Plan
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.client import LLMCallError, LLMClient, Reply
from rerankeval.llm.repair import Unusable, order_by_scores, parse, repair_order, repair_scores
from rerankeval.rerank.core import (
    MODES,
    STABILITY,
    Candidate,
    QueryResult,
    RerankConfig,
    Reranker,
    RerankResult,
    build_pools,
    kendall_tau,
    rerank_run,
    select_queries,
    sliding_windows,
    yes_prob,
)
from rerankeval.rerank.ledger import COLUMNS as LEDGER_COLUMNS
from rerankeval.rerank.ledger import FallbackCause, fallback_cause, read_ledger, summarize, write_ledger
from rerankeval.rerank.stage import VARIANT, endpoint_kind, load_inputs, summary_dict, write_outputs

__all__ = [
    "LEDGER_COLUMNS",
    "MODES",
    "Budget",
    "Plan",
    "STABILITY",
    "VARIANT",
    "Candidate",
    "FallbackCause",
    "LLMCache",
    "LLMCallError",
    "LLMClient",
    "QueryResult",
    "Reply",
    "RerankConfig",
    "RerankResult",
    "Reranker",
    "Settings",
    "Unusable",
    "build_pools",
    "endpoint_kind",
    "fallback_cause",
    "kendall_tau",
    "load_inputs",
    "load_settings",
    "order_by_scores",
    "parse",
    "read_ledger",
    "redact",
    "repair_order",
    "repair_scores",
    "rerank_run",
    "select_queries",
    "sliding_windows",
    "summarize",
    "summary_dict",
    "write_ledger",
    "write_outputs",
    "yes_prob",
]
