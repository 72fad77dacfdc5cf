"""The sweep's grid and engine: points, grids, the legs searched once, and per-query scores of any point.

A sweep point is a setting of the fusion (``method``, ``rrf_k``, per-leg ``weights``), the legs' depth
``leg_k``, BM25's ``k1``/``b`` and, for PDF datasets, the chunking. Everything a point does not change is
re-used: each leg is searched ONCE per query set at the largest ``leg_k`` of the grid, shallower depths are
that run truncated, so a fusion-only point encodes no text and calls no LLM. A BM25 ``k1``/``b`` point
re-weights the stored term counts (no re-tokenising); a chunking point re-extracts and re-indexes in a
scratch dataset folder (``results/<dataset>/sweep/chunking/``) and never touches the main results. The legs are
kept on disk (:mod:`.legcache`, keyed by every input and the code): a second sweep reads them back.

``pool_k`` changes nothing in a fused run: it sets the pool ceiling (Recall@pool_k of the fused run, what a
perfect reranker could reach), evaluated for every ``pool_k`` of the grid. The sweep never calls the LLM.

The layer under :mod:`.splits` (honest choosing) and :mod:`.sweep` (the stage: sweep, tune, write)::

    grid = load_grid("small")
    with Engine.open(dp, all_queries, max_leg_k=grid.max_leg_k) as eng:
        per_query, seconds = score_points(eng, grid.points(), qids, qrels, columns)
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from rerankeval.core import yamlsafe
from rerankeval.core.paths import PARAMS_DIR, DatasetPaths
from rerankeval.core.progress import track
from rerankeval.core.runs import Qrels, Run, ranked, to_units
from rerankeval.core.settings import Settings
from rerankeval.evaluate import metrics
from rerankeval.experiments.replay import RecordedLLM, replay
from rerankeval.index import bm25 as bm25mod
from rerankeval.index.qdrant.rrf import RRF_K
from rerankeval.retrieve.fusion import FUSION_METHODS, fuse

if TYPE_CHECKING:
    from rerankeval.corpus.stage import Params as CorpusParams

GRID_FILE = PARAMS_DIR / "sweep.yaml"
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
    alpha: list[float] = field(default_factory=list)  # rerank blend weights replayed on stage 04's scores (.blend)

    def points(self, default: Point = Point(), pdf: bool = False) -> list[Point]:
        """``default`` first, then every fusion combination, then the BM25 and chunking points."""
        out = [default]
        for m, (wd, wb), leg in itertools.product(self.method, self.weights, self.leg_k):
            for k in self.rrf_k if m in RRF_METHODS else [default.rrf_k]:
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
    """The grid ``name`` (e.g. ``small``, ``large``) of ``params/sweep.yaml``, read through
    :mod:`rerankeval.core.yamlsafe` (no aliases, no YAML 1.1 number forms, bounded size)."""
    grids = yamlsafe.load_file(path) or {}
    if not isinstance(grids, dict):
        raise ValueError(f"{path}: expected a mapping of grid names to their axes (e.g. `small:` then `leg_k: [50]`)")
    if name not in grids:
        raise ValueError(f"no grid {name!r} in {path}; choose from {', '.join(grids)} or add one there")
    spec = grids[name] or {}
    unknown = set(spec) - set(Grid.__dataclass_fields__)
    if unknown:
        raise ValueError(
            f"grid {name!r} in {path}: unknown axes {sorted(unknown)}; "
            f"the axes are {', '.join(Grid.__dataclass_fields__)}"
        )
    grid = Grid(**spec)
    bad = [m for m in grid.method if m not in FUSION_METHODS]
    if bad:
        raise ValueError(f"grid {name!r}: unknown fusion method(s) {bad}; choose from {', '.join(FUSION_METHODS)}")
    if any(not 0 <= float(a) <= 1 for a in grid.alpha):
        raise ValueError(f"grid {name!r}: alpha {grid.alpha} must lie in [0, 1] (the LLM score's share of the blend)")
    return grid


# --------------------------------------------------------------------------- the legs, searched once
@dataclass
class Leg:
    """One leg's chunk-level run at the sweep's deepest ``leg_k`` and its search seconds per query."""

    run: Run
    seconds_per_query: float


class Engine:
    """The legs of one dataset for a fixed query set, searched once; runs of any :class:`Point` from them.

    ``source`` is a :class:`rerankeval.retrieve.retriever.Retriever` (or anything with ``dense_leg``, ``bm25_leg``,
    ``bm25`` and ``unit_of``). ``chunk_sources`` builds the retriever of a chunking point (see
    :func:`chunking_source`); it is only called for such points.
    """

    def __init__(self, source, queries: Mapping[str, str], max_leg_k: int, chunk_sources=None) -> None:
        self.source, self.queries, self.max_leg_k = source, dict(queries), max_leg_k
        self.chunk_sources = chunk_sources
        self.llm: RecordedLLM | None = None  # stage 04's recorded scores, to replay reranks (never the LLM)
        self.leg_cache = None  # a .legcache.LegCache: legs read back from disk when their inputs are unchanged
        self._legs: dict[tuple, Leg] = {}
        self._units: dict[tuple, object] = {}  # deepest legs as units (+ counts), and their cuts per leg_k
        self._sources: dict[tuple[int, int], object] = {}

    @classmethod
    @contextmanager
    def open(
        cls, dp: DatasetPaths, queries: Mapping[str, str], max_leg_k: int, settings: Settings, **kw
    ) -> Iterator[Engine]:
        """An engine over the built indexes of ``dp`` (Qdrant closed on exit), searched with ``settings``."""
        from rerankeval.experiments.legcache import LegCache
        from rerankeval.retrieve.retriever import Retriever

        cache = kw.pop("cache_legs", True)
        with Retriever(dp, settings, progress=kw.pop("progress", False)) as r:
            eng = cls(
                r, queries, max_leg_k, chunk_sources=lambda size, overlap: chunking_source(dp, size, overlap, settings)
            )
            eng.leg_cache = LegCache(dp, queries, settings) if cache else None
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
                raise ValueError(f"{p.name}: a chunking point needs chunk_sources (see grid.chunking_source)")
            self._sources[p.chunking] = self.chunk_sources(*p.chunking)
        return self._sources[p.chunking]

    def leg(self, which: str, p: Point) -> Leg:
        """The ``dense`` or ``bm25`` leg of ``p``'s chunking (and BM25 parameters), at ``max_leg_k``."""
        key = (which, p.chunking, p.bm25_params if which == "bm25" else None)
        cache = self.leg_cache if not p.chunk_size else None  # chunking points: scratch datasets, not cached here
        if key not in self._legs and cache is not None and (got := cache.get(which, self.max_leg_k, key[2])):
            self._legs[key] = Leg(*got)
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
            if cache is not None:
                cache.put(which, self.max_leg_k, key[2], run, self._legs[key].seconds_per_query)
        return self._legs[key]

    def unit_legs(self, p: Point) -> tuple[Run, Run]:
        """Both legs of ``p`` cut to ``p.leg_k`` chunks, then mapped to relevance units (as stage 03)."""
        if p.leg_k > self.max_leg_k:
            raise ValueError(f"{p.name}: leg_k {p.leg_k} is deeper than the legs searched ({self.max_leg_k})")
        out = []
        for which in ("dense", "bm25"):
            key = (which, p.chunking, p.bm25_params if which == "bm25" else None)
            if key + (p.leg_k,) not in self._units:
                if key not in self._units:  # the deepest leg mapped once, with the units met in each top-k chunks
                    run = self.leg(which, p).run
                    self._units[key] = (to_units(run, self._source(p).unit_of), _distinct(run, self._source(p)))
                units, distinct = self._units[key]
                self._units[key + (p.leg_k,)] = {q: _head(d, distinct[q], p.leg_k) for q, d in units.items()}
            out.append(self._units[key + (p.leg_k,)])
        return out[0], out[1]

    def run(self, p: Point, qids: Sequence[str], depth: int | None = None) -> tuple[Run, float]:
        """The fused unit-level run of ``p`` for ``qids`` (its best ``depth`` units, all if None) and its
        seconds per query (legs + fusion)."""
        dense, lex = self.unit_legs(p)
        t0 = time.perf_counter()
        fused = fuse(
            [{q: dense.get(q, {}) for q in qids}, {q: lex.get(q, {}) for q in qids}],
            p.method,
            k=p.rrf_k,
            weights=p.weights,
            depth=depth,
        )
        per_q = (time.perf_counter() - t0) / max(1, len(qids))
        return fused, per_q + self.leg("dense", p).seconds_per_query + self.leg("bm25", p).seconds_per_query


def _distinct(run: Run, source) -> dict[str, list[int]]:
    """Per query, the number of distinct units among its top 1, 2, ... chunks (stable score order)."""
    out = {}
    for q, docs in run.items():
        seen: set[str] = set()
        counts = []
        for chunk, _ in ranked(docs):
            seen.add(source.unit_of[chunk])
            counts.append(len(seen))
        out[q] = counts
    return out


def _head(units: dict[str, float], distinct: list[int], k: int) -> dict[str, float]:
    """The units of a query's top ``k`` chunks: a prefix of its units at the deepest leg, which is exactly
    ``to_units(truncate(run, k))`` (the first, best-ranked chunk of a unit comes first either way)."""
    n = distinct[min(k, len(distinct)) - 1] if distinct and k > 0 else 0
    return dict(itertools.islice(units.items(), n))


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
    return replace(dp, name=f"{dp.name}--sweep-{tag}", root=dp.sweep_dir / "chunking" / tag)  # same roots


def chunking_source(dp: DatasetPaths, size: int, overlap: int, settings: Settings):
    """A :class:`~rerankeval.retrieve.retriever.Retriever` over ``dp`` re-extracted with ``size``/``overlap`` and
    re-indexed in :func:`scratch_dataset` (both steps are cached by content, so a second sweep reuses them)."""
    from rerankeval import corpus, index
    from rerankeval.retrieve.retriever import Retriever

    sdp = scratch_dataset(dp, size, overlap)
    corpus.write(sdp, corpus.run(sdp, chunking_params(dp, size, overlap), settings))
    index.write(sdp, index.run(sdp, index.Params(), settings.model_copy(update={"progress": "off"})))
    return Retriever(sdp, settings, progress=False)


def chunking_params(dp: DatasetPaths, size: int, overlap: int) -> CorpusParams:
    """Stage 01's parameters of ``dp``'s last run (its split, its ``x_tolerance``) with another chunking."""
    from rerankeval import corpus
    from rerankeval.corpus.contract import load_stats

    recorded = corpus.Params.of(load_stats(dp).get("params", {}))
    return replace(recorded, chunk_size=size, chunk_overlap=overlap)


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


def score_points(
    engine: Engine,
    points: Sequence[Point],
    qids: Sequence[str],
    qrels: Qrels,
    cols: Sequence[str],
    *,
    vectorised: bool = True,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per-query metrics of every point on ``qids``: long ``point, qid, metric, value``; and the seconds
    per query of each point. Only ``qrels[q]`` for ``q`` in ``qids`` is ever read.

    With recorded LLM scores (``engine.llm``, :func:`recorded_llm`) each pool (``recall@k`` columns) is also
    reranked from them, on the queries whose whole pool was scored: metrics ``reranked@<k> <cols[0]>`` and,
    on the same queries, ``fused@<k> <cols[0]>``. Nothing calls the LLM.

    ``vectorised`` (the default): all points of a leg setting are fused and evaluated at once
    (:mod:`.fastscore`, same values); the per-point loop below runs when False or for a column it lacks (``map``)."""
    from rerankeval.experiments import fastmetrics, fastscore

    qids = [q for q in qids if q in qrels]
    if vectorised and fastmetrics.supported(cols) and fastscore.evaluable(qids, qrels):
        return fastscore.score_points(engine, points, qids, qrels, cols)
    frames, secs = [], {}
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
    return pd.concat(
        [
            pd.DataFrame({"qid": got.index, "metric": f"reranked@{pool_k} {col}", "value": got.values}),
            pd.DataFrame(
                {"qid": got.index, "metric": f"fused@{pool_k} {col}", "value": wide.loc[got.index, col].values}
            ),
        ],
        ignore_index=True,
    )


def summarise(
    per_query: pd.DataFrame,
    points: Sequence[Point],
    secs: Mapping[str, float],
    split: str,
    final_k: int,
    pool_ks: Sequence[int],
    llm: RecordedLLM | None = None,
) -> pd.DataFrame:
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
            rows.append(
                {
                    "point": p.name,
                    **p.record(),
                    "split": split,
                    "n_queries": int(n[p.name]),
                    f"ndcg@{final_k}": m[f"ndcg@{final_k}"],
                    f"mrr@{final_k}": m[f"mrr@{final_k}"],
                    "pool_k": pk,
                    "pool_ceiling": m[f"recall@{pk}"],
                    "seconds_per_query": secs.get(p.name, math.nan),
                    "llm_tokens_per_query": 0.0,
                    **_reranked_columns(m, c, pk, final_k, secs.get(p.name, math.nan), llm),
                }
            )
    return pd.DataFrame(rows)


def _reranked_columns(
    means: pd.Series, counts: pd.Series, pk: int, final_k: int, secs: float, llm: RecordedLLM | None
) -> dict[str, float]:
    rr, fz = f"reranked@{pk} ndcg@{final_k}", f"fused@{pk} ndcg@{final_k}"
    covered = counts.get(rr, 0)
    covered = int(covered) if pd.notna(covered) else 0
    if not covered or llm is None:
        return {
            "reranked_queries": covered,
            "reranked_ndcg": math.nan,
            "fused_ndcg_same_queries": math.nan,
            "reranked_seconds_per_query": math.nan,
            "reranked_llm_tokens_per_query": math.nan,
        }
    return {
        "reranked_queries": covered,
        "reranked_ndcg": means[rr],
        "fused_ndcg_same_queries": means[fz],
        "reranked_seconds_per_query": secs + pk * llm.seconds_per_candidate,
        "reranked_llm_tokens_per_query": pk * llm.tokens_per_candidate,
    }
