"""A dataset with one chunk per page, three queries (q3 unjudged) and two runs over the pages, for the tests of
judgments recorded while exploring (evaluate.judgments) and of stale grades."""

from __future__ import annotations

from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl
from rerankeval.core.paths import resolve_dataset
from rerankeval.core.settings import load_settings

UNITS = [f"m.pdf#p{p}" for p in range(1, 6)]


def _dataset(tmp_path):
    """Chunks (one per page), three queries (q3 unjudged) and two runs over the pages."""
    (tmp_path / "src" / "jd" / "qrels").mkdir(parents=True)
    dp = resolve_dataset(str(tmp_path / "src" / "jd"), load_settings())
    atomic_write_jsonl(
        dp.chunks,
        [
            {
                "chunk_id": f"{u}#c0",
                "unit_id": u,
                "source": "m.pdf",
                "page": i + 1,
                "start": 0,
                "title": "",
                "text": f"page {i + 1} about topic {i}",
            }
            for i, u in enumerate(UNITS)
        ],
    )
    atomic_write_jsonl(dp.queries, [{"_id": q, "text": f"question {q}", "slices": {}} for q in ("q1", "q2", "q3")])
    runs.write_qrels({"q1": {UNITS[0]: 2}, "q2": {UNITS[1]: 1}}, dp.qrels)
    atomic_write_json(dp.corpus_stats, {"unit": "page", "split": "test"})
    chunk_run = {q: {f"{UNITS[(i + j) % 5]}#c0": 1.0 / (j + 1) for j in range(5)} for i, q in enumerate(("q1", "q2"))}
    unit_of = {f"{u}#c0": u for u in UNITS}
    for v in ("hybrid", "bm25"):
        runs.write_trec(chunk_run, dp.chunk_run_file(v), v)
        runs.write_trec(runs.to_units(chunk_run, unit_of), dp.run_file(v), v)
        atomic_write_json(dp.variant_record(v), {"variant": v, "leg_k": 5, "pool_k": 3, "rrf_k": 60, "queries": 3})
    return dp
