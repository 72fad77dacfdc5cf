"""The rerank ledger: one row per query and pass, saved as CSV at ``dp.ledger``.

Columns:

- ``qid``, ``pass`` (``main``, or ``reversed``/``shuffled`` for the stability pass), ``variant``
  (``hybrid_rerank`` for the main pass, ``hybrid_rerank@reversed`` etc. for a stability pass, so readers
  that group by variant keep the passes apart), ``mode``, ``alpha``, ``model``;
- ``status``: ``ok`` (every reply usable as sent), ``repaired`` (ids dropped/deduplicated/put back, or
  some calls of the query failed and their candidates kept their fused places) or ``fallback`` (nothing
  usable: the query keeps its fused order);
- ``n_pool``; ``n_invalid``, ``n_duplicate``, ``n_missing`` (repairs); ``n_failed`` (calls with no usable
  reply after retries); ``retries`` (transport retries by the client plus re-asks after unreadable replies);
  ``error`` (error classes seen, ``;``-joined, empty if none);
- ``llm_calls`` (calls the mode needs), ``cache_hits`` (served from the cache), ``cache_hit`` (True when
  every call was), ``requests`` (HTTP requests actually sent, retries included); ``latency_s`` (wall time
  for the query);
- ``prompt_tokens``, ``completion_tokens`` (of requests sent now), ``saved_prompt_tokens``,
  ``saved_completion_tokens`` (of cached replies), ``cost`` (USD: fresh tokens at the price table, 0 locally);
- ``response_format``: the weakest format used (``json_schema``, ``json_object``, ``none``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..ioutil import atomic_write_text

COLUMNS = [
    "qid",
    "pass",
    "variant",
    "mode",
    "alpha",
    "model",
    "status",
    "n_pool",
    "n_invalid",
    "n_duplicate",
    "n_missing",
    "n_failed",
    "retries",
    "error",
    "llm_calls",
    "cache_hits",
    "cache_hit",
    "requests",
    "latency_s",
    "prompt_tokens",
    "completion_tokens",
    "saved_prompt_tokens",
    "saved_completion_tokens",
    "cost",
    "response_format",
]
STATUSES = ("ok", "repaired", "fallback")


def to_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.astype({"qid": str, "error": str}) if not df.empty else df


def write_ledger(rows: list[dict[str, Any]] | pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    df = rows if isinstance(rows, pd.DataFrame) else to_frame(rows)
    return atomic_write_text(path, df.to_csv(index=False))


def read_ledger(path: str | os.PathLike[str]) -> pd.DataFrame:
    return pd.read_csv(path, dtype={"qid": str, "error": str}, keep_default_na=False)


def summarize(df: pd.DataFrame, pass_name: str | None = "main") -> dict[str, Any]:
    """Rates and totals for one pass (or all rows with ``pass_name=None``)."""
    d = df if pass_name is None else df[df["pass"] == pass_name]
    n = len(d)
    counts = {s: int((d["status"] == s).sum()) for s in STATUSES}
    calls = int(d["llm_calls"].sum()) if n else 0
    return {
        "queries": n,
        **counts,
        "fallback_rate": counts["fallback"] / n if n else 0.0,
        "repair_rate": counts["repaired"] / n if n else 0.0,
        "llm_calls": calls,
        "cache_hits": int(d["cache_hits"].sum()) if n else 0,
        "requests": int(d["requests"].sum()) if n else 0,
        "calls_per_query": calls / n if n else 0.0,
        "requests_per_query": float(d["requests"].sum()) / n if n else 0.0,
        "seconds_per_query": float(d["latency_s"].mean()) if n else 0.0,
        "prompt_tokens": int(d["prompt_tokens"].sum()) if n else 0,
        "completion_tokens": int(d["completion_tokens"].sum()) if n else 0,
        "tokens_saved": int(d["saved_prompt_tokens"].sum() + d["saved_completion_tokens"].sum()) if n else 0,
        "cost_usd": float(d["cost"].sum()) if n else 0.0,
        "n_invalid": int(d["n_invalid"].sum()) if n else 0,
        "n_duplicate": int(d["n_duplicate"].sum()) if n else 0,
        "n_missing": int(d["n_missing"].sum()) if n else 0,
        "retries": int(d["retries"].sum()) if n else 0,
    }
