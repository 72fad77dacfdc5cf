"""Stage 04's inputs written as stage 03 leaves them, for tests that rerank hand-made runs through ``rerank.run``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from handmade import dataset_at, write_chunks, write_questions
from rerankeval import rerank
from rerankeval.core import runs
from rerankeval.core.paths import DatasetPaths, resolve_dataset
from rerankeval.core.settings import Settings, load_settings
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank.config import Params
from rerankeval.rerank.core import Result


def stage03(
    folder: Path, fused: runs.Run, queries: Mapping[str, str], texts: Mapping[str, Mapping[str, str]]
) -> DatasetPaths:
    """A dataset at ``folder`` whose hybrid run is ``fused``: each document is one chunk and one unit (as in a BEIR
    corpus, so no chunk run is needed), with its text from ``texts`` (qid -> docid -> text, the same for every
    query that has the document)."""
    folder.mkdir(parents=True, exist_ok=True)
    dp = resolve_dataset(str(folder), load_settings())
    text: dict[str, str] = {}
    for q, docs in texts.items():
        for d, t in docs.items():
            if text.setdefault(d, t) != t:
                raise ValueError(f"document {d!r} has two texts (query {q!r}): one text per document")
    write_chunks(dp, [(d, d, 1, t) for d, t in text.items()], source=lambda d: d)
    write_questions(dp, queries)
    runs.write_trec(fused, dp.run_file("hybrid"), "hybrid")
    return dp


def run_cached(
    dp: DatasetPaths, params: Params, settings: Settings, cache: LLMCache, *, progress: bool = False
) -> Result:
    """``rerank.run`` with its reply cache in ``cache``'s folder (``<cache folder>/llm``) and ``use_cache`` as
    ``cache.enabled``: the stage opens its own cache under ``dp.roots.cache``, so the test's folder is given there."""
    if cache.root.name != "llm" or not cache.write:
        raise ValueError(f"the stage's cache is <cache folder>/llm, written to: got {cache.root}")
    dp = replace(dp, roots=replace(dp.roots, cache=cache.root.parent))
    return rerank.run(dp, replace(params, use_cache=cache.enabled), settings, progress=progress)


def rerank_made(
    folder: Path,
    fused: runs.Run,
    queries: Mapping[str, str],
    texts: Mapping[str, Mapping[str, str]],
    params: Params,
    settings: Settings,
    cache: LLMCache,
    *,
    progress: bool = False,
) -> Result:
    """Stage 04 on a hand-made hybrid run (:func:`stage03` at ``folder``), through :func:`run_cached`."""
    return run_cached(stage03(folder, fused, queries, texts), params, settings, cache, progress=progress)


# two chunks per page unit; the chunk run decides which chunk's text represents the unit
CHUNKS = [
    ("a.pdf#p1#0", "a.pdf#p1", "alpha intro"),
    ("a.pdf#p1#1", "a.pdf#p1", "alpha GOLD answer"),
    ("a.pdf#p2#0", "a.pdf#p2", "alpha other"),
    ("b.pdf#p1#0", "b.pdf#p1", "beta text"),
    ("b.pdf#p2#0", "b.pdf#p2", "beta more"),
    ("c.pdf#p1#0", "c.pdf#p1", "gamma GOLD"),
]


def hand_made_hybrid(folder: Path, qids) -> DatasetPaths:
    """Stage 03's outputs for ``qids`` in a new dataset folder, on :data:`CHUNKS`: the queries judged on a.pdf#p1,
    c.pdf#p1 and b.pdf#p1 in turn, and one hybrid run (chunk and unit level), the same for every query."""
    dp = dataset_at(folder)
    write_chunks(dp, [(c, u, 1, t) for c, u, t in CHUNKS], source=lambda u: u.split("#")[0])
    write_questions(dp, qids)
    gold = ["a.pdf#p1", "c.pdf#p1", "b.pdf#p1"]
    runs.write_qrels({q: {gold[i % 3]: 1} for i, q in enumerate(qids)}, dp.qrels)
    order = ["b.pdf#p1#0", "a.pdf#p1#1", "b.pdf#p2#0", "a.pdf#p1#0", "a.pdf#p2#0", "c.pdf#p1#0"]
    chunk_run = {q: {c: 1.0 / (i + 1) for i, c in enumerate(order)} for q in qids}
    runs.write_trec(chunk_run, dp.chunk_run_file("hybrid"), "hybrid")
    runs.write_trec(runs.to_units(chunk_run, {c: u for c, u, _ in CHUNKS}), dp.run_file("hybrid"), "hybrid")
    return dp


def make_dataset(tmp_path):
    """:func:`hand_made_hybrid` for q1-q3 at ``tmp_path/tinyds``: the folder and the dataset."""
    src = tmp_path / "tinyds"
    return src, hand_made_hybrid(src, ("q1", "q2", "q3"))
