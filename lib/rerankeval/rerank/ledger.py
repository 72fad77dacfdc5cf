"""The rerank ledger: one row per query and pass, saved as CSV at ``dp.ledger``.

Columns:

- ``qid``, ``pass`` (``main``, or ``reversed``/``shuffled`` for the stability pass), ``variant``
  (``hybrid_rerank`` for the main pass, ``hybrid_rerank@reversed`` etc. for a stability pass, so readers
  that group by variant keep the passes apart), ``mode``, ``alpha``, ``model``;
- ``status``: ``ok`` (every reply usable as sent), ``repaired`` (ids dropped/deduplicated/put back),
  ``partial_fallback`` (some calls of the query failed and their candidates kept their fused places) or
  ``fallback`` (nothing usable: the query keeps its fused order); both fallbacks count in the fallback rate;
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core.ioutil import atomic_write_text
from rerankeval.core.names import HYBRID_RERANK
from rerankeval.llm.scrub import redact_frame
from rerankeval.rerank.config import MAIN_PASS

# statuses meaning the reranker's order was not used for (part of) the query
FALLBACK_WORDS = ("fallback", "error", "fail", "unusable", "timeout")

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
    # the LLM seconds of the query's calls as first made (cached replies keep theirs, so a warm run still shows
    # what the stage costs), the LLM seconds spent in this run (0 when served from the cache), and whether the
    # budget (max_calls / max_cost) skipped the query (its fused order kept)
    "llm_seconds",
    "fresh_seconds",
    "budget_skipped",
]
PARTIAL_FALLBACK = "partial_fallback"
STATUSES = ("ok", "repaired", PARTIAL_FALLBACK, "fallback")


def to_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.astype({"qid": str, "error": str}) if not df.empty else df


def write_ledger(rows: list[dict[str, Any]] | pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """The ledger as CSV, its text redacted (an error message may quote what the endpoint echoed)."""
    df = rows if isinstance(rows, pd.DataFrame) else to_frame(rows)
    return atomic_write_text(path, redact_frame(df).to_csv(index=False))


def read_ledger(path: str | os.PathLike[str], missing_ok: bool = False) -> pd.DataFrame | None:
    """The ledger CSV (ids and errors stay strings, empty cells stay empty); None when ``missing_ok`` and the
    file does not exist (no rerank stage ran)."""
    if missing_ok and not Path(path).exists():
        return None
    return pd.read_csv(path, dtype={"qid": str, "error": str, "status": str}, keep_default_na=False)


def summarize(df: pd.DataFrame, pass_name: str | None = MAIN_PASS) -> dict[str, Any]:
    """Rates and totals for one pass (or all rows with ``pass_name=None``).

    ``fallback_rate`` and ``repaired_rate`` are shares of the pass's queries, as in :func:`ledger_summary`;
    """
    d = df if pass_name is None else df[df["pass"] == pass_name]
    n = len(d)
    status = d["status"].astype(str).str.strip().str.lower()
    counts = {s: int((status == s).sum()) for s in STATUSES}
    calls = int(d["llm_calls"].sum()) if n else 0
    repaired = int(status.eq("repaired").sum())
    return {
        "queries": n,
        **counts,
        "fallback_rate": int(status.map(is_fallback).sum()) / n if n else 0.0,
        "repaired_rate": repaired / n if n else 0.0,
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


# --------------------------------------------------------------------------- readers for the analysis
def is_fallback(status: str) -> bool:
    s = str(status).strip().lower()
    return any(w in s for w in FALLBACK_WORDS)


def fallback_queries(ledger: pd.DataFrame | None, variant: str | None = None) -> set[str]:
    """Queries with at least one ledger row whose status is a fallback/error (optionally for one variant)."""
    if ledger is None or ledger.empty or "status" not in ledger:
        return set()
    df = ledger
    if variant is not None and "variant" in df:
        df = df[df.variant == variant]
    return set(df.loc[df.status.map(is_fallback), "qid"].astype(str))


def ledger_notes(ledger: pd.DataFrame | None, variant: str | None = None, max_chars: int = 240) -> dict[str, str]:
    """``qid -> remark`` for queries whose ledger shows a fallback/error (status, retries, error text).

    The text may hold model output or endpoint errors: escape it before showing it as HTML.
    """
    out: dict[str, str] = {}
    if ledger is None or ledger.empty or "status" not in ledger:
        return out
    df = ledger if variant is None or "variant" not in ledger else ledger[ledger.variant == variant]
    for _, r in df[df.status.map(is_fallback)].iterrows():
        err = " ".join(str(r.get("error", "") or "").split())[:max_chars]
        bits = [f"status {r.status}"]
        if "pass" in r and not pd.isna(r["pass"]):
            bits.append(f"pass {r['pass']}")
        if "retries" in r and not pd.isna(r["retries"]):
            bits.append(f"{int(r['retries'])} retries")
        text = "rerank ledger: " + ", ".join(bits) + (f"; error: {err}" if err else "")
        q = str(r.qid)
        out[q] = f"{out[q]} | {text}" if q in out else text
    return out


SUMMARY_COLUMNS = [
    "variant",
    "n_queries",
    "fallback_rate",
    "repaired_rate",
    "tokens_per_query",
    "fresh_tokens_per_query",
    "llm_seconds_per_query",
    "cost_per_query",
    "cache_hit_rate",
    "retries_per_query",
    "repairs_per_query",
    "calls_per_query",
]


def _numeric_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The ledger rows with the numbers and flags :func:`ledger_summary` aggregates (missing columns = 0)."""

    def col(name: str) -> pd.Series:
        if name not in df:
            return pd.Series(0.0, index=df.index)
        return pd.to_numeric(df[name], errors="coerce").fillna(0.0)

    status = df["status"].astype(str).str.strip().str.lower() if "status" in df else pd.Series("", index=df.index)
    hit = df["cache_hit"].astype(str).str.lower().isin(["1", "true", "yes"]) if "cache_hit" in df else False
    fresh = col("prompt_tokens") + col("completion_tokens")
    return df.assign(
        _fresh=fresh,
        _tok=fresh + col("saved_prompt_tokens") + col("saved_completion_tokens"),
        _lat=col("llm_seconds") if "llm_seconds" in df else col("latency_s"),  # what the LLM calls cost
        _calls=col("llm_calls"),
        _cost=col("cost"),
        _ret=col("retries"),
        _rep=col("n_invalid") + col("n_duplicate") + col("n_missing"),
        _fb=status.map(is_fallback),
        _repaired=status.eq("repaired"),
        _hit=hit,
    )


def _variant_row(variant: str, g: pd.DataFrame) -> dict[str, Any] | None:
    per_q = g.groupby("qid").agg(
        tok=("_tok", "sum"),
        fresh=("_fresh", "sum"),
        lat=("_lat", "sum"),
        cost=("_cost", "sum"),
        ret=("_ret", "sum"),
        rep=("_rep", "sum"),
        fb=("_fb", "any"),
        repaired=("_repaired", "any"),
        hit=("_hit", "all"),
        calls=("_calls", "sum"),
    )
    if not len(per_q):
        return None
    live = per_q[~per_q.hit]
    return dict(
        variant=variant,
        n_queries=len(per_q),
        fallback_rate=float(per_q.fb.mean()),
        repaired_rate=float(per_q.repaired.mean()),
        tokens_per_query=float(per_q.tok.mean()),
        fresh_tokens_per_query=float(per_q.fresh.mean()),
        llm_seconds_per_query=float((live if len(live) else per_q).lat.mean()),
        cost_per_query=float(per_q.cost.mean()),
        cache_hit_rate=float(per_q.hit.mean()),
        retries_per_query=float(per_q.ret.mean()),
        repairs_per_query=float(per_q.rep.mean()),
        calls_per_query=float(per_q.calls.mean()),
    )


def ledger_summary(
    ledger: pd.DataFrame | None, qids: Iterable[str] | None = None, default_variant: str = HYBRID_RERANK
) -> pd.DataFrame:
    """Per variant (``variant`` column, else ``default_variant``): LLM cost figures per query.

    Columns (:data:`SUMMARY_COLUMNS`): ``variant, n_queries, fallback_rate`` (share of queries with any
    fallback row), ``repaired_rate``, ``tokens_per_query`` (prompt + completion, fresh and served from the
    cache: what the method needs), ``fresh_tokens_per_query`` (sent now), ``llm_seconds_per_query`` (mean
    wall time of the queries not served wholly from the cache; of all queries when every one was),
    ``cost_per_query``, ``cache_hit_rate`` (share of queries served wholly from the cache),
    ``retries_per_query``, ``repairs_per_query`` (invalid + duplicate + missing ids), ``calls_per_query``
    (the LLM calls the mode needs, cached or sent). Restricted to
    ``qids`` when given.
    """
    if ledger is None or ledger.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    df = ledger.copy()
    if "variant" not in df:
        df["variant"] = default_variant
    df["qid"] = df.qid.astype(str)
    if qids is not None:
        df = df[df.qid.isin(set(qids))]
    rows = [_variant_row(v, g) for v, g in _numeric_rows(df).groupby("variant", sort=False)]
    return pd.DataFrame([r for r in rows if r], columns=SUMMARY_COLUMNS)


# --------------------------------------------------------------------------- why queries fell back
UNREACHABLE_ERRORS = ("APIConnectionError", "APITimeoutError")
HTTP_ERRORS = (
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "BadRequestError",
    "RateLimitError",
    "InternalServerError",
    "UnprocessableEntityError",
    "ConflictError",
    "APIStatusError",
)
UNUSABLE_ERRORS = (
    "InvalidJSON",
    "WrongShape",
    "EmptyContent",
    "EmptyRanking",
    "NoYesNo",
    "NoValidScore",
    "EmptyChoices",
)
NOT_CHAT_ERROR = "NotChatCompletion"
BUDGET_ERRORS = ("BudgetExceeded", "BudgetSkipped")
CACHED_UNUSABLE = "CachedUnusable"  # a cached reply that did not read, asked again (see .core)


@dataclass(frozen=True)
class FallbackCause:
    """Why queries fell back: one sentence, and whether fixing the endpoint settings is the fix."""

    text: str
    endpoint: bool  # True when the endpoint (unreachable, HTTP errors, not a chat server) is to blame
    cached: bool  # True when replies served from the cache, not the endpoint, caused (some of) it


def fallback_cause(
    ledger: pd.DataFrame | None, messages: dict[str, str] | None = None, pass_name: str | None = MAIN_PASS
) -> FallbackCause | None:
    """Why the queries of ``pass_name`` that (partly) fell back did, from their ledger rows (None if none did).

    Tells apart: replies served from the cache alone (no request sent), an endpoint that could not be
    reached, HTTP errors, an HTTP 200 that is not a chat completion, replies the model got wrong, the budget.
    ``messages`` (error class -> a message of it) adds the first message of each class.
    """
    if ledger is None or ledger.empty or "status" not in ledger:
        return None
    rows = ledger if pass_name is None or "pass" not in ledger else ledger[ledger["pass"] == pass_name]
    d = rows[rows["status"].map(is_fallback)]
    if d.empty:
        return None
    classes = _error_classes(d)

    def seen(names: tuple[str, ...]) -> list[str]:
        return [c for c in classes if c.split("(")[0].split(":")[0] in names]

    cached_only = _cached_only(d)
    parts = _cause_parts(classes, seen, messages or {}, cached_only)
    endpoint = bool(seen(UNREACHABLE_ERRORS + HTTP_ERRORS + (NOT_CHAT_ERROR,)))
    partial = int(d["status"].astype(str).str.strip().str.lower().eq(PARTIAL_FALLBACK).sum())
    what = f"{len(d)} of {len(rows)} queries fell back to the fused order" + (
        f" ({partial} of them partly)" if partial else ""
    )
    return FallbackCause(f"{what}: " + "; ".join(parts) + ".", endpoint, bool(cached_only))


def _error_classes(d: pd.DataFrame) -> list[str]:
    """The error classes of these rows, each once, in the order first seen."""
    classes: list[str] = []
    for err in d.get("error", pd.Series(dtype=str)).astype(str):
        for c in (e.strip() for e in err.split(";")):
            if c and c not in classes:
                classes.append(c)
    return classes


def _cached_only(d: pd.DataFrame) -> int:
    """Rows whose every call was answered from the cache, no request sent (the cached replies are to blame)."""

    def col(name: str) -> pd.Series:
        return pd.to_numeric(d[name], errors="coerce").fillna(0) if name in d else pd.Series(0, index=d.index)

    return int(((col("requests") == 0) & (col("cache_hits") > 0) & (col("cache_hits") >= col("llm_calls"))).sum())


def _cause_parts(
    classes: list[str], seen: Callable[[tuple[str, ...]], list[str]], messages: dict[str, str], cached_only: int
) -> list[str]:
    """One clause per kind of cause seen (:func:`fallback_cause`)."""
    parts: list[str] = []
    if cached_only:
        parts.append(
            f"{cached_only} of them were answered from the reply cache alone (no request sent): the cached "
            "replies, not the endpoint, caused it; run again with use_cache=false (e.g. make report "
            'P="use_cache=false") to ask the endpoint afresh and refresh the cache'
        )
    if seen((CACHED_UNUSABLE,)):
        parts.append("cached replies that could not be used (from an older version) were asked again")
    if down := seen(UNREACHABLE_ERRORS):
        parts.append(f"the LLM endpoint could not be reached ({', '.join(down)}): start it, or fix OPENAI_BASE_URL")
    if http := seen(HTTP_ERRORS):
        hint = "; check OPENAI_API_KEY" if "AuthenticationError" in http or "PermissionDeniedError" in http else ""
        parts.append(f"the LLM endpoint answered with HTTP errors ({', '.join(http)}){hint}")
    if seen((NOT_CHAT_ERROR,)):
        parts.append(
            messages.get(NOT_CHAT_ERROR)
            or "the endpoint answered HTTP 200 but not with an OpenAI chat "
            "completion: is OPENAI_BASE_URL the /v1 root of an OpenAI-compatible server?"
        )
    if bad := seen(UNUSABLE_ERRORS):
        first = next((messages[c] for c in bad if c in messages), "")
        parts.append(
            f"the endpoint answered, but the model's replies could not be used ({', '.join(bad)}"
            f"{': ' + first[:160] if first else ''}): a model that does not follow the reply format; try "
            "another mode or a stronger model (RERANK_MODEL); such replies are not cached"
        )
    if budget := seen(BUDGET_ERRORS):
        parts.append(f"the budget (max_calls / max_cost) stopped the calls ({', '.join(budget)})")
    known = set(seen(UNREACHABLE_ERRORS + HTTP_ERRORS + UNUSABLE_ERRORS + BUDGET_ERRORS + (NOT_CHAT_ERROR,)))
    if other := [c for c in classes if c not in known and c != CACHED_UNUSABLE]:
        parts.append(f"other errors: {'; '.join(other)[:200]}")
    return parts or ["no call gave a usable reply"]
