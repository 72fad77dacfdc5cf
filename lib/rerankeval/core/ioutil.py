"""Small I/O helpers shared by every stage: atomic writes, content hashes, the lock of a dataset folder's
read-modify-writes, and the disk a path is on (for a "disk full" message)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rerankeval.core.errors import ReRankEvalError


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to a temp file beside ``path``, fsync, then rename: readers never see a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp creates 0600; outputs (reports, runs) are meant to be shared
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def atomic_write_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> Path:
    lines = [json.dumps(r, ensure_ascii=False, sort_keys=True) for r in rows]
    return atomic_write_text(path, "".join(line + "\n" for line in lines))


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_json(obj: Any) -> str:
    """Hash of a JSON-serialisable object, independent of dict key order."""
    return sha256_text(json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")))


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def lock_file(path: str | os.PathLike[str]) -> Path:
    """The hidden lock file beside ``path`` (``.<name>.lock``) that writers used before the dataset folder had
    one lock (:func:`dataset_lock`); hold any other file with :func:`hold_lock`."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


DATASET_LOCK = ".rerankeval.lock"  # the one lock file of a dataset folder (see :func:`dataset_lock`)
_NO_LOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)  # the filesystem cannot lock
_PROBE = (
    "import fcntl, sys\nwith open(sys.argv[1], 'a') as fh:\n    try:\n"
    "        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    except OSError:\n        sys.exit(1)\n"
)
_guard = threading.Lock()
_thread_locks: dict[str, threading.Lock] = {}
_held = threading.local()  # lock file -> depth, per thread (a holder may take the same lock again)
_probed: set[str] = set()  # lock files whose exclusion was checked in this process


class LockError(ReRankEvalError, RuntimeError):
    """A dataset folder cannot be locked for writing (read-only, no ``flock``, or a lock that does not exclude)."""


@contextlib.contextmanager
def dataset_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """The one lock every writer of a file of the dataset folder ``folder`` holds around its read-modify-write
    (drafts, their qrels, review decisions, judgments, promotions, added questions): ``<folder>/.rerankeval.lock``.
    Re-entrant within a thread (a holder may call another writer)."""
    with hold_lock(Path(folder) / DATASET_LOCK, Path(folder)):
        yield


@contextlib.contextmanager
def hold_lock(lock: Path, folder: Path) -> Iterator[None]:
    """Hold ``lock`` exclusively: a thread lock within this process, ``flock`` across processes. The first hold
    of a lock file in a process checks that ``flock`` really excludes (:func:`_probe`). Raises :class:`LockError`
    naming ``folder`` and the fix when the lock cannot be taken."""
    key = str(Path(lock).absolute())
    depth = getattr(_held, "depth", None)
    if depth is None:
        depth = _held.depth = {}
    if depth.get(key):
        depth[key] += 1
        try:
            yield
        finally:
            depth[key] -= 1
        return
    with _guard:
        inner = _thread_locks.setdefault(key, threading.Lock())
    with inner:
        fh = _open_lock(Path(lock), folder)
        try:
            _flock(fh, fcntl.LOCK_EX, folder)
            if key not in _probed:
                _probe(Path(lock), folder)
                _probed.add(key)
            depth[key] = 1
            try:
                yield
            finally:
                depth[key] = 0
                fcntl.flock(fh, fcntl.LOCK_UN)
        finally:
            fh.close()


def _open_lock(lock: Path, folder: Path) -> Any:
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        return open(lock, "a", encoding="utf-8")  # noqa: SIM115 (closed by hold_lock)
    except OSError as exc:
        raise LockError(
            f"cannot write to the dataset folder {folder} ({exc.strerror or exc}): it is read-only or "
            f"not yours. Fix: copy the folder to a writable local disk (cp -r {folder} ~/data/) and give "
            "that path as DATASET"
        ) from None


def _flock(fh: Any, op: int, folder: Path) -> None:
    try:
        fcntl.flock(fh, op)
    except OSError as exc:
        why = "does not support file locks (flock)" if exc.errno in _NO_LOCK else f"refused a file lock ({exc})"
        raise LockError(
            f"the filesystem of the dataset folder {folder} {why}, so two writers (a reviewer and the "
            "chain) could lose each other's lines. Fix: copy the folder to a writable local disk "
            f"(cp -r {folder} ~/data/) and give that path as DATASET"
        ) from None


def _probe(lock: Path, folder: Path) -> None:
    """Check, while holding ``lock``, that another open file and another process cannot take it; raise
    :class:`LockError` when one can (a filesystem whose ``flock`` silently does nothing)."""
    with open(lock, "a", encoding="utf-8") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return  # excluded
        fcntl.flock(other, fcntl.LOCK_UN)
    child = subprocess.run([sys.executable, "-c", _PROBE, str(lock)], capture_output=True, timeout=60)
    if child.returncode == 0:
        raise LockError(
            f"file locks do not exclude on the filesystem of the dataset folder {folder} (a second "
            f"process took the lock {lock.name} while it was held), so concurrent writers would lose "
            f"lines. Fix: copy the folder to a writable local disk (cp -r {folder} ~/data/) and give "
            "that path as DATASET"
        )


def disk_of(path: str | os.PathLike[str]) -> str:
    """``the disk mounted at /x (12.0 MB free)`` for ``path`` (or its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    mount = p
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        free = shutil.disk_usage(p).free / 1e6
    except OSError:
        return f"the disk mounted at {mount}"
    return f"the disk mounted at {mount} ({free:.1f} MB free)"
