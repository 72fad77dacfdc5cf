"""How right 04's printed time is on a fresh machine: the first estimate, the revised one, and the wall time.

It runs stage 04 (the notebook's defaults: yes/no, ``pool_k`` 10) on the first ``--queries`` queries of a dataset
against the configured endpoint, or the local llama-server started through ``llm.server.ensure_endpoint``, with a
fresh temporary reply cache and no remembered rates (a fresh machine: the local server is probed, see
``rerankeval.llm.rates``; ``--keep-rates`` copies the rates this machine remembers instead). It records the first
printed expected time (a range when nothing is known), the revised time printed after the first calls, the wall
time of the stage's calls, and their ratios (issue 36's target: within 1.5x).

    python bench/plan_accuracy.py                      # 20 queries of the default dataset
    python bench/plan_accuracy.py --queries 5          # a quick check
    python bench/plan_accuracy.py --dataset scifact --queries 50

Needs ``results/<dataset>/runs/hybrid.trec`` (notebook 03); ``--pools overlap`` needs only 01's chunks: each
query's pool is the ``pool_k`` units whose best chunk shares most words with it (04's prompts, their shape and
length; what is relevant does not matter to the time). Writes ``results/bench/plan_accuracy.json``; the machine's
load average is recorded (other work on the machine slows the calls the plan measured first).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from rerankeval.core import progress
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import DEFAULT_DATASET, ROOT, DatasetPaths, resolve_dataset
from rerankeval.core.settings import load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.llm import server as llm_server
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank.config import Params
from rerankeval.rerank.core import Inputs, rerank, select_queries
from rerankeval.rerank.stage import load

REVISED = re.compile(r"revised: ~([\d,]+) s")


class Tee:
    """The terminal the stage prints its plan on, remembering each line and when it came."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.lines, self.t0 = out, [], time.monotonic()

    def write(self, text: str) -> int:
        self.lines.extend((time.monotonic() - self.t0, t) for t in text.splitlines() if t.strip())
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()

    def isatty(self) -> bool:
        return False


def overlap_inputs(dp: DatasetPaths, params: Params) -> Inputs:
    """04's inputs without 03: each query's pool is the units whose best chunk shares most words with it."""
    chunks, queries = corpus.load_chunks(dp), corpus.load_queries(dp)
    words = [set(t.lower().split()) for t in chunks.text]
    fused, texts, chunk_ids = {}, {}, {}
    for qid, text in queries.items():
        q = set(text.lower().split())
        best: dict[str, tuple[int, str, str]] = {}
        for (cid, unit, body), w in zip(
            chunks[["chunk_id", "unit_id", "text"]].itertuples(index=False), words, strict=True
        ):
            score = len(q & w)
            if unit not in best or score > best[unit][0]:
                best[unit] = (score, cid, body)
        top = sorted(best, key=lambda u: (-best[u][0], u))[: params.pool_k]
        fused[qid] = {u: 1.0 / (61 + i) for i, u in enumerate(top)}
        texts[qid] = {u: best[u][2] for u in top}
        chunk_ids[qid] = {u: best[u][1] for u in top}
    return Inputs(fused, queries, texts, select_queries(fused, queries, params.max_queries), chunk_ids)


def run(args: argparse.Namespace, env: dict[str, str], cache_root: Path, tee: Tee) -> dict[str, Any]:
    """Stage 04 on the first ``args.queries`` queries; the plan, the revised line and the times."""
    dp = resolve_dataset(args.dataset)
    params = Params(dataset=args.dataset, pool_k=args.pool_k, max_queries=args.queries)
    inputs = overlap_inputs(dp, params) if args.pools == "overlap" else load(dp, params)
    t0, tee.t0 = time.perf_counter(), time.monotonic()
    res = rerank(
        inputs,
        params.config(),
        pool_k=params.pool_k,
        stability=params.stability,
        settings=load_settings(env),
        cache=LLMCache(cache_root),
        progress=True,
    )
    wall = time.perf_counter() - t0
    plan = res.plan
    plan_at = next((t for t, line in tee.lines if "Plan:" in line), 0.0)  # after the probe, if any
    calls = wall - plan_at  # what the plan's expected time is about: its calls
    revised = next((float(m.group(1).replace(",", "")) for _, line in tee.lines if (m := REVISED.search(line))), None)
    first = plan["expected_s"]
    low, high = plan.get("expected_low_s"), plan.get("expected_high_s")
    return {
        "dataset": dp.name,
        "queries": args.queries,
        "pool_k": args.pool_k,
        "pools": args.pools,
        "endpoint": env.get("RERANK_ENDPOINT_ID") or env.get("OPENAI_BASE_URL", ""),
        "model": res.model,
        "fresh_calls": plan["fresh_calls"],
        "first_expected_s": first,
        "first_range_s": [low, high] if low is not None else None,
        "rate_source": plan["rate_source"],
        "revised_s": revised,
        "wall_s": round(wall, 2),
        "plan_printed_at_s": round(plan_at, 2),
        "calls_wall_s": round(calls, 2),
        "llm_fresh_s": round(float(res.ledger.fresh_seconds.sum()), 2),
        "first_over_wall": round(first / calls, 3) if first else None,
        "revised_over_wall": round(revised / calls, 3) if revised else None,
        "console": [f"{t:7.1f}s {line}" for t, line in tee.lines],
        "loadavg": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default=DEFAULT_DATASET)
    ap.add_argument("--queries", type=int, default=20, help="the first N queries (sorted qid)")
    ap.add_argument("--pool-k", type=int, default=Params().pool_k, help="notebook 04's default")
    ap.add_argument(
        "--pools",
        choices=("hybrid", "overlap"),
        default="hybrid",
        help="hybrid: 03's run (as 04); overlap: word overlap with 01's chunks (no 03 needed)",
    )
    ap.add_argument("--keep-rates", action="store_true", help="start from the rates this machine remembers")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "plan_accuracy.json")
    args = ap.parse_args(argv)
    tee = Tee(sys.stderr)
    progress.terminal = lambda: tee  # the chain's terminal: where the plan and the revised line are printed
    os.environ.setdefault(progress.MODE_ENV, "plain")
    with tempfile.TemporaryDirectory(prefix="plan-accuracy-") as tmp, llm_server.ensure_endpoint() as env:
        cache_root = Path(tmp) / "llm"
        remembered = LLMCache().rates_path
        if args.keep_rates and remembered.exists():
            shutil.copy(remembered, LLMCache(cache_root).rates_path)
        out = run(args, env, cache_root, tee)
    path = atomic_write_json(args.out, out)
    print(
        f"first estimate {out['first_expected_s']:.0f} s ({out['rate_source']}); revised {out['revised_s']} s; "
        f"calls {out['calls_wall_s']} s (stage {out['wall_s']} s); first/actual {out['first_over_wall']}, "
        f"revised/actual {out['revised_over_wall']}"
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
