"""Stage 02 through a real embeddings server gives the same runs as in-process encoding (issue 36).

Copies stage 01's outputs of a dataset (``results/<dataset>/corpus``) into a temporary results folder, starts Infinity
on the bundled all-MiniLM-L6-v2 (:mod:`rerankeval.index.embed_server`, ``make embed-server`` installs it), builds
02's indexes with ``EMBED_BASE_URL`` pointing at it and an empty cache (``RERANKEVAL_CACHE`` in the scratch folder,
so the server encodes every chunk), runs 03's variants that need no LLM, and compares each run file with
``results/<dataset>/runs/<variant>.trec`` (and ``runs/chunks/``): byte-identical, else how many queries have the
same top 10, the same whole ranking, and the largest score difference. It also gives the lowest cosine between the
served and the in-process vector of every chunk and query. The control (``--no-control`` skips it) builds the same
in-process in a second scratch folder from the machine's embedding cache, so a difference between the saved runs
and today's code shows as such, not as the server's.

    python bench/embed_server_runs.py                               # the default dataset
    python bench/embed_server_runs.py --variants vector,hybrid --no-control

Writes ``results/bench/embed_server_runs.json`` (never anything under ``results/<dataset>/``) with the 1-minute load
average before and after; the last line is ``identical=<byte-identical>/<compared> same_top10=<queries>/<queries>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from rerankeval import corpus, index, retrieve
from rerankeval.core import progress
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.names import BM25, HYBRID, QDRANT_HYBRID, VECTOR
from rerankeval.core.paths import DEFAULT_DATASET, ROOT, DatasetPaths, Roots, resolve_dataset
from rerankeval.core.runs import read_trec
from rerankeval.core.settings import load_settings
from rerankeval.index import embed_server
from rerankeval.index.embed import Embedder, embeddings_root

VARIANTS = (VECTOR, BM25, HYBRID, QDRANT_HYBRID)  # 03's variants without an LLM or cross-encoder weights


def scratch(dp: DatasetPaths, work: Path) -> dict[str, str]:
    """A results folder under ``work`` holding only stage 01's outputs of ``dp``; the variables that point at it."""
    root = work / "results" / dp.name
    shutil.copytree(dp.corpus_dir, root / "corpus")
    shutil.copy(dp.source_record, root / dp.source_record.name)
    return {"RERANKEVAL_RESULTS": str(work / "results"), "RERANKEVAL_QDRANT_PATH": str(work / "qdrant")}


def resolve_dataset_in(work: Path, dataset: str) -> DatasetPaths:
    """``dataset``'s paths with its results in the scratch folder ``work`` (what :func:`scratch` made)."""
    with mock.patch.dict(os.environ, {"RERANKEVAL_RESULTS": str(work / "results")}):
        return resolve_dataset(dataset, load_settings())


def build(dataset: str, variants: list[str], env: dict[str, str]) -> dict[str, Any]:
    """02 and 03 of ``dataset`` with ``env`` set: the encoder, its counts and seconds, the runs' folder."""
    with mock.patch.dict(os.environ, env):
        settings = load_settings()
        dp = resolve_dataset(dataset, settings)
        t0 = time.perf_counter()
        built = index.run(dp, index.Params(dataset=dataset), settings)  # the encoder of EMBED_BASE_URL, if set
        index.write(dp, built)
        t02 = time.perf_counter() - t0
        t0 = time.perf_counter()
        retrieve.write(dp, retrieve.run(dp, retrieve.Params(variants=variants, reuse_runs=False), settings))
        info = built.info  # its steps: "embeddings" is the chunks' encode ("encoded N, cached M", or "cached")
        encode_s = info.seconds.get("embeddings", 0.0)
        sent = not info.actions.get("embeddings", "").startswith("cached")
        return {
            "encoder": info.embedder.get("describe"),
            "stage02_s": round(t02, 1),
            "stage03_s": round(time.perf_counter() - t0, 1),
            "chunks": info.n_chunks,
            "chunks_encode": info.actions.get("embeddings"),
            "chunks_encode_s": round(encode_s, 1),
            "chunks_per_s": round(info.n_chunks / encode_s, 1) if sent and encode_s else None,
            "runs": str(dp.runs_dir),
        }


def compare(saved: Path, new: Path) -> dict[str, Any]:
    """Byte-identical? Else the queries with the same top 10 and whole ranking, and the largest score difference."""
    if not saved.is_file() or not new.is_file():
        return {"missing": str(saved if not saved.is_file() else new)}
    a, b = read_trec(saved), read_trec(new)
    qs = sorted(set(a) | set(b))
    common = [(q, d) for q in qs for d in a.get(q, {}) if d in b.get(q, {})]
    return {
        "byte_identical": saved.read_bytes() == new.read_bytes(),
        "queries": len(qs),
        "same_top10": sum(list(a.get(q, {}))[:10] == list(b.get(q, {}))[:10] for q in qs),
        "same_ranking": sum(list(a.get(q, {})) == list(b.get(q, {})) for q in qs),
        "max_score_diff": max((abs(a[q][d] - b[q][d]) for q, d in common), default=0.0),
    }


def compare_all(saved: DatasetPaths, runs: Path, variants: list[str]) -> dict[str, Any]:
    """:func:`compare` of each variant's unit and chunk run files."""
    return {
        f"{level}{v}": compare(saved.runs_dir / f"{level}{v}.trec", runs / f"{level}{v}.trec")
        for v in variants
        for level in ("", "chunks/")
    }


def cosines(dp: DatasetPaths, env: dict[str, str]) -> dict[str, Any]:
    """The lowest cosine between the served (from the scratch cache: no text is sent again) and the in-process
    vector (the machine's cache) of every chunk and query."""
    texts = list(corpus.contract.chunk_texts(dp).values()) + list(corpus.contract.load_queries(dp).values())
    local = Embedder(progress=False, cache_root=embeddings_root(dp.roots.cache)).encode(texts)
    with mock.patch.dict(os.environ, env):
        settings = load_settings()
        served = index.open_embedder(None, settings=settings, progress=False, cache=Roots.of(settings).cache)
        served = served.encode(texts)
    cos = np.sum(local * served, axis=1)
    return {"texts": len(texts), "min_cosine": round(float(cos.min()), 6), "mean_cosine": round(float(cos.mean()), 6)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default=DEFAULT_DATASET)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="03's variants compared (no LLM needed)")
    ap.add_argument("--batch", type=int, default=None, help="EMBED_BATCH (default: the setting's, 64)")
    ap.add_argument("--no-control", action="store_true", help="skip the in-process build of the same")
    args = ap.parse_args(argv)
    variants = args.variants.split(",")
    os.environ.setdefault(progress.MODE_ENV, "plain")
    settings = load_settings()
    progress.configure(settings)
    dp = resolve_dataset(args.dataset, settings)
    batch = args.batch or settings.embed_batch
    out: dict[str, Any] = {"dataset": dp.name, "variants": variants, "batch": batch, "saved_runs": str(dp.runs_dir)}
    out["loadavg_before"] = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="embed-server-runs-") as tmp:
        work = Path(tmp)
        server_env = {**scratch(dp, work / "server"), "RERANKEVAL_CACHE": str(work / "server" / "cache")}
        with embed_server.serve(dp.roots.cache, batch_size=batch) as base_url:
            server_env.update(EMBED_BASE_URL=base_url, EMBED_MODEL=embed_server.SERVED_NAME, EMBED_BATCH=str(batch))
            out["server"] = {
                "what": f"infinity-emb {embed_server.VERSION}, torch, cpu, this machine",
                **build(args.dataset, variants, server_env),
            }
            out["server"]["loadavg_after"] = list(os.getloadavg())
            out["vectors"] = cosines(dp, server_env)
        out["server_vs_saved"] = compare_all(dp, Path(out["server"]["runs"]), variants)
        if not args.no_control:
            out["in_process"] = build(args.dataset, variants, scratch(dp, work / "local"))
            out["in_process"]["loadavg_after"] = list(os.getloadavg())
            out["in_process_vs_saved"] = compare_all(dp, Path(out["in_process"]["runs"]), variants)
            local = resolve_dataset_in(work / "local", args.dataset)
            out["server_vs_in_process"] = compare_all(local, Path(out["server"]["runs"]), variants)
    out["loadavg_after"] = list(os.getloadavg())
    path = atomic_write_json(ROOT / "results" / "bench" / "embed_server_runs.json", out)
    for name in ("server_vs_saved", "in_process_vs_saved", "server_vs_in_process"):
        for run, c in out.get(name, {}).items():
            print(f"{name:>20} {run:>22}: " + ", ".join(f"{k} {v}" for k, v in c.items()))
    print(
        f"server: {out['server']['chunks_encode']} chunks at {out['server']['chunks_per_s']} texts/s; vectors "
        f"against in-process: {out['vectors']}"
    )
    units = [c for r, c in out["server_vs_saved"].items() if not r.startswith("chunks/") and "queries" in c]
    print(f"wrote {path}")
    print(
        f"identical={sum(c['byte_identical'] for c in units)}/{len(units)} "
        f"same_top10={sum(c['same_top10'] for c in units)}/{sum(c['queries'] for c in units)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
