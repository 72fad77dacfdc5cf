"""Issue 36 item 1: `make report` starts the chain as soon as the venv is ready; the local llama-server build runs in
the background, and the first LLM step waits for it with a visible line (rerankeval.llm.build_wait)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from rerankeval.core import paths
from rerankeval.llm import build_wait

HOLD = textwrap.dedent("""
    import fcntl, sys, time
    fh = open(sys.argv[1], "a")
    fcntl.flock(fh, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
""")


def _hold_lock(cache, seconds: float) -> subprocess.Popen:
    """Another process holding the build lock for ``seconds``, as scripts/llama_setup.sh does while it builds."""
    cache.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(cache / build_wait.LOCK_NAME), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_no_build_running_no_wait_no_line(tmp_path):
    lines: list[str] = []
    assert build_wait.wait_for_build(tmp_path, say=lines.append) == 0.0 and lines == []
    (tmp_path / build_wait.LOCK_NAME).touch()  # a lock file left by a finished build holds nothing
    assert build_wait.wait_for_build(tmp_path, say=lines.append) == 0.0 and lines == []


def test_waits_for_a_running_build_saying_what_and_how_long(tmp_path):
    proc = _hold_lock(tmp_path, 2.0)
    lines: list[str] = []
    try:
        waited = build_wait.wait_for_build(tmp_path, every=0.5, poll=0.1, say=lines.append)
    finally:
        proc.wait(timeout=10)
    assert waited >= 1.0
    assert "waiting for the local llama-server build" in lines[0] and str(tmp_path / build_wait.LOG_NAME) in lines[0]
    assert any(line.endswith("s so far") for line in lines[1:-1]) and "finished after" in lines[-1]


def test_a_build_that_never_ends_is_named(tmp_path):
    proc = _hold_lock(tmp_path, 5.0)
    try:
        with pytest.raises(build_wait.BuildWaitTimeout, match=r"still running after .* RERANKEVAL_LLAMA_BACKEND=wheel"):
            build_wait.wait_for_build(tmp_path, timeout=0.5, poll=0.1, say=lambda _: None)
    finally:
        proc.kill()
        proc.wait()


STUB_SETUP = """#!/usr/bin/env bash
# stands in for scripts/llama_setup.sh: holds the build lock for 4 s, as a build does
exec 9>"$RERANKEVAL_CACHE/.llama_setup.lock"; flock 9
date +%s.%N >"$RERANKEVAL_CACHE/build-started"; sleep 4; date +%s.%N >"$RERANKEVAL_CACHE/build-ended"
"""
STUB_CHAIN = """#!/usr/bin/env bash
# stands in for the venv's python running the chain: notes when it starts, then waits as the first LLM step does
date +%s.%N >"$RERANKEVAL_CACHE/chain-started"
sleep 1  # the chain's first LLM step comes later than its start: by then the background build holds its lock
exec {python} -c 'import os, pathlib; from rerankeval.llm.build_wait import wait_for_build; \
wait_for_build(pathlib.Path(os.environ["RERANKEVAL_CACHE"]), every=1)'
"""


def _make_value(folder, env, expr: str) -> str:
    r = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", f"_v: ; @echo {expr}", "_v"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return r.stdout.strip()


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("flock") is None, reason="needs GNU make and flock")
def test_make_report_starts_the_chain_while_the_llama_build_runs(tmp_path):
    folder, cache = tmp_path / "clone", tmp_path / "cache"
    (folder / "scripts").mkdir(parents=True)
    for name in ("Makefile", "requirements.txt", "pyproject.toml", "lib"):
        (folder / name).symlink_to(paths.ROOT / name)
    (folder / "scripts" / "llama_setup.sh").write_text(STUB_SETUP)
    chain = tmp_path / "python"
    chain.write_text(STUB_CHAIN.format(python=sys.executable))
    chain.chmod(0o755)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS", "OPENAI_"))},
        "CACHE": str(cache),
        "RERANKEVAL_LLAMA_BACKEND": "build",
    }
    for stamp in ("$(STAMP)", "$(EDITABLE_STAMP)"):  # the venv is ready: `make setup` has nothing to do
        path = _make_value(folder, env, stamp)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
        time.sleep(0.01)
    r = subprocess.run(
        ["make", "--no-print-directory", "report", f"PY={chain}"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    started = {n: float((cache / n).read_text()) for n in ("build-started", "build-ended", "chain-started")}
    assert started["chain-started"] < started["build-ended"]  # the chain did not wait for the build to start
    assert "[llm] waiting for the local llama-server build" in r.stderr and "s so far" in r.stderr
    assert "finished after" in r.stderr
