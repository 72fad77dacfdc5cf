"""Failure attribution: where along legs -> fusion -> rerank pool -> reranker did a query's gold units go?

For each query the *best rank of a relevant unit* (grade >= 1) is taken in each stage's unit-level run:
the legs (``vector``, ``bm25``), the fused list (``hybrid``) and the reranked list (``hybrid_rerank``).
A query whose final list (the reranked one, else the fused one) has a relevant unit in its top ``k`` is a
hit; every miss gets the first cause that explains it, in pipeline order:

1. ``not retrieved by either leg``: no leg retrieved any relevant unit (at full run depth);
2. ``lost in fusion``: a leg had a relevant unit within the pool (top ``pool_k``; top ``k`` when there is
   no reranker), the fused list does not;
3. ``cut by the pool size``: relevant units only below the pool in the legs and the fused list (a larger
   pool could have let the reranker see them); without a reranker, ``below the cutoff``;
4. ``rerank fallback``: in the pool, but the ledger says the reranker fell back for this query;
5. ``lost in rerank``: in the fused top ``k``, pushed out by the reranker;
6. ``not lifted by rerank``: in the pool below ``k``; the reranker did not bring it up.

Missing variants are skipped gracefully: no legs -> classes 1-2 are not used; no reranker -> 4-6 are not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from .runs import Qrels, Run, ranked

HIT = "hit"
NOT_RETRIEVED = "not retrieved by either leg"
LOST_FUSION = "lost in fusion"
CUT_POOL = "cut by the pool size"
BELOW_CUTOFF = "below the cutoff"
FALLBACK = "rerank fallback"
LOST_RERANK = "lost in rerank"
NOT_LIFTED = "not lifted by rerank"
CLASSES = (HIT, NOT_RETRIEVED, LOST_FUSION, CUT_POOL, BELOW_CUTOFF, FALLBACK, LOST_RERANK, NOT_LIFTED)

LEGS = ("vector", "bm25")
FUSED = "hybrid"
RERANKED = "hybrid_rerank"

# ledger statuses meaning the reranker's order was not used for (part of) the query
FALLBACK_WORDS = ("fallback", "error", "fail", "unusable", "timeout")
LEDGER_COLUMNS = [
    "qid",
    "pass",
    "status",
    "n_invalid",
    "n_duplicate",
    "n_missing",
    "retries",
    "error",
    "latency_s",
    "prompt_tokens",
    "completion_tokens",
    "cost",
    "cache_hit",
]


def best_gold_rank(run: Run, qrels: Qrels, rel: int = 1) -> dict[str, int | None]:
    """Per query of ``run``: the 1-based rank of the best-ranked relevant unit, or None."""
    out: dict[str, int | None] = {}
    for q, docs in run.items():
        gold = {d for d, g in qrels.get(q, {}).items() if g >= rel}
        out[q] = next((i for i, (d, _) in enumerate(ranked(docs), start=1) if d in gold), None)
    return out


def first_relevant_ranks(runs: Mapping[str, Run], qrels: Qrels, qids: Sequence[str]) -> pd.DataFrame:
    """``qid x variant``: rank of the first relevant unit (NaN when none retrieved)."""
    data = {}
    for v, run in runs.items():
        r = best_gold_rank({q: run.get(q, {}) for q in qids}, qrels)
        data[v] = [r[q] if r[q] is not None else math.nan for q in qids]
    return pd.DataFrame(data, index=pd.Index(list(qids), name="qid"))


# --------------------------------------------------------------------------- ledger
def load_ledger(path: str | Path) -> pd.DataFrame | None:
    """The rerank ledger (CSV, one row per query and pass), or None when the file does not exist."""
    path = Path(path)
    if not path.exists():
        return None
    df = pd.read_csv(path, dtype={"qid": str})
    for c in ("status", "error"):
        if c in df:
            df[c] = df[c].fillna("").astype(str)
    return df


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


def ledger_notes(
    ledger: pd.DataFrame | None, variant: str | None = None, max_chars: int = 240
) -> dict[str, str]:
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


def ledger_summary(
    ledger: pd.DataFrame | None, qids: Iterable[str] | None = None, default_variant: str = RERANKED
) -> pd.DataFrame:
    """Per variant (``variant`` column, else ``default_variant``): LLM cost figures per query.

    Columns: ``variant, n_queries, fallback_rate`` (share of queries with any fallback row),
    ``repaired_rate``, ``tokens_per_query`` (prompt + completion, fresh and served from the cache: what
    the method needs), ``fresh_tokens_per_query`` (sent now), ``llm_seconds_per_query`` (mean wall time
    of the queries not served wholly from the cache; of all queries when every one was),
    ``cost_per_query``, ``cache_hit_rate`` (share of queries served wholly from the cache),
    ``retries_per_query``, ``repairs_per_query`` (invalid + duplicate + missing ids). Restricted to
    ``qids`` when given.
    """
    cols = [
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
    ]
    if ledger is None or ledger.empty:
        return pd.DataFrame(columns=cols)
    df = ledger.copy()
    if "variant" not in df:
        df["variant"] = default_variant
    df["qid"] = df.qid.astype(str)
    if qids is not None:
        df = df[df.qid.isin(set(qids))]

    def col(name):
        if name not in df:
            return pd.Series(0.0, index=df.index)
        return pd.to_numeric(df[name], errors="coerce").fillna(0.0)

    status = (
        df["status"].astype(str).str.strip().str.lower() if "status" in df else pd.Series("", index=df.index)
    )
    fresh = col("prompt_tokens") + col("completion_tokens")
    df = df.assign(
        _fresh=fresh,
        _tok=fresh + col("saved_prompt_tokens") + col("saved_completion_tokens"),
        _lat=col("latency_s"),
        _cost=col("cost"),
        _ret=col("retries"),
        _rep=col("n_invalid") + col("n_duplicate") + col("n_missing"),
        _fb=status.map(is_fallback),
        _repaired=status.eq("repaired"),
        _hit=df["cache_hit"].astype(str).str.lower().isin(["1", "true", "yes"])
        if "cache_hit" in df
        else False,
    )
    rows = []
    for v, g in df.groupby("variant", sort=False):
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
        )
        n = len(per_q)
        if not n:
            continue
        live = per_q[~per_q.hit]
        rows.append(
            dict(
                variant=v,
                n_queries=n,
                fallback_rate=float(per_q.fb.mean()),
                repaired_rate=float(per_q.repaired.mean()),
                tokens_per_query=float(per_q.tok.mean()),
                fresh_tokens_per_query=float(per_q.fresh.mean()),
                llm_seconds_per_query=float((live if len(live) else per_q).lat.mean()),
                cost_per_query=float(per_q.cost.mean()),
                cache_hit_rate=float(per_q.hit.mean()),
                retries_per_query=float(per_q.ret.mean()),
                repairs_per_query=float(per_q.rep.mean()),
            )
        )
    return pd.DataFrame(rows, columns=cols)


def retrieval_seconds(retrieve_dir: str | Path, variants: Iterable[str]) -> dict[str, float]:
    """Retrieval wall seconds per query recorded by stage 03 (``<retrieve_dir>/<variant>.json``)."""
    import json

    out: dict[str, float] = {}
    for v in variants:
        p = Path(retrieve_dir) / f"{v}.json"
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
            secs, n = float(rec["seconds"]), int(rec["queries"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if n > 0 and math.isfinite(secs):
            out[v] = secs / n
    return out


PIPELINE_INPUTS = {FUSED: LEGS, RERANKED: (FUSED,), "cross_encoder": (FUSED,)}


def pipeline_seconds(
    own: Mapping[str, float], variant: str, inputs_of: Mapping[str, Sequence[str]] = PIPELINE_INPUTS
) -> float:
    """Retrieval seconds per query of a variant's whole pipeline: its own recorded time plus its inputs'.

    Stage 03 memoises the legs, so ``hybrid`` records only the fusion and the legs are added here;
    ``hybrid_rerank`` adds ``hybrid``'s pipeline (its LLM time is the ledger's). NaN when a part is unknown.
    Approximate: work shared between variants (e.g. query embeddings) is counted where it was recorded.
    """
    inputs = list(inputs_of.get(variant, ()))
    if variant in own:
        base = float(own[variant])
    elif inputs:
        base = 0.0
    else:
        return math.nan
    return base + sum(pipeline_seconds(own, u, inputs_of) for u in inputs)


def cost_table(
    variants: Sequence[str],
    ledger_sum: pd.DataFrame | None = None,
    retrieval_s: Mapping[str, float] | None = None,
    inputs_of: Mapping[str, Sequence[str]] = PIPELINE_INPUTS,
) -> pd.DataFrame:
    """One row per variant: the ledger figures, ``retrieval_seconds_per_query`` (:func:`pipeline_seconds`)
    and ``seconds_per_query`` = retrieval + LLM seconds (NaN when neither is known)."""
    retrieval_s = dict(retrieval_s or {})
    base = pd.DataFrame({"variant": list(variants)})
    if ledger_sum is not None and len(ledger_sum):
        base = base.merge(ledger_sum.drop(columns=["n_queries"], errors="ignore"), on="variant", how="left")
    base["retrieval_seconds_per_query"] = [pipeline_seconds(retrieval_s, v, inputs_of) for v in base.variant]
    llm = (
        base["llm_seconds_per_query"]
        if "llm_seconds_per_query" in base
        else pd.Series(math.nan, index=base.index)
    )
    both = pd.concat([base.retrieval_seconds_per_query, llm], axis=1)
    base["seconds_per_query"] = both.sum(axis=1, min_count=1)
    return base


def recorded_pool_k(*stage_dirs: str | Path) -> dict[str, int]:
    """``file -> pool_k`` recorded by the retrieve/rerank stages (to check the analysis uses the same)."""
    import json

    out: dict[str, int] = {}
    for d in stage_dirs:
        for p in sorted(Path(d).glob("*.json")) if Path(d).is_dir() else []:
            try:
                rec = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            k = rec.get("pool_k", (rec.get("config") or {}).get("pool_k")) if isinstance(rec, dict) else None
            if isinstance(k, int):
                out[f"{Path(d).name}/{p.name}"] = k
    return out


# --------------------------------------------------------------------------- attribution
def classify(
    k: int,
    pool_k: int,
    legs: Mapping[str, int | None] | None,
    fused: int | None,
    reranked: int | None,
    has_reranker: bool,
    fallback: bool = False,
) -> str:
    """The funnel class of one query from its best gold ranks (None = not retrieved; see module doc)."""
    final = reranked if has_reranker else fused
    if final is not None and final <= k:
        return HIT
    leg_ranks = [r for r in (legs or {}).values() if r is not None]
    if legs and not leg_ranks:
        return NOT_RETRIEVED
    depth = pool_k if has_reranker else k
    if fused is None or fused > depth:
        if not legs and fused is None:
            return NOT_RETRIEVED
        if leg_ranks and min(leg_ranks) <= depth:
            return LOST_FUSION
        return CUT_POOL if has_reranker else BELOW_CUTOFF
    # the fused list has a relevant unit within the pool, the reranked list not in its top k
    if fallback:
        return FALLBACK
    return LOST_RERANK if fused <= k else NOT_LIFTED


def attribute(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    k: int = 10,
    pool_k: int = 20,
    fallback_qids: Iterable[str] = (),
    legs: Sequence[str] = LEGS,
    fused: str = FUSED,
    reranked: str = RERANKED,
) -> pd.DataFrame:
    """Per query: best gold rank per stage and the funnel class at cutoff ``k``.

    Columns ``qid, rank_<leg>..., rank_<fused>, rank_<reranked>, class`` (ranks NaN when not retrieved;
    stage columns only for variants present). Needs the fused variant; returns an empty frame without it.
    """
    if fused not in runs:
        return pd.DataFrame(columns=["qid", "class"])
    if pool_k < k and reranked in runs:
        raise ValueError(f"pool_k ({pool_k}) must be >= k ({k})")
    legs_here = [leg for leg in legs if leg in runs]
    has_rr = reranked in runs
    fb = set(fallback_qids)
    stages = legs_here + [fused] + ([reranked] if has_rr else [])
    best = {v: best_gold_rank({q: runs[v].get(q, {}) for q in qids}, qrels) for v in stages}
    rows = []
    for q in qids:
        leg_r = {leg: best[leg][q] for leg in legs_here}
        cls = classify(
            k, pool_k, leg_r, best[fused][q], best[reranked][q] if has_rr else None, has_rr, q in fb
        )
        row = {"qid": q}
        row.update({f"rank_{v}": (best[v][q] if best[v][q] is not None else math.nan) for v in stages})
        row["class"] = cls
        rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs.update(k=k, pool_k=pool_k, stages=stages, has_reranker=has_rr)
    return out


def funnel_counts(attribution: pd.DataFrame) -> pd.Series:
    """Queries per funnel class, in :data:`CLASSES` order (classes with no query left out)."""
    c = attribution["class"].value_counts()
    return pd.Series({k: int(c[k]) for k in CLASSES if k in c}, name="queries", dtype=int)


def funnel_by_cutoff(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    ks: Iterable[int],
    pool_k: int,
    fallback_qids: Iterable[str] = (),
    **kw,
) -> pd.DataFrame:
    """``k x class`` query counts for every cutoff ``k <= pool_k`` (all ks when there is no reranker)."""
    has_rr = kw.get("reranked", RERANKED) in runs
    rows = {}
    for k in sorted(set(ks)):
        if has_rr and k > pool_k:
            continue
        att = attribute(runs, qrels, qids, k=k, pool_k=pool_k, fallback_qids=fallback_qids, **kw)
        if att.empty:
            continue
        rows[k] = funnel_counts(att)
    df = pd.DataFrame(rows).T.fillna(0).astype(int)
    df.index.name = "k"
    return df[[c for c in CLASSES if c in df.columns]]


def rank_shift(
    runs: Mapping[str, Run],
    qrels: Qrels,
    qids: Sequence[str],
    src: str = FUSED,
    dst: str = RERANKED,
    depth: int | None = None,
) -> pd.DataFrame:
    """Every relevant unit in ``src``'s top ``depth``: ``qid, unit, grade, src_rank, dst_rank``.

    ``dst_rank`` is NaN when ``dst`` does not list the unit.
    """
    if src not in runs or dst not in runs:
        return pd.DataFrame(columns=["qid", "unit", "grade", "src_rank", "dst_rank"])
    rows = []
    for q in qids:
        gold = {d: g for d, g in qrels.get(q, {}).items() if g >= 1}
        s = {d: i for i, (d, _) in enumerate(ranked(runs[src].get(q, {})), start=1)}
        t = {d: i for i, (d, _) in enumerate(ranked(runs[dst].get(q, {})), start=1)}
        for d, g in gold.items():
            if d in s and (depth is None or s[d] <= depth):
                rows.append((q, d, g, s[d], t.get(d, math.nan)))
    return pd.DataFrame(rows, columns=["qid", "unit", "grade", "src_rank", "dst_rank"])
