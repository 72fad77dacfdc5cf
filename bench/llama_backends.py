"""Which local llama.cpp server to start: the build for this CPU, the same build with ``--no-repack`` (the crash
fallback), or the prebuilt portable server of the ``xllamacpp`` wheel — timed pair by pair on the same prompts.

All servers run at once, each alone while it answers (one request at a time, in rotating order), so each sees
the same background load: the per-prompt ratios hold on a noisy machine where back-to-back runs do not.
The prompts are the reranker's own yes/no prompts (query + passage clipped to ``max_passage_chars``) from the
default dataset's hybrid run, plus long prompts for the prompt rate; every prompt is new to every server
(``cache_prompt`` off), so nothing is served from a prompt cache.

    python bench/llama_backends.py                      # 30 yes/no prompts, 4 long ones
    python bench/llama_backends.py --prompts 60 --backends build,wheel

Needs ``results/<dataset>/runs/hybrid.trec`` (notebook 03). Writes ``results/bench/llama_backends.json``; the last
line is ``name=value`` (the wheel's median time per yes/no prompt over the build's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import ROOT, Roots, resolve_dataset
from rerankeval.core.settings import load_settings
from rerankeval.llm import local_server
from rerankeval.llm import server as llm_server
from rerankeval.rerank import prompts, stage
from rerankeval.rerank.config import Params

BACKENDS = {  # name -> (backend, no_repack)
    "build": ("build", False),
    "build-no-repack": ("build", True),
    "wheel": ("wheel", False),
}


def chat(base: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    body = {"messages": messages, "max_tokens": 1, "temperature": 0, "cache_prompt": False}
    req = urllib.request.Request(
        f"{base}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        reply = json.loads(r.read())
    t = reply.get("timings", {})
    return {"wall_s": time.perf_counter() - t0, "prompt_n": t.get("prompt_n"), "prompt_ms": t.get("prompt_ms")}


def prompt_set(dataset: str, n: int, n_long: int, chars: int) -> tuple[list[list[dict[str, str]]], list[Any]]:
    dp = resolve_dataset(dataset, load_settings())
    inputs = stage.load(dp, Params(pool_k=10))
    queries, texts = inputs.queries, inputs.texts
    short = []
    for qid in inputs.qids:
        for text in texts[qid].values():
            short.append(prompts.yesno(queries[qid], prompts.clip(text, chars), False))
            if len(short) == n:
                break
        if len(short) == n:
            break
    pool = [t for q in texts.values() for t in q.values()]
    long = [
        [{"role": "user", "content": f"Run {i}. Summarise:\n" + " ".join(pool[i * 40 : (i + 1) * 40])[:6000]}]
        for i in range(n_long)
    ]
    return short, long


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    tps = [r["prompt_n"] / (r["prompt_ms"] / 1000) for r in rows if r["prompt_ms"]]
    return {
        "n": len(rows),
        "median_wall_s": round(statistics.median(r["wall_s"] for r in rows), 3),
        "median_prompt_tps": round(statistics.median(tps), 1) if tps else None,
        "prompt_tokens": sum(r["prompt_n"] or 0 for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="debian-manuals")
    ap.add_argument("--prompts", type=int, default=30, help="yes/no prompts (the stage's calls)")
    ap.add_argument("--long", type=int, default=4, help="long prompts (about 1,500 tokens) for the prompt rate")
    ap.add_argument("--backends", default=",".join(BACKENDS), help=f"comma list of {list(BACKENDS)}")
    ap.add_argument("--max-passage-chars", type=int, default=Params.max_passage_chars)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "llama_backends.json")
    args = ap.parse_args(argv)
    names = [b for b in args.backends.split(",") if b]
    short, long = prompt_set(args.dataset, args.prompts, args.long, args.max_passage_chars)
    servers: dict[str, local_server.LocalServer] = {}
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {n: {"yesno": [], "long": []} for n in names}
    settings = load_settings()
    try:
        for name in names:
            backend, no_repack = BACKENDS[name]
            server_bin, model = llm_server.setup_paths(
                backend=backend, model=settings.local_model, cache=Roots.of(settings).cache
            )
            servers[name] = local_server.LocalServer(server_bin, model, no_repack=no_repack)
            servers[name].start()
        for kind, items in (("yesno", short), ("long", long)):
            for i, messages in enumerate(items):
                order = names[i % len(names) :] + names[: i % len(names)]  # rotate who goes first
                for name in order:
                    rows[name][kind].append(chat(servers[name].base, messages))
    finally:
        for srv in servers.values():
            srv.stop()
    out: dict[str, Any] = {"dataset": args.dataset, "loadavg": list(os.getloadavg()), "backends": {}}
    for name in names:
        out["backends"][name] = {
            "endpoint_id": llm_server.endpoint_id(servers[name].server, servers[name].model, servers[name].no_repack),
            "yesno": summary(rows[name]["yesno"]),
            "long": summary(rows[name]["long"]),
        }
    if "build" in names:
        for name in names:
            pairs = [
                b["wall_s"] / a["wall_s"] for a, b in zip(rows["build"]["yesno"], rows[name]["yesno"], strict=True)
            ]
            out["backends"][name]["yesno_wall_ratio_vs_build"] = round(statistics.median(pairs), 3)
    path = atomic_write_json(args.out, out)
    for name, b in out["backends"].items():
        print(
            f"{name}: yes/no {b['yesno']['median_wall_s']} s per prompt ({b['yesno']['median_prompt_tps']} tok/s), "
            f"long prompts {b['long']['median_prompt_tps']} tok/s, x{b.get('yesno_wall_ratio_vs_build', '-')} "
            "vs build"
        )
    print(f"wrote {path}")
    ratio = out["backends"].get("wheel", {}).get("yesno_wall_ratio_vs_build")
    print(f"wheel_vs_build={ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
