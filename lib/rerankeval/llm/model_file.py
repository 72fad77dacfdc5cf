"""The local model file's own sha256: checked at every start, and the model's part of the endpoint identity.

``scripts/llama_setup.sh`` checks the sha256 of a GGUF once, when it assembles it from its PyPI parts (the table
``LOCAL_MODELS`` holds the sha256 of the whole assembled file), and from then on finds the file by name. A file
replaced or corrupted under that name would be served, and named by the table's sha256 in the reply cache's keys,
so the cache would answer for a model that is not there. So, on every start:

- :func:`file_sha256` hashes the file itself; the digest is kept in ``.sha256.json`` beside it (in
  ``<cache>/models/``) with the file's size, mtime, ctime and inode, so an unchanged file is not read again
  (hashing reads the whole file), while any replacement (a copy, a move, a rewrite in place) changes at least one of
  them (ctime cannot be set back by a user) and is hashed anew;
- :func:`verify` refuses a file whose sha256 is not the table's, naming the file, both digests and the fix;
- :func:`rerankeval.llm.server.endpoint_id` names the model by the file's own sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from rerankeval.core.ioutil import atomic_write_json
from rerankeval.llm.local_server import EndpointError

DIGESTS = ".sha256.json"  # the record of hashed files, beside the models


class ModelFileMismatch(EndpointError):
    """The local model file is not the model the setup script assembled (replaced or corrupted)."""


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _read_record(path: Path) -> dict[str, dict]:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return rec if isinstance(rec, dict) else {}


def file_sha256(path: Path) -> str:
    """The sha256 of the file ``path``: read back from ``.sha256.json`` beside it while the file's size, mtime,
    ctime and inode are those it was hashed with, else hashed and recorded there."""
    path = Path(path).resolve()
    record = path.parent / DIGESTS
    try:
        stamp = _stamp(path.stat())
    except OSError as exc:
        raise EndpointError(
            f"the local model file {path} cannot be read ({exc.strerror}): run `make llama` to assemble it again"
        ) from None
    rec = _read_record(record)
    known = rec.get(path.name)
    if isinstance(known, dict) and known.get("stamp") == stamp and isinstance(known.get("sha256"), str):
        return known["sha256"]
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    rec[path.name] = {"stamp": stamp, "sha256": digest}
    try:
        atomic_write_json(record, rec)
    except OSError:
        pass  # a read-only cache: hashed again next time, nothing else lost
    return digest


def verify(path: Path, expected: str, name: str) -> str:
    """``path``'s sha256 when it is ``expected`` (the setup script's table for the local model ``name``); else
    :class:`ModelFileMismatch` naming the file, both digests and how to assemble the model again."""
    got = file_sha256(path)
    if got != expected:
        raise ModelFileMismatch(
            f"the local model file {path} is not {name}: its sha256 is {got}, the one scripts/llama_setup.sh "
            f"assembled has {expected}. The file was replaced or corrupted, so nothing is served from it (nor from "
            f"the reply cache in its name). Delete it and run `make llama` to assemble {name} again from its PyPI "
            "parts, or set LOCAL_MODEL to another model."
        )
    return got
