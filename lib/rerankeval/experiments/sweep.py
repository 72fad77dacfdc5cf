"""Parameter sweeps over the hybrid pipeline, from the legs' cached runs (notebook 06-sweep).

A sweep point is a setting of the fusion (``method``, ``rrf_k``, per-leg ``weights``), the legs' depth
``leg_k``, BM25's ``k1``/``b`` and, for PDF datasets, the chunking. Everything a point does not change is
re-used: each leg is searched ONCE per query set at the largest ``leg_k`` of the grid, shallower depths are
that run truncated, so a fusion-only point encodes no text and calls no LLM. A BM25 ``k1``/``b`` point
re-weights the stored term counts (no re-tokenising); a chunking point re-extracts and re-indexes in a
scratch dataset folder (``results/<dataset>/sweep/chunking/``) and never touches the main results.

``pool_k`` changes nothing in a fused run: it sets the pool ceiling (Recall@pool_k of the fused run, what a
perfect reranker could reach), evaluated for every ``pool_k`` of the grid. The sweep never calls the LLM.

Choosing a setting honestly is :mod:`rerankeval.experiments.splits`' job; this module makes the runs and scores them::

    grid = sweep.load_grid("small")
    with sweep.Engine.open(dp, all_queries, max_leg_k=grid.max_leg_k) as eng:
        per_query = sweep.score_points(eng, grid.points(), split, columns)
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd
import yaml

from rerankeval.core.names import HYBRID_TUNED
from rerankeval.core.paths import PARAMS_DIR, DatasetPaths
from rerankeval.core.progress import track
from rerankeval.core.runs import Qrels, Run, to_units, truncate
from rerankeval.evaluate import metrics
from rerankeval.index import bm25 as bm25mod
from rerankeval.retrieve.fusion import FUSION_METHODS, RRF_K, fuse

GRID_FILE = PARAMS_DIR / "sweep.yaml"
NOTEBOOK = "06"  # the prefix of the notebook's figures (plots.show(..., notebook="06"))
RRF_METHODS = ("rrf",)  # methods that use rrf_k (the others ignore it: one value is swept)


# --------------------------------------------------------------------------- points and grids
@dataclass(frozen=True)
class Point:
    """One setting of the hybrid pipeline; the defaults are what stage 03's ``hybrid`` runs."""

    method: str = "rrf"
    rrf_k: float = RRF_K
    w_dense: float = 1.0
    w_bm25: float = 1.0
    leg_k: int = 100
    k1: float = 1.2
    b: float = 0.75
    chunk_size: int = 0  # 0: the main dataset's chunks
    chunk_overlap: int = 0

    @property
    def name(self) -> str:
        """A short, unique, readable id (the ``point`` column of ``sweep.csv``)."""
        parts = [self.method] + ([f"k={self.rrf_k:g}"] if self.method in RRF_METHODS else [])
        parts += [f"w={self.w_dense:g}/{self.w_bm25:g}", f"leg={self.leg_k}", f"bm25={self.k1:g}/{self.b:g}"]
        if self.chunk_size:
            parts.append(f"chunks={self.chunk_size}/{self.chunk_overlap}")
        return " ".join(parts)

    @property
    def weights(self) -> tuple[float, float] | None:
        """(dense, bm25), or None for equal weights (exactly stage 03's unweighted fusion)."""
        return None if self.w_dense == self.w_bm25 == 1.0 else (self.w_dense, self.w_bm25)

    @property
    def bm25_params(self) -> tuple[float, float]:
        return (self.k1, self.b)

    @property
    def chunking(self) -> tuple[int, int]:
        return (self.chunk_size, self.chunk_overlap)

    def record(self) -> dict:
        return asdict(self)


@dataclass
class Grid:
    """The values swept per axis. Fusion axes are crossed; BM25 and chunking are varied one at a time
    around the default fusion (each of their values needs its own leg)."""

    method: list[str] = field(default_factory=lambda: ["rrf"])
    rrf_k: list[float] = field(default_factory=lambda: [RRF_K])
    weights: list[list[float]] = field(default_factory=lambda: [[1.0, 1.0]])
    leg_k: list[int] = field(default_factory=lambda: [100])
    pool_k: list[int] = field(default_factory=lambda: [10])
    bm25: list[list[float]] = field(default_factory=list)  # [k1, b] pairs
    chunking: list[list[int]] = field(default_factory=list)  # [size, overlap] pairs (PDF datasets)

    def points(self, default: Point = Point(), pdf: bool = False) -> list[Point]:
        """``default`` first, then every fusion combination, then the BM25 and chunking points."""
        out = [default]
        for m, (wd, wb), leg in itertools.product(self.method, self.weights, self.leg_k):
            for k in (self.rrf_k if m in RRF_METHODS else [default.rrf_k]):
                out.append(replace(default, method=m, rrf_k=k, w_dense=wd, w_bm25=wb, leg_k=leg))
        out += [replace(default, k1=k1, b=b) for k1, b in self.bm25]
        if pdf:
            out += [replace(default, chunk_size=s, chunk_overlap=o) for s, o in self.chunking]
        return list(dict.fromkeys(out))

    @property
    def max_leg_k(self) -> int:
        return max(self.leg_k)

    def axes(self) -> dict[str, list]:
        return {k: v for k, v in asdict(self).items() if v}


def load_grid(name: str, path: Path = GRID_FILE) -> Grid:
    """The grid ``name`` (e.g. ``small``, ``large``) of ``params/sweep.yaml``."""
    grids = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if name not in grids:
        raise ValueError(f"no grid {name!r} in {path}; choose from {', '.join(grids)} or add one there")
    spec = grids[name] or {}
    unknown = set(spec) - set(Grid.__dataclass_fields__)
    if unknown:
        raise ValueError(f"grid {name!r} in {path}: unknown axes {sorted(unknown)}; "
                         f"the axes are {', '.join(Grid.__dataclass_fields__)}")
    grid = Grid(**spec)
    bad = [m for m in grid.method if m not in FUSION_METHODS]
    if bad:
        raise ValueError(f"grid {name!r}: unknown fusion method(s) {bad}; choose from {', '.join(FUSION_METHODS)}")
    return grid


# --------------------------------------------------------------------------- the legs, searched once
@dataclass
class Leg:
    """One leg's chunk-level run at the sweep's deepest ``leg_k`` and its search seconds per query."""

    run: Run
    seconds_per_query: float


class Engine:
    """The legs of one dataset for a fixed query set, searched once; runs of any :class:`Point` from them.

    ``source`` is a :class:`rerankeval.retrieve.stage.Retriever` (or anything with ``dense_leg``, ``bm25_leg``,
    ``bm25`` and ``unit_of``). ``chunk_sources`` builds the retriever of a chunking point (see
    :func:`chunking_source`); it is only called for such points.
    """

    def __init__(self, source, queries: Mapping[str, str], max_leg_k: int, chunk_sources=None) -> None:
        self.source, self.queries, self.max_leg_k = source, dict(queries), max_leg_k
        self.chunk_sources = chunk_sources
        self.llm: RecordedLLM | None = None  # stage 04's recorded scores, to replay reranks (never the LLM)
        self._legs: dict[tuple, Leg] = {}
        self._units: dict[tuple, Run] = {}
        self._sources: dict[tuple[int, int], object] = {}

    @classmethod
    @contextmanager
    def open(cls, dp: DatasetPaths, queries: Mapping[str, str], max_leg_k: int, **kw) -> Iterator[Engine]:
        """An engine over the built indexes of ``dp`` (Qdrant closed on exit)."""
        from rerankeval.retrieve.stage import Retriever

        with Retriever(dp, progress=kw.pop("progress", False)) as r:
            eng = cls(r, queries, max_leg_k, chunk_sources=lambda size, overlap: chunking_source(dp, size, overlap))
            try:
                yield eng
            finally:
                for s in eng._sources.values():
                    s.close()

    def _source(self, p: Point):
        if not p.chunk_size:
            return self.source
        if p.chunking not in self._sources:
            if self.chunk_sources is None:
                raise ValueError(f"{p.name}: a chunking point needs chunk_sources (see sweep.chunking_source)")
            self._sources[p.chunking] = self.chunk_sources(*p.chunking)
        return self._sources[p.chunking]

    def leg(self, which: str, p: Point) -> Leg:
        """The ``dense`` or ``bm25`` leg of ``p``'s chunking (and BM25 parameters), at ``max_leg_k``."""
        key = (which, p.chunking, p.bm25_params if which == "bm25" else None)
        if key not in self._legs:
            src = self._source(p)
            same = p.bm25_params == (src.bm25.params.k1, src.bm25.params.b)
            index = src.bm25 if same else reweighted(src.bm25, p.k1, p.b)
            _warm(src if which == "dense" else None, index, self.queries)  # one-time loads: not per-query costs
            t0 = time.perf_counter()
            if which == "dense":
                run = src.dense_leg(self.queries, self.max_leg_k)
            else:
                run = src.bm25_leg(self.queries, self.max_leg_k) if same else index.search(self.queries, self.max_leg_k)
            self._legs[key] = Leg(run, (time.perf_counter() - t0) / max(1, len(self.queries)))
        return self._legs[key]

    def unit_legs(self, p: Point) -> tuple[Run, Run]:
        """Both legs of ``p`` cut to ``p.leg_k`` chunks, then mapped to relevance units (as stage 03)."""
        if p.leg_k > self.max_leg_k:
            raise ValueError(f"{p.name}: leg_k {p.leg_k} is deeper than the legs searched ({self.max_leg_k})")
        out = []
        for which in ("dense", "bm25"):
            key = (which, p.chunking, p.bm25_params if which == "bm25" else None, p.leg_k)
            if key not in self._units:
                run = truncate(self.leg(which, p).run, p.leg_k)
                self._units[key] = to_units(run, self._source(p).unit_of)
            out.append(self._units[key])
        return out[0], out[1]

    def run(self, p: Point, qids: Sequence[str], depth: int | None = None) -> tuple[Run, float]:
        """The fused unit-level run of ``p`` for ``qids`` (its best ``depth`` units, all if None) and its
        seconds per query (legs + fusion)."""
        dense, lex = self.unit_legs(p)
        t0 = time.perf_counter()
        fused = fuse([{q: dense.get(q, {}) for q in qids}, {q: lex.get(q, {}) for q in qids}], p.method,
                     k=p.rrf_k, weights=p.weights, depth=depth)
        per_q = (time.perf_counter() - t0) / max(1, len(qids))
        return fused, per_q + self.leg("dense", p).seconds_per_query + self.leg("bm25", p).seconds_per_query


def _warm(dense_source, index: bm25mod.BM25Index, queries: Mapping[str, str]) -> None:
    """Load the BM25 weight matrix, and the embedding model if a query is not in the embedding cache,
    before a leg is timed (a warm sweep never loads the model: importing it alone takes seconds)."""
    embedder = getattr(dense_source, "embedder", None)
    if embedder is not None and not embedder.all_cached(list(queries.values())):
        _ = embedder.model
    _ = index.weights


def reweighted(index: bm25mod.BM25Index, k1: float, b: float) -> bm25mod.BM25Index:
    """The same BM25 index (terms, counts, analyser) scored with other ``k1``/``b``: nothing re-tokenised."""
    params = bm25mod.BM25Params(k1=k1, b=b, epsilon=index.params.epsilon)
    return bm25mod.BM25Index(index.ids, index.vocab, index.tf, params, index.analyzer)


def scratch_dataset(dp: DatasetPaths, size: int, overlap: int) -> DatasetPaths:
    """A scratch copy of ``dp`` for one chunking: its own results folder and Qdrant store, same source."""
    tag = f"c{size}-o{overlap}"
    return DatasetPaths(name=f"{dp.name}--sweep-{tag}", source=dp.source,
                        root=dp.sweep_dir / "chunking" / tag)


def chunking_source(dp: DatasetPaths, size: int, overlap: int):
    """A :class:`~rerankeval.retrieve.stage.Retriever` over ``dp`` re-extracted with ``size``/``overlap`` and
    re-indexed in :func:`scratch_dataset` (both steps are cached by content, so a second sweep reuses them)."""
    from rerankeval.corpus.extract import build_corpus
    from rerankeval.index.build import build_indexes
    from rerankeval.retrieve.stage import Retriever

    sdp = scratch_dataset(dp, size, overlap)
    split = _main_split(dp)
    build_corpus(sdp, split=split, chunk_size=size, chunk_overlap=overlap)
    build_indexes(sdp, progress=False)
    return Retriever(sdp, progress=False)


def _main_split(dp: DatasetPaths) -> str:
    from rerankeval.corpus.contract import load_stats

    return str(load_stats(dp).get("split", "test"))


# --------------------------------------------------------------------------- scoring
def columns(final_k: int, pool_ks: Sequence[int]) -> list[str]:
    """The metrics a sweep computes: nDCG and MRR at ``final_k``, and the pool ceilings Recall@pool_k."""
    return list(dict.fromkeys([f"ndcg@{final_k}", f"mrr@{final_k}", *(f"recall@{k}" for k in pool_ks)]))


def evaluate_run(run: Run, qrels: Qrels, qids: Sequence[str], cols: Sequence[str]) -> pd.DataFrame:
    """Per-query metrics of one run over ``qids`` (a query the run lacks scores 0): ``qid x metric``.

    Reads ``qrels`` only for ``qids`` (the chooser's qrels may hold nothing else)."""
    sub = {q: qrels[q] for q in qids}
    qs = metrics.query_set({"p": run}, sub, qids, policy="zero")
    long = metrics.evaluate({"p": run}, sub, qs, cols)
    return long.pivot(index="qid", columns="metric", values="value").reindex(columns=list(cols))


def score_points(engine: Engine, points: Sequence[Point], qids: Sequence[str], qrels: Qrels,
                 cols: Sequence[str]) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per-query metrics of every point on ``qids``: long ``point, qid, metric, value``; and the seconds
    per query of each point. Only ``qrels[q]`` for ``q`` in ``qids`` is ever read.

    With recorded LLM scores (``engine.llm``, :func:`recorded_llm`) each pool (``recall@k`` columns) is also
    reranked from them, on the queries whose whole pool was scored: metrics ``reranked@<k> <cols[0]>`` and,
    on the same queries, ``fused@<k> <cols[0]>``. Nothing calls the LLM."""
    frames, secs = [], {}
    qids = [q for q in qids if q in qrels]
    pool_ks = [int(c.split("@")[1]) for c in cols if c.startswith("recall@")]
    cutoffs = [metrics.parse_column(c)[1] for c in cols]
    depth = None if None in cutoffs else max(cutoffs)  # every metric is cut at most here: fuse no deeper
    for p in track(points, desc=f"sweep ({len(qids)} queries)", unit="point"):
        run, secs[p.name] = engine.run(p, qids, depth)
        wide = evaluate_run(run, qrels, qids, cols)
        frames.append(wide.reset_index().melt(id_vars="qid", var_name="metric").assign(point=p.name))
        for pk in pool_ks if engine.llm is not None else ():
            frames.append(_reranked(engine.llm, run, wide, qrels, pk, cols[0]).assign(point=p.name))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["point", "qid", "metric", "value"])
    return out[["point", "qid", "metric", "value"]], secs


def _reranked(llm: RecordedLLM, run: Run, wide: pd.DataFrame, qrels: Qrels, pool_k: int, col: str) -> pd.DataFrame:
    """``col`` of the replayed rerank of the top ``pool_k`` and of the fused run, on the covered queries."""
    rr = replay(run, llm, pool_k)
    if not rr:
        return pd.DataFrame(columns=["qid", "metric", "value"])
    got = evaluate_run(rr, qrels, sorted(rr), [col])[col]
    return pd.concat([pd.DataFrame({"qid": got.index, "metric": f"reranked@{pool_k} {col}", "value": got.values}),
                      pd.DataFrame({"qid": got.index, "metric": f"fused@{pool_k} {col}",
                                    "value": wide.loc[got.index, col].values})], ignore_index=True)


def summarise(per_query: pd.DataFrame, points: Sequence[Point], secs: Mapping[str, float], split: str,
              final_k: int, pool_ks: Sequence[int], llm: RecordedLLM | None = None) -> pd.DataFrame:
    """``sweep.csv`` rows of one split: one per point and ``pool_k`` (the pool ceiling differs). With
    recorded LLM scores, the replayed rerank's nDCG and the fused nDCG on the queries it covers, and costs."""
    means = per_query.groupby(["point", "metric"]).value.mean().unstack()
    counts = per_query.groupby(["point", "metric"]).qid.nunique().unstack()
    n = per_query.groupby("point").qid.nunique()
    rows = []
    for p in points:
        if p.name not in means.index:
            continue
        m, c = means.loc[p.name], counts.loc[p.name]
        for pk in pool_ks:
            rows.append({"point": p.name, **p.record(), "split": split, "n_queries": int(n[p.name]),
                         f"ndcg@{final_k}": m[f"ndcg@{final_k}"], f"mrr@{final_k}": m[f"mrr@{final_k}"],
                         "pool_k": pk, "pool_ceiling": m[f"recall@{pk}"],
                         "seconds_per_query": secs.get(p.name, math.nan), "llm_tokens_per_query": 0.0,
                         **_reranked_columns(m, c, pk, final_k, secs.get(p.name, math.nan), llm)})
    return pd.DataFrame(rows)


def _reranked_columns(means: pd.Series, counts: pd.Series, pk: int, final_k: int, secs: float,
                      llm: RecordedLLM | None) -> dict[str, float]:
    rr, fz = f"reranked@{pk} ndcg@{final_k}", f"fused@{pk} ndcg@{final_k}"
    covered = counts.get(rr, 0)
    covered = int(covered) if pd.notna(covered) else 0
    if not covered or llm is None:
        return {"reranked_queries": covered, "reranked_ndcg": math.nan, "fused_ndcg_same_queries": math.nan,
                "reranked_seconds_per_query": math.nan, "reranked_llm_tokens_per_query": math.nan}
    return {"reranked_queries": covered, "reranked_ndcg": means[rr], "fused_ndcg_same_queries": means[fz],
            "reranked_seconds_per_query": secs + pk * llm.seconds_per_candidate,
            "reranked_llm_tokens_per_query": pk * llm.tokens_per_candidate}


# --------------------------------------------------------------------------- the LLM's recorded scores
REPLAYABLE = ("yesno",)  # modes whose score of a candidate does not depend on the other candidates


@dataclass
class RecordedLLM:
    """Stage 04's LLM score per (query, unit), its blend weight ``alpha``, and the LLM cost per candidate
    (tokens and seconds, cached replies at their original cost)."""

    scores: dict[str, dict[str, float]]
    alpha: float
    tokens_per_candidate: float
    seconds_per_candidate: float


def recorded_llm(dp: DatasetPaths) -> tuple[RecordedLLM | None, str]:
    """The LLM scores stage 04 recorded, when its mode scores each candidate on its own; else None, and why."""
    import json

    from rerankeval.rerank.ledger import read_ledger

    if not (dp.rerank_summary.is_file() and dp.rerank_candidates.is_file()):
        return None, "no rerank stage output (run 04-rerank): reranked results are skipped"
    cfg = json.loads(dp.rerank_summary.read_text(encoding="utf-8")).get("config", {})
    if cfg.get("mode") not in REPLAYABLE:
        return None, (f"the rerank mode {cfg.get('mode')!r} scores candidates jointly, so other pools cannot be "
                      f"replayed from its replies (only {', '.join(REPLAYABLE)}): reranked results are skipped")
    from rerankeval.corpus.contract import read_table

    cands = read_table(dp.rerank_candidates, ids=("qid", "docid"))  # "NA", "null" ... are ids, not missing
    cands = cands[(cands["pass"] == "main") & cands.llm_score.notna()]
    ledger = read_ledger(dp.ledger, missing_ok=True)
    main = ledger[ledger["pass"] == "main"] if ledger is not None and len(ledger) else None
    n = max(1, len(cands))
    tokens = 0.0 if main is None else float(main[["prompt_tokens", "completion_tokens", "saved_prompt_tokens",
                                                  "saved_completion_tokens"]].to_numpy().sum()) / n
    seconds = 0.0 if main is None else float(main["llm_seconds"].sum()) / n
    scores: dict[str, dict[str, float]] = {}
    for q, d, s in zip(cands.qid, cands.docid, cands.llm_score, strict=True):
        scores.setdefault(q, {})[d] = float(s)
    why = f"reranked from the {len(cands)} LLM scores stage 04 recorded ({len(scores)} queries); no LLM call"
    return RecordedLLM(scores, float(cfg.get("alpha", 1.0)), tokens, seconds), why


def replay(run: Run, llm: RecordedLLM, pool_k: int) -> Run:
    """Stage 04's reorder of each query's top ``pool_k`` from the recorded scores (blend ``alpha`` of the
    min-max LLM and fused scores, as :mod:`rerankeval.rerank.core`), for the queries whose whole pool was
    scored; the rest of the list keeps its fused order."""
    from rerankeval.core.runs import ranked
    from rerankeval.llm.repair import order_by_scores
    from rerankeval.rerank.core import minmax

    out: Run = {}
    for q, docs in run.items():
        items = ranked(docs)
        pool, rest = items[:pool_k], items[pool_k:]
        got = llm.scores.get(q, {})
        if not pool or any(d not in got for d, _ in pool):
            continue
        blend = [llm.alpha * a + (1 - llm.alpha) * b for a, b in zip(
            minmax([got[d] for d, _ in pool]), minmax([s for _, s in pool]), strict=True)]
        order = [pool[i][0] for i in order_by_scores(blend)] + [d for d, _ in rest]
        out[q] = {d: float(len(order) - i) for i, d in enumerate(order)}
    return out


# --------------------------------------------------------------------------- one call: sweep, tune, write
TUNED_VARIANT = HYBRID_TUNED


@dataclass
class SweepResult:
    """A sweep's table, its honest tuning (:class:`rerankeval.experiments.splits.Tuning`) and its timing."""

    table: pd.DataFrame  # the rows of sweep.csv (none when ``skipped``)
    tuning: object  # splits.Tuning (None when ``skipped``)
    points: list[Point]
    grid: Grid
    objective: str
    seconds: dict[str, float]  # legs (searched once), points (fusion + evaluation), total
    llm_note: str = ""  # whether reranked results were replayed from stage 04's recorded scores, and why not
    skipped: str = ""  # why nothing was swept or tuned (too few judged queries, see splits.too_few), else ""

    @property
    def default(self) -> Point:
        return self.points[0]

    def chosen_points(self) -> list[Point]:
        names = set(self.tuning.chosen.values()) if self.tuning is not None else set()
        return [p for p in self.points if p.name in names]

    @property
    def points_per_second(self) -> float:
        n = self.table.drop_duplicates(["point", "split"]).shape[0]
        return n / self.seconds["points"] if self.seconds["points"] > 0 else math.nan


def run_sweep(dp: DatasetPaths, grid: Grid, *, leg_k: int = 100, final_k: int = 10, folds: int = 5,
              seed: int = 0, n_boot: int = 10_000, engine: Engine | None = None) -> SweepResult:
    """Sweep ``grid`` around the default setting (``leg_k``, RRF k = 60) and tune it honestly: on the
    train split when the dataset has one, else by ``folds``-fold cross-validation (seeded), both over the
    judged queries (a relevant unit each). With too few of them (:func:`rerankeval.experiments.splits.too_few`) nothing
    is swept: the result says why in ``skipped`` and :func:`write_sweep` writes that."""
    from rerankeval.corpus import contract as corpus
    from rerankeval.experiments import splits

    evaluated, train = splits.judged(splits.eval_split(dp)), splits.train_split(dp)
    points = grid.points(Point(leg_k=leg_k), pdf=corpus.load_stats(dp).get("kind") == "pdf")
    cols, objective = columns(final_k, grid.pool_k), f"ndcg@{final_k}"
    if why := splits.too_few(evaluated, train):
        return SweepResult(pd.DataFrame(columns=table_columns(final_k)), None, points, grid, objective,
                           {"legs": 0.0, "points": 0.0, "total": 0.0}, skipped=why)
    queries = {**(train.queries if train else {}), **evaluated.queries}
    t0 = time.perf_counter()
    llm, llm_note = recorded_llm(dp)
    with _engine(dp, queries, max(grid.max_leg_k, leg_k), engine) as eng:
        eng.llm = llm
        for which in ("dense", "bm25"):
            eng.leg(which, points[0])
        t1 = time.perf_counter()
        if train is not None:
            tuning = splits.train_test(eng, points, train, evaluated, cols, objective, n_boot=n_boot, seed=seed)
        else:
            k = min(folds, len(evaluated.qids))  # a tiny query set: leave-one-out
            tuning = splits.kfold(eng, points, evaluated, cols, objective, k=k, seed=seed, n_boot=n_boot)
    t2 = time.perf_counter()
    table = pd.concat([summarise(pq, points, secs, name, final_k, grid.pool_k, llm)
                       for name, pq, secs in tuning.scored], ignore_index=True)
    table["chosen"] = table.point.isin(set(tuning.chosen.values()))
    table["is_default"] = table.point == points[0].name
    seconds = {"legs": t1 - t0, "points": t2 - t1, "total": t2 - t0}
    return SweepResult(table, tuning, points, grid, objective, seconds, llm_note)


@contextmanager
def _engine(dp: DatasetPaths, queries: Mapping[str, str], max_leg_k: int, given: Engine | None) -> Iterator[Engine]:
    if given is not None:
        yield given
        return
    with Engine.open(dp, queries, max_leg_k) as eng:
        yield eng


def table_columns(final_k: int) -> list[str]:
    """The columns of ``sweep.csv`` (:func:`summarise`'s, then ``chosen`` and ``is_default``)."""
    return ["point", *Point.__dataclass_fields__, "split", "n_queries", f"ndcg@{final_k}", f"mrr@{final_k}",
            "pool_k", "pool_ceiling", "seconds_per_query", "llm_tokens_per_query", "reranked_queries",
            "reranked_ndcg", "fused_ndcg_same_queries", "reranked_seconds_per_query",
            "reranked_llm_tokens_per_query", "chosen", "is_default"]


def write_sweep(dp: DatasetPaths, res: SweepResult, *, write_tuned: bool = False) -> dict[str, Path]:
    """``sweep.csv``, the sweep's summary (and folds) and, when ``write_tuned``, the tuned run as the variant
    ``hybrid_tuned`` (``runs/hybrid_tuned.trec`` over the reported queries only, with its stage record).

    A skipped sweep (``res.skipped``) writes ``sweep.csv`` with its header only and a summary saying why,
    and removes what an earlier sweep left that would now be stale: ``folds.csv``, the notebook's figures
    (the report index shows every figure it finds) and, when ``write_tuned``, the tuned run."""
    from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
    from rerankeval.core.runs import write_trec
    from rerankeval.experiments import splits

    out = {"sweep_csv": atomic_write_text(dp.sweep_csv, res.table.to_csv(index=False, float_format="%.6g"))}
    if res.skipped:
        return {**out, **_write_skipped(dp, res, write_tuned)}
    t = res.tuning
    if t.folds:
        out["folds"] = atomic_write_text(dp.sweep_dir / "folds.csv", splits.fold_table(t).to_csv(index=False))
    summary = {"protocol": t.protocol, "objective": res.objective, "chosen": t.chosen,
               "default": res.default.name, "headline": splits.headline(t, res.objective),
               "grid": res.grid.axes(), "points": len(res.points), "seconds": res.seconds,
               "points_per_second": res.points_per_second}
    out["summary"] = atomic_write_json(dp.sweep_dir / "summary.json", summary)
    if write_tuned:
        out["run"] = write_trec(t.run, dp.run_file(TUNED_VARIANT), tag=TUNED_VARIANT)
        out["record"] = atomic_write_json(dp.variant_record(TUNED_VARIANT), {
            "variant": TUNED_VARIANT, "protocol": t.protocol, "objective": res.objective,
            "setting": {k: next(p.record() for p in res.points if p.name == v) for k, v in t.chosen.items()},
            "seconds": round(t.seconds_per_query * len(t.run), 3), "queries": len(t.run)})
    return out


def _write_skipped(dp: DatasetPaths, res: SweepResult, write_tuned: bool) -> dict[str, Path]:
    from rerankeval.core.ioutil import atomic_write_json

    stale = [dp.sweep_dir / "folds.csv", *dp.figures_dir.glob(f"{NOTEBOOK}-*.png")]
    if write_tuned:
        stale += [dp.run_file(TUNED_VARIANT), dp.variant_record(TUNED_VARIANT)]
    for f in stale:
        f.unlink(missing_ok=True)
    summary = {"protocol": None, "skipped": res.skipped, "objective": res.objective, "chosen": {},
               "default": res.default.name, "headline": None, "grid": res.grid.axes(), "points": len(res.points),
               "seconds": res.seconds}
    return {"summary": atomic_write_json(dp.sweep_dir / "summary.json", summary)}


# --------------------------------------------------------------------------- views for the notebook
AXES = ("method", "rrf_k", "weights", "leg_k", "pool_k", "bm25", "chunking")


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
    out["chunking"] = [f"{a}/{b}" if a else "main" for a, b in zip(out.chunk_size, out.chunk_overlap, strict=True)]
    return out


def one_at_a_time(view: pd.DataFrame, default: Point, axis: str, pool_k: int) -> pd.DataFrame:
    """The points that differ from ``default`` in ``axis`` only (the default included): by value for a
    numeric axis, else in grid order (the default first)."""
    d = {"method": default.method, "rrf_k": default.rrf_k, "weights": f"{default.w_dense:g}/{default.w_bm25:g}",
         "leg_k": default.leg_k, "bm25": f"{default.k1:g}/{default.b:g}", "chunking": "main", "pool_k": pool_k}
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
    same = ("; within 10%: the legs dominate the cost, so quality decides" if hi <= 1.1 * lo else "")
    return (f"{len(front)} of {len(v)} points are on the {metric}-vs-{cost.replace('_', ' ')} frontier, cheapest "
            f"first: {steps}. Costs span {lo:.2f}-{hi:.2f} ms/query{same}. No sweep point calls the LLM "
            f"(0 tokens per query).")


def describe(res: SweepResult) -> list[str]:
    """What the sweep did and found, in sentences (the protocol first: how the setting was chosen)."""
    from rerankeval.experiments import splits

    if res.skipped:
        return [res.skipped]
    t, m = res.tuning, res.objective
    h = splits.headline(t, m)
    if t.protocol == "train/test":
        n_train = int(res.table[res.table.split == "train"].n_queries.max())
        how = (f"The setting was chosen on the train split ({n_train} "
               f"queries, qrels/train.tsv) and is reported once on the evaluated split ({h['n']} queries), which "
               f"played no part in choosing it: chosen {t.chosen['train']}.")
    else:
        how = (f"The dataset has no train split, so the setting was chosen by {len(t.chosen)}-fold cross-validation "
               f"over its {h['n']} queries (folds seeded and recorded in sweep/folds.csv): each fold's queries are "
               f"answered by the setting chosen on the other folds, and the out-of-fold score is reported. Chosen per "
               f"fold: {'; '.join(f'{f}: {p}' for f, p in t.chosen.items())}.")
    verdict = ("better than" if h["diff_ci_low"] > 0 else "worse than" if h["diff_ci_high"] < 0
               else "not distinguishable from")
    result = (f"{m} tuned {h['tuned mean']:.4f} [{h['tuned ci_low']:.4f}, {h['tuned ci_high']:.4f}] vs default "
              f"({res.default.name}) {h['default mean']:.4f} [{h['default ci_low']:.4f}, {h['default ci_high']:.4f}]; "
              f"difference {h['diff']:+.4f} [{h['diff_ci_low']:+.4f}, {h['diff_ci_high']:+.4f}], paired "
              f"randomisation p = {h['p']:.3g}: the tuned setting is {verdict} the default (95% CIs, bootstrap).")
    return [how, result]


def reranked_table(table: pd.DataFrame, points: Sequence[str] | None = None) -> pd.DataFrame:
    """The rows with a replayed rerank (of ``points`` only, if given): fused and reranked nDCG on the same
    (covered) queries, and costs."""
    cols = ["point", "split", "pool_k", "reranked_queries", "fused_ndcg_same_queries", "reranked_ndcg",
            "reranked_seconds_per_query", "reranked_llm_tokens_per_query"]
    keep = (table.reranked_queries > 0) & (table.point.isin(points) if points is not None else True)
    return table[keep][cols].reset_index(drop=True)
