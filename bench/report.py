"""Wall time and peak memory per notebook of ``make report``, cold and warm, on one dataset.

Cold: the dataset's results (runs, indexes), its Qdrant store and the embedding, LLM reply and checker caches are
moved aside to a temporary folder first (the venv, the llama.cpp build and the model stay: they are
set-up) and put back afterwards, whatever happens (the cold run's files are discarded). Warm: ``make
report`` again with everything cached; it must encode nothing and make no LLM call. Per notebook: the wall
seconds the chain prints (``[chain] NN-....ipynb ok in X s``) and the peak of the summed resident memory of
``make``'s process tree (notebook kernel, llama-server) sampled every 0.2 s while that notebook ran.

    python bench/report.py                       # debian-manuals; takes as long as two reports (~15+ min)
    python bench/report.py --dataset scifact --warm-only

Run it on an otherwise idle machine: it moves the shared caches aside, so it must not overlap another
run that uses them. Writes ``results/bench/report.json`` (the cold run's own results are deleted with the
restore, so the JSON is written after it). Headline: ``report_cold_s``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.core.paths import ROOT, resolve_dataset
from rerankeval.core.settings import load_settings

CACHES = ("embeddings", "llm", "conformance")  # under the rerankeval cache; venv, llama.cpp and models are set-up
NB_LINE = re.compile(r"^\[chain\] (\S+\.ipynb) (ok|FAILED) in ([0-9.]+) s")
START_LINE = re.compile(r"^\[chain\] (\S+\.ipynb) \.\.\.$")


@contextmanager
def moved_aside(paths: list[Path]):
    """Move existing ``paths`` into a temporary folder next to each; put them back on exit (also on SIGTERM)."""
    stash: list[tuple[Path, Path]] = []

    def restore() -> None:
        while stash:
            original, aside = stash.pop()
            if original.exists():
                shutil.rmtree(original) if original.is_dir() else original.unlink()
            aside.rename(original)
            aside.parent.rmdir()

    old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for p in paths:
            if p.exists():
                aside = Path(tempfile.mkdtemp(prefix=".bench-aside-", dir=p.parent)) / p.name
                p.rename(aside)
                stash.append((p, aside))
        yield
    finally:
        restore()
        signal.signal(signal.SIGTERM, old)


class TreeMemory(threading.Thread):
    """Samples the summed RSS of a process and its descendants; ``take_peak()`` returns and resets the peak."""

    def __init__(self, pid: int, interval: float = 0.2):
        super().__init__(daemon=True)
        self.proc, self.interval = psutil.Process(pid), interval
        self.peak, self._stop = 0, threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.proc, *self.proc.children(recursive=True)]
                rss = sum(p.memory_info().rss for p in procs if p.is_running())
            except psutil.Error:
                rss = 0
            with self._lock:
                self.peak = max(self.peak, rss)
            self._stop.wait(self.interval)

    def take_peak(self) -> int:
        with self._lock:
            peak, self.peak = self.peak, 0
        return peak

    def stop(self) -> None:
        self._stop.set()


def make_report(dataset: str, log: Path) -> dict[str, Any]:
    """Run ``make report`` once; wall seconds and per-notebook seconds and peak memory (MB)."""
    t0 = time.perf_counter()
    per_nb: dict[str, dict[str, float]] = {}
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            ["make", "report", f"DATASET={dataset}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1,
        )  # fmt: skip
        mem = TreeMemory(proc.pid)
        mem.start()
        for line in proc.stdout:  # type: ignore[union-attr]
            out.write(line)
            if START_LINE.match(line.strip()):
                mem.take_peak()  # set-up before the notebook does not count
            elif m := NB_LINE.match(line.strip()):
                per_nb[m.group(1)] = {"seconds": float(m.group(3)), "peak_mb": round(mem.take_peak() / 2**20, 1),
                                      "status": m.group(2)}  # fmt: skip
        rc = proc.wait()
        mem.stop()
    return {"rc": rc, "wall_s": round(time.perf_counter() - t0, 1), "notebooks": per_nb, "log": str(log)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="debian-manuals")
    ap.add_argument("--warm-only", action="store_true", help="skip the cold run (nothing is moved aside)")
    args = ap.parse_args(argv)
    dp = resolve_dataset(args.dataset, load_settings())
    logs = Path(tempfile.mkdtemp(prefix="bench-report-"))
    out: dict[str, Any] = {"dataset": dp.name, "loadavg_before": list(os.getloadavg())}
    if not args.warm_only:
        aside = [dp.root, dp.qdrant_path, *(dp.roots.cache / c for c in CACHES)]
        with moved_aside(aside):
            out["cold"] = make_report(args.dataset, logs / "cold.log")
            out["warm"] = make_report(args.dataset, logs / "warm.log")  # warm on the cold run's fresh caches
    else:
        out["warm"] = make_report(args.dataset, logs / "warm.log")
    out["loadavg_after"] = list(os.getloadavg())
    if "cold" in out and out["cold"]["wall_s"]:
        out["warm_over_cold"] = round(out["warm"]["wall_s"] / out["cold"]["wall_s"], 3)
    path = atomic_write_json(ROOT / "results" / "bench" / "report.json", out)
    for kind in ("cold", "warm"):
        if kind in out:
            nbs = ", ".join(
                f"{k[:2]} {v['seconds']:.0f} s / {v['peak_mb']:.0f} MB" for k, v in out[kind]["notebooks"].items()
            )
            print(f"{kind} make report ({dp.name}): {out[kind]['wall_s']:.0f} s (rc {out[kind]['rc']}); {nbs}")
    print(f"wrote {path}; logs in {logs}")
    if "cold" in out:
        print(f"report_cold_s={out['cold']['wall_s']}")
    else:
        print(f"report_warm_s={out['warm']['wall_s']}")
    return 0 if all(out[k]["rc"] == 0 for k in ("cold", "warm") if k in out) else 1


if __name__ == "__main__":
    sys.exit(main())
