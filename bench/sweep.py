"""Sweep speed (issue 24): fusion points per second on SciFact's train queries, old per-point path vs the vectorised
one (and that they give identical per-query values), and the wall time of each grid of params/sweep.yaml, warm.

    PYTHONPATH=lib nice -n 10 python bench/sweep.py                       # SciFact (../shared/data/scifact)
    PYTHONPATH=lib nice -n 10 python bench/sweep.py --grids small large --old-sample 40

Needs SciFact's corpus and indexes (``python -m rerankeval.apps.chain --dataset ../shared/data/scifact --only 01 --only
02``); skips with a message otherwise. "Warm" means the caches on disk are warm (embeddings, corpus, indexes) and the
grid is run a second time in this process by :func:`rerankeval.experiments.sweep.run` (a fresh engine: the legs are
searched again, from the embedding cache). Writes ``results/bench/sweep.json``; the last line is ``name=value ...``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import ROOT, resolve_dataset
from rerankeval.core.settings import load_settings
from rerankeval.experiments import grid as gridmod
from rerankeval.experiments import splits, sweep
from rerankeval.experiments.grid import columns

DEFAULT_DATASET = ROOT.parent / "shared" / "data" / "scifact"


def fusion_points(grid: gridmod.Grid, leg_k: int) -> list[gridmod.Point]:
    """The grid's fusion points (no BM25 or chunking point: those re-search a leg)."""
    default = gridmod.Point(leg_k=leg_k)
    return [p for p in grid.points(default) if p.bm25_params == default.bm25_params and not p.chunk_size]


def sample(points: list, n: int) -> list:
    """``n`` points spread evenly over the list (every method is in it when n >= the number of methods)."""
    if n >= len(points):
        return list(points)
    step = len(points) / n
    return [points[int(i * step)] for i in range(n)]


def points_speed(dp, grid: gridmod.Grid, leg_k: int, final_k: int, old_sample: int) -> dict:
    """Fusion points per second on the train queries, both paths, and whether their per-query values agree."""
    train, evaluated = splits.train_split(dp), splits.judged(splits.eval_split(dp))
    if train is None:
        raise SystemExit(f"{dp.name} has no train split (qrels/train.tsv): points_per_s is measured on train queries")
    points = fusion_points(grid, leg_k)
    cols = columns(final_k, grid.pool_k)
    with gridmod.Engine.open(
        dp, {**train.queries, **evaluated.queries}, max(grid.max_leg_k, leg_k), load_settings()
    ) as eng:
        t0 = time.perf_counter()
        for which in ("dense", "bm25"):
            eng.leg(which, points[0])
        legs_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        fast, _ = gridmod.score_points(eng, points, train.qids, train.qrels, cols)
        fast_s = time.perf_counter() - t0
        some = sample(points, old_sample)
        t0 = time.perf_counter()
        slow, _ = gridmod.score_points(eng, some, train.qids, train.qrels, cols, vectorised=False)
        slow_s = time.perf_counter() - t0
    mine = fast[fast.point.isin({p.name for p in some})].reset_index(drop=True)
    try:
        pd.testing.assert_frame_equal(mine, slow.reset_index(drop=True), check_exact=True, check_dtype=False)
        identical, diff = True, ""
    except AssertionError as exc:
        identical, diff = False, str(exc)[:500]
    return {
        "train_queries": len(train.qids),
        "fusion_points": len(points),
        "legs_s": round(legs_s, 2),
        "new_seconds": round(fast_s, 2),
        "points_per_s": round(len(points) / fast_s, 1),
        "old_sample_points": len(some),
        "old_seconds": round(slow_s, 2),
        "old_points_per_s": round(len(some) / slow_s, 2),
        "speedup": round(len(points) / fast_s * slow_s / len(some), 1),
        "identical": identical,
        "identical_rows_compared": len(slow),
        "difference": diff,
    }


def grid_wall(dp, name: str, leg_k: int, final_k: int) -> dict:
    """Wall seconds of stage 06 on grid ``name``: a first run (warms what a fresh process loads), then a timed one."""
    params = sweep.SweepParams(dataset=str(dp.source), grid=name, leg_k=leg_k, final_k=final_k)
    t0 = time.perf_counter()
    sweep.run(dp, params, load_settings())
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = sweep.run(dp, params, load_settings())
    warm = time.perf_counter() - t0
    return {
        "points": len(res.points),
        "first_s": round(first, 1),
        "warm_s": round(warm, 1),
        "legs_s": round(res.seconds["legs"], 1),
        "points_s": round(res.seconds["points"], 1),
        "chosen": res.tuning.chosen if res.tuning else {},
        "blend": sweep.blend_sentence(res),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default=str(DEFAULT_DATASET))
    ap.add_argument("--grids", nargs="+", default=["small", "large"])
    ap.add_argument("--old-sample", type=int, default=40, help="fusion points timed on the old per-point path")
    ap.add_argument("--leg-k", type=int, default=100)
    ap.add_argument("--final-k", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "sweep.json")
    args = ap.parse_args(argv)
    if not Path(args.dataset).is_dir():
        print(f"SKIP: {args.dataset} is absent; this benchmark times the sweep on SciFact's train queries.")
        return 0
    dp = resolve_dataset(args.dataset, load_settings())
    if not dp.index_manifest.is_file():
        print(
            f"SKIP: {dp.name} is not prepared ({dp.index_manifest} is missing): run python -m rerankeval.apps.chain "
            f"--dataset {args.dataset} --only 01 --only 02 first."
        )
        return 0
    large = gridmod.load_grid("large")
    out: dict = {"dataset": dp.name, "load_1min_at_start": round(os.getloadavg()[0], 2), "cores": os.cpu_count()}
    out.update(points_speed(dp, large, args.leg_k, args.final_k, args.old_sample))
    print(
        f"fusion points on {out['train_queries']} train queries: {out['points_per_s']}/s vectorised "
        f"({out['fusion_points']} points in {out['new_seconds']} s) vs {out['old_points_per_s']}/s per point "
        f"({out['old_sample_points']} points); identical: {out['identical']}",
        flush=True,
    )
    out["grids"] = {}
    for name in args.grids:
        out["grids"][name] = g = grid_wall(dp, name, args.leg_k, args.final_k)
        print(
            f"grid {name}: {g['points']} points, warm {g['warm_s']} s (first {g['first_s']} s; legs {g['legs_s']} s, "
            f"points {g['points_s']} s)",
            flush=True,
        )
    out["large_grid_warm_s"] = out["grids"].get("large", {}).get("warm_s")
    out["load_1min_at_end"] = round(os.getloadavg()[0], 2)
    out["note"] = "timed on a shared 2-core machine under load (other jobs running), with nice -n 10"
    atomic_write_json(args.out, out)
    print(f"wrote {args.out}")
    print(
        f"points_per_s={out['points_per_s']} old_points_per_s={out['old_points_per_s']} speedup={out['speedup']} "
        f"large_grid_warm_s={out['large_grid_warm_s']} identical={out['identical']}"
    )
    return 0 if out["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
