"""Run the numbered notebooks in order with papermill and render the HTML report.

``python -m rerankeval.chain --dataset NAME_OR_PATH [--set key=value ...] [--only NN] [--allow-fallback]``
is what ``make report`` calls. Parameters come from ``params/default.yaml``, then ``params/<dataset>.yaml``,
then ``--set``; each notebook receives only the parameters its ``parameters`` cell declares. Executed
notebooks go to ``results/<dataset>/executed/``, HTML to ``results/<dataset>/report/``; the index links
every notebook that has a rendered page, this run's or an earlier one's (marked "earlier run"). The explorer
``00-explore`` (what ``make lab`` opens first) reads what 01-05 saved, so the chain runs it after 05 and before 06+.

Before any notebook runs the chain checks what it can: the settings (environment and ``.env``), each
parameter against the type its notebook's ``parameters`` cell declares (``rrf_k: int = 60``), parameters that
must agree (``pool_k >= final_k``), that the results folder is writable, the dataset's files, and, when the
LLM notebook is in the run, that the LLM endpoint answers (the local llama-server is started and must become
healthy). A dead endpoint stops the run with its URL and the fix,
unless fallbacks were asked for: ``--allow-fallback`` or ``--set allow_fallback=true``
(``make report P="allow_fallback=true"``), in which case every rerank call falls back to the fused order.
The endpoint's settings reach the notebook kernels through their environment only.

Executed notebooks and pages are replaced atomically (a temporary file, then ``os.replace``): a full disk
leaves the last complete copy, never a truncated one, and ends the run with one ``[chain] ERROR`` line naming
the folder and the OS error.

Exit status: 0 done; 1 a notebook failed (the run stops, names the notebook and cell, keeps the executed
copy and still writes the index); 2 a problem found before the run (settings, dataset, parameters, results
folder, endpoint); 130 interrupted by Ctrl-C, 143 by SIGTERM (the index shows what finished; re-run the same
command to resume: every finished stage is cached).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime as _dt
import errno
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from rerankeval.core import paths

KERNEL = "rerankeval"
EXIT_FAILED, EXIT_PREFLIGHT, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 2, 130, 143
SIGNALS = {signal.SIGINT: ("interrupted", "Ctrl-C", EXIT_INTERRUPTED),
           signal.SIGTERM: ("terminated", "SIGTERM", EXIT_TERMINATED)}  # what stops the run cleanly
ALLOW_FALLBACK = "allow_fallback"  # a chain option, also accepted as --set allow_fallback=true
PROBE_TIMEOUT = 5.0  # seconds for the endpoint check before the run
POSITIVE_INTS = ("leg_k", "pool_k", "final_k")


class PreflightError(Exception):
    """A problem found before any notebook runs; the message says what is wrong and how to fix it."""


EXPLORER_AFTER = "05"  # 00-explore reads the indexes and runs 01-05 saved: the chain runs it right after 05


def _chain_order(nb: Path) -> tuple[str, str]:
    """By number, except ``00-*`` (the explorer ``make lab`` opens first), which runs after ``EXPLORER_AFTER``
    and before any later notebook (06, 07 ...)."""
    number = nb.name[:2]
    return (EXPLORER_AFTER + "+" if number == "00" else number, nb.name)


def notebooks(only: list[str] | None = None) -> list[Path]:
    """The numbered notebooks (``NN-name.ipynb``) in chain order (see :func:`_chain_order`), optionally
    filtered by number or name."""
    found = sorted(paths.NOTEBOOKS_DIR.glob("[0-9][0-9]-*.ipynb"), key=_chain_order)
    if only:
        found = [p for p in found if any(p.name.startswith(o) or p.stem == o for o in only)]
    return found


def split_params(text: str) -> list[str]:
    """``make report P="..."`` as ``--set`` items: split before each ``name=``, so that a list value may hold
    spaces (``"pool_k=30 variants=[vector, bm25]"`` -> ``["pool_k=30", "variants=[vector, bm25]"]``)."""
    return [p for p in re.split(r"\s+(?=[A-Za-z_][A-Za-z0-9_]*=)", text.strip()) if p]


def override_texts(overrides: list[str]) -> dict[str, str]:
    """``key -> value`` as typed in each ``--set key=value`` (before YAML parsing; the last one wins)."""
    return {k.strip(): v for k, sep, v in (item.partition("=") for item in overrides) if sep and k.strip()}


def load_params(dataset_name: str, overrides: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for f in (paths.PARAMS_DIR / "default.yaml", paths.PARAMS_DIR / f"{dataset_name}.yaml"):
        if f.is_file():
            try:
                loaded = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                at = f", line {mark.line + 1}" if mark is not None else ""
                raise PreflightError(f"{f}{at}: not valid YAML ({getattr(exc, 'problem', None) or exc}); "
                                     "expected `name: value` lines, e.g. `pool_k: 10`") from None
            if not isinstance(loaded, dict):
                raise PreflightError(f"{f}: expected a mapping of parameter names to values (name: value lines)")
            params.update(loaded)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PreflightError(f"--set {item!r}: expected key=value (e.g. --set pool_k=30, or P=\"pool_k=30\")")
        try:
            params[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            problem = str(getattr(exc, "problem", None) or exc).strip()
            raise PreflightError(f"--set {item!r}: the value is not valid YAML ({problem}); e.g. --set ks=[1,3,5] "
                                 f"or P=\"variants=[vector, bm25]\"; quote text with ' or \"") from None
    return params


def _parameters_cell(nb: Path) -> list[ast.stmt]:
    """The statements of the notebook's cell tagged ``parameters`` (empty without one)."""
    import nbformat

    for cell in nbformat.read(nb, as_version=4).cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            return ast.parse(cell.source).body
    return []


def declared_parameters(nb: Path) -> set[str]:
    """Names assigned in the notebook's cell tagged ``parameters`` (parsed as Python, comments and all)."""
    names: set[str] = set()
    for node in _parameters_cell(nb):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _as_typed(value: Any) -> str:
    """A literal as one types it after ``--set name=`` (YAML): ``60``, ``yesno``, ``false``, ``[1,3,5]``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_as_typed(v) for v in value) + "]"
    return str(value) if isinstance(value, (str, int, float)) else repr(value)


def declared_types(nb: Path) -> dict[str, tuple[str, str, str]]:
    """``name -> (annotation, the cell's line, its default as typed after --set name=)`` for each annotated
    assignment of the notebook's ``parameters`` cell (``rrf_k: int = 60`` -> ``("int", "rrf_k: int = 60", "60")``)."""
    out = {}
    for node in _parameters_cell(nb):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            try:
                default = _as_typed(ast.literal_eval(node.value)) if node.value is not None else ""
            except (ValueError, SyntaxError):
                default = ast.unparse(node.value)
            out[node.target.id] = (ast.unparse(node.annotation), ast.unparse(node), default)
    return out


def effective_parameters(nb: Path, params: Mapping[str, Any]) -> dict[str, Any]:
    """What the notebook will run with: its parameters cell's literal defaults, overridden by ``params``."""
    values: dict[str, Any] = {}
    for node in _parameters_cell(nb):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            with contextlib.suppress(ValueError, SyntaxError):
                values[node.target.id] = ast.literal_eval(node.value)
    declared = declared_parameters(nb)
    values.update({k: v for k, v in params.items() if k in declared})
    return values


def _needs_llm(nb: Path) -> bool:
    return "rerank" in nb.stem


def _wants_llm(nb: Path, params: Mapping[str, Any]) -> bool:
    """03 with ``hybrid_reformulate`` listed rewrites queries with the LLM (it falls back when the LLM is down)."""
    from rerankeval.core.names import HYBRID_REFORMULATE

    return HYBRID_REFORMULATE in (effective_parameters(nb, params).get("variants") or [])


def _redact_file(path: Path) -> None:
    """Remove any configured secret from an executed notebook before it is kept or rendered."""
    from rerankeval.core.settings import redact

    text = path.read_text(encoding="utf-8")
    clean = redact(text)
    if clean != text:
        from rerankeval.core.ioutil import atomic_write_text

        atomic_write_text(path, clean)


# --------------------------------------------------------------------------- checks before the run
_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict}
_EXPECTED = {"int": "a whole number", "float": "a number", "str": "text", "bool": "true or false",
             "list": "a list, e.g. [a, b]", "dict": "a mapping, e.g. {a: 1}"}


def _coerce(annotation: str, value: Any, text: str | None) -> Any:
    """``value`` as the notebook's type when YAML read it otherwise but the meaning is clear: a ``str``
    parameter given ``42``, ``1.0`` or ``yes`` (the text as typed), or nothing (empty); a ``float`` given
    ``1e-3`` (YAML 1.1 reads that as text)."""
    if annotation == "str" and value is None:
        return ""
    if annotation == "str" and isinstance(value, (int, float)) and (text is not None or not isinstance(value, bool)):
        return text.strip() if text is not None else str(value)
    if annotation == "float" and isinstance(value, str):
        with contextlib.suppress(ValueError):
            return float(value)
    return value


def _type_ok(annotation: str, value: Any) -> bool:
    want = _TYPES[annotation]
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


def typed_parameters(nbs: list[Path], params: Mapping[str, Any],
                     texts: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``params`` checked against the types the notebooks' ``parameters`` cells declare (``rrf_k: int = 60``),
    with the clear cases converted (:func:`_coerce`); raise :class:`PreflightError` naming each parameter, the
    type expected and the value given. ``texts``: the ``--set`` values as typed (:func:`override_texts`)."""
    texts = texts or {}
    out = dict(params)
    problems: dict[str, list[str]] = {}
    for nb in nbs:
        for name, (annotation, line, default) in declared_types(nb).items():
            if name == "dataset" or name not in out or annotation not in _TYPES:
                continue
            value = _coerce(annotation, out[name], texts.get(name))
            if _type_ok(annotation, value):
                out[name] = value
                continue
            if name in problems:
                problems[name].append(nb.stem)
                continue
            shown = repr(texts[name].strip()) if name in texts else repr(value)
            declared = line if len(line) <= 60 else line[:57] + "..."
            problems[name] = [f"{name} = {shown}: expected {annotation} ({_EXPECTED[annotation]}), as declared by "
                              f"`{declared}`; e.g. P=\"{name}={default}\" (in ", nb.stem]
    if problems:
        lines = [f"{msg}{', '.join(where)})" for msg, *where in problems.values()]
        raise PreflightError("parameters of the wrong type, found before running anything:\n  " + "\n  ".join(lines))
    return out


def check_settings() -> None:
    """The environment's and ``.env``'s settings must be readable (``RERANK_TIMEOUT=0`` is not)."""
    from rerankeval.core.settings import load_settings

    try:
        load_settings()
    except ValueError as exc:
        raise PreflightError(str(exc)) from None


def check_writable(dp: paths.DatasetPaths) -> None:
    """The results folder must take new files (it may be read-only, or on a full disk)."""
    for folder in (dp.executed_dir, dp.report_dir):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as exc:
            where = Path(exc.filename) if exc.filename else folder
            raise PreflightError(
                f"the results folder {where} is not writable ({exc.strerror or exc}). Make it writable, or write "
                f"the results elsewhere: RERANKEVAL_RESULTS=/a/writable/folder in .env or the environment "
                f"(e.g. RERANKEVAL_RESULTS=~/rerankeval-results make report).") from None


def check_parameters(nbs: list[Path], params: Mapping[str, Any]) -> None:
    """Raise :class:`PreflightError` for parameters a notebook would reject late (e.g. ``pool_k < final_k``)."""
    problems: dict[str, list[str]] = {}
    for nb in nbs:
        eff = effective_parameters(nb, params)
        for key in POSITIVE_INTS:
            if key in eff and (not isinstance(eff[key], int) or isinstance(eff[key], bool) or eff[key] < 1):
                problems.setdefault(f"{key} = {eff[key]!r} must be a whole number >= 1", []).append(nb.stem)
        pool, final = eff.get("pool_k"), eff.get("final_k")
        if isinstance(pool, int) and isinstance(final, int) and pool < final:
            problems.setdefault(
                f"pool_k ({pool}) must be >= final_k ({final}): the reranker reorders the top pool_k and the "
                f"headline metric is cut at final_k; e.g. P=\"pool_k={final}\" or P=\"final_k={pool}\"", []
            ).append(nb.stem)
    if problems:
        lines = [f"{msg} (in {', '.join(where)})" for msg, where in problems.items()]
        raise PreflightError("parameters that cannot work, found before running anything:\n  " + "\n  ".join(lines))


def check_dataset(dp: paths.DatasetPaths, nbs: list[Path], params: Mapping[str, Any]) -> None:
    """When the corpus notebook runs: a corpus, ``queries.jsonl`` and ``qrels/<split>.tsv`` must exist."""
    from rerankeval.corpus.beir import InputError
    from rerankeval.corpus.extract import check_inputs

    first = next((nb for nb in nbs if nb.name.startswith("01")), None)
    if first is None:
        return
    try:
        check_inputs(dp, effective_parameters(first, params).get("split", "test"))
    except InputError as exc:
        raise PreflightError(str(exc)) from None


def _endpoint_fix(configured: bool) -> str:
    where = ("start the server, or fix OPENAI_BASE_URL / OPENAI_API_KEY in .env or the environment "
             "(unset OPENAI_BASE_URL to use the local llama-server)" if configured else
             "see the llama-server log above; `make llama` rebuilds it")
    return (f"Fix: {where}. To run anyway with every rerank call falling back to the fused order: "
            f"make report P=\"{ALLOW_FALLBACK}=true\" (or python -m rerankeval.chain --allow-fallback).")


def start_endpoint(stack: contextlib.ExitStack, allow_fallback: bool) -> dict[str, str]:
    """The LLM settings for the kernels (starting the local server when none is configured), checked."""
    from rerankeval.core.settings import load_settings, redact
    from rerankeval.llm.server import EndpointError, check_endpoint, ensure_endpoint

    configured = load_settings().configured
    env: dict[str, str] = {}
    try:
        env = stack.enter_context(ensure_endpoint())
        problem = check_endpoint(load_settings(environ={**os.environ, **env}), timeout=PROBE_TIMEOUT)
    except EndpointError as exc:
        problem = redact(f"the local LLM server could not be started: {exc}")
    if problem is None:
        return env
    if not allow_fallback:
        raise PreflightError(f"{problem.rstrip('.')}.\n{_endpoint_fix(configured)}")
    print(f"[chain] WARNING: {problem}; continuing because {ALLOW_FALLBACK} is set: every rerank call will "
          "fall back to the fused order, and the report will say so.", file=sys.stderr, flush=True)
    return env


def llm_fell_back(dp: paths.DatasetPaths) -> dict[str, Any] | None:
    """Why, when the rerank ledger shows that every reranked query fell back entirely (else None):
    ``{"text": sentence, "endpoint": whether fixing the endpoint settings is the fix}``. A run where some queries
    fell back only partly is not a failed run (the page says what happened)."""
    from rerankeval.rerank.ledger import fallback_cause, read_ledger

    ledger = read_ledger(dp.ledger, missing_ok=True)
    if ledger is None or "status" not in ledger:
        return None
    main = ledger[ledger["pass"] == "main"] if "pass" in ledger else ledger
    if not len(main) or not main["status"].astype(str).str.strip().str.lower().eq("fallback").all():
        return None
    cause = fallback_cause(ledger)
    text = cause.text.rstrip(".") if cause else (f"every one of the {len(main)} reranked queries fell back to the "
                                                  "fused order (see the ledger in 04-rerank)")
    return {"text": text, "endpoint": bool(cause is None or cause.endpoint)}


# --------------------------------------------------------------------------- running the notebooks
def _signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the kernel's process group (a kernel leads its own session), if it still runs."""
    with contextlib.suppress(OSError):
        os.killpg(pid, sig)


class Stopped(KeyboardInterrupt):
    """Raised by :class:`Interrupt` outside a notebook: the chain was asked to stop by ``signum``."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = signum


class Interrupt:
    """Ctrl-C (SIGINT) and SIGTERM handling of the chain: stop the running notebook, remember it, stop the run.

    A Python exception raised from a signal handler can land anywhere, even where it is swallowed (a weakref
    callback inside nbclient: "Exception ignored"), so during a notebook the first signal does not raise:
    it terminates the notebook's kernel (papermill then keeps the cells done so far and returns). Outside a
    notebook, or on a second signal, it raises :class:`Stopped` (a KeyboardInterrupt). :attr:`hit` tells the
    chain to stop; :attr:`signum` which signal asked first.
    """

    def __init__(self) -> None:
        self.hit = False
        self.signum = signal.SIGINT
        self.in_notebook = False
        self.kernel_pid: int | None = None

    @property
    def how(self) -> tuple[str, str, int]:
        """``("interrupted", "Ctrl-C", 130)`` or ``("terminated", "SIGTERM", 143)``."""
        return SIGNALS.get(self.signum, SIGNALS[signal.SIGINT])

    def handler(self, signum: int, frame: object) -> None:  # noqa: ARG002
        first, self.hit = not self.hit, True
        if first:
            self.signum = signum
        if not first or not self.in_notebook:
            raise Stopped(signum)
        if self.kernel_pid is not None:
            _signal_group(self.kernel_pid, signal.SIGTERM)

    def kernel_started(self, pid: int) -> None:
        """Called by the kernel manager; a kernel started after Ctrl-C is stopped at once."""
        self.kernel_pid = pid
        if self.hit:
            _signal_group(pid, signal.SIGTERM)

    def kernel_done(self) -> None:
        self.kernel_pid = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[Interrupt]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {sig: signal.signal(sig, self.handler) for sig in SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def kernel_manager_class(env: Mapping[str, str], interrupt: Interrupt | None = None) -> type:
    """A kernel manager whose kernels start with ``env`` added to this process's environment."""
    from jupyter_client.manager import AsyncKernelManager

    extra = dict(env)

    class ChainKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
            kw["env"] = {**(kw.get("env") or os.environ), **extra}
            await super().start_kernel(**kw)
            pid = getattr(self.provisioner, "pid", None)
            if interrupt is not None and pid:
                interrupt.kernel_started(pid)

    return ChainKernelManager


class AtomicNotebookIO:
    """papermill's I/O for the executed copies: every save replaces the file atomically (a temporary file
    beside it, then ``os.replace``), so a full disk leaves the last complete save, never a truncated notebook.
    Registered for the executed folder only (:func:`_atomic_saves`); papermill's own handler does the rest."""

    def read(self, path: str) -> str:
        return Path(path).read_text(encoding="utf-8")

    def write(self, buf: str, path: str) -> None:
        from rerankeval.core.ioutil import atomic_write_text

        atomic_write_text(path, buf)

    def listdir(self, path: str) -> list[str]:
        return [str(p) for p in Path(path).iterdir()]

    def pretty_path(self, path: str) -> str:
        return path


_ATOMIC_FOLDERS: set[str] = set()


def _atomic_saves(folder: Path) -> None:
    """Make papermill save notebooks written under ``folder`` through :class:`AtomicNotebookIO` (once)."""
    from papermill.iorw import papermill_io

    prefix = str(folder).rstrip(os.sep) + os.sep
    if prefix not in _ATOMIC_FOLDERS:  # papermill's extension point: a handler for paths with this prefix
        papermill_io.register(prefix, AtomicNotebookIO())
        _ATOMIC_FOLDERS.add(prefix)


def os_error(exc: OSError, folder: Path, with_fix: bool = True) -> str:
    """An OS error as a user reads it: the folder it hit, what the OS said and, for a full disk or a read-only
    folder (unless ``with_fix`` is false), the fix."""
    where = Path(exc.filename).parent if exc.filename else folder
    what = exc.strerror or str(exc)
    fix = ""
    if not with_fix:
        pass
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = ("; free space on that disk, or write the results to another one: RERANKEVAL_RESULTS=/other/folder "
               "(in .env or the environment)")
    elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = "; make it writable, or write the results elsewhere: RERANKEVAL_RESULTS=/a/writable/folder"
    return f"could not write to {where}: [Errno {exc.errno}] {what}{fix}"


def _kernel_os_hint(evalue: str) -> str:
    """The fix for an OS error a notebook's own cell raised (its message names the file)."""
    if "[Errno 28]" in evalue or "No space left on device" in evalue:
        return (" (the disk is full: free space, or move the results with RERANKEVAL_RESULTS=... and the caches "
                "with RERANKEVAL_CACHE=... to a disk with room)")
    if "[Errno 30]" in evalue or "Read-only file system" in evalue:
        return " (a read-only folder: make it writable, or move the results with RERANKEVAL_RESULTS=...)"
    return ""


def run_notebook(nb: Path, dp: paths.DatasetPaths, params: Mapping[str, Any], kernel: str,
                 env: Mapping[str, str], interrupt: Interrupt) -> dict[str, Any]:
    """Execute one notebook, keep and render its executed copy; the index entry for it."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from rerankeval.core.progress import STAGE_ENV
    from rerankeval.report import render as report

    nb_params = {k: v for k, v in params.items() if k in declared_parameters(nb)}
    nb_params["dataset"] = str(dp.source)
    out, html = dp.executed_notebook(nb.name), dp.notebook_html(nb.stem)
    earlier = out.stat().st_mtime_ns if out.exists() else None  # an earlier run's copy, until this run saves
    print(f"[chain] {nb.name} ...", flush=True)
    t0 = time.perf_counter()
    status, error = "ok", None
    interrupt.in_notebook = True
    try:
        _atomic_saves(dp.executed_dir)
        papermill.execute_notebook(
            str(nb), str(out), parameters=nb_params, kernel_name=kernel, progress_bar=False, cwd=str(paths.ROOT),
            kernel_manager_class=kernel_manager_class({**env, STAGE_ENV: nb.stem}, interrupt),
        )
    except KeyboardInterrupt:
        interrupt.hit = True
    except PapermillExecutionError as exc:
        status, error = "failed", (f"{nb.name} failed in cell {exc.cell_index} (execution count "
                                   f"{exc.exec_count}): {exc.ename}: {exc.evalue}{_kernel_os_hint(exc.evalue)}")
    except OSError as exc:  # saving the executed copy: a full disk, a folder that became read-only
        status, error = "failed", f"{nb.name} stopped: {os_error(exc, dp.executed_dir)}"
    except Exception as exc:  # kernel died, missing kernel, bad parameters...
        status, error = "failed", f"{nb.name} could not be executed: {type(exc).__name__}: {exc}"
    finally:
        interrupt.kernel_done()
    if interrupt.hit:
        verb, what, _ = interrupt.how
        status, error = "interrupted", f"{nb.name} was {verb} ({what}); re-run to resume"
    seconds = time.perf_counter() - t0
    if out.exists() and (status == "ok" or out.stat().st_mtime_ns != earlier):
        try:
            _redact_file(out)
            report.render_notebook_html(out, html)
        except OSError as exc:
            problem = f"{nb.name}: its page was not rendered: {os_error(exc, dp.report_dir)}"
            status, error = ("failed", problem) if status == "ok" else (status, f"{error}; {problem}")
    print(f"[chain] {nb.name} {status.upper() if status != 'ok' else 'ok'} in {seconds:.1f} s", flush=True)
    return {"name": nb.stem, "href": html.name, "status": status, "seconds": round(seconds, 1), "error": error,
            "rerun": True, "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}


def _records_path(dp: paths.DatasetPaths) -> Path:
    return dp.executed_dir / "pages.json"


def _read_records(dp: paths.DatasetPaths) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(_records_path(dp).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _earlier_page(dp: paths.DatasetPaths, nb: Path, record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The index entry of a page an earlier run rendered (from its record, else papermill's metadata)."""
    page = dict(record or {})
    if not page:
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads((dp.executed_dir / nb.name).read_text(encoding="utf-8"))["metadata"]["papermill"]
            page = {"status": "failed" if meta.get("exception") else "ok", "seconds": meta.get("duration"),
                    "finished": meta.get("end_time")}
    when = str(page.get("finished") or "")[:16].replace("T", " ")
    return {"status": "ok", "seconds": None, "error": None, **page, "href": f"{nb.stem}.html",
            "name": f"{nb.stem} (earlier run{', ' + when + ' UTC' if when else ''})", "rerun": False}


def index_pages(dp: paths.DatasetPaths, this_run: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every notebook with a rendered page, in chain order: this run's entries, else an earlier run's."""
    from rerankeval.core.ioutil import atomic_write_json

    records = _read_records(dp)
    records.update({p["name"]: p for p in this_run})
    atomic_write_json(_records_path(dp), records)
    now = {p["name"]: p for p in this_run}
    pages = []
    for nb in notebooks():
        if nb.stem in now:
            pages.append(now[nb.stem])
        elif (dp.report_dir / f"{nb.stem}.html").is_file():
            pages.append(_earlier_page(dp, nb, records.get(nb.stem)))
    return pages


def _shown(path: Path) -> str:
    """``path`` relative to the project when it is inside it (as the user typed ``make report`` there)."""
    try:
        return str(path.resolve().relative_to(paths.ROOT))
    except ValueError:
        return str(path)


def _warn_unknown(params: Mapping[str, Any]) -> None:
    declared = set().union(*(declared_parameters(nb) for nb in notebooks()))
    unknown = sorted(set(params) - declared - {"dataset"})
    if unknown:
        print(f"[chain] WARNING: no notebook declares the parameter(s) {', '.join(unknown)}; they are ignored "
              f"(see the parameters cell at the top of each notebook)", file=sys.stderr)


def _execute_all(dp: paths.DatasetPaths, nbs: list[Path], params: Mapping[str, Any], kernel: str,
                 allow_fallback: bool, interrupt: Interrupt, pages: list[dict[str, Any]]) -> None:
    """Run ``nbs`` in order until one fails or is interrupted, appending their index entries to ``pages``.

    ``pages`` is the caller's list, so the entries of the notebooks that finished survive a Ctrl-C that raises
    between two notebooks (:class:`Interrupt` raises there).
    """
    with contextlib.ExitStack() as stack:
        env: dict[str, str] = {}
        needs = any(_needs_llm(nb) for nb in nbs)
        if needs or any(_wants_llm(nb, params) for nb in nbs):
            env = start_endpoint(stack, allow_fallback or not needs)
        for nb in nbs:
            pages.append(run_notebook(nb, dp, params, kernel, env, interrupt))
            interrupt.in_notebook = False  # only now: a Ctrl-C while its page is rendered must not lose it
            if pages[-1]["status"] != "ok" or interrupt.hit:
                break
            if _needs_llm(nb) and not allow_fallback:
                pages[-1]["llm_problem"] = llm_fell_back(dp)


def _write_index(dp: paths.DatasetPaths, pages: list[dict[str, Any]]) -> tuple[str | None, OSError | None]:
    """``(where the index is, None)``, or ``(None, the OS error)`` when it could not be written."""
    from rerankeval.report import render as report

    try:
        return _shown(report.write_index(dp, index_pages(dp, pages))), None
    except OSError as exc:
        return None, exc


def _finish(dp: paths.DatasetPaths, pages: list[dict[str, Any]], interrupted: bool, t0: float,
            signum: int = signal.SIGINT) -> int:
    """Write the index and print the last lines; the exit status (``signum``: what interrupted the run)."""
    index, index_error = _write_index(dp, pages)
    report_at = index or f"the index was not updated ({os_error(index_error, dp.report_dir, with_fix=False)})"
    done = [p["name"] for p in pages if p["status"] == "ok"]
    if interrupted:
        verb, what, status = SIGNALS.get(signum, SIGNALS[signal.SIGINT])
        print(f"\n[chain] {verb} ({what}); finished: {', '.join(done) or 'none'}; report (partial): {report_at}; "
              "re-run the same command to resume (finished stages are cached)", file=sys.stderr, flush=True)
        return status
    failed = next((p for p in pages if p["status"] != "ok"), None)
    if failed:
        kept = dp.executed_notebook(f"{failed['name']}.ipynb").exists()
        print(f"\n[chain] ERROR: {failed['error']}\n[chain] "
              f"{'executed copy kept at ' + _shown(dp.executed_dir) if kept else 'no executed copy was saved'}; "
              f"report (partial): {report_at}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    if index_error:
        print(f"\n[chain] ERROR: the report index was not updated: {os_error(index_error, dp.report_dir)}",
              file=sys.stderr, flush=True)
        return EXIT_FAILED
    fell_back = next((p["llm_problem"] for p in pages if p.get("llm_problem")), None)
    if fell_back:
        from rerankeval.core.settings import load_settings

        fix = f"\n{_endpoint_fix(load_settings().configured)}" if fell_back["endpoint"] else ""
        print(f"\n[chain] ERROR: {fell_back['text']}.{fix}\n[chain] report: {index}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    times = ", ".join(f"{p['name'][:2]} {p['seconds']:.0f} s" for p in pages)
    print(f"[chain] done: {len(pages)} notebook(s) in {time.perf_counter() - t0:.0f} s ({times}); "
          f"report: {index}", flush=True)
    return 0


def run_chain(dataset: str, overrides: list[str] | None = None, only: list[str] | None = None,
              kernel: str = KERNEL, allow_fallback: bool = False) -> int:
    """Check, run and report; the exit status (see the module docstring). Raises :class:`PreflightError`."""
    t0 = time.perf_counter()
    check_settings()
    dp = paths.resolve_dataset(dataset)
    params = load_params(dp.name, overrides or [])
    allow_fallback = bool(params.pop(ALLOW_FALLBACK, False)) or allow_fallback
    nbs = notebooks(only)
    if not nbs:
        raise PreflightError(f"no notebooks match {only!r} in {paths.NOTEBOOKS_DIR} (give a number such as "
                             "--only 05, or a notebook name)")
    _warn_unknown(params)
    params = typed_parameters(nbs, params, override_texts(overrides or []))
    check_parameters(nbs, params)
    check_dataset(dp, nbs, params)
    check_writable(dp)
    interrupt = Interrupt()
    pages: list[dict[str, Any]] = []
    with interrupt.installed():
        try:
            _execute_all(dp, nbs, params, kernel, allow_fallback, interrupt, pages)
        except KeyboardInterrupt:
            interrupt.hit = True
        return _finish(dp, pages, interrupt.hit, t0, interrupt.signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rerankeval.chain", description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=os.environ.get("DATASET", paths.DEFAULT_DATASET),
                    help="dataset name under data/ or ../shared/data, or a folder path")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a notebook parameter (repeatable)")
    ap.add_argument("--params", default="", metavar="'K=V K2=V2'",
                    help="several --set at once, split before each name= (what make report P=... passes)")
    ap.add_argument("--only", action="append", default=None, metavar="NN",
                    help="run only notebooks whose name starts with this (repeatable)")
    ap.add_argument("--kernel", default=KERNEL, help="Jupyter kernel name (default: %(default)s)")
    ap.add_argument("--allow-fallback", action="store_true",
                    help="run even when the LLM endpoint does not answer (every rerank call falls back to the "
                         "fused order); same as --set allow_fallback=true")
    args = ap.parse_args(argv)
    try:
        overrides = [*split_params(args.params), *args.overrides]
        return run_chain(args.dataset, overrides, args.only, args.kernel, args.allow_fallback)
    except (paths.DatasetNotFound, PreflightError) as exc:
        print(f"[chain] ERROR: {exc}", file=sys.stderr)
        return EXIT_PREFLIGHT
    except KeyboardInterrupt as exc:  # before the notebooks started, or again while the index was being written
        verb, what, status = SIGNALS.get(getattr(exc, "signum", signal.SIGINT), SIGNALS[signal.SIGINT])
        print(f"\n[chain] {verb} ({what}); the report index may be out of date", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
