"""``make report`` from nothing: a fresh clone, an empty cache folder, an empty pip cache, no settings.

Two ways of ordering the set-up are timed on the same code, one after the other:

- ``background`` (the Makefile as it is): ``make report``; the llama-server build runs in the background while the
  venv installs and notebooks 01-03 run, and the first LLM notebook waits for it if it is not done.
- ``serial`` (the Makefile before issue 36): ``make setup llama-if-local`` first, then ``make report``; the chain
  starts only once the venv and the llama build are both done.

Per run: the wall seconds in all, the set-up on the critical path (start to the chain's first notebook line), each
notebook's seconds as the chain prints them, and the rc. Every output line is kept with its elapsed second in
``results/bench/cold_report-<mode>.log``.

    python bench/cold_report.py                          # both, background first (~35 min on 2 idle cores)
    python bench/cold_report.py --modes serial background

Run it on an otherwise idle machine. Needs ``../shared`` only for nothing: the default dataset (the Debian
manuals) is in the repository. The fresh clones and caches are deleted afterwards (pass --keep to keep them).
Writes ``results/bench/cold_report.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NB_LINE = re.compile(r"^\[chain\] (\S+\.ipynb) (ok|FAILED|skipped)\b")
SECONDS = re.compile(r" in ([0-9.]+) s")
CHAIN_START = re.compile(r"^\[chain\] ")
COMMANDS = {
    "background": [["make", "report"]],
    "serial": [["make", "--no-print-directory", "setup", "llama-if-local"], ["make", "report"]],
}
# settings a user may have in their shell that would change what runs; a new user has none of them
CLEARED = ("OPENAI_BASE_URL", "OPENAI_API_KEY", "EMBED_BASE_URL", "QDRANT_URL", "RERANKEVAL_CACHE", "VIRTUAL_ENV")


def run_mode(mode: str, work: Path, log: Path) -> dict:
    clone = work / "p"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    cache, pip_cache = work / "cache", work / "pip-cache"
    env = {k: v for k, v in os.environ.items() if k not in CLEARED and not k.startswith("PYTHON")}
    env |= {"PIP_CACHE_DIR": str(pip_cache)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    first_chain: float | None = None
    notebooks: dict[str, float | None] = {}
    rc = 0
    with log.open("w") as out:
        for cmd in COMMANDS[mode]:
            proc = subprocess.Popen(
                [*cmd, f"CACHE={cache}"],
                cwd=clone,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                now = time.monotonic() - t0
                out.write(f"{now:8.1f} {line}")
                out.flush()
                if first_chain is None and CHAIN_START.match(line):
                    first_chain = now
                if m := NB_LINE.match(line):
                    secs = SECONDS.search(line)
                    notebooks[m.group(1)] = float(secs.group(1)) if secs else None
            rc = proc.wait()
            if rc:
                break
    total = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report = clone / "results" / "debian-manuals" / "report" / "index.html"
    return {
        "mode": mode,
        "commands": [" ".join(c) for c in COMMANDS[mode]],
        "rc": rc,
        "wall_s": round(total, 1),
        # CPU seconds of the processes make waited for (a background job make did not wait for is not counted)
        "cpu_s_waited": round(cpu, 1),
        "setup_on_critical_path_s": round(first_chain, 1) if first_chain is not None else None,
        "notebooks_s": notebooks,
        "report_written": report.exists(),
        "log": str(log.relative_to(REPO)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", choices=sorted(COMMANDS), default=["background", "serial"])
    ap.add_argument("--keep", action="store_true", help="keep the fresh clones and caches")
    args = ap.parse_args()
    out_dir = REPO / "results" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    runs = []
    for mode in args.modes:
        work = Path(tempfile.mkdtemp(prefix=f"cold-{mode}-"))
        try:
            runs.append(run_mode(mode, work, out_dir / f"cold_report-{mode}.log"))
            runs[-1]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
            print(json.dumps(runs[-1]), flush=True)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    result = {
        "machine": {"cpus": os.cpu_count(), "loadavg_before": [round(x, 2) for x in load_before]},
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip(),
        "runs": runs,
    }
    if len(runs) == 2:
        by = {r["mode"]: r for r in runs}
        result["saved_s"] = round(by["serial"]["wall_s"] - by["background"]["wall_s"], 1)
    (out_dir / "cold_report.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))


if __name__ == "__main__":
    main()
