"""The local LLM endpoint: llama.cpp's ``llama-server`` with the Qwen2.5-Coder-0.5B-Instruct GGUF.

``ensure_endpoint()`` is what the chain runner and notebook 04 use::

    with llm_server.ensure_endpoint() as env:   # env: OPENAI_BASE_URL, OPENAI_API_KEY, RERANK_MODEL, ...
        ...                                     # pass env to the notebook kernels / load_settings(env)

When an endpoint is configured (``OPENAI_BASE_URL`` in the environment or ``.env``) it yields those
settings and starts nothing. Otherwise it runs ``scripts/llama_setup.sh all`` (builds the server and
assembles the model once, cached), starts ``llama-server`` on 127.0.0.1 on a free port, waits for
``/health`` and yields its settings; on exit (normal, exception, SIGTERM, or the parent dying:
PR_SET_PDEATHSIG) the server is stopped.

CLI (e.g. for ``make lab``)::

    python -m rerankeval.llm_server --run -- jupyter lab     # CMD runs with the endpoint's environment
    python -m rerankeval.llm_server                          # serve until Ctrl-C, print the settings
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from .paths import ROOT, cache_dir
from .settings import DEFAULT_LLAMA_THREADS, Settings, load_settings, redact, scrub_url

SETUP_SCRIPT = ROOT / "scripts" / "llama_setup.sh"
LOCAL_API_KEY = "sk-local-llama-server"  # llama-server is started without --api-key; any value works
DEFAULT_CTX = 8192
DEFAULT_PARALLEL = 1  # docs/CONVENTIONS.md#local-llm: 2 slots on 2 cores are no faster; 1 keeps replies deterministic
CHECK_TIMEOUT = 10.0  # seconds check_endpoint waits for a configured endpoint to answer
# threads: Settings.llama_threads (RERANKEVAL_LLAMA_THREADS, default 2 on the 2-core reference machine); when
# other processes load the CPU, 1 thread was 2.4x faster here (1.3 vs 3.1 s per yes/no call): llama.cpp's
# threads wait on each other when one is descheduled.


class EndpointError(RuntimeError):
    pass


def setup_paths(timeout: float = 3600) -> tuple[Path, Path]:
    """(llama-server binary, GGUF model) from ``scripts/llama_setup.sh all``; builds/fetches once.

    The script holds a file lock in the cache, so two processes (or make and a test) never build at once.
    """
    env = {**os.environ, "RERANKEVAL_CACHE": str(cache_dir())}
    env.setdefault("PYTHON", sys.executable)
    proc = subprocess.run(["bash", str(SETUP_SCRIPT), "all"], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise EndpointError(f"{SETUP_SCRIPT} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    if len(lines) < 2:
        raise EndpointError(f"{SETUP_SCRIPT} printed {lines!r}, expected the server and model paths")
    return Path(lines[-2]), Path(lines[-1])


def model_name(model_path: Path) -> str:
    return model_path.name.removesuffix(".gguf")


def endpoint_id(server: Path, model_path: Path) -> str:
    """Stable identity of the local endpoint for cache keys (its port changes on every start)."""
    version = server.parent.parent.name  # .../llama.cpp/<version>/bin/llama-server
    m = re.search(r'MODEL_SHA256="([0-9a-f]{64})"', SETUP_SCRIPT.read_text(encoding="utf-8"))
    digest = m.group(1)[:16] if m else f"size{model_path.stat().st_size}"
    return f"llama-server/{version}/{model_name(model_path)}@{digest}"


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


class LocalServer:
    """One llama-server process; ``start()`` / ``stop()`` (idempotent)."""

    def __init__(
        self,
        server: Path,
        model: Path,
        *,
        ctx: int = DEFAULT_CTX,
        parallel: int = DEFAULT_PARALLEL,
        threads: int = DEFAULT_LLAMA_THREADS,
        port: int | None = None,
        log_path: Path | None = None,
    ):
        self.server, self.model = server, model
        self.ctx, self.parallel, self.threads = ctx, parallel, threads
        self.port = port or free_port()
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"rerankeval-llama-server-{os.getpid()}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.server),
            "-m", str(self.model),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "-c", str(self.ctx),
            "-np", str(self.parallel),
            "--threads", str(self.threads),
            "--alias", model_name(self.model),
            "--no-webui",
        ]  # fmt: skip

    def start(self, wait: float = 180.0) -> None:
        log = open(self.log_path, "wb")
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
            if self.proc.poll() is not None:
                raise EndpointError(f"llama-server exited with {self.proc.returncode}:\n{self.log_tail()}")
            if _healthy(self.base):
                return
            time.sleep(0.25)
        self.stop()
        raise EndpointError(f"llama-server did not become healthy within {wait:.0f} s:\n{self.log_tail()}")

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


@contextlib.contextmanager
def _stop_on_sigterm(stop) -> Iterator[None]:
    """Turn SIGTERM into SystemExit (so ``finally`` blocks run) while the server lives; main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):  # noqa: ARG001
        stop()
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def ensure_endpoint(
    environ: Mapping[str, str] | None = None,
    *,
    ctx: int = DEFAULT_CTX,
    parallel: int = DEFAULT_PARALLEL,
    threads: int | None = None,
    wait: float = 180.0,
    settings: Settings | None = None,
) -> Iterator[dict[str, str]]:
    """Yield the environment variables of a working endpoint, starting the local server if none is set.

    ``settings`` default: ``load_settings(environ)``; ``threads`` default: ``settings.llama_threads``.
    """
    settings = settings if settings is not None else load_settings(environ)
    if settings.configured:
        yield settings.env()
        return
    server_bin, model = setup_paths()
    threads = settings.llama_threads if threads is None else threads
    srv = LocalServer(server_bin, model, ctx=ctx, parallel=parallel, threads=threads)
    atexit.register(srv.stop)
    try:
        with _stop_on_sigterm(srv.stop):
            srv.start(wait=wait)
            yield {
                "OPENAI_BASE_URL": f"{srv.base}/v1",
                "OPENAI_API_KEY": LOCAL_API_KEY,
                "RERANK_MODEL": model_name(model),
                "RERANK_ENDPOINT_ID": endpoint_id(server_bin, model),
                "RERANK_TIMEOUT": repr(float(settings.timeout)),
                "RERANK_MAX_RETRIES": str(settings.max_retries),
            }
    finally:
        srv.stop()
        atexit.unregister(srv.stop)


def check_endpoint(settings: Settings, timeout: float = CHECK_TIMEOUT) -> str | None:
    """None when the configured endpoint answers (or none is configured: the local server is started on
    demand); else a message naming the endpoint (credentials redacted), what went wrong and how to fix it.

    Asks ``GET /models`` once, without retries: refused, timed out, or the key refused (401/403) is a problem;
    any other answer (even 404: not every server lists models) means the endpoint is there.
    """
    if not settings.configured:
        return None
    import openai

    from .rerank.client import UNREACHABLE_HINT

    url = scrub_url(settings.base_url or "")
    try:
        with openai.OpenAI(base_url=settings.base_url, api_key=settings.api_key or "sk-no-key", max_retries=0,
                           timeout=timeout) as client:
            client.models.list()
    except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
        return redact(f"The LLM endpoint {url} refused the key (HTTP {exc.status_code}). Fix OPENAI_API_KEY in "
                      ".env or the environment.", [settings.api_key])
    except (openai.APIConnectionError, openai.APITimeoutError) as exc:
        return redact(f"The LLM endpoint {url} cannot be reached ({type(exc).__name__}: {exc}). {UNREACHABLE_HINT}",
                      [settings.api_key])
    except openai.APIStatusError:
        pass  # it answered: reachable
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rerankeval.llm_server", description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="run the command after -- with the endpoint's environment")
    ap.add_argument("--ctx", type=int, default=DEFAULT_CTX)
    ap.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL)
    ap.add_argument("--threads", type=int, default=None, help="default: RERANKEVAL_LLAMA_THREADS, else 2")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if args.run and not cmd:
        ap.error("--run needs a command after --")
    with ensure_endpoint(ctx=args.ctx, parallel=args.parallel, threads=args.threads) as env:
        for k, v in env.items():
            print(f"{k}={redact(v, [v] if k == 'OPENAI_API_KEY' else None)}", file=sys.stderr)
        if args.run:
            child = subprocess.Popen(cmd, env={**os.environ, **env})
            try:
                return child.wait()
            except (KeyboardInterrupt, SystemExit):
                child.terminate()
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                raise
        print("serving; Ctrl-C to stop", file=sys.stderr)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
