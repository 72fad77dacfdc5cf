"""Stage 06, the parameter sweep (notebook 06-sweep): sweep a grid around the default setting, tune it honestly,
write ``sweep.csv``, its summary and (optionally) the tuned run; and the notebook's views of the table.

The layers under it: :mod:`.grid` (points, grids, the engine that searches each leg once, scores),
:mod:`.replay` (stage 04's recorded LLM scores) and :mod:`.splits` (choose on some queries, report on others).
The stage (notebook 06)::

    res = sweep.run(dp, SweepParams(grid="small", pool_k=10), settings)   # the grid file's grid, the chain's pool_k
    sweep.write(dp, res)                                                   # sweep.csv, summary, the tuned run if asked

or, with a grid of your own, ``sweep.run(dp, SweepParams(grid=Grid(rrf_k=[1, 60])), settings)``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.names import HYBRID_TUNED
from rerankeval.core.paths import DEFAULT_DATASET, DatasetPaths
from rerankeval.core.runs import write_trec
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate.stats import N_BOOT
from rerankeval.experiments import blend as blendmod
from rerankeval.experiments import splits
from rerankeval.experiments.grid import Engine, Grid, Point, columns, load_grid, summarise
from rerankeval.experiments.replay import recorded_llm

__all__ = [  # the grid's own names (Engine, Grid, Point, load_grid ...) are imported from experiments.grid
    "AXES",
    "NOTEBOOK",
    "TUNED_VARIANT",
    "SweepParams",
    "SweepResult",
    "describe",
    "frontier_sentence",
    "header",
    "one_at_a_time",
    "overview",
    "pareto_front",
    "reranked_table",
    "run",
    "table_columns",
    "timing_note",
    "two_axis_views",
    "write",
]

NOTEBOOK = "06"  # the prefix of the notebook's figures (plots.show(..., notebook="06"))
DEFAULT_CHUNKING = "main"  # the chunking label of a point that keeps stage 01's chunks (chunk_size 0)


# --------------------------------------------------------------------------- one call: sweep, tune, write
TUNED_VARIANT = HYBRID_TUNED


@dataclass(frozen=True)
class SweepParams:
    """Stage 06's parameters: notebook 06's parameters cell has the same names and defaults (a test checks)."""

    dataset: str = DEFAULT_DATASET  # the caller resolves it to the DatasetPaths given to run()
    grid: str | Grid = "small"  # grid of params/sweep.yaml, or a Grid of your own
    leg_k: int = 100  # leg depth of the default setting; the grid's leg_k values are swept around it
    pool_k: int = 10  # the chain's pool size, added to the grid's pool_k values
    final_k: int = 10  # headline cutoff: the setting is chosen on nDCG@final_k
    folds: int = 5  # k-fold cross-validation over queries when the dataset has no train split
    stats_seed: int = 42  # seed of the folds and of every bootstrap and randomisation draw
    n_boot: int = N_BOOT  # bootstrap resamples (CIs) and randomisation-test resamples
    write_tuned: bool = False  # write runs/hybrid_tuned.trec for the next 05 run


@dataclass
class SweepResult:
    """A sweep's table, its honest tuning (:class:`rerankeval.experiments.splits.Tuning`) and its timing."""

    table: pd.DataFrame  # the rows of sweep.csv (none when ``skipped``)
    tuning: splits.Tuning | None  # None when ``skipped``
    points: list[Point]
    grid: Grid
    objective: str
    seconds: dict[str, float]  # legs (searched once), points (fusion + evaluation), total
    llm_note: str = ""  # whether reranked results were replayed from stage 04's recorded scores, and why not
    skipped: str = ""  # why nothing was swept or tuned (too few judged queries, see splits.too_few), else ""
    params: SweepParams | None = None  # the stage's parameters (:func:`run` sets them)
    blend: blendmod.Blend | None = None  # the rerank blend (alpha x pool_k) chosen from stage 04's scores, if any

    @property
    def default(self) -> Point:
        return self.points[0]

    @property
    def points_per_second(self) -> float:
        n = self.table.drop_duplicates(["point", "split"]).shape[0]
        return n / self.seconds["points"] if self.seconds["points"] > 0 else math.nan


def run(dp: DatasetPaths, params: SweepParams, settings: Settings, *, engine: Engine | None = None) -> SweepResult:
    """Stage 06: sweep ``params.grid`` (a grid of the grid file, or a :class:`~.grid.Grid` of your own), with the
    chain's ``pool_k`` among its pool sizes, around the default setting at ``leg_k`` (RRF k = 60), and tune it
    honestly: on the train split when the dataset has one, else by ``folds``-fold cross-validation (seeded by
    ``stats_seed``), both over the judged queries (a relevant unit each). With too few of them
    (:func:`rerankeval.experiments.splits.too_few`) nothing is swept: the result says why in ``skipped`` and
    :func:`write` writes that. ``engine``: legs already open (else opened on ``settings``). Writes nothing."""
    grid = load_grid(params.grid) if isinstance(params.grid, str) else replace(params.grid)
    grid.pool_k = sorted({*grid.pool_k, params.pool_k})
    res = _sweep(dp, grid, params, engine=engine, settings=settings)
    res.params = params
    return res


def _sweep(dp: DatasetPaths, grid: Grid, p: SweepParams, *, engine: Engine | None, settings: Settings) -> SweepResult:
    """:func:`run` on ``grid`` (``p.grid`` resolved)."""
    evaluated, train = splits.judged(splits.eval_split(dp)), splits.train_split(dp)
    points = grid.points(Point(leg_k=p.leg_k), pdf=corpus.load_stats(dp).get("kind") == "pdf")
    cols, objective = columns(p.final_k, grid.pool_k), f"ndcg@{p.final_k}"
    if why := splits.too_few(evaluated, train):
        return SweepResult(
            pd.DataFrame(columns=table_columns(p.final_k)),
            None,
            points,
            grid,
            objective,
            {"legs": 0.0, "points": 0.0, "total": 0.0},
            skipped=why,
        )
    queries = {**(train.queries if train else {}), **evaluated.queries}
    t0 = time.perf_counter()
    llm, llm_note = recorded_llm(dp)
    with _engine(dp, queries, max(grid.max_leg_k, p.leg_k), engine, settings) as eng:
        eng.llm = llm
        for which in ("dense", "bm25"):
            eng.leg(which, points[0])
        t1 = time.perf_counter()
        if train is not None:
            tuning = splits.train_test(
                eng, points, train, evaluated, cols, objective, n_boot=p.n_boot, seed=p.stats_seed
            )
        else:
            k = min(p.folds, len(evaluated.qids))  # a tiny query set: leave-one-out
            tuning = splits.kfold(eng, points, evaluated, cols, objective, k=k, seed=p.stats_seed, n_boot=p.n_boot)
        blend = _blend(
            eng, points[0], grid, train, evaluated, objective, folds=p.folds, seed=p.stats_seed, n_boot=p.n_boot
        )
    t2 = time.perf_counter()
    table = pd.concat(
        [summarise(pq, points, secs, name, p.final_k, grid.pool_k, llm) for name, pq, secs in tuning.scored],
        ignore_index=True,
    )
    table["chosen"] = table.point.isin(set(tuning.chosen.values()))
    table["is_default"] = table.point == points[0].name
    seconds = {"legs": t1 - t0, "points": t2 - t1, "total": t2 - t0}
    return SweepResult(table, tuning, points, grid, objective, seconds, llm_note, blend=blend)


def _blend(
    eng: Engine, point: Point, grid: Grid, train: splits.Split | None, evaluated: splits.Split, objective: str, **kw
) -> blendmod.Blend | None:
    """The rerank blend over the grid's ``alpha`` x ``pool_k`` on ``point`` (the run stage 04 reranked), chosen on
    train or by k-fold (:func:`rerankeval.experiments.blend.tune`); None without recorded scores or alpha axis."""
    if eng.llm is None or not grid.alpha:
        return None
    parts = [
        blendmod.blend_values(eng, point, s.qids, s.qrels, objective, grid.pool_k, grid.alpha)
        for s in ([train] if train else []) + [evaluated]
    ]
    values = pd.concat(parts, ignore_index=True)
    return blendmod.tune(
        values, set(train.qids) if train else set(), set(evaluated.qids), objective, grid.pool_k, grid.alpha, **kw
    )


@contextmanager
def _engine(
    dp: DatasetPaths, queries: Mapping[str, str], max_leg_k: int, given: Engine | None, settings: Settings
) -> Iterator[Engine]:
    if given is not None:
        yield given
        return
    with Engine.open(dp, queries, max_leg_k, settings) as eng:
        yield eng


def table_columns(final_k: int) -> list[str]:
    """The columns of ``sweep.csv`` (:func:`summarise`'s, then ``chosen`` and ``is_default``)."""
    return [
        "point",
        *Point.__dataclass_fields__,
        "split",
        "n_queries",
        f"ndcg@{final_k}",
        f"mrr@{final_k}",
        "pool_k",
        "pool_ceiling",
        "seconds_per_query",
        "llm_tokens_per_query",
        "reranked_queries",
        "reranked_ndcg",
        "fused_ndcg_same_queries",
        "reranked_seconds_per_query",
        "reranked_llm_tokens_per_query",
        "chosen",
        "is_default",
    ]


def write(dp: DatasetPaths, res: SweepResult) -> dict[str, Path]:
    """``sweep.csv``, the sweep's summary (and folds) and, when the stage's ``write_tuned`` says so, the tuned run as
    the variant ``hybrid_tuned`` (``runs/hybrid_tuned.trec`` over the reported queries only, with its stage record).

    A skipped sweep (``res.skipped``) writes ``sweep.csv`` with its header only and a summary saying why,
    and removes what an earlier sweep left that would now be stale: ``folds.csv``, the notebook's figures
    (the report index shows every figure it finds) and, when ``write_tuned``, the tuned run."""
    write_tuned = bool(res.params and res.params.write_tuned)
    out = {"sweep_csv": atomic_write_text(dp.sweep_csv, res.table.to_csv(index=False, float_format="%.6g"))}
    if res.skipped:
        return {**out, **_write_skipped(dp, res, write_tuned)}
    t = res.tuning
    if t.folds:
        out["folds"] = atomic_write_text(dp.sweep_dir / "folds.csv", splits.fold_table(t).to_csv(index=False))
    summary = {
        "protocol": t.protocol,
        "objective": res.objective,
        "chosen": t.chosen,
        "default": res.default.name,
        "headline": splits.headline(t, res.objective),
        "grid": res.grid.axes(),
        "points": len(res.points),
        "seconds": res.seconds,
        "points_per_second": res.points_per_second,
        "blend": _blend_summary(res),
    }
    blend_csv = dp.sweep_dir / "blend.csv"
    if res.blend is not None:
        out["blend"] = atomic_write_text(blend_csv, res.blend.table.to_csv(index=False, float_format="%.6g"))
    else:
        blend_csv.unlink(missing_ok=True)
    out["summary"] = atomic_write_json(dp.sweep_dir / "summary.json", summary)
    if write_tuned:
        out["run"] = write_trec(t.run, dp.run_file(TUNED_VARIANT), tag=TUNED_VARIANT)
        out["record"] = atomic_write_json(
            dp.variant_record(TUNED_VARIANT),
            {
                "variant": TUNED_VARIANT,
                "protocol": t.protocol,
                "objective": res.objective,
                "setting": {k: next(p.record() for p in res.points if p.name == v) for k, v in t.chosen.items()},
                "seconds": round(t.seconds_per_query * len(t.run), 3),
                "queries": len(t.run),
            },
        )
    return out


def _blend_summary(res: SweepResult) -> dict:
    """The blend's protocol, choice, note and headline for ``summary.json`` (why there is none, else)."""
    b = res.blend
    if b is None:
        why = res.llm_note if not res.llm_note.startswith("reranked from") else "the grid has no alpha axis"
        return {"protocol": None, "note": why}
    return {
        "protocol": b.protocol or None,
        "note": b.note,
        "objective": res.objective,
        "chosen": {k: {"pool_k": pk, "alpha": a} for k, (pk, a) in b.chosen.items()},
        "headline": blendmod.headline(b) or None,
    }


def _write_skipped(dp: DatasetPaths, res: SweepResult, write_tuned: bool) -> dict[str, Path]:
    stale = [dp.sweep_dir / "folds.csv", dp.sweep_dir / "blend.csv", *dp.figures_dir.glob(f"{NOTEBOOK}-*.png")]
    if write_tuned:
        stale += [dp.run_file(TUNED_VARIANT), dp.variant_record(TUNED_VARIANT)]
    for f in stale:
        f.unlink(missing_ok=True)
    summary = {
        "protocol": None,
        "skipped": res.skipped,
        "objective": res.objective,
        "chosen": {},
        "default": res.default.name,
        "headline": None,
        "grid": res.grid.axes(),
        "points": len(res.points),
        "seconds": res.seconds,
    }
    return {"summary": atomic_write_json(dp.sweep_dir / "summary.json", summary)}


# --------------------------------------------------------------------------- views for the notebook
AXES = ("method", "rrf_k", "weights", "leg_k", "pool_k", "bm25", "chunking")


def _axis(values: object) -> str:
    """An axis' values for people: ``rrf, dbsf`` and ``1:1, 1:0.5`` (pairs), never a list's repr."""
    if not isinstance(values, list | tuple):
        return str(values)
    return ", ".join(":".join(map(str, x)) if isinstance(x, list | tuple) else str(x) for x in values)


def header(dp: DatasetPaths, res: SweepResult, written: Mapping[str, Path]) -> str:
    """The grid and its points, the files written (relative to the dataset's results), why nothing was swept."""
    grid = res.params.grid if res.params else ""
    named = f"grid {grid!r}" if isinstance(grid, str) else "a grid of your own"
    lines = [
        f"Dataset {dp.name}: {named}, {len(res.points)} points "
        f"({'; '.join(f'{k}: {_axis(v)}' for k, v in res.grid.axes().items())}).",
        f"Wrote {', '.join(str(p.relative_to(dp.root)) for p in written.values())}.",
    ]
    return "\n".join(lines + ([f"Skipped: {res.skipped}"] if res.skipped else []))


def two_axis_views(view: pd.DataFrame, default: Point) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of the two heatmaps: RRF k x weights (RRF, the default depth, BM25 and chunking), and fusion method x
    leg depth (equal weights, the default RRF k, BM25 and chunking)."""
    bm25, main = view.bm25 == f"{default.k1:g}/{default.b:g}", view.chunking == DEFAULT_CHUNKING
    rrf = view[(view.method == "rrf") & (view.leg_k == default.leg_k) & bm25 & main]
    depth = view[(view.weights == "1/1") & (view.rrf_k == default.rrf_k) & main & bm25]
    return rrf, depth


def timing_note(res: SweepResult, write_tuned: bool) -> str:
    """The legs' and the points' wall time, and where the tuned run went (or that nothing was swept)."""
    if res.skipped:
        return "Nothing was swept or tuned (see above); no figure and no tuned run were written."
    s, n = res.seconds, len(res.table.drop_duplicates(["point", "split"]))
    where = (
        "The tuned run was written as runs/hybrid_tuned.trec: the next 05 run evaluates it beside the other "
        "variants, on the reported queries only."
        if write_tuned
        else "The tuned run is shown here only (write_tuned=False); `make sweep` writes runs/hybrid_tuned.trec for 05."
    )
    return (
        f"legs {s['legs']:.1f} s, {n} point x split evaluations in {s['points']:.1f} s "
        f"({res.points_per_second:.1f} per second), total {s['total']:.1f} s.\n{where}"
    )


def overview(table: pd.DataFrame, final_k: int) -> pd.DataFrame:
    """One row per point and ``pool_k`` on the choosing queries (train; with k-fold every query, the folds'
    rows pooled), with readable ``weights``/``bm25``/``chunking`` labels."""
    choosing = table[table.split == "train"] if (table.split == "train").any() else table
    vals = [f"ndcg@{final_k}", f"mrr@{final_k}", "pool_ceiling", "seconds_per_query", "llm_tokens_per_query"]
    weighted = choosing.assign(**{c: choosing[c] * choosing.n_queries for c in vals})
    keys = ["point", "pool_k", *(c for c in Point.__dataclass_fields__)]
    g = weighted.groupby(keys, sort=False, dropna=False)
    out = g[vals].sum().div(g.n_queries.sum(), axis=0).reset_index()
    out["n_queries"] = g.n_queries.sum().to_numpy()
    out["weights"] = [f"{a:g}/{b:g}" for a, b in zip(out.w_dense, out.w_bm25, strict=True)]
    out["bm25"] = [f"{a:g}/{b:g}" for a, b in zip(out.k1, out.b, strict=True)]
    out["chunking"] = [
        f"{a}/{b}" if a else DEFAULT_CHUNKING for a, b in zip(out.chunk_size, out.chunk_overlap, strict=True)
    ]
    return out


def one_at_a_time(view: pd.DataFrame, default: Point, axis: str, pool_k: int) -> pd.DataFrame:
    """The points that differ from ``default`` in ``axis`` only (the default included): by value for a
    numeric axis, else in grid order (the default first)."""
    d = {
        "method": default.method,
        "rrf_k": default.rrf_k,
        "weights": f"{default.w_dense:g}/{default.w_bm25:g}",
        "leg_k": default.leg_k,
        "bm25": f"{default.k1:g}/{default.b:g}",
        "chunking": DEFAULT_CHUNKING,
        "pool_k": pool_k,
    }
    keep = pd.Series(True, index=view.index)
    for a, v in d.items():
        if a != axis:
            keep &= view[a] == v
    out = view[keep].drop_duplicates(axis)
    return out.sort_values(axis, kind="stable") if pd.api.types.is_numeric_dtype(out[axis]) else out


def pareto_front(quality: Sequence[float], cost: Sequence[float]) -> list[bool]:
    """True for the points no other point beats on both (higher ``quality`` at lower or equal ``cost``)."""
    pts = list(zip(quality, cost, strict=True))
    return [not any((q2 >= q and c2 <= c) and (q2 > q or c2 < c) for q2, c2 in pts) for q, c in pts]


def frontier_sentence(view: pd.DataFrame, metric: str, cost: str = "seconds_per_query") -> str:
    """The quality-vs-cost frontier in words (cheapest to best)."""
    v = view.drop_duplicates("point")
    front = v[pareto_front(v[metric].tolist(), v[cost].tolist())].sort_values(cost)
    steps = "; ".join(f"{r.point} ({r[metric]:.4f} at {1000 * r[cost]:.2f} ms/query)" for _, r in front.iterrows())
    lo, hi = 1000 * v[cost].min(), 1000 * v[cost].max()
    same = "; within 10%: the legs dominate the cost, so quality decides" if hi <= 1.1 * lo else ""
    return (
        f"{len(front)} of {len(v)} points are on the {metric}-vs-{cost.replace('_', ' ')} frontier, cheapest "
        f"first: {steps}. Costs span {lo:.2f}-{hi:.2f} ms/query{same}. No sweep point calls the LLM "
        f"(0 tokens per query)."
    )


def describe(res: SweepResult) -> list[str]:
    """What the sweep did and found, in sentences (the protocol first: how the setting was chosen)."""
    if res.skipped:
        return [res.skipped]
    t, m = res.tuning, res.objective
    h = splits.headline(t, m)
    if t.protocol == "train/test":
        n_train = int(res.table[res.table.split == "train"].n_queries.max())
        how = (
            f"The setting was chosen on the train split ({n_train} "
            f"queries, qrels/train.tsv) and is reported once on the evaluated split ({h['n']} queries), which "
            f"played no part in choosing it: chosen {t.chosen['train']}."
        )
    else:
        how = (
            f"The dataset has no train split, so the setting was chosen by {len(t.chosen)}-fold cross-validation "
            f"over its {h['n']} queries (folds seeded and recorded in sweep/folds.csv): each fold's queries are "
            f"answered by the setting chosen on the other folds, and the out-of-fold score is reported. Chosen per "
            f"fold: {'; '.join(f'{f}: {p}' for f, p in t.chosen.items())}."
        )
    verdict = (
        "better than" if h["diff_ci_low"] > 0 else "worse than" if h["diff_ci_high"] < 0 else "not distinguishable from"
    )
    result = (
        f"{m} tuned {h['tuned mean']:.4f} [{h['tuned ci_low']:.4f}, {h['tuned ci_high']:.4f}] vs default "
        f"({res.default.name}) {h['default mean']:.4f} [{h['default ci_low']:.4f}, {h['default ci_high']:.4f}]; "
        f"difference {h['diff']:+.4f} [{h['diff_ci_low']:+.4f}, {h['diff_ci_high']:+.4f}], paired "
        f"randomisation p = {h['p']:.3g}: the tuned setting is {verdict} the default (95% CIs, bootstrap)."
    )
    return [how, result]


def reranked_table(table: pd.DataFrame, points: Sequence[str] | None = None) -> pd.DataFrame:
    """The rows with a replayed rerank (of ``points`` only, if given): fused and reranked nDCG on the same
    (covered) queries, and costs."""
    cols = [
        "point",
        "split",
        "pool_k",
        "reranked_queries",
        "fused_ndcg_same_queries",
        "reranked_ndcg",
        "reranked_seconds_per_query",
        "reranked_llm_tokens_per_query",
    ]
    keep = (table.reranked_queries > 0) & (table.point.isin(points) if points is not None else True)
    return table[keep][cols].reset_index(drop=True)


def blend_sentence(res: SweepResult) -> str:
    """The rerank blend chosen from stage 04's replayed scores, or why there is none."""
    if res.blend is None:
        return f"Rerank blend: not swept ({_blend_summary(res)['note']})."
    return blendmod.sentence(res.blend, res.objective)


def blend_grid(res: SweepResult) -> pd.DataFrame | None:
    """Mean replayed reranked ``objective`` per split and pool_k (rows) and alpha (columns), fused beside it."""
    if res.blend is None or res.blend.table.empty:
        return None
    t = res.blend.table
    grid = t.pivot_table(index=["split", "pool_k"], columns="alpha", values=blendmod.BLEND, sort=False)
    grid.columns = [f"alpha {a:g}" for a in grid.columns]
    return grid.join(t.groupby(["split", "pool_k"], sort=False)[[blendmod.FUSED, "n_queries"]].first())
