"""The explorer's hand-built dataset (saved runs, ledger, no indexes), shared by the explorer's tests and the lab's."""

from __future__ import annotations

from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl
from rerankeval.core.paths import resolve_dataset
from rerankeval.core.settings import load_settings
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
    (tmp_path / "src" / "ex" / "qrels").mkdir(parents=True)
    dp = resolve_dataset(str(tmp_path / "src" / "ex"), load_settings())
    atomic_write_jsonl(
        dp.chunks,
        [
            {"chunk_id": f"{u}#c0", "unit_id": u, "source": "m.pdf", "page": i + 1, "start": 0, "title": "", "text": t}
            for i, (u, t) in enumerate(zip(UNITS, TEXTS, strict=True))
        ],
    )
    atomic_write_jsonl(
        dp.queries,
        [
            {"_id": "q1", "text": "alpha configuration", "slices": {}},
            {"_id": "q2", "text": "how do beta upgrades run", "slices": {}},
            {"_id": "q3", "text": "what rotates weekly", "slices": {}},
        ],
    )
    runs.write_qrels({"q1": {UNITS[0]: 2, UNITS[2]: 0}, "q2": {UNITS[1]: 1}}, dp.qrels)
    atomic_write_json(dp.corpus_stats, {"unit": "page", "split": "test"})
    unit_of = {f"{u}#c0": u for u in UNITS}
    chunk_run = {
        q: {f"{UNITS[(i + j) % 5]}#c0": 1.0 / (j + 1) for j in range(5)} for i, q in enumerate(("q1", "q2", "q3"))
    }
    for v in ("bm25", "hybrid"):
        runs.write_trec(chunk_run, dp.chunk_run_file(v), v)
        runs.write_trec(runs.to_units(chunk_run, unit_of), dp.run_file(v), v)
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
