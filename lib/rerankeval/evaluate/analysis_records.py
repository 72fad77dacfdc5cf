"""Stage 05's parameters, the summary it leaves for the report (``analyse/summary.json``), its winner
(``analyse/winner.json``) and what its numbers rest on (``analyse/inputs.json`` and ``questions.csv``: questions,
grades, parameters, which the report's "since the previous run" line compares), apart from :mod:`.analyse` so that
their readers (the report, 07) need not import the analysis."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.names import HYBRID, HYBRID_RERANK
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import metrics, stats, verdict

if TYPE_CHECKING:
    import pandas as pd


class AnalysisWarning(UserWarning):
    """Something the analysis got and could still measure, but the user should know (empty runs...)."""


@dataclass
class AnalysisParams:
    """Stage 05's parameters: notebook 05's parameters cell has the same names and defaults (a test checks)."""

    dataset: str = "debian-manuals"
    ks: list[int] = field(default_factory=lambda: [1, 3, 5, 10, 20, 100])
    final_k: int = 10
    pool_k: int | None = 0  # 0 / None: what stages 03/04 recorded
    eval_variants: list[str] = field(default_factory=list)
    missing_queries: str = "zero"
    verify_with: list[str] = field(default_factory=lambda: ["ranx", "pytrec_eval"])
    n_boot: int = stats.N_BOOT
    n_perm: int = stats.N_PERM
    test: str = "randomization"
    stats_seed: int = 42
    diff_pair: list[str] = field(default_factory=lambda: [HYBRID, HYBRID_RERANK])
    diff_queries: list[str] = field(default_factory=list)
    diff_n: int = 6
    diff_top_k: int = 10
    qrels_source: str = "human"  # "human", or "human+llm": LLM grades (09-assess) added where no human judged
    baseline: str = ""  # the variant every other is compared with; "": the better single leg (vector or bm25)

    @classmethod
    def of(cls, params: AnalysisParams | Mapping[str, Any]) -> AnalysisParams:
        """From a mapping (e.g. the notebook's globals): known names are taken, the rest ignored."""
        if isinstance(params, cls):
            return params
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(params).items() if k in names})


@dataclass
class Summary:
    """The analysis facts the report page reads (``analyse/summary.json``; also in the manifest)."""

    headline_metric: str = verdict.HEADLINE
    k: int = 10
    pool_k: int | None = None
    cutoffs: list[int] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    n_queries: int = 0
    query_set: str = ""
    policy: str = "zero"
    missing: dict[str, int] = field(default_factory=dict)  # variant -> evaluated queries it did not answer
    relevance_unit: str = "unknown"
    dedupe_policy: str = metrics.DEDUPE_POLICY
    primary: str = "ir_measures"
    verified_against: str = ""
    max_abs_diff: str = ""
    test: str = "randomization"
    n_boot: int = 0
    n_perm: int = 0
    stats_seed: int = 0
    verdict: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)  # one note per run file from another system
    judging: dict[str, Any] = field(default_factory=dict)  # Judged@k, unjudged pool, merged judgments (judgments.py)
    discrimination: dict[str, Any] = field(default_factory=dict)  # the reranker model's ROC AUC (discrimination.py)
    qrels_source: str = "human"  # the grades every table rests on ("human" or "human+llm")
    grades: dict[str, Any] = field(default_factory=dict)  # LLM file, grades added, agreement (agreement.py)
    baseline: str = ""  # the variant the others are compared with (verdict.baseline_of of the parameter)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Summary:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def winner(table: pd.DataFrame, summary: Summary) -> str | None:
    """The best variant on the headline metric among those that answered every query (else among all), or None."""
    col = summary.headline_metric
    if "variant" not in table or col not in table or table[col].isna().all():
        return None
    full = table[~table.variant.map(lambda v: bool(summary.missing.get(v)))]
    table = full if len(full) else table
    return str(table.loc[table[col].idxmax(), "variant"])


def _winner_record(dp: DatasetPaths) -> dict:
    try:
        got = json.loads(dp.analyse_winner.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def read_winner(dp: DatasetPaths) -> str | None:
    """The variant with the best mean that :func:`rerankeval.evaluate.analyse.write_summary` saved
    (``analyse/winner.json``), or None."""
    got = _winner_record(dp).get("variant")
    return got if isinstance(got, str) else None


def winner_is_distinguishable(dp: DatasetPaths) -> bool:
    """Whether 05 found that best mean distinguishable from the next (significant after Holm, not 0 at the shown
    precision): only then may a page call it the winner."""
    return _winner_record(dp).get("distinguishable") is True


def read_summary(dp: DatasetPaths) -> Summary | None:
    """What stage 05 saved for the report (``analyse/summary.json``), or None when the analysis has not run."""
    p = dp.analyse_summary
    try:
        return Summary.from_dict(json.loads(p.read_text(encoding="utf-8"))) if p.exists() else None
    except (ValueError, TypeError):
        return None


INPUTS_FILE = "inputs.json"  # under dp.stage_dir("analyse"): what the numbers rest on, for the next run to compare
QUESTIONS_FILE = "questions.csv"  # ... and per evaluated question (a CSV: the manifest copies only the JSON files)
_NOT_PARAMETERS = {"variant", "seconds", "queries", "read_back", "wall_s"}  # a stage record's facts, not settings


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


def stage_parameters(dp: DatasetPaths) -> dict[str, Any]:
    """The settings the stages recorded, flat: ``retrieve.<variant>.<name>`` from 03's records, ``rerank.model`` and
    ``rerank.<name>`` from 04's summary's config."""
    out: dict[str, Any] = {}
    folder = dp.stage_dir("retrieve")
    for rec in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        got = _read_json(rec)
        out |= {f"retrieve.{rec.stem}.{k}": v for k, v in got.items() if k not in _NOT_PARAMETERS}
    rerank = _read_json(dp.stage_dir("rerank") / "summary.json")
    if rerank:
        out["rerank.model"] = rerank.get("model")
        out |= {f"rerank.{k}": v for k, v in (rerank.get("config") or {}).items()}
    return out


def _read_json(path: Any) -> dict[str, Any]:
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def inputs_record(
    dp: DatasetPaths,
    params: AnalysisParams,
    queries: Mapping[str, str],
    qrels: Mapping[str, Any],
    qids: Sequence[str],
    judging: Mapping[str, Any],
) -> dict[str, Any]:
    """What an analysis rests on, per evaluated question: its text's and its grades' digests; the judgments merged,
    the grades' source, the analysis's and the stages' parameters (:mod:`rerankeval.report.history` compares two)."""
    merged = (judging or {}).get("judgments") or {}
    return {
        "questions": {q: _digest(queries.get(q, "")) for q in qids},
        "grades": {q: _digest(sorted((qrels.get(q) or {}).items())) for q in qids},
        "judgments_merged": int(merged.get("merged", 0) or 0) if isinstance(merged, Mapping) else 0,
        "qrels_source": params.qrels_source,
        "parameters": {**{f"analyse.{k}": getattr(params, k) for k in ANALYSIS_PARAMETERS}, **stage_parameters(dp)},
    }


ANALYSIS_PARAMETERS = ("final_k", "pool_k", "missing_queries", "qrels_source", "baseline")


def write_inputs(dp: DatasetPaths, record: Mapping[str, Any]) -> Path:
    """``analyse/inputs.json`` (:func:`inputs_record` but the per-question digests) and ``analyse/questions.csv``
    (``qid, question_sha256, grades_sha256``: one row per evaluated question)."""
    folder, grades = dp.stage_dir("analyse"), record.get("grades") or {}
    out = io.StringIO()
    table = csv.writer(out, lineterminator="\n")
    table.writerow(["qid", "question_sha256", "grades_sha256"])
    table.writerows([q, h, grades.get(q, "")] for q, h in (record.get("questions") or {}).items())
    atomic_write_text(folder / QUESTIONS_FILE, out.getvalue())
    rest = {k: v for k, v in record.items() if k not in ("questions", "grades")}
    return atomic_write_json(folder / INPUTS_FILE, rest)


def read_inputs(dp: DatasetPaths) -> dict[str, Any] | None:
    """What :func:`write_inputs` saved (the record of :func:`inputs_record`), or None."""
    folder = dp.stage_dir("analyse")
    got = _read_json(folder / INPUTS_FILE)
    try:
        table = corpus.read_table(folder / QUESTIONS_FILE, ids=("qid", "question_sha256", "grades_sha256"))
    except (OSError, ValueError):
        return None
    if not got:
        return None
    return {
        **got,
        "questions": dict(zip(table.qid, table.question_sha256, strict=True)),
        "grades": dict(zip(table.qid, table.grades_sha256, strict=True)),
    }


def read_comparisons(dp: DatasetPaths) -> pd.DataFrame | None:
    """Stage 05's headline comparisons (``analyse/comparisons.csv``; ids kept as written), or None."""
    p = dp.analyse_comparisons
    try:
        return corpus.read_table(p, ids=("metric", "a", "b")) if p.exists() else None
    except (ValueError, OSError):
        return None
