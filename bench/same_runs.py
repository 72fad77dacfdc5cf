"""Behaviour unchanged: run the chain with an earlier commit's code and with this tree's, and compare every run file.

A refactor must not move a number. This checks out ``--base`` (a commit, tag or branch) into a temporary git
worktree, runs the chain (``python -m rerankeval.apps.chain --only ...``, ``rerankeval.chain`` in a tree from before
it moved) with each tree's own package (``PYTHONPATH``), each into
its own results folder and Qdrant store but with the same caches (embeddings, LLM replies): so a reply-cache key
that changed shows up as LLM calls in the second run, and a changed ranking as a differing run file.

    python bench/same_runs.py --base pre-restructure                     # default dataset, notebooks 01-04
    python bench/same_runs.py --base pre-restructure --dataset ../shared/data/scifact --only 01 02 03

Writes ``results/bench/same_runs.json``; the last line is ``identical=<same>/<compared>``. Exit 1 when a run file
differs or is missing on one side.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import ROOT


def run_chain(tree: Path, dataset: str, only: list[str], out: Path) -> dict[str, object]:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree / "lib"),
        "RERANKEVAL_RESULTS": str(out / "results"),
        "RERANKEVAL_QDRANT_PATH": str(out / "qdrant"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONHASHSEED": "0",
    }
    chain = "rerankeval.apps.chain" if (tree / "lib" / "rerankeval" / "apps" / "chain").is_dir() else "rerankeval.chain"
    cmd = [sys.executable, "-m", chain, "--dataset", dataset]
    for nb in only:
        cmd += ["--only", nb]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the chain failed in {tree} (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return {"seconds": round(time.perf_counter() - t0, 1), "last_line": proc.stdout.strip().splitlines()[-1]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the commit whose code is the reference")
    ap.add_argument("--head", default=None, help="a commit to compare instead of this working tree")
    ap.add_argument("--dataset", default="debian-manuals")
    ap.add_argument("--only", nargs="+", default=["01", "02", "03", "04"])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "same_runs.json")
    args = ap.parse_args(argv)
    dataset = str(Path(args.dataset).resolve()) if Path(args.dataset).exists() else args.dataset
    work = Path(tempfile.mkdtemp(prefix="same-runs-"))
    trees = {"base": work / "base-tree", "head": work / "head-tree" if args.head else ROOT}
    for side, rev in (("base", args.base), ("head", args.head)):
        if rev:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(trees[side]), rev], check=True
            )
    try:
        timing = {side: run_chain(trees[side], dataset, args.only, work / side) for side in ("base", "head")}
    finally:
        for tree in trees.values():
            if tree != ROOT:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    name = Path(dataset).name
    runs = {side: work / side / "results" / name / "runs" for side in ("base", "head")}
    files = sorted({p.name for side in runs.values() for p in side.glob("*.trec")})
    differ = [
        f
        for f in files
        if not (runs["base"] / f).exists()
        or not (runs["head"] / f).exists()
        or not filecmp.cmp(runs["base"] / f, runs["head"] / f, shallow=False)
    ]
    out = {
        "base": args.base,
        "head": args.head or "working tree",
        "dataset": name,
        "notebooks": args.only,
        "run_files": files,
        "differ": differ,
        "timing": timing,
        "work": str(work),
    }
    path = atomic_write_json(args.out, out)
    for side, t in timing.items():
        print(f"{side}: {t['last_line']}")
    print(f"differing run files: {', '.join(differ) or 'none'}")
    print(f"wrote {path}")
    print(f"identical={len(files) - len(differ)}/{len(files)}")
    return 1 if differ or not files else 0


if __name__ == "__main__":
    sys.exit(main())
