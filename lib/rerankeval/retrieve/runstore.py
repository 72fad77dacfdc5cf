"""Stage 03's saved runs read back (issue 24): the key file beside each run, and the Qdrant comparison's.

:func:`rerankeval.retrieve.stage.write` saves, next to ``runs/<variant>.trec``, a small key file
``runs/<variant>.key.json`` (:func:`key_file`, written atomically and last by :func:`store`, after the run files it
vouches for) holding the key of the run (:mod:`rerankeval.retrieve.runkey`), its parts and the SHA-256 of each file.

A run is read back (:func:`read_back`) only when the key file reads, its key equals the key computed now, and every
file it names (unit run, chunk run, the rewrite ledger) still has the recorded SHA-256; anything else (a missing or
corrupt file, another code version, another input) is ignored and the variant searched again, with the reason
(:attr:`Saved.reason`). A ``hybrid_reformulate`` run is read back only while each of the rewrite replies it used is
still in the LLM cache.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rerankeval.core import names
from rerankeval.core.ioutil import atomic_write_json, sha256_file
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run
from rerankeval.retrieve import reformulate, runkey, variants
from rerankeval.retrieve.qdrant_compare import QdrantComparison
from rerankeval.retrieve.retriever import Retrieval

if TYPE_CHECKING:
    import pandas as pd

    from rerankeval.llm.cache import LLMCache

COMPARISON = "qdrant_comparison.json"  # in dp.retrieve_dir: the Qdrant comparison and its key


@dataclass
class Saved:
    """What :func:`read_back` found: the variant's saved runs (``retrieval``; None: ``reason`` says why not), the
    seconds of the search that made them and, for ``hybrid_reformulate``, the rewrite ledger."""

    retrieval: Retrieval | None = None
    searched_seconds: float = 0.0
    ledger: pd.DataFrame | None = None
    reason: str = ""


@dataclass
class _Lookup:
    """The key file and runs :func:`_load` found (``run`` None: ``reason`` says why not)."""

    reason: str = ""
    run: Run | None = None
    chunk_run: Run | None = None
    entry: dict[str, Any] | None = None
    seconds: float = 0.0


def key_file(dp: DatasetPaths, variant: str) -> Path:
    """``runs/<variant>.key.json``, beside the variant's run file (not a ``*.trec``: no stage reads it as a run)."""
    return dp.run_file(variant).with_suffix(".key.json")


def read_back(
    dp: DatasetPaths,
    v: str,
    parts: Mapping[str, Any],
    queries: Mapping[str, str],
    record: Mapping[str, Any],
    *,
    cache: LLMCache,
) -> Saved:
    """``v``'s saved runs for ``queries`` when its key file matches ``parts`` and its files are intact, with
    ``record`` (the budget searched with) over the saved record; ``cache``: the LLM cache a ``hybrid_reformulate``
    run's replies must still be in."""
    ledger = dp.retrieve_dir / reformulate.LEDGER if v == names.HYBRID_REFORMULATE else None
    hit = _load(dp, v, parts, ledger)
    if hit.run is None:
        return Saved(reason=hit.reason)
    rows = None
    if ledger is not None:
        if not replies_cached(hit.entry, cache):
            return Saved(reason="a rewrite's reply is no longer in the LLM cache")
        rows = reformulate.read_ledger(dp)
    found = variants.complete(variants.Runs(hit.run, hit.chunk_run), queries)
    retrieval = Retrieval(v, found.run, found.chunk_run, hit.seconds, {**hit.entry["record"], **record})
    return Saved(retrieval, float(hit.entry.get("seconds") or 0.0), rows)


def _load(dp: DatasetPaths, variant: str, parts: Mapping[str, Any], ledger: Path | None) -> _Lookup:
    """The saved runs of ``variant`` when its key file matches ``parts`` and its files are intact."""
    t0 = time.perf_counter()
    out = _Lookup()
    path = key_file(dp, variant)
    if not path.is_file():
        out.reason = "no saved run" if not dp.run_file(variant).exists() else "no key file beside its run"
        return out
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        ok = isinstance(entry, dict) and entry.get("format") == runkey.FORMAT and isinstance(entry.get("files"), dict)
    except (OSError, UnicodeDecodeError, ValueError):
        ok = False
    if not ok:
        out.reason = f"its key file {path.name} is unreadable"
        return out
    if entry.get("key") != runkey.key_of(parts):
        out.reason = f"changed: {runkey.what_changed(entry.get('parts') or {}, parts)}"
        return out
    for name, f in _files(dp, variant, ledger).items():
        if not f.is_file() or sha256_file(f) != entry["files"].get(name):
            out.reason = f"{f.relative_to(dp.root)} {'is missing' if not f.is_file() else 'changed on disk'}"
            return out
    try:
        out.run, out.chunk_run = _read_run(dp.run_file(variant)), _read_run(dp.chunk_run_file(variant))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        out.run, out.reason = None, f"its run file does not read ({exc})"[:200]
        return out
    out.entry, out.seconds = entry, time.perf_counter() - t0
    return out


def _files(dp: DatasetPaths, variant: str, ledger: Path | None) -> dict[str, Path]:
    files = {"run": dp.run_file(variant), "chunk_run": dp.chunk_run_file(variant)}
    return {**files, "ledger": ledger} if ledger is not None else files


def _read_run(path: Path) -> Run:
    """A run file whose hash matched the one :func:`~rerankeval.core.runs.write_trec` gave it, so its lines are
    well formed, ranked and strictly decreasing per query: read without :func:`~rerankeval.core.runs.read_trec`'s
    per-line checks and sort (the same run, several times faster)."""
    out: dict[str, dict[str, float]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        q, _, doc, _, score, _ = line.split()
        out.setdefault(q, {})[doc] = float(score)
    return out


def replies_cached(entry: Mapping[str, Any], cache: Any) -> bool:
    """Every rewrite reply a saved ``hybrid_reformulate`` run used is still in the LLM cache ``cache``."""
    return all(cache.get(k) is not None for k in entry.get("llm_keys") or [])


def store(
    dp: DatasetPaths,
    variant: str,
    parts: Mapping[str, Any],
    record: Mapping[str, Any],
    seconds: float,
    *,
    ledger: Path | None = None,
    llm_keys: list[str] | None = None,
) -> Path:
    """Write the key file of the run files just written (atomically, last: it vouches for them)."""
    files = {name: sha256_file(f) for name, f in _files(dp, variant, ledger).items()}
    return atomic_write_json(
        key_file(dp, variant),
        {
            "format": runkey.FORMAT,
            "key": runkey.key_of(parts),
            "parts": dict(parts),
            "files": files,
            "record": dict(record),
            "seconds": round(seconds, 3),
            "llm_keys": list(llm_keys or []),
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )


def forget(dp: DatasetPaths, variant: str) -> None:
    """Remove ``variant``'s key file (its run is not to be read back)."""
    key_file(dp, variant).unlink(missing_ok=True)


def read_comparison(dp: DatasetPaths, key: str) -> QdrantComparison | None:
    """The Qdrant comparison :func:`store_comparison` saved under ``key`` (:func:`~.runkey.comparison_key`), or None."""
    try:
        saved = json.loads((dp.retrieve_dir / COMPARISON).read_text(encoding="utf-8"))
        return QdrantComparison(**saved["comparison"]) if saved["key"] == key else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store_comparison(dp: DatasetPaths, key: str, found: QdrantComparison) -> Path:
    """Write the Qdrant comparison with its key (:func:`read_comparison` reads it back)."""
    return atomic_write_json(dp.retrieve_dir / COMPARISON, {"key": key, "comparison": asdict(found)})
