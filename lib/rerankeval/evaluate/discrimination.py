"""The reranker's own quality: how well an LLM's scores separate relevant from non-relevant candidates.

For an LLM-scored pool (stage 04's ``rerank/candidates.csv``: ``llm_score`` per query and candidate; an
assessor's pool in the same shape), :func:`measure` computes per query the ROC AUC of the score, relevant
(grade > 0) against non-relevant candidates, over the *judged* candidates only, and its macro average over the
queries that have both classes, with a percentile bootstrap CI (:func:`rerankeval.evaluate.stats.bootstrap_ci`).
The AUC is the Mann-Whitney U statistic over ``n_rel * n_non`` (Mann & Whitney 1947; Hanley & McNeil 1982,
"The meaning and use of the area under a ROC curve"): the chance that a random relevant candidate scores above
a random non-relevant one, ties counting 1/2. It is computed with ``scipy.stats.mannwhitneyu`` and cross-checked
against ``sklearn.metrics.roc_auc_score``.

Undefined is said, not crashed: no score (NaN, every query fell back), no judged candidate, no query with
both classes, or one score for the whole pool give ``status = "undefined"`` with the reason. A query whose
candidates all got one score (both classes present) counts AUC 0.5 (the tie rule) and is counted.

:func:`sentence` words it for the verdict: when the CI includes 0.5 the model's judgments are uninformative and
no reranking gain can be expected from it (and :data:`WAY_OUT` says what to try instead).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rerankeval.core.ioutil import atomic_write_text
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Qrels
from rerankeval.evaluate import stats
from rerankeval.rerank.config import MAIN_PASS

CHANCE = 0.5
MIN_QUERIES = 3  # fewer queries with both classes: no confidence interval, no verdict on the model
INFORMATIVE, UNINFORMATIVE, INVERTED, UNDEFINED = "informative", "uninformative", "inverted", "undefined"
WAY_OUT = "a stronger model behind OPENAI_BASE_URL, or the local 1.5B model (LOCAL_MODEL=qwen2.5-coder-1.5b)"
PER_QUERY_COLUMNS = ["qid", "n_relevant", "n_non_relevant", "auc", "constant"]


@dataclass
class Discrimination:
    """One pool's discrimination: the macro AUC with its CI, what was left out, and the rank shift."""

    pool: str = "reranker"
    model: str = ""
    status: str = UNDEFINED  # informative | uninformative | inverted | undefined
    reason: str = ""  # why undefined
    negatives: str = "judged"  # the non-relevant class: judged grade <= 0, or "unjudged" counted as non-relevant
    auc: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    n_candidates: int = 0  # candidates in the pool
    n_unscored: int = 0  # without a finite score (fallback, NaN): left out
    n_unjudged: int = 0  # scored, without a judgment: left out
    n_relevant: int = 0  # judged, scored, grade > 0
    n_non_relevant: int = 0  # judged, scored, grade <= 0
    n_queries: int = 0  # queries with a scored and judged candidate
    n_defined: int = 0  # ... with both classes (the AUC's queries)
    n_one_class: int = 0  # ... with one class only: no AUC
    n_constant: int = 0  # defined queries whose candidates all got one score (AUC 0.5 by the tie rule)
    verified_against: str = ""  # the second computation, e.g. "sklearn 1.9.1"
    max_abs_diff: float = math.nan
    # the first stage's own order of the same candidates (score: minus the fused rank), on the same queries, and
    # the model's AUC minus it, per query, with bootstrap CIs: what a model must beat before a blend can help
    first_stage_auc: float = math.nan
    first_stage_ci_low: float = math.nan
    first_stage_ci_high: float = math.nan
    vs_first_stage: float = math.nan
    vs_first_stage_ci_low: float = math.nan
    vs_first_stage_ci_high: float = math.nan
    shift: dict[str, Any] = field(default_factory=dict)  # the rank shift the rerank causes (:func:`rank_shift`)
    per_query: pd.DataFrame | None = field(default=None, repr=False)  # :data:`PER_QUERY_COLUMNS`
    scores: pd.DataFrame | None = field(default=None, repr=False)  # the judged scored candidates (for the plot)

    def to_dict(self) -> dict[str, Any]:
        """Everything but the frames, JSON-ready (NaN as None)."""
        return _clean(
            {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("per_query", "scores")}
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Discrimination | None:
        if not d:
            return None
        names = {f.name for f in dataclasses.fields(cls)} - {"per_query", "scores"}
        floats = {f.name for f in dataclasses.fields(cls) if f.type in ("float", float)}
        vals = {k: (math.nan if v is None and k in floats else v) for k, v in d.items() if k in names}
        return cls(**vals)


def _clean(x: Any) -> Any:
    """``x`` with NaN as None and numpy numbers as Python ones (for JSON)."""
    if isinstance(x, Mapping):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return None if math.isnan(float(x)) else float(x)
    return int(x) if isinstance(x, np.integer) else x


# --------------------------------------------------------------------------- per query
def auc_mann_whitney(relevant: np.ndarray, other: np.ndarray) -> float:
    """ROC AUC of two score samples: U / (n_rel * n_non), ties 1/2 (``scipy.stats.mannwhitneyu``)."""
    from scipy.stats import mannwhitneyu

    if relevant.size == 0 or other.size == 0:
        return math.nan
    if np.all(relevant == relevant[0]) and np.all(other == relevant[0]):
        return CHANCE  # scipy warns on a constant sample; every pair is a tie
    return float(mannwhitneyu(relevant, other, alternative="two-sided").statistic) / (relevant.size * other.size)


def _sklearn_check(judged: pd.DataFrame, per_query: pd.DataFrame) -> tuple[str, float]:
    """The per-query AUCs recomputed with sklearn: ``(version, max |difference|)``; ("", NaN) without sklearn."""
    try:
        import sklearn
        from sklearn.metrics import roc_auc_score
    except ImportError:
        return "", math.nan
    diffs = [
        abs(roc_auc_score(g.relevant, g.score) - a)
        for (_, g), a in zip(judged.groupby("qid", sort=True), per_query.set_index("qid").auc.sort_index(), strict=True)
        if not math.isnan(a)
    ]
    worst = float(max(diffs, default=0.0))
    if worst > 1e-9:
        raise RuntimeError(
            f"the AUC by Mann-Whitney and sklearn's roc_auc_score differ by {worst:.3g}: report "
            "this with the candidates file; the AUC is not trustworthy"
        )
    return f"sklearn {sklearn.__version__}", worst


def per_query_auc(judged: pd.DataFrame) -> pd.DataFrame:
    """One row per query of the judged scored candidates (``qid, score, relevant``): :data:`PER_QUERY_COLUMNS`;
    ``auc`` is NaN for a query with one class only."""
    rows = []
    for q, g in judged.groupby("qid", sort=True):
        s, rel = g.score.to_numpy(dtype=float), g.relevant.to_numpy(dtype=bool)
        rows.append(
            (
                q,
                int(rel.sum()),
                int((~rel).sum()),
                auc_mann_whitney(s[rel], s[~rel]),
                bool(rel.any() and (~rel).any() and np.all(s == s[0])),
            )
        )
    return pd.DataFrame(rows, columns=PER_QUERY_COLUMNS)


# --------------------------------------------------------------------------- the pool
def judged_scores(
    cands: pd.DataFrame,
    qrels: Qrels,
    qids: Collection[str] | None = None,
    score: str = "llm_score",
    unjudged_as_non_relevant: bool = False,
) -> tuple[pd.DataFrame, dict]:
    """The pool's judged candidates with a finite score (``qid, docid, score, grade, relevant`` and the rank
    columns when present), and the counts of what was left out. ``unjudged_as_non_relevant``: an unjudged
    candidate is kept with grade 0 (the metrics' convention) instead of being left out."""
    c = cands[cands["pass"] == MAIN_PASS] if "pass" in cands else cands
    if qids is not None:
        c = c[c.qid.astype(str).isin(set(qids))]
    c = c.assign(
        qid=c.qid.astype(str),
        docid=c.docid.astype(str),
        score=pd.to_numeric(c[score], errors="coerce") if score in c else math.nan,
    )
    finite = np.isfinite(c.score.to_numpy(dtype=float))
    grade = pd.array([qrels.get(q, {}).get(d) for q, d in zip(c.qid, c.docid, strict=True)], dtype="Int64")
    unjudged = pd.isna(grade)
    counts = {"n_candidates": len(c), "n_unscored": int((~finite).sum()), "n_unjudged": int((finite & unjudged).sum())}
    c = c.assign(grade=grade.fillna(0) if unjudged_as_non_relevant else grade)
    judged = c[finite & (c.grade.notna().to_numpy())]
    return judged.assign(relevant=(judged.grade > 0).astype(bool)).reset_index(drop=True), counts


def rank_shift(judged: pd.DataFrame) -> dict[str, Any]:
    """What the rerank did to the judged candidates' ranks (``fused_rank`` -> ``final_rank``), per class:
    how many, the mean |rank change|, the shares moved up, down and kept."""
    if judged.empty or not {"fused_rank", "final_rank"} <= set(judged.columns):
        return {}
    out: dict[str, Any] = {}
    for name, g in (("relevant", judged[judged.relevant]), ("non_relevant", judged[~judged.relevant])):
        d = (pd.to_numeric(g.fused_rank, errors="coerce") - pd.to_numeric(g.final_rank, errors="coerce")).dropna()
        n = len(d)
        out[name] = {
            "n": n,
            "mean_abs_change": float(d.abs().mean()) if n else math.nan,
            "up": float((d > 0).mean()) if n else math.nan,
            "down": float((d < 0).mean()) if n else math.nan,
            "same": float((d == 0).mean()) if n else math.nan,
        }
    return out


def _status(d: Discrimination, judged: pd.DataFrame) -> tuple[str, str]:
    if d.n_candidates == 0:
        return UNDEFINED, "the pool has no candidate"
    if d.n_unscored == d.n_candidates:
        return UNDEFINED, f"none of the {d.n_candidates} candidates has a score (NaN: every call fell back?)"
    if judged.empty:
        return UNDEFINED, f"none of the {d.n_candidates - d.n_unscored} scored candidates is judged"
    if judged.score.nunique() == 1:
        return UNDEFINED, (
            f"the model gave all {len(judged)} judged candidates the same score ({float(judged.score.iloc[0]):.3g})"
        )
    if d.n_defined == 0:
        return UNDEFINED, "no query has both a relevant and a non-relevant judged candidate"
    if d.n_defined < MIN_QUERIES:
        return UNDEFINED, (
            f"only {d.n_defined} quer{'y has' if d.n_defined == 1 else 'ies have'} both relevant and "
            f"non-relevant judged candidates (mean AUC {d.auc:.3f}): too few for a confidence interval"
        )
    if d.ci_low > CHANCE:
        return INFORMATIVE, ""
    if d.ci_high < CHANCE:
        return INVERTED, ""
    return UNINFORMATIVE, ""


def measure(
    cands: pd.DataFrame,
    qrels: Qrels,
    qids: Collection[str] | None = None,
    *,
    model: str = "",
    pool: str = "reranker",
    score: str = "llm_score",
    unjudged: str = "auto",
    n_boot: int = stats.N_BOOT,
    seed: int = 0,
) -> Discrimination:
    """The pool's :class:`Discrimination`: per-query AUC, the macro AUC with its bootstrap CI, the counts left
    out, the rank shift. ``cands`` has ``qid, docid, <score>`` (and ``pass``, ``fused_rank``, ``final_rank``).

    ``unjudged``: ``"leave_out"`` (judged candidates only), ``"non_relevant"`` (grade 0, as the metrics count
    them), or ``"auto"``: left out, unless no candidate of the pool is judged non-relevant (qrels that list only
    relevant units), then counted non-relevant -- ``negatives`` says which.
    """
    if unjudged not in ("auto", "leave_out", "non_relevant"):
        raise ValueError(f"unjudged must be 'auto', 'leave_out' or 'non_relevant', got {unjudged!r}")
    judged, counts = judged_scores(cands, qrels, qids, score, unjudged == "non_relevant")
    negatives = "unjudged" if unjudged == "non_relevant" else "judged"
    if unjudged == "auto" and len(judged) and not (~judged.relevant).any() and counts["n_unjudged"]:
        judged, counts = judged_scores(cands, qrels, qids, score, True)
        negatives = "unjudged"
    pq = per_query_auc(judged) if len(judged) else pd.DataFrame(columns=PER_QUERY_COLUMNS)
    defined = pq[pq.auc.notna()]
    n_rel = int(judged.relevant.sum()) if len(judged) else 0
    d = Discrimination(
        pool=pool,
        model=model,
        negatives=negatives,
        **counts,
        n_relevant=n_rel,
        n_non_relevant=len(judged) - n_rel,
        n_queries=len(pq),
        n_defined=len(defined),
        n_one_class=len(pq) - len(defined),
        n_constant=int(defined.constant.sum()),
        shift=rank_shift(judged),
        per_query=pq,
        scores=judged,
    )
    if len(defined):
        d.verified_against, d.max_abs_diff = _sklearn_check(judged, pq)
        d.auc, lo, hi = stats.bootstrap_ci(defined.auc.to_numpy(dtype=float), n_boot=n_boot, seed=seed)
        if len(defined) >= MIN_QUERIES:
            d.ci_low, d.ci_high = lo, hi
    d.status, d.reason = _status(d, judged)
    if d.status == UNDEFINED:
        d.ci_low = d.ci_high = math.nan
    elif d.n_defined >= MIN_QUERIES:
        _against_first_stage(d, judged, defined, n_boot, seed)
    if len(judged) and judged.score.nunique() == 1:
        d.auc = math.nan  # one score for the whole pool: no ranking to measure
    return d


def _against_first_stage(
    d: Discrimination, judged: pd.DataFrame, defined: pd.DataFrame, n_boot: int, seed: int
) -> None:
    """Fill ``d``'s first-stage fields: the AUC of minus the fused rank over the same judged candidates and
    queries, and the paired per-query difference (model minus first stage), each with its bootstrap CI."""
    if "fused_rank" not in judged:
        return
    rank = pd.to_numeric(judged.fused_rank, errors="coerce")
    if rank.isna().any():
        return
    first = per_query_auc(judged.assign(score=-rank.to_numpy(dtype=float))).set_index("qid").auc
    model = defined.set_index("qid").auc
    fs = first.reindex(model.index).to_numpy(dtype=float)
    d.first_stage_auc, d.first_stage_ci_low, d.first_stage_ci_high = stats.bootstrap_ci(fs, n_boot=n_boot, seed=seed)
    d.vs_first_stage, d.vs_first_stage_ci_low, d.vs_first_stage_ci_high = stats.bootstrap_ci(
        model.to_numpy(dtype=float) - fs, n_boot=n_boot, seed=seed
    )


# --------------------------------------------------------------------------- in words
def _f(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(float(x)) else f"{float(x):.3f}"


def _auc_words(d: Discrimination) -> str:
    ci = f"95% CI {_f(d.ci_low)}\u2013{_f(d.ci_high)}" if math.isfinite(d.ci_low) else "no CI"
    return f"ROC AUC {_f(d.auc)} ({ci}; 0.5 is chance, 1 perfect) over {d.n_defined} queries"


def first_stage_words(d: Discrimination) -> str:
    """The first stage's own AUC on the same candidates and the model's difference from it ("" when not measured):
    a model has to separate the pool better than its fused order already does before reranking can help."""
    if not math.isfinite(d.first_stage_auc):
        return ""
    lo, hi = d.vs_first_stage_ci_low, d.vs_first_stage_ci_high
    than = "below" if hi < 0 else "above" if lo > 0 else "not distinguishable from"
    tail = {
        "below": "so its scores order the pool worse than the first stage already does, and blending them in is "
        "unlikely to raise the ranking",
        "above": "so it adds what the first stage's order lacks, and a blend can raise the ranking",
        "not distinguishable from": "so a blend can gain little",
    }[than]
    return (
        f" The first stage's own order of the same candidates (their fused rank) separates them at ROC AUC "
        f"{_f(d.first_stage_auc)} (95% CI {_f(d.first_stage_ci_low)}\u2013{_f(d.first_stage_ci_high)}); the model "
        f"is {than} it ({d.vs_first_stage:+.3f}, 95% CI {lo:+.3f} to {hi:+.3f}), {tail}."
    )


def sentence(d: Discrimination | Mapping[str, Any] | None) -> str | None:
    """The verdict's sentence on the model's discrimination (None without a pool); names the model and, when the
    CI includes 0.5 or the model gave one score to everything, says no reranking gain can be expected; then the
    first stage's own AUC on the same candidates beside it (:func:`first_stage_words`)."""
    d = Discrimination.from_dict(d) if isinstance(d, Mapping) else d
    if d is None:
        return None
    who = f"The {d.pool}'s model ({d.model or 'not recorded'})"
    hopeless = f"its judgments are uninformative and no reranking gain can be expected from it; instead use {WAY_OUT}"
    if d.status == INFORMATIVE:
        return (
            f"{who} separates relevant from non-relevant candidates better than chance: {_auc_words(d)}."
            + first_stage_words(d)
        )
    if d.status == UNINFORMATIVE:
        return (
            f"{who} cannot tell relevant from non-relevant candidates: {_auc_words(d)}, and the CI includes "
            f"0.5, so {hopeless}." + first_stage_words(d)
        )
    if d.status == INVERTED:
        return (
            f"{who} scores non-relevant candidates above relevant ones: {_auc_words(d)}, below chance: its "
            "judgments are inverted and reranking with them can only hurt; check that its score is read the "
            f"right way round (the prompt, p(yes) against p(no)), or use {WAY_OUT}."
        )
    if d.reason.startswith("the model gave all"):
        return f"{who} {d.reason[len('the model ') :]}: its ROC AUC is undefined, {hopeless}."
    tail = (
        ""
        if "re-run" in d.reason
        else "; judge more of its candidates (review/unjudged.tsv) to measure it"
        if "judged" in d.reason
        else "; see the ledger in 04-rerank"
        if "has a score" in d.reason
        else ""
    )
    return f"{who} could not be measured (ROC AUC undefined): {d.reason}{tail}."


def coverage(d: Discrimination | Mapping[str, Any] | None) -> str | None:
    """What the AUC was computed over and what was left out (one line, for the facts under the table)."""
    d = Discrimination.from_dict(d) if isinstance(d, Mapping) else d
    if d is None:
        return None
    unj = (
        "counted as non-relevant, as the metrics count them (the qrels judge no candidate of this pool non-relevant)"
        if d.negatives == "unjudged"
        else "left out"
    )
    const = f", {d.n_constant} had one score for every candidate (AUC 0.5 by the tie rule)" if d.n_constant else ""
    check = (
        f"; cross-checked against {d.verified_against} (max difference {d.max_abs_diff:.1e})"
        if d.verified_against
        else ""
    )
    return (
        f"{d.pool.capitalize()} ROC AUC (ties count 1/2) over {d.n_relevant} relevant and {d.n_non_relevant} "
        f"non-relevant scored candidates of {d.n_candidates}: {d.n_unjudged} unjudged {unj}, {d.n_unscored} "
        f"without a score left out; {d.n_one_class} of {d.n_queries} queries had one class only (no AUC)"
        f"{const}{check}."
    )


def shift_sentence(d: Discrimination | Mapping[str, Any] | None) -> str | None:
    """The rank shift the rerank caused, relevant against non-relevant candidates (None when not recorded)."""
    d = Discrimination.from_dict(d) if isinstance(d, Mapping) else d
    if d is None or not d.shift.get("relevant", {}).get("n"):
        return None

    def part(name: str) -> str:
        s = d.shift.get(name) or {}
        if not s.get("n"):
            return f"no {name.replace('_', '-')} candidates"
        return (
            f"{s['n']} {name.replace('_', '-')}: {100 * s['up']:.0f}% moved up, {100 * s['down']:.0f}% down, "
            f"mean |rank change| {s['mean_abs_change']:.2f}"
        )

    return f"The rerank's rank shift within the pool: {part('relevant')}; {part('non_relevant')}."


# --------------------------------------------------------------------------- the reranker's pool on disk
def reranker_model(dp: DatasetPaths) -> str:
    """The model stage 04 recorded in ``rerank/summary.json`` ("" when not recorded)."""
    try:
        return str(json.loads(dp.rerank_summary.read_text(encoding="utf-8")).get("model") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def reranker(
    dp: DatasetPaths, qrels: Qrels, qids: Collection[str] | None = None, *, n_boot: int = stats.N_BOOT, seed: int = 0
) -> Discrimination | None:
    """The discrimination of stage 04's LLM scores (``rerank/candidates.csv``), or None when stage 04 wrote none.
    A file that cannot be read gives an undefined one whose reason says so (the rest of the analysis goes on)."""
    from rerankeval.corpus.contract import read_table

    if not dp.rerank_candidates.is_file():
        return None
    model, where = reranker_model(dp), dp.rerank_candidates.relative_to(dp.root)
    try:
        cands = read_table(dp.rerank_candidates, ids=("qid", "docid"))
    except (OSError, ValueError) as e:
        return Discrimination(model=model, reason=f"{where} cannot be read ({e}); re-run 04-rerank to write it")
    missing = sorted({"qid", "docid", "llm_score"} - set(cands.columns))
    if missing:
        return Discrimination(
            model=model,
            reason=f"{where} lacks the column(s) {missing} (written by another version of 04-rerank); re-run 04-rerank",
        )
    return measure(cands, qrels, qids, model=model, n_boot=n_boot, seed=seed)


def per_query_csv(dp: DatasetPaths) -> Path:
    return dp.analyse_dir / "discrimination.csv"


def write(dp: DatasetPaths, d: Discrimination | None) -> dict[str, Path]:
    """The per-query AUCs as ``analyse/discrimination.csv`` (nothing without a pool)."""
    if d is None or d.per_query is None:
        return {}
    return {"discrimination": atomic_write_text(per_query_csv(dp), d.per_query.to_csv(index=False))}
