"""Benchmark: the retrieval chain (index + every non-LLM variant) on synthetic corpora of 5k-100k documents.

Corpora are built by repeating and perturbing SciFact (../shared/data/scifact): copy ``r`` of a document
drops and swaps words (some swapped in from other documents, some fused into new rare terms, so the
vocabulary keeps growing) and gets a perturbed copy of the document's real embedding
(``normalise(v + sigma * noise)``); only the SciFact documents themselves are encoded, once, through the
project's embedding cache. The index and search work is real, through the project's modules:

- ``bm25_build``: :class:`rerankeval.index.bm25.BM25Index` (analysis + fast-path weight matrix);
- ``upsert``: sparse document vectors + the Qdrant collection filled, per backend: ``client``
  (:mod:`rerankeval.index.qdrant.store`, qdrant-client's embedded local mode on disk, as ``02-build-indexes``
  runs it) and ``edge`` (:mod:`rerankeval.index.qdrant.edge`, qdrant-edge-py, upsert + HNSW build);
- ``q_vector``, ``q_bm25``, ``q_hybrid`` (client-side RRF), ``q_qdrant_hybrid`` (Qdrant's RRF), and
  ``q_sparse`` (Qdrant's native sparse leg): every query searched at depth ``leg_k``.

Each (size, backend) runs in its own child process; peak memory per stage is the process's VmHWM after
the stage, the high-water mark being reset before it (``/proc/self/clear_refs``). The growth exponent of
a stage is the slope of a least-squares line through (log n, log seconds). ``index`` = ``bm25_build`` +
``upsert`` (the encode excluded: see ``bench/embed``).

    python bench/scale.py [--quick] [--sizes 5000,20000,50000,100000] [--backends client,edge]
                          [--client-max-size 20000] [--client-queries 10] [--queries 100] [--base-docs N]

Writes results/bench/scale.json (per backend: seconds, ms per query, peak MiB per stage, growth exponents,
power-law extrapolations to 1M and 10M documents; top-10 overlap of the two backends) and prints
``index_exponent=<index-time exponent of the backend measured over the widest size range>`` last.
Skips with a message when ../shared/data/scifact is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rerankeval.core import paths
from rerankeval.corpus import beir

DEFAULT_SIZES = (5_000, 20_000, 50_000, 100_000)
QUICK_SIZES = (5_000, 20_000)
BACKENDS = ("client", "edge")
SEED = 12
SIGMA = 0.35  # noise norm relative to the unit vector, for copies r >= 1
EXTRAPOLATE_TO = (1_000_000, 10_000_000)
QUERY_STAGES = ("q_vector", "q_bm25", "q_hybrid", "q_qdrant_hybrid", "q_sparse")


# ---------------------------------------------------------------- synthetic corpus
def base_texts(folder: Path) -> tuple[list[str], list[str]]:
    """SciFact (ids, texts) in id order, texts joined as the chunk table joins them (title, newline, body)."""
    docs = beir.read_corpus(beir.find_corpus(folder))
    ids = sorted(docs)
    return ids, [f"{docs[i]['title']}\n{docs[i]['text']}" if docs[i]["title"] else docs[i]["text"] for i in ids]


def pick_base(texts: list[str], limit: int | None, cached: set[str]) -> list[int]:
    """Positions of the base documents: all, or ``limit`` of them, those already embedded first."""
    from rerankeval.core.ioutil import sha256_text

    if limit is None or limit >= len(texts):
        return list(range(len(texts)))
    order = sorted(range(len(texts)), key=lambda i: (sha256_text(texts[i]) not in cached, i))
    return sorted(order[:limit])


def perturb(words: list[str], donor: list[str], rng: np.random.Generator) -> list[str]:
    """Drop ~15% of the words, swap ~10% for the donor's, fuse ~2% with their neighbour (a new term)."""
    u = rng.random(len(words))
    picks = rng.integers(len(donor), size=len(words)) if donor else None
    out = []
    for j, w in enumerate(words):
        if u[j] < 0.15:
            continue
        if u[j] < 0.25 and donor:
            w = donor[picks[j]]
        elif u[j] < 0.27 and j + 1 < len(words):
            w = w + words[j + 1]
        out.append(w)
    return out


def synth_corpus(texts: list[str], vecs: np.ndarray, n: int, seed: int = SEED) -> tuple[list[str], list[str],
                                                                                         np.ndarray]:
    """``n`` documents: copy 0 of every base document as is, later copies perturbed (text and vector)."""
    rng = np.random.default_rng(seed)
    nb = len(texts)
    words = [t.split() for t in texts]
    ids, out = [], []
    dense = np.empty((n, vecs.shape[1]), dtype=np.float32)
    for j in range(n):
        src, copy = j % nb, j // nb
        ids.append(f"d{j:07d}")
        if copy == 0:
            out.append(texts[src])
            dense[j] = vecs[src]
            continue
        out.append(" ".join(perturb(words[src], words[int(rng.integers(nb))], rng)))
        v = vecs[src] + SIGMA * rng.standard_normal(vecs.shape[1]).astype(np.float32) / np.sqrt(vecs.shape[1])
        dense[j] = v / np.linalg.norm(v)
    return ids, out, dense


# ---------------------------------------------------------------- measurement (child side)
def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class Stages:
    """Seconds, peak RSS (MiB) and the RSS rise above the stage's start (MiB) per named stage."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, float]] = {}
        self.peak_reset = _reset_peak()

    def run(self, name: str, fn: Callable, *args, **kw):
        rss0 = _status_kib("VmRSS")
        _reset_peak()
        t = time.perf_counter()
        out = fn(*args, **kw)
        sec = time.perf_counter() - t
        hwm = _status_kib("VmHWM")
        self.rows[name] = {"seconds": sec, "peak_mib": hwm / 1024, "rise_mib": max(hwm - rss0, 0) / 1024}
        return out


def _overlap(a: dict, b: dict, k: int) -> float:
    """Mean share of ``a``'s top ``k`` that is in ``b``'s top ``k`` (over queries with results in ``a``)."""
    vals = [len(set(list(a[q])[:k]) & set(list(b.get(q, {}))[:k])) / min(k, len(a[q])) for q in a if a[q]]
    return float(np.mean(vals)) if vals else float("nan")


def _store_ops(backend: str):
    if backend == "edge":
        from rerankeval.index.qdrant import edge as ops
    else:
        from rerankeval.index.qdrant import store as ops
    return ops


def _fill(backend: str, store, ids, dense, index) -> None:
    ops = _store_ops(backend)
    sparse = index.sparse_doc_vectors()
    if backend == "edge":
        ops.upsert_chunks(store, ids, ids, dense, sparse)
    else:
        ops.ensure_collection(store, "scale", dense.shape[1])
        ops.upsert_chunks(store, "scale", ids, ids, dense, sparse, progress=False)


def _queries(st: Stages, backend: str, store, index, qids, qtexts, qvecs, leg_k: int) -> dict:
    from rerankeval.core.runs import to_units
    from rerankeval.retrieve.fusion import rrf

    ops = _store_ops(backend)
    args = (store,) if backend == "edge" else (store, "scale")
    id_to_chunk = {ops.point_id(c): c for c in index.ids}
    unit_of = {c: c for c in index.ids}
    queries = dict(zip(qids, qtexts, strict=True))
    qsparse = [index.sparse_query_vector(t) for t in qtexts]
    dense = st.run("q_vector", ops.search_dense, *args, qids, qvecs, leg_k, id_to_chunk)
    lex = st.run("q_bm25", index.search, queries, leg_k)
    st.run("q_hybrid", lambda: rrf([to_units(dense, unit_of), to_units(lex, unit_of)]))
    st.run("q_qdrant_hybrid", ops.search_hybrid, *args, qids, qvecs, qsparse, leg_k=leg_k, limit=2 * leg_k,
           id_to_chunk=id_to_chunk)
    sparse = st.run("q_sparse", ops.search_sparse, *args, qids, qsparse, leg_k, id_to_chunk)
    return {"vector": dense, "sparse": sparse}


def child(n: int, backend: str, base: Path, leg_k: int, max_queries: int | None = None) -> dict:
    """One size on one backend: build, fill, search; per-stage figures (and top-10 runs for parity)."""
    z = np.load(base, allow_pickle=False)
    texts, vecs = [str(t) for t in z["texts"]], z["vectors"]
    qids, qtexts, qvecs = [str(q) for q in z["qids"]], [str(t) for t in z["qtexts"]], z["qvectors"]
    qids, qtexts, qvecs = qids[:max_queries], qtexts[:max_queries], qvecs[:max_queries]
    st = Stages()
    ids, docs, dense = st.run("synthesise", synth_corpus, texts, vecs, n)
    index = st.run("bm25_build", _build_bm25, ids, docs)
    del docs
    with tempfile.TemporaryDirectory(prefix="rerankeval-scale-") as tmp:
        if backend == "edge":
            from rerankeval.index.qdrant.edge import open_shard as opener

            cm = opener(Path(tmp) / "shard", dense.shape[1])
        else:
            from rerankeval.index.qdrant.store import open_client as opener

            cm = opener(path=Path(tmp) / "qdrant", url="")
        store = st.run("open", cm.__enter__)
        try:
            st.run("upsert", _fill, backend, store, ids, dense, index)
            shard = _shard_info(store) if backend == "edge" else {}
            runs = _queries(st, backend, store, index, qids, qtexts, qvecs, leg_k)
        finally:
            cm.__exit__(None, None, None)
        disk = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
    return {"n": n, "backend": backend, "queries": len(qids), "vocab": len(index.vocab), "stages": st.rows,
            "peak_reset_supported": st.peak_reset, "store_disk_mib": disk / 2**20, "shard": shard,
            "process_peak_mib": max(row["peak_mib"] for row in st.rows.values()),
            "runs_top10": {k: {q: list(r[q])[:10] for q in r} for k, r in runs.items()}}


def _shard_info(shard) -> dict:
    """Segments and indexed vectors (dense + sparse) of an edge shard: did the HNSW graph get built?"""
    info = shard.info()
    return {"segments": info.segments_count, "points": info.points_count,
            "indexed_vectors": info.indexed_vectors_count}


def _build_bm25(ids: list[str], docs: list[str]):
    from rerankeval.index.bm25 import BM25Index

    index = BM25Index.build(ids, docs)
    _ = index.weights  # the fast path's weight matrix is part of the build
    return index


# ---------------------------------------------------------------- orchestration (parent side)
def prepare_base(folder: Path, out: Path, n_queries: int, base_docs: int | None) -> dict:
    """Encode (or read from the embedding cache) the base SciFact documents and the first judged queries."""
    from rerankeval.core.ioutil import sha256_text
    from rerankeval.index.embed import Embedder

    _, texts = base_texts(folder)
    queries = beir.read_queries(folder / "queries.jsonl")
    judged = beir.read_qrels(folder / "qrels" / "test.tsv")
    qids = [q for q in sorted(queries) if q in judged][:n_queries]
    emb = Embedder(progress=True)
    cached = set(emb.cache.lookup({sha256_text(t) for t in texts}))
    texts = [texts[i] for i in pick_base(texts, base_docs, cached)]
    t = time.perf_counter()
    vecs = emb.encode(texts, desc="embedding SciFact (once, cached)")
    doc_stats = emb.stats
    qvecs = emb.encode([queries[q]["text"] for q in qids], desc="embedding queries")
    np.savez(out, texts=np.asarray(texts), vectors=vecs, qids=np.asarray(qids),
             qtexts=np.asarray([queries[q]["text"] for q in qids]), qvectors=qvecs)
    return {"base_docs": len(texts), "queries": len(qids), "dim": int(vecs.shape[1]),
            "encode_seconds": time.perf_counter() - t, "docs_encoded": doc_stats.encoded,
            "docs_cached": doc_stats.cached}


def run_child(n: int, backend: str, base: Path, leg_k: int, timeout: float, max_queries: int) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = Path(fh.name)
    cmd = [sys.executable, __file__, "--child", str(n), "--backend", backend, "--base", str(base),
           "--leg-k", str(leg_k), "--child-out", str(out), "--queries", str(max_queries)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"n": n, "backend": backend, "error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-5:]
        return {"n": n, "backend": backend, "error": f"exit {proc.returncode}: " + " | ".join(tail)}
    res = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    res["child_wall_seconds"] = wall
    return res


def power_fit(ns: list[int], ys: list[float]) -> tuple[float, float] | None:
    """Least-squares line through (log n, log y): (slope, intercept); None with fewer than two points."""
    pts = [(n, y) for n, y in zip(ns, ys, strict=True) if y and y > 0]
    if len(pts) < 2:
        return None
    slope, icpt = np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)
    return float(slope), float(icpt)


def exponent(ns: list[int], ys: list[float]) -> float | None:
    """The growth exponent: the slope of :func:`power_fit` (None with fewer than two positive points)."""
    fit = power_fit(ns, ys)
    return None if fit is None else fit[0]


def extrapolate(ns: list[int], ys: list[float], targets: tuple[int, ...] = EXTRAPOLATE_TO) -> dict[str, float]:
    """``y(n) = e^intercept * n^slope`` of :func:`power_fit` at each target size."""
    fit = power_fit(ns, ys)
    return {} if fit is None else {str(t): float(np.exp(fit[1]) * t ** fit[0]) for t in targets}


def summarise(results: list[dict], backends: list[str]) -> dict:
    """Per backend: per-stage seconds, ms per query, peaks and growth exponents; parity of the backends."""
    out: dict = {}
    for b in backends:
        ok = sorted((r for r in results if r.get("backend") == b and "stages" in r), key=lambda r: r["n"])
        if not ok:
            continue
        ns = [r["n"] for r in ok]
        for r in ok:
            r["stages"]["index"] = {"seconds": r["stages"]["bm25_build"]["seconds"]
                                    + r["stages"]["upsert"]["seconds"],
                                    "peak_mib": max(r["stages"]["bm25_build"]["peak_mib"],
                                                    r["stages"]["upsert"]["peak_mib"])}
        stages = list(ok[0]["stages"])
        out[b] = {
            "sizes": ns,
            "seconds": {s: [r["stages"][s]["seconds"] for r in ok] for s in stages},
            "ms_per_query": {s: [1000 * r["stages"][s]["seconds"] / r["queries"] for r in ok]
                             for s in QUERY_STAGES},
            "peak_mib": {s: [r["stages"][s]["peak_mib"] for r in ok] for s in stages},
            "process_peak_mib": [r["process_peak_mib"] for r in ok],
            "store_disk_mib": [r["store_disk_mib"] for r in ok],
            "time_exponent": {s: exponent(ns, [r["stages"][s]["seconds"] for r in ok]) for s in stages},
            "peak_exponent": {s: exponent(ns, [r["stages"][s]["peak_mib"] for r in ok]) for s in stages},
            "extrapolated_seconds": {s: extrapolate(ns, [r["stages"][s]["seconds"] for r in ok]) for s in stages},
            "extrapolated_ms_per_query": {s: extrapolate(ns, [1000 * r["stages"][s]["seconds"] / r["queries"]
                                                             for r in ok]) for s in QUERY_STAGES},
            "extrapolated_peak_mib": {s: extrapolate(ns, [r["stages"][s]["peak_mib"] for r in ok])
                                      for s in stages},
        }
    return out


def parity(results: list[dict]) -> dict:
    """Top-10 overlap of the edge backend with the client backend (exact dense search) per size."""
    by = {(r["n"], r["backend"]): r for r in results if "runs_top10" in r}
    out = {}
    for (n, b), r in sorted(by.items()):
        if b == "edge" and (n, "client") in by:
            c = by[(n, "client")]["runs_top10"]
            out[str(n)] = {leg: _overlap(c[leg], r["runs_top10"][leg], 10) for leg in r["runs_top10"]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="comma-separated corpus sizes")
    ap.add_argument("--quick", action="store_true",
                    help=f"sizes {QUICK_SIZES} only, the client backend at the first (a few minutes)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="client (qdrant-client) and/or edge")
    ap.add_argument("--queries", type=int, default=100, help="judged SciFact test queries searched per size")
    ap.add_argument("--leg-k", type=int, default=100, help="depth of every leg (the notebooks' leg_k)")
    ap.add_argument("--base-docs", type=int, default=None, help="use only the first N SciFact documents")
    ap.add_argument("--client-queries", type=int, default=10,
                    help="queries searched on the client backend (its sparse search scans every point)")
    ap.add_argument("--client-max-size", type=int, default=20_000,
                    help="largest size run on the client backend, 0 for no limit (its upsert commits point "
                         "by point, ~30 ms each here; larger sizes are extrapolated in the summary)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds allowed per (size, backend)")
    ap.add_argument("--out", type=Path, default=paths.results_dir() / "bench" / "scale.json")
    ap.add_argument("--resummarise", type=Path, metavar="JSON",
                    help="recompute the summary of a saved scale.json from its runs (no measuring)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--base", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        res = child(args.child, args.backend, args.base, args.leg_k, args.queries)
        args.child_out.write_text(json.dumps(res), encoding="utf-8")
        return 0
    if args.resummarise:
        report = json.loads(args.resummarise.read_text(encoding="utf-8"))
        report["summary"] = summarise(report["runs"], report["backends"])
        args.resummarise.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        _print_summary(report["summary"], report["parity_top10"])
        return 0
    return orchestrate(args)


def orchestrate(args: argparse.Namespace) -> int:
    folder = paths.SHARED_DATA_DIR / "scifact"
    if not folder.is_dir() or beir.find_corpus(folder) is None:
        print(f"SKIP: {folder} is absent (this benchmark builds its corpora from SciFact in ../shared/data).")
        return 0
    sizes = list(QUICK_SIZES) if args.quick else [int(s) for s in args.sizes.split(",")]
    if args.quick:
        args.client_max_size = QUICK_SIZES[0]
    backends = [b for b in args.backends.split(",") if b]
    if "edge" in backends and not _has_edge():
        print("note: qdrant-edge-py is not installed (pip install qdrant-edge-py==0.9.0); edge backend skipped")
        backends.remove("edge")
    meta = {"sizes": sizes, "backends": backends, "leg_k": args.leg_k, "sigma": SIGMA,
            "client_queries": args.client_queries, "client_max_size": args.client_max_size,
            "loadavg_before": os.getloadavg(), "cpus": os.cpu_count()}
    t0 = time.perf_counter()
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="rerankeval-scale-base-") as tmp:
        base = Path(tmp) / "base.npz"
        meta["base"] = prepare_base(folder, base, args.queries, args.base_docs)
        print(f"base: {meta['base']}", flush=True)
        for n in sizes:
            for b in backends:
                if b == "client" and args.client_max_size and n > args.client_max_size:
                    continue
                nq = min(args.queries, args.client_queries) if b == "client" else args.queries
                results.append(run_child(n, b, base, args.leg_k, args.timeout, nq))
                _print_row(results[-1])
                report = write_report(args.out, meta, results, backends, time.perf_counter() - t0)
    _print_summary(report["summary"], report["parity_top10"])
    print(f"wrote {args.out}")
    summ = report["summary"]
    if not summ:
        print("index_exponent=nan")
        return 1
    head = max(summ, key=lambda b: (len(summ[b]["sizes"]), b == "client"))  # the widest size range
    exp = summ[head]["time_exponent"]["index"]
    print(f"headline: index-time exponent of the {head} backend over {summ[head]['sizes']}")
    print("index_exponent=" + ("nan" if exp is None else f"{exp:.2f}"))
    return 0


def write_report(out: Path, meta: dict, results: list[dict], backends: list[str], wall: float) -> dict:
    """The JSON so far (rewritten after every child, so an interrupted run keeps its finished sizes)."""
    report = {**meta, "loadavg_after": os.getloadavg(), "wall_seconds": wall,
              "summary": summarise(results, backends), "parity_top10": parity(results),
              "runs": [{k: v for k, v in r.items() if k != "runs_top10"} for r in results]}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def _has_edge() -> bool:
    try:
        import qdrant_edge  # noqa: F401
    except ImportError:
        return False
    return True


def _print_row(r: dict) -> None:
    if "error" in r:
        print(f"{r['n']:>7} {r['backend']:<6} ERROR {r['error']}", flush=True)
        return
    s = r["stages"]
    q = r["queries"]
    print(f"{r['n']:>7} {r['backend']:<6} bm25 {s['bm25_build']['seconds']:7.1f} s  upsert "
          f"{s['upsert']['seconds']:7.1f} s  ms/query: " + " ".join(
              f"{k[2:]} {1000 * s[k]['seconds'] / q:.1f}" for k in QUERY_STAGES)
          + f"  peak {r['process_peak_mib']:.0f} MiB", flush=True)


def _print_summary(summary: dict, par: dict) -> None:
    for b, s in summary.items():
        ex = ", ".join(f"{k} {v:.2f}" for k, v in s["time_exponent"].items() if v is not None)
        print(f"{b}: time exponents: {ex}")
    for n, ov in par.items():
        print(f"edge vs client top-10 overlap at {n}: " + ", ".join(f"{k} {v:.3f}" for k, v in ov.items()))


if __name__ == "__main__":
    sys.exit(main())
