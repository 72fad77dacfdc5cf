"""Stage 05 as a library: ``run(dp, AnalysisParams(...), settings) -> Analysis`` computes what notebook 05 shows
(:mod:`.views` words it), ``write(dp, analysis)`` writes ``metrics.csv``, ``per_query.csv``, ``analyse/summary.json``,
``comparisons.csv``, ``discrimination.csv`` (:mod:`.discrimination`), ``injection.json`` (:mod:`.injection`: units
that instruct the model, with the headline with and without them), ``incomplete.json`` (:mod:`.holes`: the bounds
over the unjudged units and which comparisons they leave undecided) and the manifest. Reads (stages 01, 03, 04, 09):
the query table, qrels, corpus statistics, every run in ``dp.runs_dir`` (unit and chunk level), the rerank ledger,
the parameters 03/04 recorded, the LLM assessor's grades (:mod:`.agreement`: kappa against the human grades; its
grades where no human judged with ``qrels_source = "human+llm"``). ``baseline``: the variant the rest face.

Queries a run has no line for follow ``missing_queries`` (``zero``: scored 0, as trec_eval ``-c``; ``common``: only
queries every run answered); each pair is compared only on the queries both answered (listed in the run, or recorded
as run by the stage: 03's query count, 04's ledger). A run file whose name is not a chain variant is another
system's, read as trec_eval reads it (:func:`rerankeval.core.runs.read_external_run`).
"""

from __future__ import annotations

import json
import pickle
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_bytes, atomic_write_json, atomic_write_text, sha256_file, sha256_json
from rerankeval.core.names import CROSS_ENCODER, HYBRID, HYBRID_RERANK
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import agreement as agree
from rerankeval.evaluate import (
    conformance,
    costs,
    funnel,
    holes,
    injection,
    judgments,
    limitations,
    manifest,
    metrics,
    other_grades,
    stats,
    verdict,
)
from rerankeval.evaluate import discrimination as discrim
from rerankeval.evaluate.analysis_records import (
    AnalysisParams,
    AnalysisWarning,
    Summary,
    inputs_record,
    winner,
    write_inputs,
)

FUSED, RERANKED = HYBRID, HYBRID_RERANK
RERANKERS = (RERANKED, CROSS_ENCODER)


@dataclass
class Analysis:
    """Everything notebook 05 computes, typed (tables are pandas frames)."""

    dp: DatasetPaths
    params: AnalysisParams
    pool_k: int
    headline: str
    cutoffs: list[int]
    columns: list[str]  # metric columns
    queries: dict[str, str]  # qid -> text
    slices: dict[str, dict[str, str]]
    qrels: runs.Qrels
    run_files: dict[str, Path]
    runs: dict[str, runs.Run]
    chunk_runs: dict[str, runs.Run]
    checks: list[runs.RunCheck]  # the run contract, one per chain variant
    external: list[runs.ExternalRun]  # one per run file from another system
    unit_mapping: dict[str, int]  # variant -> queries whose unit run is not its chunk run mapped to units
    query_set: metrics.QuerySet
    answered: dict[str, set[str]]  # variant -> evaluated queries it answered
    per_query: pd.DataFrame  # variant, qid, metric, value (per_query.csv)
    conformance: pd.DataFrame
    ci: pd.DataFrame  # variant, metric, n, mean, ci_low, ci_high
    ledger: pd.DataFrame | None
    costs: pd.DataFrame
    table: pd.DataFrame  # metrics.csv
    comparisons: pd.DataFrame
    reranked: str
    fallback_qids: set[str]
    attribution: pd.DataFrame
    funnel_by_k: pd.DataFrame
    first_ranks: pd.DataFrame
    rank_shift: pd.DataFrame
    by_slice: pd.DataFrame
    summary: Summary
    settings: Settings = field(repr=False)  # given to run: the manifest records them (nothing reads the environment)
    warnings: list[str] = field(default_factory=list)
    known_limitations: pd.DataFrame | None = None  # issue 11: rerankeval.evaluate.limitations.table
    discrimination: discrim.Discrimination | None = None  # issue 22: the reranker model's AUC
    human_qrels: runs.Qrels | None = None  # the human grades (qrels + judgments), whatever qrels_source is
    other: tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]] | None = None  # the table under the other grades
    injection: dict[str, Any] | None = None  # issue 32: units that instruct the model, and their effect (injection)
    holes: dict[str, Any] | None = None  # issue 34: bounds over the unjudged units, decided/undecided (holes)

    @property
    def verdict(self) -> list[str]:
        return self.summary.verdict

    def missing(self) -> dict[str, list[str]]:
        """variant -> evaluated queries it did not answer (sorted)."""
        return {v: sorted(set(self.query_set.qids) - got) for v, got in self.answered.items()}

    def diff_view(self) -> tuple[list[str], list[str]]:
        """The pair and the queries the diff view shows (largest headline change first; HTML: :mod:`..htmlsafe`)."""
        pair = [v for v in self.params.diff_pair if v in self.runs]
        pair = pair if len(pair) == 2 else list(self.runs)[-2:]
        if len(pair) != 2:
            return pair, []
        w = metrics.wide(self.per_query, self.headline)
        chosen = [q for q in self.params.diff_queries if q in w.index]
        if not chosen:
            change = (w[pair[1]] - w[pair[0]]).abs().sort_values(ascending=False, kind="stable")
            chosen = list(change.index[: self.params.diff_n])
        return pair, chosen


def resolve_pool_k(dp: DatasetPaths, override: int | None, variants: list[str]) -> tuple[int, list[str]]:
    """``pool_k`` from the stage records (or ``override``), and warnings when records and override differ.

    Raises :class:`ValueError` when nothing was recorded and no override is given, or when the records
    disagree among themselves and no override says which one to use.
    """
    recorded = costs.recorded_pool_k(dp.stage_dir("retrieve"), dp.stage_dir("rerank"), variants=variants)
    values = sorted(set(recorded.values()))
    if override:
        other = {f: k for f, k in recorded.items() if k != override}
        return int(override), [
            f"pool_k = {override} here, but the stages recorded {other}: pass the same pool_k to "
            "every notebook (or pool_k = 0 here to use what they recorded)."
        ] if other else []
    if not values:
        raise ValueError(
            f"no stage recorded pool_k under {dp.stage_dir('retrieve')} or {dp.stage_dir('rerank')}: "
            "run 03-retrieve first, or pass pool_k to this notebook"
        )
    if len(values) > 1:
        raise ValueError(
            f"the stages recorded different pool_k values {recorded}: re-run 03-retrieve and "
            "04-rerank with one pool_k, or pass pool_k here to choose one"
        )
    return values[0], []


def ledger_pool_warnings(ledger: pd.DataFrame | None, pool_k: int) -> list[str]:
    """A warning when the rerank ledger shows larger pools than ``pool_k`` (stage 04 ran with a larger one)."""
    if ledger is None or ledger.empty or "n_pool" not in ledger:
        return []
    biggest = pd.to_numeric(ledger.n_pool, errors="coerce").max()
    if pd.isna(biggest) or biggest <= pool_k:
        return []
    return [
        f"the rerank ledger shows pools of up to {int(biggest)} candidates, but pool_k = {pool_k} here: "
        "re-run 04-rerank with this pool_k, or pass the pool_k it ran with"
    ]


def _load_runs(dp: DatasetPaths, p: AnalysisParams, qids: list[str]):
    """``run_files, runs, checks, external notes``; chain runs are held to the run contract."""
    run_files = runs.discover_runs(dp.runs_dir, p.eval_variants or None)
    if not run_files:
        raise FileNotFoundError(f"no run files (*.trec) in {dp.runs_dir}: run 03-retrieve (and 04-rerank) first")
    loaded: dict[str, runs.Run] = {}
    checks, external = [], []
    for v, path in run_files.items():
        if runs.is_external(v):
            loaded[v], note = runs.read_external_run(path, qids, v)
            external.append(note)
        else:
            loaded[v], chk = runs.read_run_checked(path, v)
            checks.append(chk)
    runs.assert_run_contract(checks)
    return run_files, loaded, checks, external


def _answered(
    dp: DatasetPaths, loaded: Mapping[str, runs.Run], ledger: pd.DataFrame | None, n_queries: int, qids: list[str]
) -> dict[str, set[str]]:
    """variant -> the evaluated queries it answered (listed in its run, or recorded as run by its stage)."""
    out: dict[str, set[str]] = {}
    for v, run in loaded.items():
        got = {q for q, d in run.items() if d}
        rec = dp.stage_dir("retrieve") / f"{v}.json"
        if v == RERANKED and ledger is not None and "qid" in ledger:
            rows = ledger[ledger.variant == v] if "variant" in ledger else ledger
            got |= set(rows.qid.astype(str))
        elif rec.exists():
            try:
                if int(json.loads(rec.read_text(encoding="utf-8")).get("queries", -1)) >= n_queries:
                    got = set(qids)
            except (ValueError, TypeError):
                pass
        out[v] = got & set(qids)
    return out


def _degenerate_warnings(qs: metrics.QuerySet) -> list[str]:
    out = [f"{v} returned nothing for any evaluated query: every metric of {v} is 0" for v in qs.empty]
    for v, miss in qs.missing_by_variant.items():
        if miss and v not in qs.empty:
            shown = ", ".join(miss[:10]) + (" ..." if len(miss) > 10 else "")
            what = "scored 0 for it" if qs.policy == "zero" else "left out of the common set"
            out.append(f"{v} has no result for {len(miss)} of {qs.n_judged} judged queries ({what}): {shown}")
    return out


# --------------------------------------------------------------------------- the analysis
def _evaluate(dp, p, qrels, queries, loaded, run_files, external, columns):
    qs = metrics.query_set(loaded, qrels, queries, policy=p.missing_queries)
    if not qs.qids:
        raise ValueError(
            "no query is judged and answered by the runs: nothing to evaluate. Check that the "
            'qrels\' query ids match queries.jsonl, or use missing_queries = "zero".'
        )
    per_query = metrics.evaluate(loaded, qrels, qs, columns)
    with tempfile.TemporaryDirectory() as tmp:
        files = dict(run_files)
        for note in external:  # the checkers read the run as re-sorted, not the raw file
            files[note.variant] = runs.write_trec(loaded[note.variant], Path(tmp) / f"{note.variant}.trec", "ext")
        conf = conformance.conformance_check(
            files, qrels, per_query, qs, checkers=p.verify_with, cache=dp.roots.cache / "conformance"
        )
    return qs, per_query, conf


def _compare_all(per_query: pd.DataFrame, columns, headline, final_k, pool_k, p, answered) -> pd.DataFrame:
    wanted = [headline, f"mrr@{final_k}", f"success@{final_k}", f"recall@{final_k}", f"recall@{pool_k}", "map"]
    frames = [
        stats.compare(
            per_query, m, test=p.test, n_resamples=p.n_perm, n_boot=p.n_boot, seed=p.stats_seed, answered=answered
        )
        for m in dict.fromkeys(wanted)
        if m in columns
    ]
    return pd.concat(frames, ignore_index=True)


def _funnel(loaded, qrels, qids, p: AnalysisParams, pool_k, cutoffs, fallback_qids, reranked):
    att = funnel.attribute(
        loaded, qrels, qids, k=p.final_k, pool_k=pool_k, fallback_qids=fallback_qids, reranked=reranked
    )
    by_k = (
        funnel.funnel_by_cutoff(loaded, qrels, qids, cutoffs, pool_k, fallback_qids, reranked=reranked)
        if not att.empty
        else pd.DataFrame()
    )
    return att, by_k


def _tables(dp: DatasetPaths, p: AnalysisParams, loaded, per_query, ledger, qids):
    """The bootstrap CIs, the cost table and metrics.csv's table."""
    from rerankeval.rerank import ledger as ledger_mod

    ci = stats.bootstrap_table(per_query, n_boot=p.n_boot, seed=p.stats_seed)
    retrieve_dir = dp.stage_dir("retrieve")
    cost = costs.cost_table(
        list(loaded),
        ledger_mod.ledger_summary(ledger, qids),
        costs.retrieval_seconds(retrieve_dir, loaded),
        step_llm=costs.step_llm_costs(retrieve_dir, loaded),
    )
    return ci, cost, metrics.summary_table(ci, cost)


DISCRIMINATION_CODE = ("discrimination.py", "stats.py")  # this package's modules the reranker's AUC is computed by
DISCRIMINATION_LIBS = ("numpy", "pandas", "scipy", "scikit-learn")


def _discrimination(dp: DatasetPaths, qrels: runs.Qrels, qids: list[str], p: AnalysisParams):
    """:func:`rerankeval.evaluate.discrimination.reranker`, read back from ``<cache>/analysis/`` when its inputs (04's
    candidates and model, the qrels, the queries, ``n_boot``, the seed, its code and libraries) are unchanged: a
    follow-up that does not touch 04 or the grades (a new ``rrf_k``) skips it and scipy.stats' and sklearn's imports,
    ~2 CPU-s. An entry that does not read or is not this key's is computed again and rewritten."""
    from importlib import metadata

    if not dp.rerank_candidates.is_file():
        return discrim.reranker(dp, qrels, qids, n_boot=p.n_boot, seed=p.stats_seed)
    here = Path(discrim.__file__).parent
    key = sha256_json(
        {
            "candidates": sha256_file(dp.rerank_candidates),
            "model": discrim.reranker_model(dp),
            "qrels": qrels,
            "qids": list(qids),
            "n_boot": p.n_boot,
            "seed": p.stats_seed,
            "code": [sha256_file(here / f) for f in DISCRIMINATION_CODE],
            "libraries": [metadata.version(lib) for lib in DISCRIMINATION_LIBS],
        }
    )
    path = dp.roots.cache / "analysis" / f"discrimination-{key}.pkl"
    try:
        saved = pickle.loads(path.read_bytes())  # our own cache entry, written below
        if isinstance(saved, dict) and saved.get("key") == key:
            return saved["value"]
    except Exception:  # noqa: BLE001 - missing, truncated or from another version: compute it again
        pass
    disc = discrim.reranker(dp, qrels, qids, n_boot=p.n_boot, seed=p.stats_seed)
    atomic_write_bytes(path, pickle.dumps({"key": key, "value": disc}))
    return disc


def _llm_grades(dp: DatasetPaths) -> runs.Qrels | None:
    """The LLM judge's grades 05 reads (the first of ``agreement.llm_qrels_files``), or None without any."""
    files = agree.llm_qrels_files(dp)
    return agree.read_llm_qrels(files[0]) if files else None


def run(dp: DatasetPaths, params: AnalysisParams | Mapping[str, Any], settings: Settings) -> Analysis:
    """Load and check the runs, evaluate, cross-check, bootstrap, compare, attribute: see the module doc.
    ``settings`` (the caller's, e.g. ``load_settings()`` in notebook 05) are what :func:`write`'s manifest records."""
    from rerankeval.rerank import ledger as ledger_mod  # here: the package imports the LLM client (openai)

    p = AnalysisParams.of(params)
    stats_ = corpus.load_stats(dp)
    original = corpus.load_qrels(dp)  # stage 01's own: the holes a random sample of human grades is drawn from
    human, merge = judgments.merged_qrels(dp, original)
    qrels, grades = agree.analysis_qrels(dp, human, p.qrels_source)
    table_q = corpus.load_query_table(dp)
    queries = {q.qid: q.text for q in table_q}
    run_files, loaded, checks, external = _load_runs(dp, p, list(queries))
    pool_k, warn = resolve_pool_k(dp, p.pool_k, [v for v in loaded if not runs.is_external(v)])
    headline = f"ndcg@{p.final_k}"
    cutoffs = sorted(set(p.ks) | {p.final_k, pool_k})
    columns = metrics.metric_columns(cutoffs)
    unit_of = corpus.unit_of(dp)
    chunk_runs = {v: runs.read_trec(dp.chunk_run_file(v)) for v in run_files if dp.chunk_run_file(v).exists()}
    qs, per_query, conf = _evaluate(dp, p, qrels, queries, loaded, run_files, external, columns)
    warn += _degenerate_warnings(qs)
    ledger = ledger_mod.read_ledger(dp.ledger, missing_ok=True)
    warn += ledger_pool_warnings(ledger, pool_k)
    ci, cost, table = _tables(dp, p, loaded, per_query, ledger, qs.qids)
    answered = _answered(dp, loaded, ledger, len(queries), qs.qids)
    comparisons = _compare_all(per_query, columns, headline, p.final_k, pool_k, p, answered)
    reranked = next((v for v in RERANKERS if v in loaded), RERANKED)
    missing = {v: len(set(qs.qids) - got) for v, got in answered.items()}
    disc = _discrimination(dp, qrels, qs.qids, p)
    other = _other(dp, p, human, grades, (loaded, queries, columns, ledger, answered, headline))
    summary = _summary(
        p,
        corpus_stats=stats_,
        qs=qs,
        conf=conf,
        table=table,
        comparisons=comparisons,
        headline=headline,
        pool_k=pool_k,
        cutoffs=cutoffs,
        variants=list(loaded),
        missing=missing,
        warn=warn,
        disc=disc,
        external=external,
        judging=judgments.judging_summary(merge, loaded, qrels, qs.qids, p.final_k),
        grades=grades,
    )
    warn += agree.warnings(grades)
    table["qrels"] = comparisons["qrels"] = grades["qrels_source"]  # every table says which grades it rests on
    fallback_qids = ledger_mod.fallback_queries(ledger, variant=reranked)
    att, by_k = _funnel(loaded, qrels, qs.qids, p, pool_k, cutoffs, fallback_qids, reranked)
    for w in warn:
        warnings.warn(w, AnalysisWarning, stacklevel=2)
    return Analysis(
        dp=dp,
        params=p,
        pool_k=pool_k,
        headline=headline,
        cutoffs=cutoffs,
        columns=columns,
        queries=queries,
        slices={q.qid: q.slices for q in table_q},
        qrels=qrels,
        run_files=run_files,
        runs=loaded,
        chunk_runs=chunk_runs,
        checks=checks,
        external=external,
        unit_mapping={v: runs.unit_mapping_check(loaded[v], c, unit_of) for v, c in chunk_runs.items()},
        query_set=qs,
        answered=answered,
        per_query=per_query,
        conformance=conf,
        ci=ci,
        ledger=ledger,
        costs=cost,
        table=table,
        comparisons=comparisons,
        reranked=reranked,
        fallback_qids=fallback_qids,
        attribution=att,
        funnel_by_k=by_k,
        first_ranks=funnel.first_relevant_ranks(loaded, qrels, qs.qids),
        rank_shift=funnel.rank_shift(loaded, qrels, qs.qids, FUSED, reranked, depth=pool_k),
        by_slice=_slices(per_query, qs, {q.qid: q.slices for q in table_q}, headline, p.final_k, pool_k, columns),
        summary=summary,
        settings=settings,
        warnings=warn,
        known_limitations=limitations.analyse(dp, loaded, qrels, queries),
        discrimination=disc,
        human_qrels=human,
        other=other,
        injection=injection.analyse(dp, loaded, qrels, human, qs.qids, headline, p.missing_queries),
        holes=holes.analyse(
            loaded, qrels, qs.qids, summary.baseline, k=p.final_k, llm=_llm_grades(dp), original=original, human=human
        ),
    )


def _other(dp: DatasetPaths, p: AnalysisParams, human: runs.Qrels, grades: Mapping[str, Any], ctx: tuple):
    """The metrics table and headline comparisons under the grades 05 was not asked for, when LLM grades exist
    (:mod:`rerankeval.evaluate.other_grades`); None without them. The same runs, queries and statistics."""
    source = other_grades.other_source(grades)
    if source is None:
        return None
    loaded, queries, columns, ledger, answered, headline = ctx
    qrels, rec = agree.analysis_qrels(dp, human, source)
    qs = metrics.query_set(loaded, qrels, queries, policy=p.missing_queries)
    per_query = metrics.evaluate(loaded, qrels, qs, columns)
    table = _tables(dp, p, loaded, per_query, ledger, qs.qids)[2]
    comparisons = stats.compare(
        per_query, headline, test=p.test, n_resamples=p.n_perm, n_boot=p.n_boot, seed=p.stats_seed, answered=answered
    )
    table["qrels"] = comparisons["qrels"] = rec["qrels_source"]
    return table, comparisons, {k: rec[k] for k in ("qrels_source", "llm_file", "llm_added")}


def _summary(
    p: AnalysisParams,
    *,
    corpus_stats: Mapping[str, Any],
    qs: metrics.QuerySet,
    conf: pd.DataFrame,
    table: pd.DataFrame,
    comparisons: pd.DataFrame,
    headline: str,
    pool_k: int,
    cutoffs: list[int],
    variants: list[str],
    missing: dict[str, int],
    warn: list[str],
    disc: discrim.Discrimination | None,
    external: list[runs.ExternalRun],
    judging: dict[str, Any],
    grades: Mapping[str, Any],
) -> Summary:
    """The facts the report reads, from what :func:`run` computed (``corpus_stats``: stage 01's statistics;
    ``missing``: variant -> evaluated queries it did not answer; ``disc``: the reranker's AUC)."""
    return Summary(
        headline_metric=headline,
        k=p.final_k,
        pool_k=pool_k,
        cutoffs=cutoffs,
        variants=variants,
        n_queries=qs.n,
        query_set=qs.describe(),
        policy=p.missing_queries,
        missing=missing,
        relevance_unit=corpus_stats.get("unit", "unknown"),
        verified_against=conformance.checker_versions(p.verify_with),
        max_abs_diff=f"{float(conf.max_abs_diff.max()) if len(conf) else float('nan'):.1e}",
        test=p.test,
        n_boot=p.n_boot,
        n_perm=p.n_perm,
        stats_seed=p.stats_seed,
        warnings=warn,
        verdict=verdict.verdict_lines(
            table, comparisons, headline, pool_k, missing=missing, discrimination=disc, baseline=p.baseline
        ),
        baseline=verdict.baseline_of(table, headline, p.baseline) or "",
        external=[n.describe() for n in external],
        discrimination=disc.to_dict() if disc else {},
        judging=judging,
        qrels_source=grades["qrels_source"],
        grades=grades,
    )


def _slices(per_query, qs, slices, headline, final_k, pool_k, columns) -> pd.DataFrame:
    wanted = [m for m in (headline, f"success@{final_k}", f"recall@{pool_k}") if m in columns]
    return metrics.slice_table(per_query[per_query.qid.isin(qs.qids)], slices, wanted)


def write(dp: DatasetPaths, a: Analysis) -> dict[str, Path]:
    """Write ``metrics.csv``, ``per_query.csv``, ``analyse/summary.json``, ``analyse/comparisons.csv``,
    ``analyse/winner.json`` and the manifest; returns ``name -> path``."""
    out = {
        "metrics": atomic_write_text(dp.metrics_csv, a.table.to_csv(index=False)),
        "per_query": atomic_write_text(dp.per_query_csv, a.per_query.to_csv(index=False)),
        **write_summary(dp, a.summary, a.comparisons, a.table),
        "review": judgments.write_review(
            dp,
            a.runs,
            a.human_qrels or a.qrels,
            a.query_set.qids,
            a.params.final_k,
            a.chunk_runs,
            holes.review_weights(a.runs, a.human_qrels or a.qrels, a.query_set.qids, a.holes),
        ),
        # what no human graded (LLM grades leave a pair in it), in the judging queue's order
        **holes.write(dp, a.holes),
        **limitations.write(dp, a.known_limitations),
        **discrim.write(dp, a.discrimination),
        **other_grades.write(dp, a.other),
        **injection.write(dp, a.injection),
        "inputs": write_inputs(
            dp, inputs_record(dp, a.params, a.queries, a.qrels, a.query_set.qids, a.summary.judging)
        ),
    }
    man = manifest.build_manifest(dp, a.settings, variants=list(a.runs), extra=a.summary.to_dict())
    out["manifest"] = manifest.write_manifest(dp, man, a.settings)
    return out


def write_summary(
    dp: DatasetPaths, summary: Summary, comparisons: pd.DataFrame | None = None, table: pd.DataFrame | None = None
) -> dict[str, Path]:
    """The part of :func:`write` the report reads: ``analyse/summary.json``, the comparisons and, from the metrics
    ``table``, the winner (``analyse/winner.json``)."""
    out = {"summary": atomic_write_json(dp.analyse_summary, json.loads(json.dumps(summary.to_dict())))}
    if table is not None:
        best = winner(table, summary)
        clear = verdict.clear_winner(table, comparisons, summary.headline_metric, summary.missing)
        out["winner"] = atomic_write_json(
            dp.analyse_winner,
            {  # "variant": the best mean, 07's default passages;
                "variant": best,
                "metric": summary.headline_metric,  # "distinguishable": whether the page may call it
                "distinguishable": best is not None and clear == best,
            },
        )  # a winner (significant, not 0.000)
    if comparisons is not None:
        out["comparisons"] = atomic_write_text(dp.analyse_comparisons, comparisons.to_csv(index=False))
    return out
