"""Stage 04's inputs written as stage 03 leaves them, for tests that rerank hand-made runs through ``rerank.run``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from rerankeval import rerank
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_jsonl
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
    atomic_write_jsonl(
        dp.chunks,
        [
            {"chunk_id": d, "unit_id": d, "source": d, "page": 1, "start": 0, "title": "", "text": t}
            for d, t in text.items()
        ],
    )
    atomic_write_jsonl(dp.queries, [{"_id": q, "text": t, "slices": {}} for q, t in queries.items()])
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


def make_dataset(tmp_path):
    src = tmp_path / "tinyds"
    src.mkdir()
    dp = resolve_dataset(str(src), load_settings())
    atomic_write_jsonl(
        dp.chunks,
        [
            {
                "chunk_id": c,
                "unit_id": u,
                "source": u.split("#")[0],
                "page": 1,
                "start": 0,
                "title": "",
                "text": t,
            }
            for c, u, t in CHUNKS
        ],
    )
    atomic_write_jsonl(dp.queries, [{"_id": q, "text": f"question {q}", "slices": {}} for q in ("q1", "q2", "q3")])
    runs.write_qrels({"q1": {"a.pdf#p1": 1}, "q2": {"c.pdf#p1": 1}, "q3": {"b.pdf#p1": 1}}, dp.qrels)
    order = ["b.pdf#p1#0", "a.pdf#p1#1", "b.pdf#p2#0", "a.pdf#p1#0", "a.pdf#p2#0", "c.pdf#p1#0"]
    chunk_run = {q: {c: 1.0 / (i + 1) for i, c in enumerate(order)} for q in ("q1", "q2", "q3")}
    unit_of = {c: u for c, u, _ in CHUNKS}
    runs.write_trec(chunk_run, dp.chunk_run_file("hybrid"), "hybrid")
    runs.write_trec(runs.to_units(chunk_run, unit_of), dp.run_file("hybrid"), "hybrid")
    return src, dp
