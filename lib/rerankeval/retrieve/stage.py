"""Stage 03 (retrieve): every retrieval variant behind one signature.

The stage (notebook 03)::

    result = run(dp, RetrieveParams(variants=["bm25", "hybrid"]))   # searches, writes nothing
    write(dp, result)                                             # run files, records, the rewrite ledger

One variant::

    with Retriever(dp) as r:
        res = r.search("hybrid", queries, leg_k=100)   # -> Retrieval(variant, run, chunk_run, ...)
    write_runs(dp, res)

or in one call ``retrieve(dp, "hybrid")`` (loads the judged queries, searches, writes both run files).
The indexes come from stage 02 (:mod:`rerankeval.index.build`); the variants are classes in the registry of
:mod:`rerankeval.retrieve.variants` (one shape: a name, its parameters, ``search(queries) -> Run``), composed
with a query-rewriting step for ``hybrid_reformulate`` (:data:`REWRITES`, :mod:`rerankeval.retrieve.reformulate`).

Variants (all chunk-level first, then mapped to relevance units with :func:`rerankeval.core.runs.to_units`):

- ``vector``: dense cosine top-``leg_k`` chunks from Qdrant;
- ``bm25``: BM25 (:mod:`rerankeval.index.bm25`, fast path, rank-bm25 statistics) top-``leg_k`` chunks;
- ``hybrid``: client-side Reciprocal Rank Fusion (Cormack, Clarke & Buettcher, SIGIR 2009) of the two
  legs, ``sum 1/(rrf_k + rank)`` with 1-based ranks and ``rrf_k = 60``; each leg is mapped to units
  *before* fusing, so a page/document never splits its credit across chunks (ties: fused score, best
  single-leg rank, id; see :mod:`rerankeval.retrieve.fusion`);
- ``qdrant_hybrid``: the same fusion done by Qdrant's Query API (prefetch dense + native sparse BM25
  with Qdrant's IDF, ``RrfQuery`` with ``k = rrf_k + 1``); Qdrant fuses chunks, so units are mapped after
  fusing (identical to ``hybrid``'s mapping when chunk = unit, as in BEIR);
- ``hybrid_combsum``, ``hybrid_combmnz``, ``hybrid_dbsf`` (fusion alternatives, not run by default): ``hybrid``'s
  legs and unit mapping fused by min-max CombSUM/CombMNZ or DBSF (:func:`rerankeval.retrieve.fusion.fuse`);
  ``qdrant_dbsf``: ``qdrant_hybrid`` with Qdrant's own DBSF (``docs/CONVENTIONS.md#fusion``);
- ``cross_encoder`` (optional): the top ``pool_k`` units of the ``hybrid`` run reordered by a
  sentence-transformers CrossEncoder scoring (query, the unit's best chunk); the rest keep their fused
  order (the same pool contract as the LLM reranker of stage 04);
- ``hybrid_reformulate``: ``hybrid``, then the LLM's rewrite of each weak query fused with it unless a
  judgment-free guard reverts it (:class:`rerankeval.retrieve.reformulate.Reformulate`, a step, not a variant).

Budgets, equal for every variant: ``leg_k`` chunks per leg (so any metric at a cutoff <= ``leg_k``
compares equal budgets); ``pool_k`` fused candidates go to a reranker; ``final_k`` is the cutoff of the
headline metric (nDCG@final_k). Runs are written at full depth, never truncated to ``pool_k`` or
``final_k``: single legs hold up to ``leg_k`` chunks/units, fused runs the union of both legs.
"""


from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json, sha256_json
from rerankeval.core.names import BM25, CROSS_ENCODER, HYBRID, HYBRID_REFORMULATE, QDRANT_HYBRID, VECTOR
from rerankeval.core.paths import DEFAULT_DATASET, DatasetPaths
from rerankeval.core.runs import Run, ranked, to_units, write_trec
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.retrieve import cross_encoder, reformulate, runcache, variants
from rerankeval.retrieve.fusion import RRF_K, rrf
from rerankeval.retrieve.retriever import BASE_VARIANTS as BASE_VARIANTS  # re-exported: callers import them here
from rerankeval.retrieve.retriever import REWRITES as REWRITES
from rerankeval.retrieve.retriever import VARIANTS as VARIANTS
from rerankeval.retrieve.retriever import Retrieval, Retriever

if TYPE_CHECKING:
    from rerankeval.llm.cache import LLMCache


def write_runs(dp: DatasetPaths, res: Retrieval) -> tuple[Path, Path]:
    """Write ``dp.run_file(variant)`` (units) and ``dp.chunk_run_file(variant)`` (chunks), full depth,
    and the variant's parameters to ``dp.stage_dir("retrieve")/<variant>.json``."""
    a = write_trec(res.run, dp.run_file(res.variant), tag=res.variant)
    b = write_trec(res.chunk_run, dp.chunk_run_file(res.variant), tag=res.variant)
    write_record(dp, res)
    return a, b


def write_record(dp: DatasetPaths, res: Retrieval, *, seconds: float | None = None, read_back: bool = False) -> Path:
    """``dp.variant_record(variant)``: the parameters, the search's wall ``seconds`` (default ``res.seconds``; a run
    read back keeps those of the search that made it, ``read_back`` true) and the query count."""
    record = variants.REGISTRY.get(res.variant, variants.Variant).record(res.params)
    seconds = res.seconds if seconds is None else seconds
    return atomic_write_json(dp.variant_record(res.variant), {
        "variant": res.variant, **res.params, **record, "seconds": round(seconds, 3), "queries": len(res.run),
        **({"read_back": True} if read_back else {})})


def retrieve(
    dp: DatasetPaths,
    variant: str,
    queries: Mapping[str, str] | None = None,
    *,
    leg_k: int = 100,
    pool_k: int = 20,
    rrf_k: int = RRF_K,
    weights: Sequence[float] | None = None,
    cross_encoder=None,
    write: bool = True,
    retriever: Retriever | None = None,
) -> Retrieval:
    """One call per variant: search ``queries`` (default: the judged queries of ``dp``) and write the runs."""
    queries = corpus.load_queries(dp) if queries is None else queries
    with Retriever(dp) if retriever is None else contextlib.nullcontext(retriever) as r:
        res = r.search(variant, queries, leg_k=leg_k, pool_k=pool_k, rrf_k=rrf_k, weights=weights,
                       cross_encoder=cross_encoder)
    if write:
        write_runs(dp, res)
    return res


def overlap_at_k(a: Run, b: Run, k: int) -> dict[str, float]:
    """Per query |top-k(a) ∩ top-k(b)| / k (1.0 = same documents, any order)."""
    out = {}
    for q in sorted(set(a) | set(b)):
        ta = {d for d, _ in ranked(a.get(q, {}))[:k]}
        tb = {d for d, _ in ranked(b.get(q, {}))[:k]}
        out[q] = len(ta & tb) / k if k else math.nan
    return out


# -- the stage: run(dp, params) -> RetrieveResult, write(dp, result) --
@dataclass(frozen=True)
class RetrieveParams:
    """Stage 03's parameters: notebook 03's parameters cell has the same names and defaults (a test checks)."""

    dataset: str = DEFAULT_DATASET  # the caller resolves it to the DatasetPaths given to run()
    leg_k: int = 100  # chunks per leg
    pool_k: int = 10  # hybrid units the cross_encoder reorders (the LLM reranker's pool in 04)
    final_k: int = 10  # cutoff of the headline metric (and of the Qdrant comparison's first overlap)
    rrf_k: int = RRF_K  # paper convention 1/(rrf_k + rank); Qdrant is sent rrf_k + 1
    variants: Sequence[str] = (VECTOR, BM25, HYBRID, QDRANT_HYBRID, CROSS_ENCODER, HYBRID_REFORMULATE)
    cross_encoder_model: str = ""  # local folder or cached name; empty: the configured one, else the default
    explain_queries: int = 50  # queries of the Qdrant comparison (Qdrant's local sparse search is slow)
    reformulate_threshold: float = reformulate.THRESHOLD
    reformulate_guard_k: int = reformulate.GUARD_K
    reuse_runs: bool = True  # read back a variant whose inputs did not change (False: search every one again)


@dataclass(frozen=True)
class QdrantComparison:
    """``qdrant_hybrid`` against ``hybrid``: top-k overlaps of their runs, and, over the first ``sample`` queries,
    of our RRF over Qdrant's own legs against ``qdrant_hybrid`` and of Qdrant's sparse leg against our BM25 leg."""

    final_k: int
    leg_k: int
    sample: int
    overlap_final: float
    overlap_leg: float
    ours_on_qdrant_legs: float
    sparse_vs_bm25: float

    def summary(self, ndcg: pd.DataFrame) -> pd.DataFrame:
        """The comparison as a one-column table, with ``ndcg`` (qid x variant nDCG@final_k, stage 05's)."""
        diff = ndcg[QDRANT_HYBRID] - ndcg[HYBRID]
        k, n = self.final_k, self.sample
        return pd.Series({
            f"overlap@{k}: hybrid vs qdrant_hybrid": self.overlap_final,
            f"overlap@{self.leg_k}: hybrid vs qdrant_hybrid": self.overlap_leg,
            f"nDCG@{k} qdrant_hybrid - hybrid (mean)": diff.mean(),
            "queries with a different nDCG": int((diff.abs() > 1e-12).sum()),
            f"overlap@{k}: our RRF of Qdrant's legs vs qdrant_hybrid ({n} queries)": self.ours_on_qdrant_legs,
            f"overlap@{k}: Qdrant's sparse leg vs our BM25 leg ({n} queries)": self.sparse_vs_bm25,
        }).to_frame("value")


@dataclass
class RetrieveResult:
    """What :func:`run` found: each variant's runs in the order run, the variants skipped and why, the rewrite
    ledger, the Qdrant comparison (when both hybrids ran), the variants read back (``read_back``: -> the seconds of
    the search that made the run) and whether each was read back or searched and why (``reuse``, :meth:`notes`)."""

    retrievals: dict[str, Retrieval] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    ledger: pd.DataFrame | None = None
    qdrant: QdrantComparison | None = None
    reuse: dict[str, str] = field(default_factory=dict)
    read_back: dict[str, float] = field(default_factory=dict)
    keys: dict[str, dict] = field(default_factory=dict)  # variant -> its key parts (write() saves them)
    llm_keys: dict[str, list[str]] = field(default_factory=dict)  # hybrid_reformulate -> its replies' cache keys
    qdrant_key: str | None = None

    @property
    def runs(self) -> dict[str, Run]:
        """variant -> its unit-level run."""
        return {v: res.run for v, res in self.retrievals.items()}

    def notes(self) -> list[str]:
        """One line per variant: read back (``hybrid: unchanged, read back``) or searched and why; the skips."""
        return [f"{v}: {why}" for v, why in self.reuse.items()] + list(self.skipped.values())

    def table(self, dp: DatasetPaths) -> pd.DataFrame:
        """One row per variant: seconds, whether it was read back, mean units and chunks per query, its run file."""
        return pd.DataFrame([{
            "variant": v, "seconds": round(res.seconds, 2), "read back": v in self.read_back,
            "units per query (mean)": sum(map(len, res.run.values())) / max(1, len(res.run)),
            "chunks per query (mean)": sum(map(len, res.chunk_run.values())) / max(1, len(res.chunk_run)),
            "run file": str(dp.run_file(v).relative_to(dp.root))} for v, res in self.retrievals.items()])


class _Searcher(contextlib.AbstractContextManager):
    """The :class:`Retriever`, opened on first use: a run whose variants are all read back never opens the indexes."""

    def __init__(self, dp: DatasetPaths) -> None:
        self.dp, self._r = dp, None

    def get(self) -> Retriever:
        self._r = self._r or Retriever(self.dp)
        return self._r

    def __exit__(self, *exc) -> None:
        if self._r is not None:
            self._r.close()


def run(dp: DatasetPaths, params: RetrieveParams, *, settings: Settings | None = None,
        cache: LLMCache | None = None) -> RetrieveResult:
    """Search each of ``params.variants`` for the judged queries of ``dp``, in order; writes nothing (:func:`write`).

    A variant whose inputs did not change since :func:`write` saved its run is read back instead
    (:mod:`rerankeval.retrieve.runcache`; ``reuse_runs=False`` searches every one). ``cross_encoder`` is skipped
    (with the reason in ``skipped``) when no weights are on disk; ``hybrid_reformulate`` asks the LLM of
    ``settings`` (default: the environment's) and falls back to ``hybrid`` without one."""
    queries = corpus.load_queries(dp)
    result = RetrieveResult()
    inputs = runcache.Inputs.of(dp, queries)
    with _Searcher(dp) as searcher:
        for v in params.variants:
            _variant(dp, searcher, v, queries, params, inputs, result, settings=settings, cache=cache)
        result.qdrant = _comparison(dp, searcher, result, queries, params)
    return result


def _variant(dp: DatasetPaths, searcher: _Searcher, v: str, queries: Mapping[str, str], p: RetrieveParams,
             inputs: runcache.Inputs, result: RetrieveResult, *, settings: Settings | None,
             cache: LLMCache | None) -> None:
    """Read ``v`` back when its inputs did not change, else search it, into ``result``."""
    extra = None
    if v == CROSS_ENCODER and (extra := runcache.cross_encoder_identity(p.cross_encoder_model)) is None:
        result.skipped[v] = f"Skipping {v}: {cross_encoder.NOT_ON_DISK}"
        return
    if v == HYBRID_REFORMULATE:
        from rerankeval.core.settings import load_settings

        settings = settings or load_settings()
        extra = runcache.rewrite_identity(settings)
    budget = {"leg_k": p.leg_k, "pool_k": p.pool_k, "rrf_k": p.rrf_k, "weights": None,
              "threshold": p.reformulate_threshold, "guard_k": p.reformulate_guard_k}
    parts = runcache.key_parts(inputs, v, budget, extra)
    why = _read_back(dp, v, parts, queries, p, result, cache) if p.reuse_runs else "reuse_runs is off"
    if why is None:
        return
    _run_variant(searcher.get(), v, queries, p, result, settings=settings, cache=cache)
    result.keys[v] = parts
    if v == HYBRID_REFORMULATE:
        why = _rewrites_saved(v, queries, result, settings, why if extra is not None else "no LLM model named")
    result.reuse[v] = f"searched ({why})"


def _read_back(dp: DatasetPaths, v: str, parts: dict, queries: Mapping[str, str], p: RetrieveParams,
               result: RetrieveResult, cache: LLMCache | None) -> str | None:
    """Put ``v``'s saved runs in ``result`` and return None, or return why they cannot be read back."""
    ledger = dp.retrieve_dir / reformulate.LEDGER if v == HYBRID_REFORMULATE else None
    hit = runcache.load(dp, v, parts, ledger)
    if not hit.found:
        return hit.reason
    if ledger is not None:
        from rerankeval.llm.cache import LLMCache

        if not runcache.replies_cached(hit.entry, cache if cache is not None else LLMCache()):
            return "a rewrite's reply is no longer in the LLM cache"
        result.ledger = runcache.read_ledger(ledger, reformulate.LEDGER_COLUMNS)
    found = variants.complete(variants.Runs(hit.run, hit.chunk_run), queries)
    budget = variants.Params(leg_k=p.leg_k, pool_k=p.pool_k, rrf_k=p.rrf_k).record()
    result.retrievals[v] = Retrieval(v, found.run, found.chunk_run, hit.seconds, {**hit.entry["record"], **budget})
    result.read_back[v] = float(hit.entry.get("seconds") or 0.0)
    result.keys[v] = parts
    result.reuse[v] = "unchanged, read back"
    return None


def _rewrites_saved(v: str, queries: Mapping[str, str], result: RetrieveResult, settings: Settings,
                    why: str) -> str:
    """Keep ``hybrid_reformulate``'s key only when every rewrite asked had a usable reply (so the replies are in
    the LLM cache) and the model is named; note the LLM cache keys; return the reason to show."""
    ledger = result.ledger
    asked = ledger[ledger.status != reformulate.NOT_REWRITTEN] if ledger is not None else None
    failed = asked is None or reformulate.failed_calls(asked).any()
    if failed or runcache.rewrite_identity(settings) is None:
        result.keys.pop(v, None)
        return f"{why}; not saved for reading back: {'a rewrite failed' if failed else 'no model name'}"
    result.llm_keys[v] = runcache.rewrite_keys(settings, [queries[q] for q in asked.qid])
    return why


def _run_variant(r: Retriever, v: str, queries: Mapping[str, str], p: RetrieveParams, result: RetrieveResult,
                 **llm) -> None:
    """Search ``v`` into ``result`` (the cross-encoder's and the rewrite step's special cases)."""
    budget = {"leg_k": p.leg_k, "pool_k": p.pool_k, "rrf_k": p.rrf_k}
    if v == CROSS_ENCODER:
        model = cross_encoder.load_local(p.cross_encoder_model or None)
        if model is None:
            result.skipped[v] = f"Skipping {v}: {cross_encoder.NOT_ON_DISK}"
            return
        result.retrievals[v] = r.search(v, queries, cross_encoder=model, **budget)
    elif v == HYBRID_REFORMULATE:
        result.retrievals[v], result.ledger = search_reformulated(
            r, queries, threshold=p.reformulate_threshold, guard_k=p.reformulate_guard_k, **budget, **llm)
    else:
        result.retrievals[v] = r.search(v, queries, **budget)


def search_reformulated(retriever: Retriever, queries: Mapping[str, str], *, leg_k: int = 100, pool_k: int = 20,
                        rrf_k: int = RRF_K, threshold: float = reformulate.THRESHOLD,
                        guard_k: int = reformulate.GUARD_K, settings: Settings | None = None,
                        cache: LLMCache | None = None) -> tuple[Retrieval, pd.DataFrame]:
    """``hybrid_reformulate``: ``hybrid``, then the rewrite step on the LLM of ``settings``; (its Retrieval, whose
    ``params`` hold the step's record, the ledger). Without a reachable endpoint every weak query keeps its
    original result (status ``llm_failed``). Writes nothing."""
    t0 = time.perf_counter()
    with reformulate.open_rewriter(settings, cache) as (rewriter, problem):
        step = reformulate.Reformulate(rewriter, threshold, guard_k)
        res = retriever.search(HYBRID_REFORMULATE, queries, leg_k=leg_k, pool_k=pool_k, rrf_k=rrf_k, rewrite=step)
    step.no_endpoint(problem)
    res.params.update(step.record())
    res.seconds = time.perf_counter() - t0
    return res, step.ledger


def compare_qdrant(r: Retriever, found: Mapping[str, Retrieval], queries: Mapping[str, str],
                   p: RetrieveParams) -> QdrantComparison | None:
    """Why ``qdrant_hybrid`` and ``hybrid`` differ (None unless both are in ``found``): is it the fusion convention
    (our RRF over Qdrant's own legs) or the sparse leg (Qdrant's IDF against rank-bm25's)?"""
    if not {HYBRID, QDRANT_HYBRID} <= set(found):
        return None
    a, b = found[HYBRID].run, found[QDRANT_HYBRID].run
    sample = dict(list(queries.items())[: p.explain_queries])
    bm25_leg, sparse_leg, dense_leg = (r.bm25_leg(sample, p.leg_k), r.sparse_leg(sample, p.leg_k),
                                       r.dense_leg(sample, p.leg_k))
    ours_on_qdrant_legs = to_units(rrf([dense_leg, sparse_leg], k=p.rrf_k), r.unit_of)

    def mean_overlap(x: Run, y: Run, k: int) -> float:
        return pd.Series(overlap_at_k(x, y, k)).mean()

    return QdrantComparison(p.final_k, p.leg_k, len(sample), mean_overlap(a, b, p.final_k),
                            mean_overlap(a, b, p.leg_k),
                            mean_overlap(ours_on_qdrant_legs, {q: b[q] for q in sample}, p.final_k),
                            mean_overlap(sparse_leg, bm25_leg, p.final_k))


COMPARISON = "qdrant_comparison.json"  # in dp.retrieve_dir: the Qdrant comparison and its key


def _comparison(dp: DatasetPaths, searcher: _Searcher, result: RetrieveResult, queries: Mapping[str, str],
                p: RetrieveParams) -> QdrantComparison | None:
    """The Qdrant comparison (:func:`compare_qdrant`), read back when both hybrids' inputs and its own did not
    change (its key: both runs' keys, its parameters, the code), else computed."""
    if not {HYBRID, QDRANT_HYBRID} <= set(result.retrievals):
        return None
    result.qdrant_key = sha256_json({
        "runs": [runcache.key_of(result.keys[v]) for v in (HYBRID, QDRANT_HYBRID) if v in result.keys],
        "params": [p.explain_queries, p.final_k, p.leg_k, p.rrf_k], "code": runcache.code_version(QDRANT_HYBRID)})
    try:
        saved = json.loads((dp.retrieve_dir / COMPARISON).read_text(encoding="utf-8"))
        if p.reuse_runs and saved["key"] == result.qdrant_key:
            return QdrantComparison(**saved["comparison"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return compare_qdrant(searcher.get(), result.retrievals, queries, p)


def write(dp: DatasetPaths, result: RetrieveResult) -> list[Path]:
    """Write each searched variant's runs and record (:func:`write_runs`), the rewrite ledger and, last, the key
    file that lets the next run read them back (:func:`rerankeval.retrieve.runcache.store`); a variant read back
    gets its record only (its files are intact: their hashes were checked). The files written."""
    out: list[Path] = []
    for v, res in result.retrievals.items():
        if v in result.read_back:
            out.append(write_record(dp, res, seconds=result.read_back[v], read_back=True))
            continue
        out += write_runs(dp, res)
        ledger = None
        if v == HYBRID_REFORMULATE and result.ledger is not None:
            out.append(ledger := reformulate.write_ledger(dp, result.ledger))
        if v in result.keys:
            runcache.store(dp, v, result.keys[v], res.params, res.seconds, ledger=ledger,
                           llm_keys=result.llm_keys.get(v))
        else:
            runcache.forget(dp, v)
    if result.qdrant is not None and result.qdrant_key:
        out.append(atomic_write_json(dp.retrieve_dir / COMPARISON,
                                     {"key": result.qdrant_key, "comparison": asdict(result.qdrant)}))
    return out
