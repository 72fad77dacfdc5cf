"""The explorer's hand-built dataset (saved runs, ledger, no indexes), shared by the explorer's tests and the lab's."""

from __future__ import annotations

from handmade import dataset_at, write_pages, write_questions, write_rotated_runs
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.rerank.ledger import write_ledger

UNITS = [f"m.pdf#p{p}" for p in range(1, 6)]
TEXTS = [
    "The alpha configuration file lives in /etc/alpha.",
    "Beta upgrades <script>alert(1)</script> run nightly.",
    "Gamma threads are configured by GAMMA_WORKERS.",
    "Delta logs rotate weekly.",
    "Epsilon is unrelated.",
]


def _dataset(tmp_path):
    """Five one-chunk pages, three queries (q3 unjudged), hybrid/bm25 runs, a hybrid_rerank run and its ledger."""
    dp = dataset_at(tmp_path / "src" / "ex", qrels=True)
    write_pages(dp, UNITS, TEXTS)
    write_questions(dp, {"q1": "alpha configuration", "q2": "how do beta upgrades run", "q3": "what rotates weekly"})
    runs.write_qrels({"q1": {UNITS[0]: 2, UNITS[2]: 0}, "q2": {UNITS[1]: 1}}, dp.qrels)
    atomic_write_json(dp.corpus_stats, {"unit": "page", "split": "test"})
    write_rotated_runs(dp, ("q1", "q2", "q3"), UNITS, ("bm25", "hybrid"))
    hybrid = runs.read_trec(dp.run_file("hybrid"))
    reranked = {q: dict(reversed(list(d.items()))) for q, d in hybrid.items()}  # the pool reversed
    runs.write_trec(
        {q: {d: 1.0 / (i + 1) for i, d in enumerate(d)} for q, d in reranked.items()},
        dp.run_file("hybrid_rerank"),
        "hybrid_rerank",
    )
    rows = [
        {
            "qid": q,
            "pass": "main",
            "variant": "hybrid_rerank",
            "status": "repaired" if q == "q1" else "ok",
            "n_invalid": 1,
            "n_duplicate": 0,
            "n_missing": 1,
            "n_failed": 0,
            "retries": 2,
            "error": "",
            "llm_calls": 5,
            "cache_hits": 5,
            "latency_s": 1.25,
            "model": "fake-reranker",
        }
        for q in hybrid
    ]
    write_ledger(rows, dp.ledger)
    return dp
