"""Stage 03 (retrieve): every retrieval variant behind one signature.

The stage (notebook 03), through its face :mod:`rerankeval.retrieve`::

    from rerankeval import retrieve
    result = retrieve.run(dp, retrieve.Params(variants=["bm25", "hybrid"]), settings)   # searches, writes nothing
    retrieve.write(dp, result)                         # run files, records, the rewrite ledger, the keys

Each variant is fetched (:func:`fetch`): its key (:mod:`rerankeval.retrieve.runkey`), its saved runs read back
when the key did not change (:mod:`rerankeval.retrieve.runstore`), else searched (:mod:`rerankeval.retrieve.search`);
the walk of a parameter goes one way, stage -> runkey -> runstore -> search -> retriever, and none of them calls
back. One variant over the built indexes, written by the same :func:`write`::

    with Retriever(dp, settings) as r:   # rerankeval.retrieve.retriever
        res = r.search("hybrid", queries, leg_k=100, pool_k=10, rrf_k=60)   # -> Retrieval(variant, run, ...)
    write(dp, Result(retrievals={"hybrid": res}))

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

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.names import CROSS_ENCODER, HYBRID, HYBRID_REFORMULATE, QDRANT_HYBRID
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run, write_trec
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.retrieve import cross_encoder, qdrant_compare, reformulate, runkey, runstore, search, variants
from rerankeval.retrieve.params import Params
from rerankeval.retrieve.qdrant_compare import QdrantComparison
from rerankeval.retrieve.retriever import Retrieval
from rerankeval.retrieve.search import Searcher

if TYPE_CHECKING:
    from rerankeval.llm.cache import LLMCache


@dataclass
class Fetched:
    """One variant as :func:`fetch` got it: its runs (``retrieval``; None: skipped, ``skipped`` says why), read
    back or searched (``note``), the key parts :func:`write` saves (None: not to be read back), the seconds of the
    search that made a run read back, the rewrite ledger and the LLM cache keys of its replies."""

    retrieval: Retrieval | None = None
    note: str = ""
    skipped: str = ""
    parts: dict[str, Any] | None = None
    read_back: float | None = None
    ledger: pd.DataFrame | None = None
    llm_keys: list[str] | None = None


@dataclass
class Result:
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
        return pd.DataFrame(
            [
                {
                    "variant": v,
                    "seconds": round(res.seconds, 2),
                    "read back": v in self.read_back,
                    "units per query (mean)": sum(map(len, res.run.values())) / max(1, len(res.run)),
                    "chunks per query (mean)": sum(map(len, res.chunk_run.values())) / max(1, len(res.chunk_run)),
                    "run file": str(dp.run_file(v).relative_to(dp.root)),
                }
                for v, res in self.retrievals.items()
            ]
        )

    def add(self, v: str, got: Fetched) -> None:
        """Put variant ``v`` as :func:`fetch` got it (read back, searched or skipped)."""
        if got.retrieval is None:
            self.skipped[v] = got.skipped
            return
        self.retrievals[v], self.reuse[v] = got.retrieval, got.note
        if got.parts is not None:
            self.keys[v] = got.parts
        if got.read_back is not None:
            self.read_back[v] = got.read_back
        if got.ledger is not None:
            self.ledger = got.ledger
        if got.llm_keys is not None:
            self.llm_keys[v] = got.llm_keys


def run(dp: DatasetPaths, params: Params, settings: Settings, *, cache: LLMCache | None = None) -> Result:
    """Search each of ``params.variants`` for the judged queries of ``dp``, in order; writes nothing (:func:`write`).

    A variant whose inputs did not change since :func:`write` saved its run is read back instead (:func:`fetch`;
    ``reuse_runs=False`` searches every one). ``cross_encoder`` is skipped (with the reason in ``skipped``) when no
    weights are on disk; ``hybrid_reformulate`` asks the LLM of ``settings`` (the reply cache ``cache``, None: the
    one under ``dp.roots.cache``) and falls back to ``hybrid`` without one. ``settings`` also name the Qdrant store
    and the configured cross-encoder: nothing below reads the environment."""
    from rerankeval.llm.cache import LLMCache

    cache = cache if cache is not None else LLMCache.under(dp.roots.cache)
    queries = corpus.load_queries(dp)
    result = Result()
    inputs = runkey.Inputs.of(dp, queries, settings)
    with Searcher(dp, settings) as searcher:
        for v in params.variants:
            result.add(v, fetch(dp, searcher, v, queries, params, inputs, cache=cache))
        result.qdrant, result.qdrant_key = comparison(dp, searcher, result, queries, params)
    return result


def fetch(
    dp: DatasetPaths,
    searcher: Searcher,
    v: str,
    queries: Mapping[str, str],
    p: Params,
    inputs: runkey.Inputs,
    *,
    cache: LLMCache,
) -> Fetched:
    """``v``'s runs: read back when its key did not change since :func:`write` saved them (and ``p.reuse_runs``),
    else searched (:func:`rerankeval.retrieve.search.search`) on the settings of ``searcher``."""
    settings, extra = searcher.settings, None
    if v == CROSS_ENCODER:
        extra = cross_encoder.identity(cross_encoder.model_name(p.cross_encoder_model, settings), dp.roots.cache)
        if extra is None:
            return Fetched(skipped=f"Skipping {v}: {cross_encoder.NOT_ON_DISK}")
    elif v == HYBRID_REFORMULATE:
        extra = runkey.rewrite_identity(settings)
    budget = {
        "leg_k": p.leg_k,
        "pool_k": p.pool_k,
        "rrf_k": p.rrf_k,
        "weights": None,
        "threshold": p.reformulate_threshold,
        "guard_k": p.reformulate_guard_k,
    }
    parts = runkey.key_parts(inputs, v, budget, extra)
    why = "reuse_runs is off"
    if p.reuse_runs:
        saved = runstore.read_back(dp, v, parts, queries, p.budget().record(), cache=cache)
        if saved.retrieval is not None:
            back = saved.searched_seconds
            return Fetched(saved.retrieval, "unchanged, read back", parts=parts, read_back=back, ledger=saved.ledger)
        why = saved.reason
    found = search.search(searcher, v, queries, p, cache=cache)
    if found.retrieval is None:
        return Fetched(skipped=found.skipped)
    out = Fetched(found.retrieval, parts=parts, ledger=found.ledger)
    if v == HYBRID_REFORMULATE:
        why = why if extra is not None else "no LLM model named"
        out.llm_keys, not_saved = runkey.rewrite_replies(found.ledger, queries, settings)
        if out.llm_keys is None:
            out.parts, why = None, f"{why}; not saved for reading back: {not_saved}"
    out.note = f"searched ({why})"
    return out


def comparison(
    dp: DatasetPaths, searcher: Searcher, result: Result, queries: Mapping[str, str], p: Params
) -> tuple[QdrantComparison | None, str | None]:
    """(the Qdrant comparison, its key): read back when both hybrids' keys and its own parameters did not change,
    else computed (:func:`rerankeval.retrieve.qdrant_compare.compare_qdrant`); (None, None) unless both hybrids ran."""
    if not {HYBRID, QDRANT_HYBRID} <= set(result.retrievals):
        return None, None
    key = runkey.comparison_key(result.keys, p, dp.roots.cache)
    saved = runstore.read_comparison(dp, key) if p.reuse_runs else None
    if saved is not None:
        return saved, key
    return qdrant_compare.compare_qdrant(searcher.get(), result.retrievals, queries, p), key


def write(dp: DatasetPaths, result: Result) -> list[Path]:
    """Write each searched variant's runs (``dp.run_file``: units, ``dp.chunk_run_file``: chunks, full depth) and
    record (``dp.variant_record``), the rewrite ledger and, last, the key file that lets the next run read them back
    (:func:`rerankeval.retrieve.runstore.store`); a variant read back gets its record only (its files are intact:
    their hashes were checked). The files written."""
    out: list[Path] = []
    for v, res in result.retrievals.items():
        if v in result.read_back:
            out.append(_write_record(dp, res, seconds=result.read_back[v], read_back=True))
            continue
        out += [write_trec(res.run, dp.run_file(v), tag=v), write_trec(res.chunk_run, dp.chunk_run_file(v), tag=v)]
        _write_record(dp, res)
        ledger = None
        if v == HYBRID_REFORMULATE and result.ledger is not None:
            out.append(ledger := reformulate.write_ledger(dp, result.ledger))
        if v in result.keys:
            runstore.store(
                dp, v, result.keys[v], res.params, res.seconds, ledger=ledger, llm_keys=result.llm_keys.get(v)
            )
        else:
            runstore.forget(dp, v)
    if result.qdrant is not None and result.qdrant_key:
        out.append(runstore.store_comparison(dp, result.qdrant_key, result.qdrant))
    return out


def _write_record(dp: DatasetPaths, res: Retrieval, *, seconds: float | None = None, read_back: bool = False) -> Path:
    """``dp.variant_record(variant)``: the parameters, the search's wall ``seconds`` (default ``res.seconds``; a run
    read back keeps those of the search that made it, ``read_back`` true) and the query count."""
    record = variants.REGISTRY.get(res.variant, variants.Variant).record(res.params)
    seconds = res.seconds if seconds is None else seconds
    return atomic_write_json(
        dp.variant_record(res.variant),
        {
            "variant": res.variant,
            **res.params,
            **record,
            "seconds": round(seconds, 3),
            "queries": len(res.run),
            **({"read_back": True} if read_back else {}),
        },
    )
