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

The names below are imported on first use (PEP 562), so ``import rerankeval.rerank.ledger`` (stage 05, the chain)
does not import the LLM client and openai with them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_WHERE: dict[str, tuple[str, str]] = {  # exported name -> (module, its name there)
    "Settings": ("rerankeval.core.settings", "Settings"),
    "load_settings": ("rerankeval.core.settings", "load_settings"),
    "redact": ("rerankeval.core.settings", "redact"),
    "Budget": ("rerankeval.llm.budget", "Budget"),
    "Plan": ("rerankeval.llm.budget", "Plan"),
    "LLMCache": ("rerankeval.llm.cache", "LLMCache"),
    "LLMCallError": ("rerankeval.llm.client", "LLMCallError"),
    "LLMClient": ("rerankeval.llm.client", "LLMClient"),
    "Reply": ("rerankeval.llm.client", "Reply"),
    "Unusable": ("rerankeval.llm.repair", "Unusable"),
    "order_by_scores": ("rerankeval.llm.repair", "order_by_scores"),
    "parse": ("rerankeval.llm.repair", "parse"),
    "repair_order": ("rerankeval.llm.repair", "repair_order"),
    "repair_scores": ("rerankeval.llm.repair", "repair_scores"),
    "Candidate": ("rerankeval.rerank.core", "Candidate"),
    "MODES": ("rerankeval.rerank.core", "MODES"),
    "QueryResult": ("rerankeval.rerank.core", "QueryResult"),
    "RerankConfig": ("rerankeval.rerank.core", "RerankConfig"),
    "RerankResult": ("rerankeval.rerank.core", "RerankResult"),
    "Reranker": ("rerankeval.rerank.core", "Reranker"),
    "STABILITY": ("rerankeval.rerank.core", "STABILITY"),
    "build_pools": ("rerankeval.rerank.core", "build_pools"),
    "kendall_tau": ("rerankeval.rerank.core", "kendall_tau"),
    "rerank_run": ("rerankeval.rerank.core", "rerank_run"),
    "select_queries": ("rerankeval.rerank.core", "select_queries"),
    "sliding_windows": ("rerankeval.rerank.core", "sliding_windows"),
    "yes_prob": ("rerankeval.rerank.core", "yes_prob"),
    "FallbackCause": ("rerankeval.rerank.ledger", "FallbackCause"),
    "LEDGER_COLUMNS": ("rerankeval.rerank.ledger", "COLUMNS"),
    "fallback_cause": ("rerankeval.rerank.ledger", "fallback_cause"),
    "read_ledger": ("rerankeval.rerank.ledger", "read_ledger"),
    "summarize": ("rerankeval.rerank.ledger", "summarize"),
    "write_ledger": ("rerankeval.rerank.ledger", "write_ledger"),
    "VARIANT": ("rerankeval.rerank.stage", "VARIANT"),
    "endpoint_kind": ("rerankeval.rerank.stage", "endpoint_kind"),
    "load_inputs": ("rerankeval.rerank.stage", "load_inputs"),
    "summary_dict": ("rerankeval.rerank.stage", "summary_dict"),
    "write_outputs": ("rerankeval.rerank.stage", "write_outputs"),
}


def __getattr__(name: str) -> Any:
    """The exported ``name`` (or a submodule, ``rerank.stage``), imported when first asked for."""
    if name in _WHERE:
        module, attr = _WHERE[name]
        value = getattr(importlib.import_module(module), attr)
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


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
