"""A dataset with one chunk per page, three queries (q3 unjudged) and two runs over the pages, for the tests of
judgments recorded while exploring (evaluate.judgments) and of stale grades."""

from __future__ import annotations

from handmade import dataset_at, write_pages, write_questions, write_rotated_runs
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json

UNITS = [f"m.pdf#p{p}" for p in range(1, 6)]


def _dataset(tmp_path):
    """Chunks (one per page), three queries (q3 unjudged) and two runs over the pages."""
    dp = dataset_at(tmp_path / "src" / "jd", qrels=True)
    write_pages(dp, UNITS, [f"page {i + 1} about topic {i}" for i in range(len(UNITS))])
    write_questions(dp, ("q1", "q2", "q3"))
    runs.write_qrels({"q1": {UNITS[0]: 2}, "q2": {UNITS[1]: 1}}, dp.qrels)
    atomic_write_json(dp.corpus_stats, {"unit": "page", "split": "test"})
    write_rotated_runs(dp, ("q1", "q2"), UNITS, ("hybrid", "bm25"))
    for v in ("hybrid", "bm25"):
        atomic_write_json(dp.variant_record(v), {"variant": v, "leg_k": 5, "pool_k": 3, "rrf_k": 60, "queries": 3})
    return dp
