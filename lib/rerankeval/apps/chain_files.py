"""What the chain writes and how it reports a failed write: executed notebooks saved atomically through papermill,
secrets removed from them, OS errors (a full disk, a read-only folder) as the user reads them with the fix, and
the index's page records (this run's, else an earlier run's). Part of :mod:`rerankeval.apps.chain`."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rerankeval.apps.chain_params import notebooks
from rerankeval.core import paths


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


def kernel_os_hint(evalue: str) -> str:
    """The fix for an OS error a notebook's own cell raised (its message names the file)."""
    if "[Errno 28]" in evalue or "No space left on device" in evalue:
        return (" (the disk is full: free space, or move the results with RERANKEVAL_RESULTS=... and the caches "
                "with RERANKEVAL_CACHE=... to a disk with room)")
    if "[Errno 30]" in evalue or "Read-only file system" in evalue:
        return " (a read-only folder: make it writable, or move the results with RERANKEVAL_RESULTS=...)"
    return ""


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


def shown_path(path: Path) -> str:
    """``path`` relative to the project when it is inside it (as the user typed ``make report`` there)."""
    try:
        return str(path.resolve().relative_to(paths.ROOT))
    except ValueError:
        return str(path)
