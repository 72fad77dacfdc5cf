"""The injection check of the LLM stages: units that carry an instruction to the model, and what they did to the
metrics (written to ``analyse/injection.json``, listed on the report's index).

Indirect prompt injection (OWASP Top 10 for LLM Applications, LLM01; Greshake et al. 2023, "Not what you've signed
up for") puts words for the model inside the content it reads. A reranker or judge that obeys a page saying "rank it
first" moves that page up for every query. Two signs, per unit a model was shown (04's reranked candidates, 09's
judged pairs, 08's drafts' source pages):

1. **Its text** contains an instruction (:data:`rerankeval.corpus.instructions.PATTERNS`, case-insensitive).
2. **Its scores**: it got the reranker's top score (the unique highest LLM score of a query's pool, main pass:
   what the model preferred, whatever the blend then did) or the judge's top grade (3) for many *unrelated* queries
   (no human grade says it is relevant): at least :data:`MIN_QUERIES` queries and at least :data:`MIN_SHARE` of the
   queries that stage scored. A page that answers many questions is related to them and is not counted.

The effect: every variant's headline metric with and without the flagged units, the units taken out of the runs
(the rest moves up) and out of the grades, as if the collection did not have them (:func:`effect`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels, Run
from rerankeval.corpus import contract, instructions, queryset
from rerankeval.evaluate import agreement, metrics
from rerankeval.rerank.config import MAIN_PASS

MIN_QUERIES = 3  # a unit on top for fewer unrelated queries is not flagged
MIN_SHARE = 0.10  # ... nor for less than this share of the queries the stage scored
TOP_GRADE = 3  # the judge's highest grade (UMBRELA 0-3)
COLUMNS = ["unit", "file", "page", "why", "stage"]
FILE_NAME = "injection.json"


def _unit_texts(chunks: pd.DataFrame) -> dict[str, str]:
    """unit -> its chunks' texts joined (overlaps repeat words; a pattern cut at a chunk end is found in the next)."""
    ordered = chunks.sort_values(["unit_id", "start"], kind="stable")
    return {str(u): " ".join(map(str, g.text)) for u, g in ordered.groupby("unit_id", sort=False)}


def rerank_tops(cands: pd.DataFrame | None) -> tuple[dict[str, set[str]], int]:
    """``unit -> queries where it had the unique highest LLM score`` (main pass) and the number of scored queries."""
    if cands is None or cands.empty or not {"qid", "docid", "llm_score"} <= set(cands.columns):
        return {}, 0
    main = cands[cands["pass"].astype(str) == MAIN_PASS] if "pass" in cands else cands
    main = main.assign(llm_score=pd.to_numeric(main.llm_score, errors="coerce")).dropna(subset=["llm_score"])
    tops: dict[str, set[str]] = {}
    for qid, g in main.groupby("qid", sort=False):
        best = g[g.llm_score == g.llm_score.max()]
        if len(best) == 1:  # a tie on top is no preference
            tops.setdefault(str(best.docid.iloc[0]), set()).add(str(qid))
    return tops, int(main.qid.nunique())


def judge_tops(llm: Qrels) -> tuple[dict[str, set[str]], int]:
    """``unit -> queries the judge graded it TOP_GRADE for`` and the number of queries it graded."""
    tops: dict[str, set[str]] = {}
    for qid, grades in llm.items():
        for unit, g in grades.items():
            if g >= TOP_GRADE:
                tops.setdefault(unit, set()).add(qid)
    return tops, len(llm)


def often_on_top(tops: Mapping[str, set[str]], n_scored: int, human: Qrels) -> dict[str, int]:
    """``unit -> unrelated queries it was on top for``, for the units past the rule of the module docstring."""
    need = max(MIN_QUERIES, math.ceil(MIN_SHARE * n_scored))
    out = {}
    for unit, qids in tops.items():
        unrelated = [q for q in qids if human.get(q, {}).get(unit, 0) < 1]
        if len(unrelated) >= need:
            out[unit] = len(unrelated)
    return out


def _shown(dp: DatasetPaths, cands: pd.DataFrame | None, llm: Qrels) -> dict[str, set[str]]:
    """stage -> the units a model was shown there."""
    drafts = queryset.read_drafts(dp.source_draft_queries) if dp.source_draft_queries.is_file() else []
    return {
        "rerank": set(map(str, cands.docid)) if cands is not None and "docid" in cands else set(),
        "judge": {u for grades in llm.values() for u in grades},
        "draft": {d.unit for d in drafts if d.unit},
    }


def flags(dp: DatasetPaths, human: Qrels) -> pd.DataFrame:
    """The flagged units (:data:`COLUMNS`): the instruction found in the text, or "top for N queries", and the
    stages that showed it to a model; empty when nothing is flagged."""
    cands = contract.read_table(dp.rerank_candidates, ids=("qid", "docid")) if dp.rerank_candidates.is_file() else None
    files = agreement.llm_qrels_files(dp)
    llm = agreement.read_llm_qrels(files[0]) if files else {}
    shown = _shown(dp, cands, llm)
    units = set().union(*shown.values())
    chunks = contract.load_chunks(dp)
    chunks = chunks[chunks.unit_id.astype(str).isin(units)]  # only the units a model was shown are read
    texts = _unit_texts(chunks)
    why: dict[str, list[str]] = {}
    stage: dict[str, set[str]] = {}
    for u in sorted(units):
        words = instructions.first(texts.get(u, ""))
        if words:
            why[u] = [f'says "{words}"']
            stage[u] = {st for st, units in shown.items() if u in units}
    for st, (tops, n) in (("rerank", rerank_tops(cands)), ("judge", judge_tops(llm))):
        what = "the reranker's top score" if st == "rerank" else f"the judge's grade {TOP_GRADE}"
        for u, count in often_on_top(tops, n, human).items():
            why.setdefault(u, []).append(f"{what} for {count} of {n} unrelated queries")
            stage.setdefault(u, set()).add(st)
    return _table(why, stage, chunks)


def _table(why: Mapping[str, list[str]], stage: Mapping[str, set[str]], chunks: pd.DataFrame) -> pd.DataFrame:
    first = chunks.sort_values(["unit_id", "start"], kind="stable").drop_duplicates("unit_id").set_index("unit_id")
    rows = []
    for u in sorted(why):
        src = first.source.get(u, "") if u in first.index else ""
        page = _page(first.page.get(u, "")) if u in first.index else ""
        order = [s for s in ("rerank", "judge", "draft") if s in stage.get(u, set())]
        rows.append([u, str(src or ""), page, "; ".join(why[u]), ", ".join(order)])
    return pd.DataFrame(rows, columns=COLUMNS)


def _page(value: Any) -> str:
    """A page number as text ("" for a document without pages)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value or "")
    return "" if math.isnan(f) else str(int(f)) if f.is_integer() else str(value)


def _without(run: Run, units: set[str]) -> Run:
    return {q: {d: s for d, s in docs.items() if d not in units} for q, docs in run.items()}


def effect(
    runs: Mapping[str, Run], qrels: Qrels, qids: Iterable[str], metric: str, units: Iterable[str], policy: str = "zero"
) -> pd.DataFrame:
    """Per variant: ``metric`` with the units (``with``) and without them (``without``: taken out of the runs and
    the grades; the rest moves up), over the queries still judged without them (``n``); ``diff``: with − without."""
    gone = set(units)
    qids = list(qids)
    qrels_wo = {q: {u: g for u, g in grades.items() if u not in gone} for q, grades in qrels.items()}
    runs_wo = {v: _without(r, gone) for v, r in runs.items()}
    qs = metrics.query_set(runs_wo, qrels_wo, qids, policy=policy)
    qs_with = metrics.query_set(runs, qrels, qs.qids, policy=policy)
    got = []
    for label, rr, qq, s in (("with", runs, qrels, qs_with), ("without", runs_wo, qrels_wo, qs)):
        per = metrics.evaluate(rr, qq, s, [metric]) if s.qids else pd.DataFrame(columns=["variant", "value"])
        got.append(per.groupby("variant").value.mean().rename(label))
    out = pd.concat(got, axis=1).reindex(list(runs))
    out["diff"] = out["with"] - out["without"]
    out["n"] = len(qs.qids)
    return out.rename_axis("variant").reset_index()


def analyse(
    dp: DatasetPaths,
    runs: Mapping[str, Run],
    qrels: Qrels,
    human: Qrels,
    qids: Iterable[str],
    metric: str,
    policy: str = "zero",
) -> dict[str, Any]:
    """The record :func:`write` saves: ``flagged`` (rows of :func:`flags`), ``metric``, ``effect`` (rows of
    :func:`effect`, empty when nothing is flagged) and the rule."""
    table = flags(dp, human)
    eff = effect(runs, qrels, qids, metric, table.unit, policy) if len(table) else pd.DataFrame()
    return {
        "flagged": table.to_dict("records"),
        "metric": metric,
        "effect": json.loads(eff.to_json(orient="records")) if len(eff) else [],
        "rule": f"an instruction to the model in the text (rerankeval.corpus.instructions), or on top for at least "
        f"{MIN_QUERIES} and {MIN_SHARE:.0%} of the queries with no human grade saying it is relevant",
    }


def write(dp: DatasetPaths, record: Mapping[str, Any] | None) -> dict[str, Path]:
    """``analyse/injection.json`` (``{}`` when ``record`` is None: the check did not run)."""
    return {} if record is None else {"injection": atomic_write_json(dp.stage_dir("analyse") / FILE_NAME, dict(record))}


def read(dp: DatasetPaths) -> dict[str, Any] | None:
    """What :func:`write` saved, or None (not written, unreadable)."""
    try:
        got = json.loads((dp.stage_dir("analyse") / FILE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def headline_sentence(record: Mapping[str, Any] | None, variants: Iterable[str] = ()) -> str:
    """ "N candidate(s) contain an instruction to the model ...: nDCG@10 of X with them .XXX, without .YYY", or ""
    when nothing was flagged; ``variants``: the ones to name first (the reranked ones)."""
    if not record or not record.get("flagged"):
        return ""
    flagged = list(record["flagged"])
    metric = metrics.label(str(record.get("metric", "")))
    units = ", ".join(f"{f['unit']} ({f['why']})" for f in flagged[:5]) + (
        f" and {len(flagged) - 5} more" if len(flagged) > 5 else ""
    )
    rows = {
        r["variant"]: r
        for r in record.get("effect") or []
        if r.get("with") is not None and r.get("without") is not None
    }
    wanted = [v for v in variants if v in rows] or sorted(rows, key=lambda v: -abs(rows[v]["diff"] or 0))[:1]
    parts = [
        f"{metric} of {v} with them {rows[v]['with']:.3f}, without {rows[v]['without']:.3f} "
        f"({rows[v]['with'] - rows[v]['without']:+.3f})"
        for v in wanted
    ]
    return (
        f"{len(flagged)} candidate(s) contain an instruction to the model or were put on top for many "
        f"unrelated queries: {units}. " + ("; ".join(parts) + "." if parts else "")
    )


def describe(record: Mapping[str, Any] | None, variants: Iterable[str] = ()) -> str:
    """What notebook 05 prints: :func:`headline_sentence`, or that nothing was flagged."""
    if record is None:
        return "The injection check did not run."
    return headline_sentence(record, variants) or (
        "No candidate contains an instruction to the model, and none was put on top for many unrelated queries "
        f"(rule: {record.get('rule', '')})."
    )


def tables(record: Mapping[str, Any] | None) -> list[pd.DataFrame]:
    """The flagged units and each variant's headline with and without them, as notebook 05 shows them ([] when
    nothing was flagged)."""
    if not record or not record.get("flagged"):
        return []
    out = [pd.DataFrame(record["flagged"], columns=COLUMNS)]
    if record.get("effect"):
        m = metrics.label(str(record.get("metric", "")))
        eff = pd.DataFrame(record["effect"]).round(3)
        out.append(
            eff.rename(
                columns={"with": f"{m} with them", "without": f"{m} without them", "diff": "difference", "n": "queries"}
            )
        )
    return out
