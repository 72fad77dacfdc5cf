"""Stage 05's parameters, the summary it leaves for the report (``analyse/summary.json``) and its winner
(``analyse/winner.json``), apart from :mod:`.analyse` so that their readers (the report, 07) need not import the
analysis."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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


def read_winner(dp: DatasetPaths) -> str | None:
    """What :func:`rerankeval.evaluate.analyse.write_summary` saved as the winner (``analyse/winner.json``), or None."""
    try:
        got = json.loads(dp.analyse_winner.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return got.get("variant") if isinstance(got, dict) and isinstance(got.get("variant"), str) else None


def read_summary(dp: DatasetPaths) -> Summary | None:
    """What stage 05 saved for the report (``analyse/summary.json``), or None when the analysis has not run."""
    p = dp.analyse_summary
    try:
        return Summary.from_dict(json.loads(p.read_text(encoding="utf-8"))) if p.exists() else None
    except (ValueError, TypeError):
        return None


def read_comparisons(dp: DatasetPaths) -> pd.DataFrame | None:
    """Stage 05's headline comparisons (``analyse/comparisons.csv``; ids kept as written), or None."""
    p = dp.analyse_comparisons
    try:
        return corpus.read_table(p, ids=("metric", "a", "b")) if p.exists() else None
    except (ValueError, OSError):
        return None
