"""One local llama.cpp server process, started, watched and stopped (used by :mod:`rerankeval.llm.server`).

Both backends (the ``llama-server`` build and the prebuilt ``xllamacpp`` server) take llama-server's options.
A server that dies of a signal while starting or on its first request is restarted once with ``--no-repack``
(llama.cpp issue 20824: the AMX/repacked CPU kernels segfault on some AVX-512/AMX CPUs).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.settings import DEFAULT_LLAMA_THREADS

DEFAULT_CTX = 8192
DEFAULT_PARALLEL = 1  # docs/CONVENTIONS.md#local-llm: 2 slots on 2 cores are no faster; 1 keeps replies deterministic
FIRST_REQUEST_TIMEOUT = 120.0  # seconds the start-up probe (one token) may take


class EndpointError(ReRankEvalError, RuntimeError):
    pass


class ServerCrashed(EndpointError):
    """The server process died of a signal (SIGSEGV, SIGILL, ...) while starting or on its first request."""


def model_name(model_path: Path) -> str:
    return model_path.name.removesuffix(".gguf")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pdeathsig() -> None:  # runs in the child: die with the parent
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _healthy(base: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


class LocalServer:
    """One local llama.cpp server process; ``start()`` / ``stop()`` (idempotent).

    ``server`` is the ``llama-server`` binary or a command (``[python, -m, rerankeval.llm.xllama_server]``); both take
    llama-server's options. A server that dies of a signal while starting or on its first request is started once
    more with ``--no-repack``: llama.cpp's AMX/repacked CPU kernels segfault on some AVX-512/AMX CPUs
    (llama.cpp issue 20824); ``no_repack`` then stays True and the endpoint id says so.
    """

    def __init__(
        self,
        server: Path | list[str],
        model: Path,
        *,
        ctx: int = DEFAULT_CTX,
        parallel: int = DEFAULT_PARALLEL,
        threads: int = DEFAULT_LLAMA_THREADS,
        port: int | None = None,
        log_path: Path | None = None,
        no_repack: bool = False,
    ):
        self.server, self.model = server, model
        self.ctx, self.parallel, self.threads = ctx, parallel, threads
        self.port = port or free_port()
        self.no_repack = no_repack
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"rerankeval-llama-server-{os.getpid()}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.notes: list[str] = []  # what start() had to do (said on the terminal too)
        self._lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def label(self) -> str:
        return "llama-server" if isinstance(self.server, Path) else "llama.cpp server (xllamacpp)"

    def command(self) -> list[str]:
        head = [str(self.server)] if isinstance(self.server, Path) else list(self.server)
        return [
            *head,
            "-m", str(self.model),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "-c", str(self.ctx),
            "-np", str(self.parallel),
            "--threads", str(self.threads),
            "--alias", model_name(self.model),
            "--no-webui",
            *(["--no-repack"] if self.no_repack else []),
        ]  # fmt: skip

    def start(self, wait: float = 180.0) -> None:
        """Start, wait for ``/health``, send one one-token request; on a crash retry once with --no-repack."""
        try:
            self._start_once(wait)
        except ServerCrashed as exc:
            if self.no_repack:
                raise
            sig = str(exc).split(":", 1)[0]
            note = (
                f"{self.label} died ({sig}) while starting; this is llama.cpp's known crash in its AMX/repacked "
                "CPU kernels on some AVX-512/AMX CPUs (llama.cpp issue 20824). Restarting it with --no-repack "
                "(LLAMA_ARG_REPACK=0): same model, slightly different float order."
            )
            if "SIGILL" in sig:
                note += (
                    " SIGILL usually means a binary built for another CPU: `make llama` builds one for this "
                    "CPU, or set RERANKEVAL_LLAMA_BACKEND=wheel for the portable prebuilt server."
                )
            self.notes.append(note)
            print(f"[llm] {note}", file=sys.stderr, flush=True)
            self.stop()
            self.no_repack = True
            self.port = free_port()
            self._start_once(wait)

    def _start_once(self, wait: float) -> None:
        # a predictable name in the shared temp dir: never follow a link planted there, never open another's file
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        if os.fstat(fd).st_uid != os.getuid():
            os.close(fd)
            raise PermissionError(
                f"{self.log_path} belongs to another user: remove it, or set TMPDIR to a private folder"
            )
        os.ftruncate(fd, 0)
        log = os.fdopen(fd, "wb")
        try:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_pdeathsig if sys.platform.startswith("linux") else None,
            )
        finally:
            log.close()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            self._raise_if_dead("while starting")
            if _healthy(self.base):
                self._first_request()
                return
            time.sleep(0.25)
        self.stop()
        raise EndpointError(f"{self.label} did not become healthy within {wait:.0f} s:\n{self.log_tail()}")

    def _raise_if_dead(self, when: str) -> None:
        rc = self.proc.poll() if self.proc is not None else None
        if rc is None:
            return
        if rc < 0:
            raise ServerCrashed(
                f"{_signal_name(rc)}: {self.label} was killed by {_signal_name(rc)} {when}:\n{self.log_tail()}"
            )
        raise EndpointError(f"{self.label} exited with {rc} {when}:\n{self.log_tail()}")

    def _first_request(self) -> None:
        """One one-token chat request: the AMX crash happens on the first matrix product, after /health."""
        body = json.dumps(
            {"messages": [{"role": "user", "content": "Say ok."}], "max_tokens": 1, "temperature": 0}
        ).encode()
        req = urllib.request.Request(
            f"{self.base}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=FIRST_REQUEST_TIMEOUT) as r:
                r.read()
        except urllib.error.HTTPError:
            pass  # it answered
        except (urllib.error.URLError, OSError):
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)  # a crashing process may take a moment to be reaped
            self._raise_if_dead("on its first request")
            raise EndpointError(f"{self.label} did not answer its first request:\n{self.log_tail()}") from None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        with self._lock:
            proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
