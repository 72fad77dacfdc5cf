"""Incomplete judgments (issue 34): how zero-fill nDCG@10, condensed nDCG'@10 and bpref rank systems when judgments
are hidden, and how many judgments the queue needs to settle the headline comparison against random and pool order.

    PYTHONPATH=lib nice -n 10 python bench/incomplete.py                    # Cranfield and SciFact (../shared/data)
    PYTHONPATH=lib nice -n 10 python bench/incomplete.py --datasets cranfield --reps 2 --keep 0.3
    PYTHONPATH=lib nice -n 10 python bench/incomplete.py --datasets --status     # only the explorer's status time

Per dataset (stage 01 must have run; skipped with a message otherwise):

- **Systems.** With stage 02's indexes (dense + BM25): the fusion points of the ``small`` sweep grid
  (``params/sweep.yaml``: method x rrf_k x weights x leg_k, through :class:`rerankeval.experiments.grid.Engine`) plus
  the two legs alone (``vector``, ``bm25``); the headline pair is ``hybrid`` (RRF k 60, leg_k 100) vs ``vector``.
  Without a dense index (``--bm25-only``, or no index built): two lexical legs, BM25 with stemming and stopwords and
  BM25 on raw tokens (``bm25_raw``, the cheap second system), fused over the same grid; the headline pair is then
  their RRF fusion vs ``bm25_raw`` (a stand-in for hybrid vs vector, said in the JSON).
- **Full judgments.** The qrels plus every unit of every system's top 10 graded from them (0 when the qrels do not
  list it: Cranfield and SciFact list relevant documents only, so the pool is what makes judged non-relevant units).
- **Hidden judgments.** ``--keep`` of the judgment rows kept uniformly at random (``--reps`` draws, seeded), the
  evaluated queries fixed (those with a relevant unit in the full judgments).
- **Kendall tau** (scipy, tau-b) between the system ranking by each metric under the kept judgments and the ranking by
  zero-fill nDCG@10 under the full ones.
- **Judgments to decide** the headline pair (:func:`rerankeval.evaluate.judging_queue.judgments_to_decide`; the hidden
  grades answer): the queue (adaptive, MTC weights), random order of the pair's unjudged units, and today's pool
  order (``review/unjudged.tsv``'s: by query, then units most variants share, then best rank; over vector, bm25 and
  hybrid). ``None``: never decided (a tie under full judgments).

``--status`` also times the explorer's status after a grade (``explore.next_to_judge``) on a private copy of Cranfield
(01-03 run there; embeddings come from the cache). Writes ``results/bench/incomplete.json`` (updated: a run of some
datasets keeps the others' figures).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import ROOT, resolve_dataset
from rerankeval.core.runs import Qrels, Run, ranked, to_units
from rerankeval.core.settings import load_settings
from rerankeval.evaluate import incomplete, judging_queue, judgments
from rerankeval.evaluate.bounds import top_k
from rerankeval.experiments import splits
from rerankeval.experiments.grid import Point, load_grid
from rerankeval.retrieve.fusion import fuse

SHARED = ROOT.parent / "shared" / "data"
K = 10
METRIC = f"ndcg@{K}"


# --------------------------------------------------------------------------- systems
def _cut(run: Run, k: int) -> Run:
    return {q: dict(ranked(d)[:k]) for q, d in run.items()}


def _fused(legs: tuple[Run, Run], p: Point, qids: Sequence[str]) -> Run:
    a, b = (_cut(leg, p.leg_k) for leg in legs)
    return fuse(
        [{q: a.get(q, {}) for q in qids}, {q: b.get(q, {}) for q in qids}],
        p.method,
        k=p.rrf_k,
        weights=p.weights,
        depth=K,
    )


def grid_systems(dp, queries: Mapping[str, str]) -> tuple[dict[str, Run], tuple[str, str], str]:
    """The small grid's fusion points and both legs, from the built indexes (dense + BM25)."""
    from rerankeval.experiments.grid import Engine

    grid, default = load_grid("small"), Point(leg_k=100)
    with Engine.open(dp, queries, max(grid.max_leg_k, 100)) as eng:
        dense, lex = eng.unit_legs(default)
        out = {"vector": _cut(dense, K), "bm25": _cut(lex, K)}
        for p in grid.points(default):
            out["hybrid" if p == default else p.name] = eng.run(p, list(queries), depth=K)[0]
    return out, ("hybrid", "vector"), "small grid fusion points over the dense and BM25 legs, plus each leg alone"


def bm25_systems(dp, queries: Mapping[str, str]) -> tuple[dict[str, Run], tuple[str, str], str]:
    """Two lexical legs (stemmed + stopwords, raw tokens) fused over the small grid: no dense index needed."""
    from rerankeval.corpus import contract as corpus
    from rerankeval.index.bm25 import Analyzer, BM25Index

    chunks = corpus.load_chunks(dp)
    unit_of = dict(zip(chunks.chunk_id, chunks.unit_id, strict=True))
    legs = []
    for an in (Analyzer(stopwords=None, stemmer=None), Analyzer()):
        index = BM25Index.build(list(chunks.chunk_id), list(chunks.text), analyzer=an)
        legs.append(to_units(index.search(queries, 100), unit_of))
    grid, default = load_grid("small"), Point(leg_k=100)
    out = {"bm25_raw": _cut(legs[0], K), "bm25": _cut(legs[1], K)}
    for p in grid.points(default):
        out["bm25_fused" if p == default else p.name] = _fused((legs[0], legs[1]), p, list(queries))
    how = (
        "BM25-only: BM25 on raw tokens ('bm25_raw', standing in for the dense leg) and BM25 with stemming and "
        "stopwords, fused over the small grid's fusion points; headline pair bm25_fused (RRF k 60) vs bm25_raw"
    )
    return out, ("bm25_fused", "bm25_raw"), how


# --------------------------------------------------------------------------- judgments
def full_judgments(systems: Mapping[str, Run], qrels: Qrels, qids: Sequence[str]) -> Qrels:
    """The qrels of ``qids`` plus every unit of every system's top k, graded from the qrels (0 when not listed)."""
    out = {q: dict(qrels.get(q, {})) for q in qids}
    for run in systems.values():
        for q in qids:
            for u in top_k(run.get(q, {}), K):
                out[q].setdefault(u, 0)
    return out


def hide(full: Qrels, keep: float, seed: int) -> Qrels:
    """``keep`` of the judgment rows, drawn uniformly at random (seeded)."""
    rows = sorted((q, u) for q, d in full.items() for u in d)
    kept = random.Random(seed).sample(rows, round(keep * len(rows)))
    out: Qrels = {q: {} for q in full}
    for q, u in kept:
        out[q][u] = full[q][u]
    return out


def taus(
    systems: Mapping[str, Run], full: Qrels, kept: Qrels, qids: Sequence[str], truth: Sequence[float]
) -> dict[str, float]:
    """Kendall tau-b of each metric's system ranking under ``kept`` against ``truth`` (zero-fill under full)."""
    from scipy.stats import kendalltau

    got = incomplete.robust_means(systems, kept, qids, METRIC).loc[list(systems)]
    return {m: float(kendalltau(got[m].to_numpy(), truth).statistic) for m in ("zero_fill", "condensed", "bpref")}


def effort(
    systems: Mapping[str, Run],
    pair: tuple[str, str],
    full: Qrels,
    kept: Qrels,
    qids: Sequence[str],
    seed: int,
    top: int,
) -> dict:
    """Judgments each order needs to decide ``pair`` (the full judgments answer)."""
    sub = {v: systems[v] for v in pair}
    third = [v for v in ("bm25",) if v in systems and v not in pair]
    pool_runs = {v: systems[v] for v in (*pair, *third)}
    pool = judgments.unjudged_pool(pool_runs, kept, qids, K)
    orders: dict[str, object] = {
        "queue": "queue",
        "random": "random",
        "pool": list(zip(pool.qid, pool.unit_id, strict=True)),
    }
    out: dict = {}
    for name, order in orders.items():
        j = judging_queue.Judging(sub, kept, qids, METRIC, [pair], top)
        if name == "queue":
            out["start_interval"] = [round(x, 4) for x in j.interval(pair)]
            out["pair_unjudged"] = sum(len(p.units) for p in j.pools.values())
        t0 = time.perf_counter()
        out[name] = judging_queue.judgments_to_decide(j, pair, lambda q, u: int(full[q].get(u, 0)), order, seed)
        out[f"{name}_s"] = round(time.perf_counter() - t0, 1)
        lo, hi = j.interval(pair)
        out[f"{name}_sign"] = 1 if lo > 0 else -1 if hi < 0 else 0
    return out


# --------------------------------------------------------------------------- one dataset
def dataset(name: str, keeps: Sequence[float], reps: int, bm25_only: bool) -> dict:
    path = SHARED / name
    if not path.is_dir():
        return {"skipped": f"{path} is absent (the shared data is not part of the repository)"}
    dp = resolve_dataset(str(path), load_settings())
    if not dp.chunks.is_file():
        return {
            "skipped": f"{name} has no corpus: run python -m rerankeval.apps.chain --dataset {path} --only 01 "
            "(and --only 02 for the dense systems)"
        }
    ev = splits.judged(splits.eval_split(dp))
    qids = sorted(ev.queries)
    t0 = time.perf_counter()
    dense = dp.index_manifest.is_file() and not bm25_only
    systems, pair, how = (grid_systems if dense else bm25_systems)(dp, ev.queries)
    build_s = time.perf_counter() - t0
    full = full_judgments(systems, ev.qrels, qids)
    top = judgments.grade_scale(ev.qrels)
    truth = incomplete.robust_means(systems, full, qids, METRIC).loc[list(systems), "zero_fill"].to_numpy()
    d_full = judging_queue.Judging({v: systems[v] for v in pair}, full, qids, METRIC, [pair], top).interval(pair)
    out = {
        "systems": len(systems),
        "systems_are": how,
        "queries": len(qids),
        "pair": list(pair),
        "full_judgments": sum(len(d) for d in full.values()),
        "top_grade": top,
        "systems_s": round(build_s, 1),
        "full_difference": round(d_full[0], 4),
        "keep": {},
    }
    for keep in keeps:
        rows = []
        for r in range(reps):
            kept = hide(full, keep, seed=1000 * r + int(keep * 100))
            row = {"tau": taus(systems, full, kept, qids, truth)}
            row.update(effort(systems, pair, full, kept, qids, seed=r, top=top))
            rows.append(row)
            print(
                f"{name} keep {keep:.0%} rep {r}: tau {row['tau']} queue {row['queue']} random {row['random']} "
                f"pool {row['pool']}",
                flush=True,
            )
        out["keep"][f"{keep:.2f}"] = _summary(rows)
    return out


def _mean(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(float(np.mean(got)), 1) if got else None


def _summary(rows: list[dict]) -> dict:
    tau = {m: round(float(np.mean([r["tau"][m] for r in rows])), 3) for m in rows[0]["tau"]}
    mean = {o: _mean([r[o] for r in rows]) for o in ("queue", "random", "pool")}
    ratio = {
        f"{o}_over_queue": (round(mean[o] / mean["queue"], 2) if mean[o] and mean["queue"] else None)
        for o in ("random", "pool")
    }
    return {"tau_vs_full_zero_fill_ndcg": tau, "judgments_to_decide_mean": mean, **ratio, "reps": rows}


# --------------------------------------------------------------------------- the explorer's status after a grade
def status_time(tmp: Path) -> dict:
    """Seconds of ``explore.next_to_judge`` after a grade, and of :func:`incomplete.first_screen`, on a private copy
    of Cranfield (stage 01 run there; its runs are vector, bm25 and hybrid of the built Cranfield indexes, written
    once and re-used; the copy's judgments file is reset each time)."""
    from rerankeval import corpus
    from rerankeval.apps import explore
    from rerankeval.core.runs import read_trec, write_trec
    from rerankeval.core.settings import load_settings

    src = SHARED / "cranfield"
    if not resolve_dataset(str(src), load_settings()).index_manifest.is_file():
        return {
            "skipped": f"{src} is absent or has no indexes (python -m rerankeval.apps.chain --dataset {src} --only 01 "
            "--only 02)"
        }
    ev = splits.judged(splits.eval_split(resolve_dataset(str(src), load_settings())))
    copy = tmp / "cranfield-status-bench"
    dp = resolve_dataset(str(copy), load_settings())
    names = ("vector", "bm25", "hybrid")
    if all(dp.run_file(v).is_file() for v in names):  # prepared by an earlier run: only the judgments are reset
        dp.judgments(judgments.split_of(dp)).unlink(missing_ok=True)
        three = {v: read_trec(dp.run_file(v)) for v in names}
    else:
        systems, _, _ = grid_systems(resolve_dataset(str(src), load_settings()), ev.queries)
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(src, copy)
        shutil.rmtree(dp.root, ignore_errors=True)
        corpus.write(dp, corpus.run(dp, corpus.Params(), load_settings()))
        three = {v: systems[v] for v in names}
        for v in names:
            write_trec(three[v], dp.run_file(v), v)
    t0 = time.perf_counter()
    got = explore.next_to_judge(dp, 5)
    cold = time.perf_counter() - t0
    after = []
    for _ in range(3):
        u = got.units.iloc[0]
        t0 = time.perf_counter()
        explore.judge(dp, u.qid, u.unit_id, 0)
        got = explore.next_to_judge(dp, 5)
        after.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    screen = incomplete.first_screen(three, ev.qrels, sorted(ev.queries), baseline="vector", k=K)
    return {
        "dataset": "cranfield (a private copy, 225 queries; runs vector, bm25, hybrid)",
        "first_status_s": round(cold, 2),
        "status_after_grade_s": [round(x, 2) for x in after],
        "status": got.status,
        "first_screen_s": round(time.perf_counter() - t0, 1),
        "first_screen_comparisons": [c["sentence"] for c in screen["comparisons"]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="*", default=["cranfield", "scifact"], help="none: only --status")
    ap.add_argument("--keep", nargs="+", type=float, default=[0.1, 0.3, 0.5])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bm25-only", nargs="*", default=[], help="datasets to run with the lexical systems only")
    ap.add_argument("--status", action="store_true", help="also time the explorer's status after a grade")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "incomplete.json")
    args = ap.parse_args(argv)
    out = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    out.update({"load_1min_at_start": round(os.getloadavg()[0], 2), "cores": os.cpu_count()})
    out.setdefault("datasets", {})
    for name in args.datasets:
        out["datasets"][name] = got = dataset(name, args.keep, args.reps, name in args.bm25_only)
        if "skipped" in got:
            print(f"SKIP {name}: {got['skipped']}")
        atomic_write_json(args.out, out)  # each dataset saved as soon as it is measured
    if args.status:
        out["status"] = status_time(ROOT / "results" / "bench" / "tmp")
        print(f"status after a grade: {out['status']}")
    out["load_1min_at_end"] = round(os.getloadavg()[0], 2)
    atomic_write_json(args.out, out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
