"""Benchmark: what the next question costs from a warm default run (issue 24, item 1).

On a copy of the default dataset's state (its folder, ``results/<dataset>/``, its Qdrant store, and the embedding
and LLM caches; the venv, the llama.cpp build and the model weights are linked, not copied) it warms the chain
(``python -m rerankeval.apps.chain``, what ``make report`` runs), keeps a snapshot, and times each follow-up from that
snapshot, as a user makes it:

- ``rrf_k``: ``make report P="rrf_k=30"``;
- ``hybrid_dbsf``: ``make report P="variants=[..., hybrid_dbsf]"`` (a fusion variant added);
- ``pool_k``: ``make report P="pool_k=20 max_queries=5"`` (5 queries: 50 fresh LLM calls): before it, the LLM cache
  copy is stripped of exactly the replies the 10 new candidates per query need (their keys recorded by reranking
  pools of 10 and 20 against a cache that only records, endpoint unreachable), so the run must send those and only
  those: the 04 ledger's requests and cache hits are counted per query;
- ``chunk_size``: ``make report P="chunk_size=600"`` (everything downstream of 01 changes; minimal: without 04);
- ``judgment``: one grade recorded through the explorer's API (``apps.explore.judge``), then ``--only 05``;
- ``free_text``: a new free-text query in the explorer (``Explorer.show``): the explorer opened and its first
  free text (cold), then a second new text (warm).

Each follow-up gets: wall and CPU seconds (``cpu_s``: less load-sensitive), the notebooks re-run and their seconds,
texts encoded (new vectors in the embedding cache copy), LLM calls (new replies in the LLM cache copy; the 04
ledger's requests and cache hits), the 03 variants read back, the notebooks skipped. ``--scope minimal`` runs
``--only`` what a follow-up changes. The chain runs a frozen copy of the code (``code/``); the LLM server is started
once (``endpoint_start_s``). Writes ``results/bench/next_question.json`` (``warm_03_s``: 03 alone, forced, the
median of 3), the load average, and a last line ``name=value ...``.

    python bench/next_question.py [--dataset NAME] [--only rrf_k,judgment] [--scope both] [--keep] [--work DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from rerankeval.core import paths
from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.settings import load_settings

LINKED = ("venv", "models", "llama.cpp", "conformance")  # set-up, shared read-only
COPIED = ("embeddings", "llm", "llm.rates.json")  # the caches a follow-up may add to (counted)
DBSF_VARIANTS = "[vector, bm25, hybrid, qdrant_hybrid, cross_encoder, hybrid_reformulate, hybrid_dbsf]"
FOLLOW_UPS: dict[str, tuple[str, list[str]]] = {  # name -> (P=..., the notebooks it changes but the LLM's: minimal)
    "rrf_k": ("rrf_k=30", ["03", "05"]),
    "hybrid_dbsf": (f"variants={DBSF_VARIANTS}", ["03", "05"]),
    "pool_k": ("pool_k=20 max_queries=5", ["03", "04", "05"]),  # 5 queries: 50 fresh LLM calls
    "chunk_size": ("chunk_size=600", ["01", "02", "03", "05"]),
}
ORDER = ("rrf_k", "hybrid_dbsf", "judgment", "free_text", "pool_k", "chunk_size")
DEST = paths.ROOT / "results" / "bench" / "next_question.json"
CHAIN_LINE = re.compile(r"^\[chain\] (\d\d-[\w-]+)\.ipynb (\w+) in ([\d.]+) s", re.M)
SKIPPED_LINE = re.compile(r"^\[chain\] (\d\d-[\w-]+)\.ipynb up to date \(skipped\)", re.M)


class Workspace:
    """A copy of one dataset's state under ``root``: ``data/<name>``, ``results``, ``qdrant``, ``cache``."""

    def __init__(self, root: Path, name: str) -> None:
        self.root, self.name, self.data = root, name, root / "data" / name
        self.results, self.qdrant, self.cache = root / "results", root / "qdrant", root / "cache"

    @classmethod
    def seed(cls, root: Path, dp: paths.DatasetPaths) -> Workspace:
        ws = cls(root, dp.name)
        shutil.copytree(dp.source, ws.data)
        shutil.copytree(dp.root, ws.results / dp.name, ignore=shutil.ignore_patterns("executed", "report"))
        if dp.qdrant_path.exists():
            shutil.copytree(dp.qdrant_path, ws.qdrant / dp.name)
        atomic_write_json(ws.results / dp.name / paths.SOURCE_RECORD, {"source": str(ws.data)})
        cache = dp.roots.cache
        ws.cache.mkdir(parents=True)
        for name in LINKED:
            if (cache / name).exists():
                (ws.cache / name).symlink_to(cache / name)
        for name in COPIED:
            _copy(cache / name, ws.cache / name)
        return ws

    def freeze_code(self) -> dict[str, str]:
        """Copy the package, notebooks and parameters to ``code/``: the chain runs this copy, so edits made to the
        working tree while the bench runs (other sessions share it) cannot change a code version midway."""
        shutil.rmtree(self.root / "code", ignore_errors=True)
        for part in ("lib", "notebooks", "params"):
            shutil.copytree(paths.ROOT / part, self.root / "code" / part, ignore=shutil.ignore_patterns("__pycache__"))
        git = ["git", "-C", str(paths.ROOT)]
        return {
            "head": subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
            "uncommitted": subprocess.run(
                [*git, "status", "--short", "lib", "notebooks", "params"], capture_output=True, text=True
            ).stdout.split("\n"),
        }

    def env(self) -> dict[str, str]:
        return {
            "RERANKEVAL_RESULTS": str(self.results),
            "RERANKEVAL_QDRANT_PATH": str(self.qdrant),
            "RERANKEVAL_CACHE": str(self.cache),
            "PYTHONPATH": str(self.root / "code" / "lib"),
        }

    def dp(self) -> paths.DatasetPaths:
        roots = paths.Roots(results=self.results, cache=self.cache, qdrant=self.qdrant)  # what env() gives the chain
        return paths.DatasetPaths(self.name, self.data, self.results / self.name, roots)

    def _parts(self) -> list[Path]:
        return [self.data, self.results, self.qdrant, *(self.cache / n for n in COPIED)]

    def snapshot(self) -> None:
        shutil.rmtree(self.root / "snapshot", ignore_errors=True)
        for p in self._parts():
            _copy(p, self.root / "snapshot" / p.relative_to(self.root))

    def restore(self) -> None:
        for p in self._parts():
            if p.is_dir():
                shutil.rmtree(p)
            _copy(self.root / "snapshot" / p.relative_to(self.root), p)


def _copy(src: Path, dst: Path) -> None:
    """A folder (its symbolic links as links) or a file, when it exists."""
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    elif src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


# -- counters --
def embedded_hashes(ws: Workspace) -> set[str]:
    """Every text hash in the embedding cache copy (a new one is a text encoded)."""
    out: set[str] = set()
    for shard in (ws.cache / "embeddings").rglob("*.npz"):
        with contextlib.suppress(Exception), np.load(shard) as z:
            out.update(z["hashes"].tolist())
    return out


def counters(ws: Workspace) -> dict[str, set[str]]:
    return {"texts": embedded_hashes(ws), "llm": {p.name for p in (ws.cache / "llm").rglob("*.json")}}


def counted(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, int]:
    """Texts encoded and LLM replies stored between two :func:`counters`."""
    return {"texts_encoded": len(after["texts"] - before["texts"]), "llm_calls": len(after["llm"] - before["llm"])}


def ledger_counts(ws: Workspace) -> dict[str, Any]:
    """The 04 ledger's main pass: requests, cache hits and calls, summed and per query."""
    import pandas as pd

    from rerankeval.rerank.config import MAIN_PASS

    path = ws.dp().ledger
    if not path.is_file():
        return {}
    led = pd.read_csv(path, dtype={"qid": str})
    led = led[led["pass"] == MAIN_PASS] if "pass" in led else led
    return {
        "rerank_requests": int(led.requests.sum()),
        "rerank_cache_hits": int(led.cache_hits.sum()),
        "rerank_calls": int(led.llm_calls.sum()),
        "per_query": led[["qid", "n_pool", "requests", "cache_hits"]].to_dict("records"),
    }


def read_back(ws: Workspace) -> list[str]:
    """The stage-03 variants whose records say they were read back."""
    records = {p.stem: p.read_text(encoding="utf-8") for p in sorted(ws.dp().retrieve_dir.glob("*.json"))}
    return [v for v, text in records.items() if '"read_back": true' in text]  # as atomic_write_json writes it


# -- running the chain as a user would --
def chain(
    ws: Workspace, endpoint: dict[str, str], params: str = "", only: list[str] | None = None, force: bool = False
) -> dict[str, Any]:
    """``python -m rerankeval.apps.chain --dataset <copy> [--params P] [--only NN ...] [--force]``, timed, counted."""
    cmd = [sys.executable, "-m", "rerankeval.apps.chain", "--dataset", str(ws.data), *(["--force"] if force else [])]
    cmd += [*(["--params", params] if params else []), *(a for nb in only or [] for a in ("--only", nb))]
    env, before = {**os.environ, **ws.env(), **endpoint, "PYTHONHASHSEED": "0"}, counters(ws)
    t0, cpu0 = time.perf_counter(), sum(os.times()[2:4])  # user + system seconds of the finished children
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    wall, cpu = time.perf_counter() - t0, sum(os.times()[2:4]) - cpu0  # the chain and its kernels
    notebooks = {m.group(1): float(m.group(3)) for m in CHAIN_LINE.finditer(r.stdout)}
    failed = [m.group(1) for m in CHAIN_LINE.finditer(r.stdout) if m.group(2).lower() != "ok"]
    out = {
        "command": " ".join(["python -m rerankeval.apps.chain", *cmd[3:]]),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "exit": r.returncode,
        "notebooks_rerun": len(notebooks),
        "notebooks_s": notebooks,
        "notebooks_skipped": SKIPPED_LINE.findall(r.stdout),
        **counted(before, counters(ws)),
        "read_back_03": read_back(ws) if "03-retrieve" in notebooks else None,
    }
    return {**out, "error": (r.stderr or r.stdout)[-1500:]} if r.returncode != 0 or failed else out


def stage_cell_seconds(ws: Workspace, notebook: str = "03-retrieve.ipynb") -> dict[str, float]:
    """From the executed copy: papermill's duration and each code cell's (the run/write cell: the stage's own)."""
    nb = json.loads(ws.dp().executed_notebook(notebook).read_text(encoding="utf-8"))
    cells = [
        round(c["metadata"].get("papermill", {}).get("duration") or 0.0, 2)
        for c in nb["cells"]
        if c["cell_type"] == "code"
    ]
    return {"papermill_s": round(nb["metadata"]["papermill"]["duration"], 2), "code_cells_s": cells}


def parameter_follow_up(ws: Workspace, endpoint: dict[str, str], name: str, scope: str) -> dict[str, Any]:
    """A ``make report P=...`` follow-up from the snapshot (``full``) and/or with ``--only`` what it changes
    (``minimal``), as ``scope`` says (``full``, ``minimal`` or ``both``)."""
    params, changed = FOLLOW_UPS[name]
    out = {}
    for kind, only in (("full", None), ("minimal", changed)):
        if scope in (kind, "both"):
            ws.restore()
            out[kind] = chain(ws, endpoint, params, only=only)
            out[kind]["rerank"] = {k: v for k, v in ledger_counts(ws).items() if k != "per_query"}
            if kind == "minimal" and "04" not in only:  # what 04 would send: pool replies not in the cache
                out[kind]["rerank_fresh_calls_needed"] = sum(
                    not (ws.cache / "llm" / k[:2] / f"{k}.json").exists() for k in pool_keys(ws, endpoint, 10)
                )
    return out


# -- pool_k 10 -> 20: exactly the new candidates reach the LLM --
def recording_cache(root: Path) -> Any:
    """An LLM cache that serves what the copy holds, stores nothing and records every key asked for (``keys``)."""
    from rerankeval.llm.cache import LLMCache

    class Recording(LLMCache):
        keys: list[str] = []

        def get(self, key: str) -> dict[str, Any] | None:
            self.keys.append(key)
            return super().get(key)

    return Recording(root, write=False)


def pool_keys(ws: Workspace, endpoint: dict[str, str], pool_k: int, max_queries: int = 0) -> list[str]:
    """The LLM cache keys stage 04 asks for with ``pool_k`` (first attempts), the endpoint made unreachable so
    that nothing is sent (misses fail at once) and nothing stored."""
    from rerankeval.rerank import stage as rstage
    from rerankeval.rerank.config import NO_STABILITY, Params
    from rerankeval.rerank.core import rerank

    dead = load_settings({**endpoint, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "RERANK_MAX_RETRIES": "0"})
    p = Params(pool_k=pool_k, max_queries=max_queries)
    i = rstage.load(ws.dp(), p)
    rec = recording_cache(ws.cache / "llm")
    with contextlib.redirect_stderr(open(os.devnull, "w")):  # noqa: SIM115 - the fallback warnings
        rerank(i, p.config(), pool_k=pool_k, stability=NO_STABILITY, settings=dead, cache=rec, progress=False)
    return list(dict.fromkeys(rec.keys))


def pool_follow_up(ws: Workspace, endpoint: dict[str, str], scope: str) -> dict[str, Any]:
    """``pool_k=20`` after stripping the copy's LLM cache of the new candidates' replies: counted per query."""
    ws.restore()
    k10, k20 = pool_keys(ws, endpoint, 10, max_queries=5), pool_keys(ws, endpoint, 20, max_queries=5)
    from rerankeval.llm.cache import LLMCache

    new = [k for k in k20 if k not in set(k10)]
    removed = sum((p := LLMCache(ws.cache / "llm").path(k)).exists() and not p.unlink() for k in new)
    params, changed = FOLLOW_UPS["pool_k"]
    out = chain(ws, endpoint, params, only=None if scope != "minimal" else changed)
    led = ledger_counts(ws)
    per_query = led.pop("per_query", [])
    exact = [r for r in per_query if r["requests"] == r["n_pool"] - 10 and r["cache_hits"] == 10]
    out.update(
        rerank=led,
        keys_pool_10=len(k10),
        keys_pool_20=len(k20),
        new_keys=len(new),
        new_replies_removed=removed,
        queries=len(per_query),
        queries_exactly_new_sent=len(exact),
    )
    return out


# -- the explorer's follow-ups (in this process, on the copy) --
def judgment_follow_up(ws: Workspace, endpoint: dict[str, str]) -> dict[str, Any]:
    """A grade for the first unit of stage 05's judging pool, recorded with ``explore.judge``, then ``--only 05``."""
    import pandas as pd

    from rerankeval.apps import explore

    ws.restore()
    qid, unit = pd.read_csv(ws.dp().unjudged_review, sep="\t", dtype=str)[["qid", "unit_id"]].iloc[0]
    t0 = time.perf_counter()
    said = explore.judge(ws.dp(), qid, unit, 2)
    judge_s = time.perf_counter() - t0
    out = chain(ws, endpoint, only=["05"])
    return {
        **out,
        "judged": f"{qid} {unit} 2",
        "judge_s": round(judge_s, 3),
        "said": said[:200],
        "wall_s": round(out["wall_s"] + judge_s, 1),
    }


def free_text_follow_up(ws: Workspace, endpoint: dict[str, str]) -> dict[str, Any]:
    """A new free-text query in the explorer: opened + first text (cold), then another new text (warm)."""
    from rerankeval.apps import explore

    ws.restore()
    texts = ["how do I keep a package from being upgraded", "where are the boot loader settings kept"]
    out: dict[str, Any] = {}
    with mock.patch.dict(os.environ, endpoint):
        for label, text in zip(("cold", "warm"), texts, strict=True):
            before, t0 = counters(ws), time.perf_counter()
            x = explore.explorer(ws.dp()).show(text, 10)
            wall, ledger = time.perf_counter() - t0, x.ledger or {}
            out[label] = {
                "text": text,
                "wall_s": round(wall, 2),
                **counted(before, counters(ws)),
                "rerank_requests": ledger.get("requests"),
                "rerank_calls": ledger.get("llm_calls"),
                "columns": [c.variant for c in x.columns],
            }
        explore.close_all()
    out["wall_s"] = out["warm"]["wall_s"]
    return out


# -- the run --
def warm_up(ws: Workspace, endpoint: dict[str, str], skip: list[str]) -> dict[str, Any]:
    """Warm the copy with this code (03 writes its key files), then the warm chain (without ``skip``; an
    unchanged notebook is skipped), then notebook 03 alone 3 times, forced (what its warm run costs)."""
    only = (
        [nb.name[:2] for nb in sorted((paths.ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")) if nb.name[:2] not in skip]
        if skip
        else None
    )
    prime, warm = chain(ws, endpoint, only=only), chain(ws, endpoint, only=only)
    alone = [chain(ws, endpoint, only=["03"], force=True) for _ in range(3)]
    return {"prime": prime, "warm": warm, "warm_03_alone": alone, "warm_03_stage": stage_cell_seconds(ws)}


def follow_up(ws: Workspace, endpoint: dict[str, str], name: str, scope: str) -> dict[str, Any]:
    if name in ("judgment", "free_text"):
        return {"judgment": judgment_follow_up, "free_text": free_text_follow_up}[name](ws, endpoint)
    if name == "pool_k":
        return pool_follow_up(ws, endpoint, scope)
    return parameter_follow_up(ws, endpoint, name, scope)


def save(out: dict[str, Any]) -> Path:
    """Write what was measured so far (a run stopped halfway keeps its finished follow-ups)."""
    out["headline"] = headline(out)
    return atomic_write_json(DEST, out)


def run(
    dataset: str, which: list[str], keep: bool, scope: str, work: str = "", skip: list[str] = (), resume: bool = False
) -> dict[str, Any]:
    """Seed a copy (or take ``work``, one an earlier ``--keep`` run seeded), freeze the code, warm it, then the
    follow-ups in :data:`ORDER`."""
    from rerankeval.llm import server as llm_server

    dp = paths.resolve_dataset(dataset, load_settings())
    root = Path(work) if work else Path(tempfile.mkdtemp(prefix="next_question-"))
    ws = Workspace(root, dp.name) if work else Workspace.seed(root, dp)
    out: dict[str, Any] = {
        "dataset": dp.name,
        "workspace": str(root),
        "scope": scope,
        "skipped": list(skip),
        "load_before": os.getloadavg(),
    }  # skipped: --skip (left out), not up to date
    resumed = json.loads(DEST.read_text(encoding="utf-8")) if resume else {"code": ws.freeze_code()}
    out.update({k: resumed[k] for k in ("code", "warm_up", "endpoint_start_s", "load_before") if k in resumed})
    try:
        with (
            mock.patch.dict(os.environ, {k: v for k, v in ws.env().items() if k != "PYTHONPATH"}),
            contextlib.ExitStack() as stack,
        ):
            t0 = time.perf_counter()
            endpoint = stack.enter_context(llm_server.ensure_endpoint(load_settings()))
            out["endpoint_start_s"] = round(time.perf_counter() - t0, 1)
            if not resume:  # else: the warm-up, frozen code and snapshot of the earlier run
                out["warm_up"] = warm_up(ws, endpoint, list(skip))
                save(out)
                ws.snapshot()
            for name in (n for n in ORDER if n in which):
                print(f"[bench] {name} ...", flush=True)
                try:
                    out[name] = follow_up(ws, endpoint, name, scope)
                except Exception as exc:  # noqa: BLE001 - one broken follow-up must not lose the others
                    out[name] = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
                save(out)
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    return out


def headline(out: dict[str, Any]) -> dict[str, Any]:
    """The ``name=value`` figures of the last line."""
    warm = out["warm_up"]["warm"]
    alone = [a["notebooks_s"].get("03-retrieve") for a in out["warm_up"].get("warm_03_alone", [])]
    line: dict[str, Any] = {
        "warm_03_s": statistics.median(alone) if alone and all(alone) else None,
        "warm_report_s": warm["wall_s"],
    }
    for name in (n for n in ORDER if out.get(n)):
        got = out[name]
        for key, part in ((f"{name}_s", got.get("full", got)), (f"{name}_minimal_s", got.get("minimal", {}))):
            if part.get("wall_s") is not None:
                line[key], line[key.removesuffix("_s") + "_cpu_s"] = part["wall_s"], part.get("cpu_s")
    if "queries" in (pool := out.get("pool_k", {})):
        line["pool_k_new_sent_exactly"] = f"{pool['queries_exactly_new_sent']}/{pool['queries']}"
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=paths.DEFAULT_DATASET)
    ap.add_argument("--only", default=",".join(ORDER), help=f"comma-separated follow-ups (default: {','.join(ORDER)})")
    ap.add_argument(
        "--scope",
        choices=("full", "minimal", "both"),
        default="both",
        help="as make report (full), with --only what they change (minimal), or both",
    )
    ap.add_argument("--skip", default="", help="notebooks (numbers) the warm chain leaves out, e.g. 07")
    ap.add_argument("--resume", action="store_true", help="with --work: keep its warm state and the JSON's warm-up")
    ap.add_argument("--work", default="", help="reuse the copy an earlier --keep run seeded (its path is in the JSON)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy (its path is in the JSON)")
    args = ap.parse_args()
    which = [w.strip() for w in args.only.split(",") if w.strip()]
    if unknown := sorted(set(which) - set(ORDER)):
        raise SystemExit(f"unknown follow-up(s) {unknown}; choose from {', '.join(ORDER)}")
    out = run(
        args.dataset,
        which,
        args.keep or bool(args.work),
        args.scope,
        args.work,
        [n.strip() for n in args.skip.split(",") if n.strip()],
        args.resume and bool(args.work),
    )
    print(f"wrote {save(out)}")
    print(" ".join(f"{k}={v}" for k, v in out["headline"].items()))


if __name__ == "__main__":
    main()
