"""Wait, visibly, for a local llama-server build that another process is running.

``make report`` starts the chain as soon as the venv is ready and builds the local llama-server (and assembles the
model) in the background meanwhile (``make llama-if-local``, its output in ``<cache>/llama-build.log``).
``scripts/llama_setup.sh`` holds an exclusive ``flock`` on ``<cache>/.llama_setup.lock`` while it builds or assembles,
so anyone who needs the server before the build is done would block on that lock in silence. Call
:func:`wait_for_build` first: it returns at once when no build is running, and otherwise prints, every ``every``
seconds, what it waits for and how long so far::

    [llm] waiting for the local llama-server build (scripts/llama_setup.sh, log: <cache>/llama-build.log): 30 s so far

A build that fails ends the wait like one that succeeds; whoever starts the server then falls back to the prebuilt
server, as before (:func:`rerankeval.llm.server.start_local`).
"""

from __future__ import annotations

import fcntl
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rerankeval.core.errors import ReRankEvalError

LOCK_NAME = ".llama_setup.lock"  # scripts/llama_setup.sh: lock llama_setup -> $CACHE/.llama_setup.lock
LOG_NAME = "llama-build.log"  # the Makefile's report target writes the background build's output here
EVERY_S = 15.0
TIMEOUT_S = 3600.0  # as rerankeval.llm.server.setup_paths waits for the setup script


class BuildWaitTimeout(ReRankEvalError, TimeoutError):
    """The background build held its lock for longer than the wait allows."""


def build_running(cache: Path) -> bool:
    """True while another process holds the local server's build lock (a build or model assembly is running) in
    the cache folder ``cache``."""
    lock = cache / LOCK_NAME
    if not lock.exists():
        return False
    with open(lock, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def wait_for_build(
    cache: Path,
    *,
    every: float = EVERY_S,
    timeout: float = TIMEOUT_S,
    say: Callable[[str], None] = _say,
    poll: float = 0.5,
) -> float:
    """Block until no local llama-server build is running in the cache folder ``cache`` (the settings'
    ``RERANKEVAL_CACHE``, where ``scripts/llama_setup.sh`` builds); return the seconds waited (0.0 when none was).

    Prints a line when the wait starts, every ``every`` seconds after, and when it ends; raises
    :class:`BuildWaitTimeout` (naming the log) after ``timeout`` seconds.
    """
    if not build_running(cache):
        return 0.0
    what = f"the local llama-server build (scripts/llama_setup.sh, log: {cache / LOG_NAME})"
    t0 = time.monotonic()
    said = t0
    say(f"[llm] waiting for {what}: the first LLM step needs it")
    while build_running(cache):
        now = time.monotonic()
        if now - t0 > timeout:
            raise BuildWaitTimeout(
                f"{what} is still running after {now - t0:.0f} s: look at its log; stop it and run "
                "`make llama` to build again, or set RERANKEVAL_LLAMA_BACKEND=wheel to use the "
                "prebuilt server"
            )
        if now - said >= every:
            say(f"[llm] waiting for {what}: {now - t0:.0f} s so far")
            said = now
        time.sleep(poll)
    waited = time.monotonic() - t0
    say(f"[llm] the local llama-server build finished after {waited:.0f} s of waiting")
    return waited
