"""A real embeddings server on this machine: Infinity (``infinity-emb`` from PyPI) serving the bundled all-MiniLM-L6-v2.

It lives in its own venv, ``<cache>/embed-server-venv`` (``make embed-server``, i.e. ``scripts/embed_server_setup.sh``:
once, never the project's venv), and serves the very model folder the in-process encoder loads
(:func:`rerankeval.index.embed.bundled_model_path`) under the name :data:`SERVED_NAME`, offline, on 127.0.0.1. The
endpoint test (``tests/index/test_embed_server.py``) and ``bench/embed_server.py`` start it with :func:`serve`::

    with serve() as base_url:      # e.g. http://127.0.0.1:41234/v1 ; EMBED_BASE_URL=base_url EMBED_MODEL=SERVED_NAME
        ...

or by hand: ``python -m rerankeval.index.embed_server`` prints the two settings and serves until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from rerankeval.core.errors import ReRankEvalError
from rerankeval.index.embed import bundled_model_path

SERVED_NAME = "all-MiniLM-L6-v2"
VERSION = "0.0.78"  # infinity-emb, as scripts/embed_server_setup.sh installs it
SETUP = "make embed-server"


class EmbedServerUnavailable(ReRankEvalError, RuntimeError):
    """The local embeddings server is not installed or did not start; the message says how to set it up."""


def venv_dir(cache: Path) -> Path:
    """Where ``make embed-server`` installs the server, in the cache folder ``cache`` (``RERANKEVAL_CACHE``)."""
    return cache / "embed-server-venv"


def server_command(cache: Path) -> Path:
    """The installed ``infinity_emb`` command, or :class:`EmbedServerUnavailable` saying how to install it."""
    venv = venv_dir(cache)
    if not (venv / f".installed-{VERSION}").is_file() or not (venv / "bin" / "infinity_emb").is_file():
        raise EmbedServerUnavailable(
            f"the local embeddings server (infinity-emb {VERSION}) is not installed in "
            f"{venv}: run `{SETUP}` (once, a few minutes; it never touches the project's "
            "venv)"
        )
    return venv / "bin" / "infinity_emb"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as r:  # noqa: S310 - 127.0.0.1 only
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def serve(cache: Path, *, wait: float = 240.0, batch_size: int = 32, log: Path | None = None) -> Iterator[str]:
    """Start Infinity (installed in the cache folder ``cache``: :func:`venv_dir`) on a free port of 127.0.0.1 and
    yield its base URL (``.../v1``); stop it on exit."""
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    cmd = [
        str(server_command(cache)),
        "v2",
        "--model-id",
        str(bundled_model_path()),
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--url-prefix",
        "/v1",
        "--engine",
        "torch",
        "--device",
        "cpu",
        "--batch-size",
        str(batch_size),
        "--no-model-warmup",
    ]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "DO_NOT_TRACK": "1",
        "INFINITY_ANONYMOUS_USAGE_STATS": "0",
    }
    logfile = Path(log) if log else Path(tempfile.mkstemp(prefix="infinity-", suffix=".log")[1])
    with open(logfile, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + wait
        while not _up(base_url):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = logfile.read_bytes()[-1500:].decode(errors="replace")
                raise EmbedServerUnavailable(
                    f"the local embeddings server did not start within {wait:.0f} s "
                    f"(exit code {proc.poll()}; its log: {logfile}):\n{tail}"
                )
            time.sleep(1)
        yield base_url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if not log:
            logfile.unlink(missing_ok=True)


def main() -> int:
    with serve() as base_url:
        print(f"EMBED_BASE_URL={base_url}\nEMBED_MODEL={SERVED_NAME}\nserving; Ctrl-C to stop", file=sys.stderr)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
