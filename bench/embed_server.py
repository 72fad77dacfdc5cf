"""Encoding through a real embeddings server: throughput at 1, 2 and 4 concurrent requests, and agreement with the
in-process encoder.

Starts Infinity (``make embed-server`` installs it once, in its own venv) on the bundled all-MiniLM-L6-v2 folder
(:mod:`rerankeval.index.embed_server`), encodes SciFact documents (synthetic texts without ``../shared/data``)
in-process once, then through the server once per concurrency level, each into an empty cache
(:class:`rerankeval.index.embed_remote.RemoteEmbedder`, ``EMBED_BATCH`` texts per request). Agreement: the lowest
cosine between a served and an in-process vector, and how many queries get the same top 10 from both.

    python bench/embed_server.py                                   # 1,000 texts, 100 queries, batch 32, c = 1,2,4
    python bench/embed_server.py --texts 300 --queries 50          # a short run
    python bench/embed_server.py --base-url http://gpu:7997/v1 --model all-MiniLM-L6-v2   # your own server

Writes ``results/bench/embed_server.json`` with the machine's load average (on a shared 2-core machine the server and
this client compete for the same cores: timings are upper bounds, and concurrency cannot add cores).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import random
import sys
import tempfile
import time

import numpy as np

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import ROOT, SHARED_DATA_DIR, Roots
from rerankeval.core.settings import Settings, load_settings
from rerankeval.index import embed, embed_server
from rerankeval.index.embed_remote import RemoteEmbedder

WORDS = "package install system file configuration server network user kernel boot disk mount service log".split()


def texts_and_queries(n: int, nq: int, seed: int = 0) -> tuple[list[str], list[str], str]:
    """``n`` SciFact documents (title and abstract) and ``nq`` of its queries, else synthetic ones; and the source."""
    folder = SHARED_DATA_DIR / "scifact"
    if (folder / "corpus.jsonl.gz").is_file() and (folder / "queries.jsonl").is_file():
        with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
            docs = [json.loads(line) for _, line in zip(range(n), fh, strict=False)]
        qs = [json.loads(line)["text"] for line in (folder / "queries.jsonl").read_text().splitlines()[:nq]]
        return [f"{d.get('title', '')}. {d['text']}" for d in docs], qs, "scifact"
    rng = random.Random(seed)
    synth = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 180))) for _ in range(n)]
    return synth, [" ".join(rng.sample(WORDS, 4)) for _ in range(nq)], "synthetic"


def top10(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    return np.argsort(-(q @ d.T), axis=1, kind="stable")[:, :10]


def run_remote(
    base_url: str, model: str, texts: list[str], batch: int, concurrency: int
) -> tuple[float, RemoteEmbedder, np.ndarray]:
    """Seconds to encode ``texts`` through the server into an empty cache, the encoder and the vectors."""
    s = Settings(
        embed_base_url=base_url, embed_model=model, embed_batch=batch, embed_concurrency=concurrency, embed_timeout=600
    )
    with tempfile.TemporaryDirectory(prefix="bench-embed-server-") as tmp:
        remote = RemoteEmbedder(s, progress=False, cache_root=tmp)
        t0 = time.perf_counter()
        vecs = remote.encode(texts)
        return time.perf_counter() - t0, remote, vecs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--base-url", default=None, help="an embeddings server of yours (default: start Infinity here)")
    ap.add_argument("--model", default=embed_server.SERVED_NAME, help="the model name that server serves")
    args = ap.parse_args(argv)
    texts, queries, source = texts_and_queries(args.texts, args.queries)
    with tempfile.TemporaryDirectory(prefix="bench-embed-local-") as tmp:
        local = embed.Embedder(cache_root=tmp, progress=False)
        t0 = time.perf_counter()
        d_local = local.encode(texts)
        local_s = time.perf_counter() - t0
        q_local = local.encode(queries)
    out: dict = {
        "texts": len(texts),
        "queries": len(queries),
        "source": source,
        "batch": args.batch,
        "server": args.base_url or f"infinity-emb {embed_server.VERSION}, torch, cpu, this machine",
        "model": args.model,
        "loadavg_before": list(os.getloadavg()),
        "in_process_texts_per_s": round(len(texts) / local_s, 1),
        "runs": [],
    }
    server = (
        contextlib.nullcontext(args.base_url)
        if args.base_url
        else embed_server.serve(Roots.of(load_settings()).cache, batch_size=args.batch)
    )
    with server as base_url:
        for c in (int(x) for x in args.concurrency.split(",")):
            secs, remote, d_remote = run_remote(base_url, args.model, texts, args.batch, c)
            q_remote = remote.encode(queries)
            cos = np.sum(np.vstack([d_local, q_local]) * np.vstack([d_remote, q_remote]), axis=1)
            same = int((top10(q_remote, d_remote) == top10(q_local, d_local)).all(axis=1).sum())
            out["runs"].append(
                {
                    "concurrency": c,
                    "seconds": round(secs, 2),
                    "texts_per_s": round(len(texts) / secs, 1),
                    "min_cosine": round(float(cos.min()), 6),
                    "same_top10_queries": same,
                }
            )
            print(
                f"concurrency {c}: {len(texts) / secs:.1f} texts/s, min cosine {cos.min():.6f}, same top 10 for "
                f"{same}/{len(queries)} queries",
                flush=True,
            )
    out["loadavg_after"] = list(os.getloadavg())
    path = atomic_write_json(ROOT / "results" / "bench" / "embed_server.json", out)
    print(f"in-process: {out['in_process_texts_per_s']} texts/s; wrote {path}")
    best = max(out["runs"], key=lambda r: r["texts_per_s"])
    print(f"embed_server_texts_per_s={best['texts_per_s']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
