"""JupyterLab on the project's notebooks, with the project kernel and an LLM endpoint beside it.

``python -m rerankeval.apps.lab`` is what ``make lab`` runs. It works as root or not (``--allow-root`` is
added for root, as in most containers, and one line says what that means: the token gives a root terminal),
with or without a display (no browser is opened without one), and prints the URL with its token once the
server answers. New notebooks get the project kernel (``rerankeval``, installed by ``make setup``). The LLM
endpoint comes from :func:`rerankeval.llm.server.endpoint`: the configured one (``OPENAI_BASE_URL``),
else the local llama-server, started here and given to every kernel through its environment. Ctrl-C (or
SIGTERM) stops JupyterLab, its kernels and the local server.

The lab opens one dataset (``--dataset``, what ``make lab DATASET=...`` passes): its kernels get ``DATASET``, which
00-explore reads through :func:`dataset_of_lab` while its ``dataset`` parameter is left at the default. Using the
lab leaves the repository clean: :func:`strip_outputs` (the server's ``pre_save_hook``, set in the config file
:func:`config_env` writes) saves a notebook of the repository's ``notebooks/`` without outputs, execution counts
or run metadata, so JupyterLab's autosave never dirties the tracked notebooks (issue 35 item 6).

The console stays quiet: the server logs at WARN (no extension-by-extension start log), kernels talk over IPC
(no IPKernelApp "running over TCP without encryption" warning), and :func:`quiet_logs` (loaded through a config
file in a private folder made for each lab, :func:`config_env`) drops two known harmless messages:
jupyter_server's ``kernel_ws_protocol`` traceback when a browser tab re-attaches to a closed kernel
(jupyter_server issue 1265; one line says so instead) and tornado's ``websocket_ping_timeout`` warning.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import shutil
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
from typing import Any

from rerankeval.core import paths
from rerankeval.core.settings import Settings, load_settings

KERNEL = "rerankeval"
DEFAULT_PORT = 8888
FIRST_NOTEBOOK = "00-explore.ipynb"  # opened first when it exists
LOG_LEVEL = "WARN"  # the server's console: warnings and errors only
_QUIET_LOGGERS = ("ServerApp", "LabApp", "tornado.application", "tornado.general", "tornado.access")
WS_REATTACH = (
    "a browser tab re-attached to a kernel that had closed (a known jupyter_server quirk, issue 1265): "
    "reload the tab if its kernel shows as disconnected"
)


class QuietFilter(logging.Filter):
    """Drops tornado's ``websocket_ping_timeout`` warning; turns jupyter_server's ``kernel_ws_protocol`` traceback
    (an ``AttributeError`` in ``select_subprotocol``) into the one line :data:`WS_REATTACH`."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, AttributeError) and "kernel_ws_protocol" in str(exc):
            record.msg, record.args, record.exc_info, record.exc_text = WS_REATTACH, (), None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            return True
        return "websocket_ping_timeout" not in record.getMessage()


def quiet_logs() -> None:
    """Install :class:`QuietFilter` on the server's loggers (called from the config file :func:`lab_command` writes;
    tornado's loggers keep their objects when jupyter_server renames them)."""
    from tornado.log import access_log, app_log, gen_log

    for log in {*(logging.getLogger(n) for n in _QUIET_LOGGERS), access_log, app_log, gen_log}:
        if not any(isinstance(f, QuietFilter) for f in log.filters):
            log.addFilter(QuietFilter())


RUN_METADATA = frozenset({"collapsed", "scrolled", "execution", "ExecuteTime"})  # cell metadata a run or a view adds
DATASET_ENV = "DATASET"  # the Makefile's variable (not one of ours: docs/CONTRACTS.md), given to the lab's kernels


def _stored_metadata(target: Path, metadata: dict[str, Any]) -> dict[str, Any]:
    """The notebook-level metadata to save: the file's own when it exists (a kernel's ``language_info``, a switched
    kernel or widget state never change a tracked notebook), else ``metadata`` without run details."""
    import nbformat

    try:
        return dict(nbformat.read(target, as_version=4).metadata)
    except (OSError, ValueError):  # none yet, or unreadable: nbformat raises a ValueError
        kept = {k: v for k, v in metadata.items() if k != "widgets"}
        if isinstance(kept.get("language_info"), dict):
            kept["language_info"] = {"name": kept["language_info"].get("name", "python")}
        return kept


def strip_outputs(model: dict[str, Any], path: str, contents_manager: Any, **_: Any) -> None:
    """The Jupyter server's ``pre_save_hook``: a notebook saved under the repository's ``notebooks/`` loses its
    outputs, execution counts and run metadata (nbconvert's ``ClearOutputPreprocessor``) and keeps the file's
    notebook metadata, so it is saved as it is stored (``git status`` stays clean). Other files are left alone."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    target = Path(contents_manager.root_dir, path.lstrip("/")).resolve()
    if not target.is_relative_to(paths.NOTEBOOKS_DIR.resolve()):
        return
    import nbformat
    from nbconvert.preprocessors import ClearOutputPreprocessor

    nb = nbformat.from_dict(model["content"])
    ClearOutputPreprocessor(remove_metadata_fields=set(RUN_METADATA)).preprocess(nb, {})
    nb.metadata = nbformat.from_dict(_stored_metadata(target, dict(nb.metadata)))
    model["content"] = nb


def dataset_of_lab(dataset: str) -> str:
    """The dataset 00-explore shows: ``dataset`` when it was given (papermill, an edit), else the one the lab was
    opened on (``make lab DATASET=...``: ``DATASET`` in the kernel's environment), else the default."""
    if dataset != paths.DEFAULT_DATASET:
        return dataset
    return os.environ.get(DATASET_ENV, "").strip() or dataset


CONFIG_TEXT = (
    "from rerankeval.apps.lab import quiet_logs\n\nquiet_logs()\n"
    "c = get_config()  # noqa: F821 - Jupyter's config loader defines it\n"
    "c.ContentsManager.pre_save_hook = 'rerankeval.apps.lab.strip_outputs'\n"
)


@contextlib.contextmanager
def config_env() -> Iterator[dict[str, str]]:
    """``JUPYTER_CONFIG_PATH`` with a folder first whose ``jupyter_server_config.py`` calls :func:`quiet_logs` in the
    server process; a personal ``jupyter_server_config.py`` is still read (Jupyter reads every one on the path).

    The folder is new for each lab and private: made by ``tempfile.mkdtemp`` (mode 0700, owned by us, a name no
    one could have planted), the file created there with ``O_EXCL | O_NOFOLLOW`` (never through a symlink), and
    removed when the lab stops. A fixed folder in the shared temporary directory was reused without a check: a
    symlink planted there by another user made the lab overwrite the link's target, and Jupyter would have run a
    planted config file as the lab's user (issue 32, defect 13)."""
    folder = Path(tempfile.mkdtemp(prefix=f"rerankeval-lab-{os.getuid()}-"))
    try:
        fd = os.open(folder / "jupyter_server_config.py", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(CONFIG_TEXT)
        rest = os.environ.get("JUPYTER_CONFIG_PATH", "")
        yield {"JUPYTER_CONFIG_PATH": os.pathsep.join(p for p in (str(folder), rest) if p)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def free_port(preferred: int = DEFAULT_PORT, host: str = "127.0.0.1") -> int:
    """``preferred`` when nothing listens there, else a free port chosen by the system."""
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"no free TCP port on {host}")


def kernel_name() -> str:
    """The project kernel when installed, else ``python3`` (with a hint to install it)."""
    from jupyter_client.kernelspec import KernelSpecManager

    if KERNEL in KernelSpecManager().find_kernel_specs():
        return KERNEL
    print(
        f"[lab] the Jupyter kernel {KERNEL!r} is not installed (make setup installs it); using python3", file=sys.stderr
    )
    return "python3"


def has_display() -> bool:
    return sys.platform == "darwin" or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def runs_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


ROOT_NOTE = (
    "[lab] running as root: JupyterLab gets --allow-root, so whoever has the URL with its token gets a "
    "root terminal and root kernels on this machine; keep the token private, or run make lab as an ordinary "
    "user"
)


def lab_command(port: int, token: str, notebook_dir: Path, ip: str, browser: bool) -> list[str]:
    """The ``jupyter lab`` command line (run with this interpreter)."""
    cmd = [
        sys.executable, "-m", "jupyterlab",
        f"--ServerApp.ip={ip}", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={notebook_dir}", f"--IdentityProvider.token={token}",
        f"--MappingKernelManager.default_kernel_name={kernel_name()}",
        f"--ServerApp.log_level={LOG_LEVEL}", f"--LabApp.log_level={LOG_LEVEL}", "--KernelManager.transport=ipc",
    ]  # fmt: skip
    if not browser:
        cmd.append("--no-browser")
    if runs_as_root():
        cmd.append("--allow-root")  # said on the console: ROOT_NOTE
    return cmd


def wait_ready(base: str, token: str, proc: subprocess.Popen, timeout: float = 180.0) -> bool:
    """True once ``GET /api/status`` answers 200; False when the server exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    return False


def stop(proc: subprocess.Popen, wait: float = 20.0) -> None:
    """SIGTERM (JupyterLab shuts its kernels down), then SIGKILL after ``wait`` seconds."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _announce(base: str, token: str, notebook_dir: Path, llm_env: dict[str, str], dataset: str = "") -> None:
    from rerankeval.core.settings import redact

    first = f"/lab/tree/{FIRST_NOTEBOOK}" if (notebook_dir / FIRST_NOTEBOOK).is_file() else "/lab"
    endpoint = redact(llm_env.get("OPENAI_BASE_URL", "none"))
    print(f"[lab] JupyterLab: {base}{first}?token={token}", flush=True)
    opened = f"dataset: {dataset} (make lab DATASET=... opens another); " if dataset else ""
    print(
        f"[lab] {opened}notebooks: {notebook_dir}; LLM endpoint for the kernels: {endpoint}; Ctrl-C stops both",
        flush=True,
    )


def serve(
    port: int,
    notebook_dir: Path,
    ip: str,
    browser: bool,
    settings: Settings,
    dataset: paths.DatasetPaths | None = None,
) -> int:
    """Run JupyterLab beside the LLM endpoint of ``settings`` until it exits or Ctrl-C; its exit status (0 on
    Ctrl-C). Its kernels get ``DATASET`` (``dataset``'s folder: what 00-explore opens)."""
    from rerankeval.llm.server import endpoint, endpoint_env

    token = secrets.token_hex(24)
    with endpoint(settings) as served, config_env() as quiet_env:
        llm_env = endpoint_env(served)
        opened = {DATASET_ENV: str(dataset.source)} if dataset else {}
        # its own session: the terminal's Ctrl-C reaches only us, and we stop it without its y/n prompt
        proc = subprocess.Popen(
            lab_command(port, token, notebook_dir, ip, browser),
            env={**os.environ, **llm_env, **quiet_env, **opened},
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            base = f"http://{'127.0.0.1' if ip in ('0.0.0.0', '') else ip}:{port}"
            if wait_ready(base, token, proc):
                _announce(base, token, notebook_dir, llm_env, dataset.name if dataset else "")
            return proc.wait()
        except KeyboardInterrupt:
            print("\n[lab] stopping JupyterLab and the LLM endpoint ...", file=sys.stderr, flush=True)
            return 0
        finally:
            stop(proc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rerankeval.apps.lab", description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0, help=f"port (default: {DEFAULT_PORT}, else a free one)")
    ap.add_argument("--ip", default="127.0.0.1", help="address to listen on (0.0.0.0: reachable from outside)")
    ap.add_argument("--notebook-dir", type=Path, default=paths.NOTEBOOKS_DIR, help="folder JupyterLab shows")
    ap.add_argument("--no-browser", action="store_true", help="never open a browser (none opens without a display)")
    ap.add_argument(
        "--dataset",
        default=os.environ.get(DATASET_ENV, paths.DEFAULT_DATASET),
        help="dataset name under data/ or ../shared/data, or a folder path: what 00-explore opens",
    )
    args = ap.parse_args(argv)
    try:
        settings = load_settings()  # the lab's one read of the environment and .env: its LLM endpoint
        dataset = paths.resolve_dataset(args.dataset, settings)
    except (ValueError, paths.DatasetNotFound) as exc:
        print(f"[lab] ERROR: {exc}", file=sys.stderr)
        return 2
    port = args.port or free_port(DEFAULT_PORT, "127.0.0.1" if args.ip in ("0.0.0.0", "") else args.ip)

    def on_sigterm(signum: int, frame: object) -> None:  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    if runs_as_root():
        print(ROOT_NOTE, file=sys.stderr, flush=True)
    try:
        browser = has_display() and not args.no_browser
        return serve(port, args.notebook_dir.resolve(), args.ip, browser, settings, dataset)
    except KeyboardInterrupt:  # while the LLM endpoint was starting
        return 0


if __name__ == "__main__":
    sys.exit(main())
