"""What the LLM rerank stage costs against the local llama-server, and how close it runs to the hardware.

For each mode and pool size (and each concurrency) it reranks the first ``--queries`` queries of the
hybrid run twice: cold (an empty temporary reply cache) and warm (the same cache again), and records LLM
calls, HTTP requests, prompt tokens (as the server counts them), the tokens the server actually processed
after its prompt cache (``llamacpp:prompt_tokens_total`` from ``/metrics``), seconds per query, and the
server's own prompt and generation seconds. Every configuration gets a freshly started server, so "cold"
is cold at the server too (llama-server keeps recent prompts' KV cache in RAM, which would otherwise serve
one configuration's prompts to the next). It also measures the server alone: prompt tokens/s on long
prompts and on short, stage-sized ones (the server's ``timings``), and whether a query's second yes/no call
re-uses the first one's prompt head (``timings.cache_n``). The headline is ``floor_ratio``: the default
configuration's cold wall time over the time the server needs to process the prompt tokens it processed,
at the fastest rate measured alone (1.0 = at the hardware floor).

    python bench/rerank.py                                   # 5 queries, default modes, pools 10 and 20
    python bench/rerank.py --queries 10 --modes yesno-plain --pools 10 --concurrency 1,2
    python bench/rerank.py --model qwen2.5-coder-1.5b --modes yesno-plain --pools 10   # the other local model

``--model`` (a LOCAL_MODEL name, default the settings' LOCAL_MODEL) picks the local model; its default output is
``results/bench/rerank.json`` for the default model and ``results/bench/rerank-<model>.json`` for another. The
quality of each model (nDCG@10, AUC) is ``bench/models.py``'s.

Needs ``results/<dataset>/runs/hybrid.trec`` (notebook 03). Starts its own llama-server (with
``--metrics``); an endpoint configured in .env is not used (its server counters are not readable).
Writes ``results/bench/rerank.json``. The machine's load average is recorded: timings are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import ROOT, resolve_dataset
from rerankeval.core.settings import DEFAULT_LOCAL_MODEL, LOCAL_MODELS, load_settings
from rerankeval.llm import local_server
from rerankeval.llm import server as llm_server
from rerankeval.llm.cache import LLMCache
from rerankeval.rerank import core, prompts, stage
from rerankeval.rerank.config import Params
from rerankeval.rerank.ledger import summarize

MODES: dict[str, dict[str, Any]] = {
    "yesno": {"mode": "yesno", "yesno_json": True},
    "yesno-plain": {"mode": "yesno", "yesno_json": False},
    "pointwise": {"mode": "pointwise", "batch_size": 1},
    "pointwise-batch": {"mode": "pointwise", "batch_size": 10},
    "listwise": {"mode": "listwise", "window": 20, "step": 10},
}
DEFAULT = ("yesno-plain", 10, 1)  # (mode, pool, concurrency) of the stage's default: the headline's run
METRICS = ("prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total", "tokens_predicted_seconds_total")


class MetricsServer(local_server.LocalServer):
    """The local server with its Prometheus counters on (``/metrics``)."""

    def command(self) -> list[str]:
        return [*super().command(), "--metrics"]


def _http(base: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{base}{path}", data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        raw = r.read().decode()
    return json.loads(raw) if raw.lstrip().startswith(("{", "[")) else raw


def counters(base: str) -> dict[str, float]:
    text = _http(base, "/metrics")
    out = {}
    for name in METRICS:
        m = re.search(rf"^llamacpp:{name}\s+([0-9.eE+-]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else float("nan")
    return out


def chat(base: str, model: str, messages: list[dict[str, str]], max_tokens: int = 1) -> dict[str, Any]:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    return _http(base, "/v1/chat/completions", body)


def server_alone(base: str, model: str, texts: list[str], chars: int) -> dict[str, Any]:
    """Prompt tokens/s on long prompts (``chars`` characters) and on short ones the size of a yes/no call
    (no cache hit: each prompt differs from the first token). The floor is the fastest rate seen."""
    found: dict[str, list[dict[str, Any]]] = {"long_prompts": [], "short_prompts": []}
    sizes = [("long_prompts", chars, 40)] * (2 if chars else 0) + [("short_prompts", 400, 2)] * 5
    for i, (kind, n_chars, n_texts) in enumerate(sizes):
        text = " ".join(texts[i * n_texts : (i + 1) * n_texts])[:n_chars]
        t = chat(base, model, [{"role": "user", "content": f"Run {i}. Summarise:\n{text}"}]).get("timings", {})
        found[kind].append(
            {"prompt_n": t.get("prompt_n"), "prompt_ms": t.get("prompt_ms"), "tps": t.get("prompt_per_second")}
        )
    best = max([*found["long_prompts"], *found["short_prompts"]], key=lambda x: x["tps"] or 0, default={"tps": None})
    return {**found, "prompt_tokens_per_s": best["tps"]}


def prefix_reuse(base: str, model: str, query: str, passages: list[str]) -> dict[str, Any]:
    """Two yes/no calls of one query: how many prompt tokens the second one takes from the server's cache."""
    out = []
    for p in passages[:2]:
        t = chat(base, model, prompts.yesno(query, prompts.clip(p, 600), False)).get("timings", {})
        out.append({"prompt_n": t.get("prompt_n"), "cache_n": t.get("cache_n")})
    props = _http(base, "/props")
    gen = props.get("default_generation_settings", {}) if isinstance(props, dict) else {}
    params = gen.get("params", gen)
    return {"calls": out, "cache_prompt_default": params.get("cache_prompt"), "n_ctx": gen.get("n_ctx")}


def one_run(args, inputs, settings, base, name: str, pool: int, conc: int, cache_dir: Path) -> dict[str, Any]:
    params = Params(
        alpha=0.1,
        max_passage_chars=args.max_passage_chars,
        concurrency=conc,
        pool_k=pool,
        max_queries=args.queries,
        **MODES[name],
    )
    before = counters(base)
    t0 = time.perf_counter()  # the reranking step of rerank.run, on inputs read once (the timing is the LLM's)
    res = core.rerank(
        inputs,
        params.config(),
        pool_k=pool,
        stability=params.stability,
        settings=settings,
        cache=LLMCache(cache_dir),
        progress=False,
    )
    wall = time.perf_counter() - t0
    after = counters(base)
    d = {k: after[k] - before[k] for k in METRICS}
    s = summarize(res.ledger)
    n = s["queries"] or 1
    return {
        "wall_s": round(wall, 2),
        "seconds_per_query": round(wall / n, 3),
        "llm_calls": s["llm_calls"],
        "requests": s["requests"],
        "cache_hits": s["cache_hits"],
        "prompt_tokens": s["prompt_tokens"],
        "prompt_tokens_per_query": round(s["prompt_tokens"] / n, 1),
        "processed_prompt_tokens": int(d["prompt_tokens_total"]),
        "server_prompt_s": round(d["prompt_seconds_total"], 2),
        "server_generation_s": round(d["tokens_predicted_seconds_total"], 2),
        "generated_tokens": int(d["tokens_predicted_total"]),
        "fallback_rate": s["fallback_rate"],
        "plan": getattr(res, "plan", None),  # None with the pre-issue-12 package (before/after runs)
    }


def started(server_bin: Path | list[str], model: Path, no_repack: bool = False) -> tuple[MetricsServer, Any]:
    """A fresh local server (empty prompt cache) and the settings that point the reranker at it (``no_repack``:
    started as the crash fallback starts it)."""
    srv = MetricsServer(server_bin, model, no_repack=no_repack)
    srv.start()
    env = {
        "OPENAI_BASE_URL": f"{srv.base}/v1",
        "OPENAI_API_KEY": llm_server.LOCAL_API_KEY,
        "RERANK_MODEL": local_server.model_name(model),
        "RERANK_ENDPOINT_ID": llm_server.endpoint_id(server_bin, model, srv.no_repack),
    }
    return srv, load_settings(env)


def bench(args, inputs, server_bin: Path | list[str], model: Path) -> list[dict[str, Any]]:
    rows = []
    for name in args.modes.split(","):
        for pool in [int(p) for p in args.pools.split(",")]:
            for conc in [int(c) for c in args.concurrency.split(",")]:
                srv, settings = started(server_bin, model, args.no_repack)
                try:
                    with tempfile.TemporaryDirectory(prefix="bench-rerank-") as tmp:
                        cold = one_run(args, inputs, settings, srv.base, name, pool, conc, Path(tmp))
                        warm = one_run(args, inputs, settings, srv.base, name, pool, conc, Path(tmp))
                finally:
                    srv.stop()
                row = {"mode": name, "pool_k": pool, "concurrency": conc, "cold": cold, "warm": warm}
                print(
                    f"{name:16s} pool {pool:2d} conc {conc}: cold {cold['seconds_per_query']:.2f} s/query, "
                    f"{cold['llm_calls'] / args.queries:.0f} calls and {cold['prompt_tokens_per_query']:.0f} prompt "
                    f"tokens per query ({cold['processed_prompt_tokens']} processed); warm {warm['wall_s']:.2f} s, "
                    f"{warm['requests']} requests",
                    flush=True,
                )
                rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="debian-manuals")
    ap.add_argument("--queries", type=int, default=5, help="first N queries by qid")
    ap.add_argument(
        "--modes", default="yesno-plain,yesno,pointwise-batch,listwise", help=f"comma list of {list(MODES)}"
    )
    ap.add_argument("--pools", default="10,20")
    ap.add_argument("--concurrency", default="1", help="comma list, e.g. 1,2 (the local server has one slot)")
    ap.add_argument("--max-passage-chars", type=int, default=Params.max_passage_chars)
    ap.add_argument("--floor-chars", type=int, default=9000, help="length of the long prompts timed (0: skip)")
    ap.add_argument("--server-bin", type=Path, help="another llama-server binary to time (default: the backend's)")
    ap.add_argument(
        "--backend",
        choices=llm_server.BACKENDS,
        default=llm_server.DEFAULT_BACKEND,
        help="wheel: the prebuilt xllamacpp server; build: llama-server compiled for this CPU",
    )
    ap.add_argument("--no-repack", action="store_true", help="start the server with --no-repack (crash fallback)")
    ap.add_argument("--model", choices=LOCAL_MODELS, default=None, help="the local model (default: LOCAL_MODEL)")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: results/bench/rerank.json (rerank-<model>.json for a model other than the default)",
    )
    args = ap.parse_args(argv)
    settings = load_settings()
    args.model = args.model or settings.local_model
    if args.out is None:
        name = "rerank.json" if args.model == DEFAULT_LOCAL_MODEL else f"rerank-{args.model}.json"
        args.out = ROOT / "results" / "bench" / name

    dp = resolve_dataset(args.dataset, settings)
    inputs = stage.load(dp, Params(pool_k=max(int(p) for p in args.pools.split(",")), max_queries=args.queries))
    fused, queries, texts, qids = inputs.fused, inputs.queries, inputs.texts, inputs.qids
    server_bin, model = llm_server.setup_paths(backend=args.backend, model=args.model, cache=dp.roots.cache)
    server_bin = args.server_bin or server_bin
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks stop the servers
    srv, _ = started(server_bin, model, args.no_repack)
    try:
        name = local_server.model_name(model)
        all_texts = [t for q in qids for t in texts[q].values()]
        alone = server_alone(srv.base, name, all_texts, args.floor_chars)
        probe = core.select_queries(fused, queries, 0)[-1]
        reuse = prefix_reuse(srv.base, name, queries[probe], list(texts[probe].values()))
    finally:
        srv.stop()
    rows = bench(args, inputs, server_bin, model)
    tps = alone["prompt_tokens_per_s"]
    default = next((r for r in rows if (r["mode"], r["pool_k"], r["concurrency"]) == DEFAULT), rows[0])
    floor_s = default["cold"]["processed_prompt_tokens"] / tps if tps else 0.0
    out = {
        "dataset": dp.name,
        "queries": len(qids),
        "max_passage_chars": args.max_passage_chars,
        "local_model": args.model,
        "backend": args.backend if not args.server_bin else "build",
        "server_bin": str(server_bin),
        "endpoint_id": llm_server.endpoint_id(server_bin, model, args.no_repack),
        "loadavg": list(os.getloadavg()),
        "server": {**alone, **reuse},
        "runs": rows,
        "default": {"mode": default["mode"], "pool_k": default["pool_k"], "concurrency": default["concurrency"]},
        "floor_s": round(floor_s, 2),
        "floor_ratio": round(default["cold"]["wall_s"] / floor_s, 2) if floor_s else None,
    }
    path = atomic_write_json(args.out, out)
    print(f"server alone: {tps} prompt tokens/s; second yes/no call of a query: {reuse['calls'][1]}")
    print(f"wrote {path}")
    print(f"floor_ratio={out['floor_ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
