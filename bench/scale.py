"""Benchmark: stage 02 (without the encode) and every non-LLM variant of stage 03 at 5k-1M chunks, on the
default local path: the edge backend (Qdrant's engine in-process), through the project's own stage functions.

Corpora are built by repeating and perturbing SciFact (../shared/data/scifact): copy ``r`` of a document
drops and swaps words (some swapped in from other documents, some fused into new rare terms, so the
vocabulary keeps growing) and gets a perturbed copy of the document's real embedding
(``normalise(v + sigma * noise)``); only the SciFact documents and the queries are encoded, once, through the
project's embedding cache. Each size is a dataset folder with a chunk table (stage 01's output, written
directly), on which the child process runs:

- ``stage_02``: ``index.run`` then ``index.write`` as notebook 02 calls them (BM25, the shard filled
  and optimised, i.e. the HNSW graph built above Qdrant's indexing threshold, the recall@10 check on sampled
  queries); its embedder hands out the derived vectors by text, so ``index`` = ``stage_02`` less its
  ``embeddings`` step is 02 without the encode (the encode is ``bench/embed.py``'s subject);
- ``q_<variant>``: :meth:`rerankeval.retrieve.retriever.Retriever.search` for every variant that needs no model
  (legs not shared between variants: each is timed from scratch; the store opened, the query vectors and BM25's
  weight matrix built once before), at ``leg_k``; ``q_dense_default`` and
  ``q_dense_exact``: the dense leg with Qdrant's own choice (HNSW above the threshold) and exhaustively.

Peak memory per stage is the child's VmHWM after the stage, the high-water mark being reset before it
(``/proc/self/clear_refs``). The growth exponent of a stage is the slope of a least-squares line through
(log n, log seconds). Sizes run smallest first until the next one's predicted wall time (from the sizes done)
would pass ``--budget`` seconds or its predicted peak memory ``--mem-share`` of the memory available; larger
sizes, 1M included, are then extrapolated from the fit, and the JSON says which figures were measured and which
extrapolated.

    nice -n 10 python bench/scale.py [--sizes 5000,20000,50000,100000,200000,500000,1000000]
                                     [--budget 900] [--mem-share 0.5] [--queries 100] [--base-docs N]
                                     [--backend edge]
                                     [--resume results/bench/scale.json]

Writes results/bench/scale.json and prints ``index_exponent=<02-without-encode time exponent>`` last.
Skips with a message when ../shared/data/scifact is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scale_corpus import SIGMA, DerivedEmbedder, prepare_base, synth_corpus, write_dataset

from rerankeval.core import paths
from rerankeval.core.settings import load_settings
from rerankeval.corpus import beir

DEFAULT_SIZES = (5_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)
EXTRAPOLATE_TO = (100_000, 1_000_000, 10_000_000)
VARIANTS = (
    "vector",
    "bm25",
    "hybrid",
    "qdrant_hybrid",
    "hybrid_combsum",
    "hybrid_combmnz",
    "hybrid_dbsf",
    "qdrant_dbsf",
)
QUERY_STAGES = (*(f"q_{v}" for v in VARIANTS), "q_dense_default", "q_dense_exact")


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


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process, every thread (Qdrant's Rust threads too)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Stages:
    """Wall and CPU seconds, peak RSS (MiB) and the RSS rise above the stage's start (MiB) per named stage
    (CPU seconds do not grow with other processes' load the way wall seconds do)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, float]] = {}
        self.peak_reset = _reset_peak()

    def run(self, name: str, fn: Callable, *args, **kw):
        rss0 = _status_kib("VmRSS")
        _reset_peak()
        t, cpu = time.perf_counter(), _cpu_seconds()
        out = fn(*args, **kw)
        sec, cpu = time.perf_counter() - t, _cpu_seconds() - cpu
        hwm = _status_kib("VmHWM")
        self.rows[name] = {
            "seconds": sec,
            "cpu_seconds": cpu,
            "peak_mib": hwm / 1024,
            "rise_mib": max(hwm - rss0, 0) / 1024,
        }
        return out


def _variants(st: Stages, dp, emb, queries: dict[str, str], leg_k: int) -> dict:
    from rerankeval.core.settings import load_settings
    from rerankeval.index.qdrant import edge as qdrant_edge
    from rerankeval.retrieve.params import Params
    from rerankeval.retrieve.retriever import Retriever

    budget = {"leg_k": leg_k, "pool_k": Params().pool_k, "rrf_k": Params().rrf_k}  # stage 03's defaults
    r = st.run("open_retriever", Retriever, dp, load_settings(), embedder=emb, progress=False)
    with r:
        # not timed: open the store, memoise the query vectors, build BM25's weight matrix (once per process)
        r.search("vector", queries, **budget)
        r.search("bm25", queries, **budget)
        for v in VARIANTS:
            r._memo = {k: m for k, m in r._memo.items() if k[0] == "qvec"}  # every variant's legs from scratch
            st.run(f"q_{v}", r.search, v, queries, **budget)
        extra = {"retriever_dense_exact": bool(r._exact)}
        if r.info.backend == qdrant_edge.EDGE:
            qv = r._qvecs(queries)
            for name, exact in (("q_dense_default", False), ("q_dense_exact", True)):
                st.run(name, qdrant_edge.search_dense, r.client, list(queries), qv, leg_k, r._id_to_chunk, exact=exact)
    return extra


def _stage_02(dp, emb):
    """Stage 02 as notebook 02 runs it (the settings of the environment set by :func:`child`), manifest included."""
    from rerankeval import index
    from rerankeval.core.settings import load_settings

    result = index.run(dp, index.Params(), load_settings().model_copy(update={"progress": "off"}), embedder=emb)
    index.write(dp, result)
    return result


def child(n: int, backend: str, base: Path, leg_k: int, max_queries: int, tmp_root: str | None) -> dict:
    """One size: synthesise, write the chunk table, run stage 02 and every variant; per-stage figures."""
    from rerankeval.index.embed import Embedder, embeddings_root

    z = np.load(base, allow_pickle=False)
    texts, vecs = [str(t) for t in z["texts"]], z["vectors"]
    queries = dict(
        zip([str(q) for q in z["qids"]][:max_queries], [str(t) for t in z["qtexts"]][:max_queries], strict=True)
    )
    real = Embedder(progress=False, cache_root=embeddings_root(paths.Roots.of(load_settings()).cache))
    st = Stages()
    ids, docs, dense = st.run("synthesise", synth_corpus, texts, vecs, n)
    with tempfile.TemporaryDirectory(prefix="rerankeval-scale-", dir=tmp_root) as tmp:
        os.environ.update(
            {
                "RERANKEVAL_RESULTS": f"{tmp}/results",
                "RERANKEVAL_QDRANT_PATH": f"{tmp}/qdrant",
                "RERANKEVAL_QDRANT_BACKEND": backend,
            }
        )
        os.environ.pop("QDRANT_URL", None)
        dp = st.run("write_chunk_table", write_dataset, Path(tmp) / "src" / f"scale-{n}", ids, docs, queries)
        table = dict(zip(docs, dense, strict=True))
        table.update(zip(queries.values(), z["qvectors"][: len(queries)], strict=True))
        del docs, dense
        emb = DerivedEmbedder(real.key, real.model_id, table)
        info = st.run("stage_02", _stage_02, dp, emb).info
        del table
        extra = _variants(st, dp, emb, queries, leg_k)
        disk = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
    st.rows["index"] = {
        "seconds": info.seconds["total"] - info.seconds.get("embeddings", 0.0),
        "cpu_seconds": st.rows["stage_02"]["cpu_seconds"],  # with the (dict lookup) encode
        "peak_mib": st.rows["stage_02"]["peak_mib"],
    }
    return {
        "n": n,
        "backend": backend,
        "queries": len(queries),
        "vocab": info.vocab_size,
        "stages": st.rows,
        "stage_02_steps": info.seconds,
        "stage_02_actions": info.actions,
        "dense_search": info.dense_search,
        "peak_reset_supported": st.peak_reset,
        "disk_mib": disk / 2**20,
        **extra,
        "process_peak_mib": max(row["peak_mib"] for row in st.rows.values()),
    }


# ---------------------------------------------------------------- orchestration (parent side)
def run_child(n: int, args: argparse.Namespace, base: Path, timeout: float) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = Path(fh.name)
    cmd = [
        sys.executable,
        __file__,
        "--child",
        str(n),
        "--backend",
        args.backend,
        "--base",
        str(base),
        "--leg-k",
        str(args.leg_k),
        "--child-out",
        str(out),
        "--queries",
        str(args.queries),
    ]
    if args.tmp:
        cmd += ["--tmp", str(args.tmp)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"n": n, "backend": args.backend, "error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-5:]
        return {"n": n, "backend": args.backend, "error": f"exit {proc.returncode}: " + " | ".join(tail)}
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


def predict(done: list[dict], n: int, key: Callable[[dict], float]) -> float | None:
    """``key`` at size ``n`` from the sizes done: the power fit, or linear growth from a single size."""
    ok = [r for r in done if "stages" in r]
    if not ok:
        return None
    if len(ok) == 1:
        return key(ok[0]) * n / ok[0]["n"]
    return extrapolate([r["n"] for r in ok], [key(r) for r in ok], (n,))[str(n)]


def summarise(results: list[dict]) -> dict:
    """Per-stage seconds, ms per query and peaks by size, growth exponents and extrapolations."""
    ok = sorted((r for r in results if "stages" in r), key=lambda r: r["n"])
    if not ok:
        return {}
    ns = [r["n"] for r in ok]
    stages = list(ok[0]["stages"])
    secs = {s: [r["stages"][s]["seconds"] for r in ok] for s in stages}
    cpu = {s: [r["stages"][s].get("cpu_seconds") for r in ok] for s in stages}
    peaks = {s: [r["stages"][s]["peak_mib"] for r in ok] for s in stages}
    msq = {s: [1000 * r["stages"][s]["seconds"] / r["queries"] for r in ok] for s in QUERY_STAGES if s in secs}
    return {
        "sizes": ns,
        "seconds": secs,
        "cpu_seconds": cpu,
        "ms_per_query": msq,
        "peak_mib": peaks,
        "process_peak_mib": [r["process_peak_mib"] for r in ok],
        "disk_mib": [r["disk_mib"] for r in ok],
        "dense_search": [r["dense_search"] for r in ok],
        "time_exponent": {s: exponent(ns, v) for s, v in secs.items()},
        "cpu_time_exponent": {s: exponent(ns, v) for s, v in cpu.items()},
        "peak_exponent": {s: exponent(ns, v) for s, v in peaks.items()},
        **_graph_regime(ok, secs, cpu),
        "extrapolated_seconds": {s: extrapolate(ns, v) for s, v in secs.items()},
        "extrapolated_cpu_seconds": {s: extrapolate(ns, v) for s, v in cpu.items()},
        "extrapolated_ms_per_query": {s: extrapolate(ns, v) for s, v in msq.items()},
        "extrapolated_process_peak_mib": extrapolate(ns, [r["process_peak_mib"] for r in ok]),
    }


def _graph_regime(ok: list[dict], secs: dict[str, list], cpu: dict[str, list]) -> dict:
    """The exponents again over the sizes whose dense vectors Qdrant put in an HNSW graph (above its indexing
    threshold; below it nothing is built and the search is exact), so one regime's growth is not confused with
    the step between the two."""
    idx = [i for i, r in enumerate(ok) if (r.get("dense_search") or {}).get("mode") == "hnsw"]
    ns = [ok[i]["n"] for i in idx]
    return {
        "graph_sizes": ns,
        "time_exponent_graph": {s: exponent(ns, [v[i] for i in idx]) for s, v in secs.items()},
        "cpu_time_exponent_graph": {s: exponent(ns, [v[i] for i in idx]) for s, v in cpu.items()},
    }


def _mem_available_mib() -> float:
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("inf")


def _stop_reason(done: list[dict], n: int, elapsed: float, budget: float, mem_share: float) -> tuple[str | None, dict]:
    """Why size ``n`` is not run (its predicted wall time, or memory above ``mem_share`` of the memory
    available, does not fit), or None."""
    wall = predict(done, n, lambda r: r["child_wall_seconds"])
    peak = predict(done, n, lambda r: r["process_peak_mib"])
    pred = {"n": n, "predicted_wall_seconds": wall, "predicted_peak_mib": peak}
    if wall is not None and elapsed + wall > budget:
        return f"{n:,} chunks would take about {wall:.0f} s, past the {budget:.0f} s budget", pred
    if peak is not None and peak > mem_share * _mem_available_mib():
        return (
            f"{n:,} chunks would need about {peak:.0f} MiB, more than {mem_share:.0%} of the "
            f"{_mem_available_mib():.0f} MiB available",
            pred,
        )
    return None, pred


def _print_row(r: dict) -> None:
    if "error" in r:
        print(f"{r['n']:>8} ERROR {r['error']}", flush=True)
        return
    s, q, ds, steps = r["stages"], r["queries"], r["dense_search"], r["stage_02_steps"]
    print(
        f"{r['n']:>8} 02 w/o encode {s['index']['seconds']:7.1f} s ({s['index']['cpu_seconds']:.1f} cpu-s; bm25 "
        f"{steps['bm25']:.1f}, qdrant {steps.get('qdrant', 0):.1f}, recall check {steps.get('recall check', 0):.1f})"
        f"  dense {ds.get('mode')} recall@10 {ds.get('recall_at_10')} (eps {ds.get('recall_at_10_eps')})"
        f"  peak {r['process_peak_mib']:.0f} MiB  "
        "ms/query: " + " ".join(f"{k[2:]} {1000 * s[k]['seconds'] / q:.1f}" for k in QUERY_STAGES if k in s),
        flush=True,
    )


def write_report(out: Path, meta: dict, results: list[dict], wall: float) -> dict:
    """The JSON so far (rewritten after every child, so an interrupted run keeps its finished sizes)."""
    report = {
        **meta,
        "loadavg_after": os.getloadavg(),
        "wall_seconds": wall,
        "summary": summarise(results),
        "runs": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def orchestrate(args: argparse.Namespace) -> int:
    folder = paths.SHARED_DATA_DIR / "scifact"
    if not folder.is_dir() or beir.find_corpus(folder) is None:
        print(f"SKIP: {folder} is absent (this benchmark builds its corpora from SciFact in ../shared/data).")
        return 0
    sizes = sorted(int(s) for s in args.sizes.split(","))
    meta = {
        "sizes_asked": sizes,
        "backend": args.backend,
        "leg_k": args.leg_k,
        "sigma": SIGMA,
        "budget_seconds": args.budget,
        "mem_share": args.mem_share,
        "loadavg_before": os.getloadavg(),
        "cpus": os.cpu_count(),
        "mem_available_mib": _mem_available_mib(),
        "niceness": os.nice(0),
        "stopped": None,
    }
    t0 = time.perf_counter()
    results: list[dict] = []
    if args.resume:  # keep the sizes an earlier run measured (on the same base); run only the others
        old = json.loads(args.resume.read_text(encoding="utf-8"))
        results = [r for r in old["runs"] if "stages" in r]
        meta["resumed"] = {
            "from": str(args.resume),
            "sizes": [r["n"] for r in results],
            "wall_seconds": old["wall_seconds"],
            "stopped": old.get("stopped"),
        }
        sizes = [n for n in sizes if n not in meta["resumed"]["sizes"]]
    with tempfile.TemporaryDirectory(prefix="rerankeval-scale-base-") as tmp:
        base = Path(tmp) / "base.npz"
        meta["base"] = prepare_base(folder, base, args.queries, args.base_docs)
        print(f"base: {meta['base']}", flush=True)
        t0 = time.perf_counter()  # the budget covers the sizes, not the one-off encode of the base
        for n in sizes:
            reason, pred = _stop_reason(results, n, time.perf_counter() - t0, args.budget, args.mem_share)
            if reason:
                meta["stopped"] = {"reason": reason, **pred, "not_run": [m for m in sizes if m >= n]}
                print(f"stopped: {reason}; sizes from {n:,} on are extrapolated", flush=True)
                break
            results.append(run_child(n, args, base, args.timeout))
            _print_row(results[-1])
            write_report(args.out, meta, results, time.perf_counter() - t0)
    report = write_report(args.out, meta, results, time.perf_counter() - t0)
    return _print_summary(report, args.out)


def _at(s: dict, key: str, stage: str, n: int) -> tuple[float | None, str]:
    """``s[key][stage]`` at size ``n``: measured if ``n`` was run, else from the fit."""
    if n in s["sizes"]:
        return s[key][stage][s["sizes"].index(n)], "measured"
    return s[f"extrapolated_{key}"][stage].get(str(n)), "extrapolated"


def _print_summary(report: dict, out: Path) -> int:
    s = report["summary"]
    if not s:
        print("index_exponent=nan")
        return 1
    for n in (100_000, 1_000_000):
        sec, how = _at(s, "seconds", "index", n)
        cpu, _ = _at(s, "cpu_seconds", "index", n)
        ms = {k[2:]: _at(s, "ms_per_query", k, n)[0] for k in s["ms_per_query"]}
        msq = ", ".join(f"{k} {v:.1f}" for k, v in ms.items() if v is not None)
        if sec is not None and cpu is not None:
            print(f"{n:,} chunks ({how}): 02 without the encode {sec:.0f} s wall, {cpu:.0f} cpu-s; ms/query {msq}")
    peak_1m = (s.get("extrapolated_process_peak_mib") or {}).get("1000000")
    print(
        f"process peak MiB by size {s['process_peak_mib']}; 1M from the fit: "
        + ("fewer than two sizes" if peak_1m is None else f"{peak_1m:.0f}")
    )
    graph = s.get("graph_sizes")
    for key, sizes in (
        ("time_exponent", s["sizes"]),
        ("cpu_time_exponent", s["sizes"]),
        ("time_exponent_graph", graph),
        ("cpu_time_exponent_graph", graph),
    ):
        got = ", ".join(f"{k} {v:.2f}" for k, v in (s.get(key) or {}).items() if v is not None)
        print(f"{key} over {sizes}: {got or 'fewer than two sizes'}")
    print(f"wrote {out}")
    exp = s["time_exponent"].get("index")
    print("index_exponent=" + ("nan" if exp is None else f"{exp:.2f}"))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="comma-separated corpus sizes")
    ap.add_argument(
        "--backend",
        default="edge",
        choices=("edge", "client"),
        help="the Qdrant backend (default edge; client's local mode is ~27 ms per point)",
    )
    ap.add_argument("--queries", type=int, default=100, help="judged SciFact test queries searched per size")
    ap.add_argument("--leg-k", type=int, default=100, help="depth of every leg (the notebooks' leg_k)")
    ap.add_argument("--base-docs", type=int, default=None, help="use only N SciFact documents (cached first)")
    ap.add_argument(
        "--budget",
        type=float,
        default=900,
        help="wall seconds for all sizes (the next size runs only if its predicted time fits)",
    )
    ap.add_argument(
        "--mem-share",
        type=float,
        default=0.5,
        help="run a size only if its predicted peak memory "
        "is below this share of the memory available (the machine is shared; default 0.5)",
    )
    ap.add_argument("--timeout", type=float, default=3600, help="seconds allowed per size")
    ap.add_argument("--tmp", type=Path, default=None, help="where the children's dataset folders go")
    ap.add_argument("--out", type=Path, default=paths.Roots.of(load_settings()).results / "bench" / "scale.json")
    ap.add_argument("--resume", type=Path, metavar="JSON", help="keep the sizes of an earlier scale.json, run the rest")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--base", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        res = child(args.child, args.backend, args.base, args.leg_k, args.queries, str(args.tmp) if args.tmp else None)
        args.child_out.write_text(json.dumps(res), encoding="utf-8")
        return 0
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
