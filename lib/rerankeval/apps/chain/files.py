"""What the chain writes and how it reports a failed write: executed notebooks saved atomically through papermill,
secrets removed from them, OS errors (a full disk, a read-only folder) as the user reads them with the fix, and
the index's page records (this run's, else an earlier run's). Part of :mod:`rerankeval.apps.chain`."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rerankeval.apps.chain.params import notebooks
from rerankeval.core import paths
from rerankeval.core.ioutil import sha256_file

if TYPE_CHECKING:
    from rerankeval.core.settings import Settings


def redact_file(path: Path) -> None:
    """Remove any configured secret from an executed notebook before it is kept or rendered."""
    from rerankeval.core.settings import redact

    text = path.read_text(encoding="utf-8")
    clean = redact(text)
    if clean != text:
        from rerankeval.core.ioutil import atomic_write_text

        atomic_write_text(path, clean)


class AtomicNotebookIO:
    """papermill's I/O for the executed copies: every save replaces the file atomically (a temporary file
    beside it, then ``os.replace``), so a full disk leaves the last complete save, never a truncated notebook.
    Registered for the executed folder only (:func:`atomic_saves`); papermill's own handler does the rest."""

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


def atomic_saves(folder: Path) -> None:
    """Make papermill save notebooks written under ``folder`` through :class:`AtomicNotebookIO` (once)."""
    from papermill.iorw import papermill_io

    prefix = str(folder).rstrip(os.sep) + os.sep
    if prefix not in _ATOMIC_FOLDERS:  # papermill's extension point: a handler for paths with this prefix
        papermill_io.register(prefix, AtomicNotebookIO())
        _ATOMIC_FOLDERS.add(prefix)


SAVE_EVERY = 10.0  # seconds between two saves of a running notebook's executed copy (its last save is always made)
ENGINE = "rerankeval"  # the papermill engine the chain runs notebooks with (:func:`chain_engine`)


@functools.cache
def chain_engine() -> str:
    """Register (once) and name papermill's nbclient engine with fewer saves: papermill saves the executed copy at
    the start and end of every cell (a 40-cell notebook with figures: 80 validations, serialisations and fsyncs, a
    few seconds); this engine saves at most every :data:`SAVE_EVERY` seconds while the notebook runs, and always
    at its end, finished, failed or interrupted (papermill's ``notebook_complete`` runs in a ``finally``), so what
    is kept is what papermill keeps. Papermill's extension point: ``papermill_engines.register``."""
    from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

    class Manager(NotebookExecutionManager):
        final = False

        def save(self, **kwargs: Any) -> None:
            if self.final or (self.now() - self.last_save_time).total_seconds() >= SAVE_EVERY:
                super().save(**kwargs)

        def notebook_complete(self, **kwargs: Any) -> None:
            self.final = True
            super().notebook_complete(**kwargs)

    class Engine(NBClientEngine):
        @classmethod
        def execute_notebook(
            cls,
            nb: Any,
            kernel_name: str,
            output_path: str | None = None,
            progress_bar: bool = True,
            log_output: bool = False,
            autosave_cell_every: int = 30,
            **kwargs: Any,
        ) -> Any:
            """papermill's ``Engine.execute_notebook`` with :class:`Manager`."""
            nb_man = Manager(
                nb,
                output_path=output_path,
                progress_bar=progress_bar,
                log_output=log_output,
                autosave_cell_every=autosave_cell_every,
            )
            nb_man.notebook_start()
            try:
                cls.execute_managed_notebook(nb_man, kernel_name, log_output=log_output, **kwargs)
            finally:
                nb_man.cleanup_pbar()
                nb_man.notebook_complete()
            return nb_man.nb

    papermill_engines.register(ENGINE, Engine)
    return ENGINE


def os_error(exc: OSError, folder: Path, with_fix: bool = True) -> str:
    """An OS error as a user reads it: the folder it hit, what the OS said and, for a full disk or a read-only
    folder (unless ``with_fix`` is false), the fix."""
    where = Path(exc.filename).parent if exc.filename else folder
    what = exc.strerror or str(exc)
    fix = ""
    if not with_fix:
        pass
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = (
            "; free space on that disk, or write the results to another one: RERANKEVAL_RESULTS=/other/folder "
            "(in .env or the environment)"
        )
    elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        fix = "; make it writable, or write the results elsewhere: RERANKEVAL_RESULTS=/a/writable/folder"
    return f"could not write to {where}: [Errno {exc.errno}] {what}{fix}"


def kernel_os_hint(evalue: str) -> str:
    """The fix for an OS error a notebook's own cell raised (its message names the file)."""
    if "[Errno 28]" in evalue or "No space left on device" in evalue:
        return (
            " (the disk is full: free space, or move the results with RERANKEVAL_RESULTS=... and the caches "
            "with RERANKEVAL_CACHE=... to a disk with room)"
        )
    if "[Errno 30]" in evalue or "Read-only file system" in evalue:
        return " (a read-only folder: make it writable, or move the results with RERANKEVAL_RESULTS=...)"
    return ""


def _records_path(dp: paths.DatasetPaths) -> Path:
    return dp.executed_dir / "pages.json"


def read_records(dp: paths.DatasetPaths) -> dict[str, dict[str, Any]]:
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
            page = {
                "status": "failed" if meta.get("exception") else "ok",
                "seconds": meta.get("duration"),
                "finished": meta.get("end_time"),
            }
    when = str(page.get("finished") or "")[:16].replace("T", " ")
    return {
        "status": "ok",
        "seconds": None,
        "error": None,
        **page,
        "href": f"{nb.stem}.html",
        "name": f"{nb.stem} (earlier run{', ' + when + ' UTC' if when else ''})",
        "rerun": False,
    }


def index_pages(dp: paths.DatasetPaths, this_run: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every notebook with a rendered page, in chain order: this run's entries, else an earlier run's."""
    from rerankeval.core.ioutil import atomic_write_json

    records = read_records(dp)
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


def shown_path(path: Path) -> str:
    """``path`` relative to the project when it is inside it (as the user typed ``make report`` there)."""
    try:
        return str(path.resolve().relative_to(paths.ROOT))
    except ValueError:
        return str(path)


# --- skipping a notebook whose inputs are unchanged ----------------------------------------------------------------
# After a notebook succeeds the chain records its fingerprint (executed/<stem>.fingerprint.json): the notebook file,
# its parameters, the package's code, the non-secret settings, and the state of every input it read. Its inputs are
# traced inside the kernel (an audit hook on ``open`` and directory listings, see :func:`install_read_trace`) under
# the dataset folder and results/<dataset>/: a file read and not changed by the notebook itself (size, mtime_ns and,
# under results/, its sha256), and a folder listed (its entry names; in the dataset folder also each file's size and
# mtime_ns, since the PDF reader opens files below Python). A notebook whose fingerprint matches is skipped.

FINGERPRINT_VERSION = 1
# never a key nor a URL's password (every value redacted); the LLM endpoint counts by its identity
# (llm.scrub.endpoint_identity: RERANK_ENDPOINT_ID, else the URL without user:password@), so
# a local server that comes up on another port, with the same model, does not make every notebook run again
_SETTING_FIELDS = (
    "model",
    "qdrant_url",
    "cross_encoder",
    "qdrant_path",
    "qdrant_backend",
    "dense_exact",
    "llama_backend",
    "local_model",
    "judge_model",
    "judge_base_url",
    "embed_base_url",
    "embed_model",
    "embed_dim",
)


def install_read_trace(log: str, roots: list[str]) -> None:
    """Inside a notebook's kernel: append ``r<TAB>path`` for each file opened and ``d<TAB>path`` for each folder
    listed under ``roots`` to ``log`` (once each). What the chain's fingerprint of the notebook is made of."""
    import sys

    prefixes = tuple(os.path.join(os.path.abspath(r), "") for r in roots)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    seen: set[tuple[str, str]] = set()
    busy = [False]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if busy[0] or event not in ("open", "os.listdir", "os.scandir") or not args:
            return
        where = args[0]
        if isinstance(where, bytes):
            where = os.fsdecode(where)
        if not isinstance(where, str | os.PathLike):
            return
        busy[0] = True
        try:
            full = os.path.abspath(os.fspath(where))
            kind = "r" if event == "open" else "d"
            if (kind, full) not in seen and (full + os.sep).startswith(prefixes):
                seen.add((kind, full))
                os.write(fd, f"{kind}\t{full}\n".encode("utf-8", "surrogateescape"))
        finally:
            busy[0] = False

    sys.addaudithook(hook)


def trace_line(log: Path, roots: list[Path]) -> str:
    """The kernel's start-up line that installs :func:`install_read_trace` (an ``IPKernelApp.exec_lines`` item)."""
    return (
        f"__import__('rerankeval.apps.chain.files', fromlist=['_']).install_read_trace("
        f"{str(log)!r}, {[str(r) for r in roots]!r})"
    )


def code_version() -> str:
    """A hash of the package's code (every ``.py`` file and template under ``lib/rerankeval``)."""
    import hashlib

    import rerankeval

    root = Path(rerankeval.__file__).parent
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".html", ".css", ".j2") and p.is_file()):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def notebook_key(
    nb: Path, nb_params: Mapping[str, Any], code: str, extra: Mapping[str, Any], settings: Settings
) -> dict[str, Any]:
    """What must be equal for a notebook to be skipped, besides its inputs: the notebook file, its parameters,
    the code version, the ``settings`` that choose models, endpoints and backends (no secret), and ``extra``."""
    import hashlib

    from rerankeval.core.settings import redact
    from rerankeval.llm.scrub import endpoint_identity

    chosen = {f: None if getattr(settings, f, None) is None else redact(getattr(settings, f)) for f in _SETTING_FIELDS}
    chosen["endpoint"] = endpoint_identity(settings) or None  # without user:password@ (issue 32, defect 9)
    return {
        "version": FINGERPRINT_VERSION,
        "notebook": hashlib.sha256(nb.read_bytes()).hexdigest(),
        "parameters": json.loads(json.dumps(dict(nb_params), sort_keys=True, default=str)),
        "code": code,
        "settings": chosen,
        **extra,
    }


def fingerprint_path(dp: paths.DatasetPaths, nb: Path) -> Path:
    return dp.executed_dir / f"{nb.stem}.fingerprint.json"


_LATER_FILES = ("judgments-", "llm-")  # the explorer's grades and the assessor's: opened by name, never discovered


def _listing(folder: Path, with_stats: bool) -> dict[str, Any]:
    names = sorted(n for n in os.listdir(folder) if not n.startswith((".", *_LATER_FILES)))
    if not with_stats:
        return {"names": names}
    stats = {n: [(s := (folder / n).stat()).st_size, s.st_mtime_ns] for n in names if (folder / n).is_file()}
    return {"names": names, "files": stats}


def _input_state(path: Path, results: Path, with_hash: bool = True) -> dict[str, Any] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    if not path.is_file():
        return None
    state: dict[str, Any] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if with_hash and path.is_relative_to(results):
        state["sha256"] = sha256_file(path)
    return state


def record_fingerprint(dp: paths.DatasetPaths, nb: Path, key: Mapping[str, Any], log: Path, started_ns: int) -> bool:
    """Save the fingerprint of a notebook that just succeeded, from its kernel's trace ``log`` (False: no trace,
    so nothing was recorded and the notebook will run next time)."""
    from rerankeval.core.ioutil import atomic_write_json

    try:
        lines = log.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError:
        return False
    results, skip = dp.root.resolve(), (dp.executed_dir.resolve(), dp.report_dir.resolve())
    files: dict[str, Any] = {}
    folders: dict[str, Any] = {}
    for kind, _, where in (ln.partition("\t") for ln in lines):
        p = Path(where).resolve()
        if p.is_relative_to(skip[0]) or p.is_relative_to(skip[1]) or p.name.startswith("."):
            continue
        if kind == "d" and p.is_dir():
            folders[str(p)] = _listing(p, with_stats=not p.is_relative_to(results))
        elif kind == "r" and not p.exists():
            files[str(p)] = {"absent": True}  # looked for and not there: its arrival is a change
        elif kind == "r" and (state := _input_state(p, results, with_hash=False)) and state["mtime_ns"] < started_ns:
            files[str(p)] = _input_state(p, results)  # (else written by the notebook itself: not an input)
    atomic_write_json(fingerprint_path(dp, nb), {**key, "files": files, "folders": folders})
    return True


def _same_file(path: Path, was: Mapping[str, Any], results: Path) -> bool:
    if was.get("absent"):
        return not path.exists()
    now = _input_state(path, results, with_hash=False)
    if now is None or now["size"] != was.get("size"):
        return False
    if now["mtime_ns"] == was.get("mtime_ns"):
        return True
    return "sha256" in was and sha256_file(path) == was["sha256"]  # rewritten with the same bytes


def up_to_date(dp: paths.DatasetPaths, nb: Path, key: Mapping[str, Any]) -> bool:
    """Whether ``nb`` may be skipped: its recorded fingerprint matches ``key`` and every input it read is as it
    was, and its executed copy and page exist. A missing or unreadable fingerprint means: run it."""
    if not (dp.executed_notebook(nb.name).is_file() and dp.notebook_html(nb.stem).is_file()):
        return False
    try:
        rec = json.loads(fingerprint_path(dp, nb).read_text(encoding="utf-8"))
        if not isinstance(rec, dict) or any(rec.get(k) != v for k, v in key.items()):
            return False
        results = dp.root.resolve()
        if not all(_same_file(Path(f), was, results) for f, was in rec["files"].items()):
            return False
        return all(Path(d).is_dir() and _listing(Path(d), "files" in was) == was for d, was in rec["folders"].items())
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return False


def forget_fingerprint(dp: paths.DatasetPaths, nb: Path) -> None:
    """Drop ``nb``'s fingerprint (before it runs: a failed or interrupted run must not leave an old one behind)."""
    with contextlib.suppress(OSError):
        fingerprint_path(dp, nb).unlink()
