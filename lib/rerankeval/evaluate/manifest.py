"""Reproducibility manifest: what data, parameters, models, endpoints and code produced these numbers.

Stage 05 writes it (:func:`rerankeval.evaluate.analyse.write`) beside its metrics; the report reads it
(:func:`read_manifest`).

Read only from what the stages saved (``dp.corpus_stats``, small JSON files in ``dp.index_dir`` and the
retrieve/rerank stage folders, the run files) and from the environment's non-secret settings. It never
holds secrets: every value whose key looks like a key, token, secret or password is replaced by
``[REDACTED]``, credentials are stripped from URLs, and the configured API key is scrubbed from the text.
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from rerankeval.core.ioutil import atomic_write_json, sha256_file
from rerankeval.core.paths import ROOT, DatasetPaths
from rerankeval.core.settings import REDACTED, Settings, looks_secret, scrub_url, secrets_of
from rerankeval.core.settings import redact as redact_text

SMALL_JSON = 64 * 1024  # JSON files up to this size are copied into the manifest
LIBRARIES = (
    "rerankeval",
    "ir_measures",
    "ranx",
    "pytrec_eval-terrier",
    "numpy",
    "scipy",
    "pandas",
    "matplotlib",
    "seaborn",
    "rank-bm25",
    "PyStemmer",
    "qdrant-client",
    "sentence-transformers",
    "torch",
    "transformers",
    "openai",
    "pdfplumber",
    "pypdf",
    "nbconvert",
    "papermill",
)


def redact(obj: Any, settings: Settings | None = None) -> Any:
    """A copy of ``obj`` with secret-keyed values replaced and every string passed through
    :func:`rerankeval.core.settings.redact` (with the secrets of ``settings`` as well)."""
    extra = sorted(secrets_of(settings)) if settings is not None else None
    if isinstance(obj, Mapping):
        return {
            str(k): (REDACTED if looks_secret(str(k)) and v not in (None, "") else redact(v, settings))
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [redact(v, settings) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj, extra)
    return obj


def _json_safe(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


def _git() -> dict[str, Any]:
    def run(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = run("rev-parse", "HEAD")
    status = run("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit or "none (no commit yet or not a git checkout)",
        "dirty": bool(status) if status is not None else None,
        "branch": run("rev-parse", "--abbrev-ref", "HEAD"),
    }


def library_versions(names: Sequence[str] = LIBRARIES) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = "not installed"
    return out


def _small_jsons(folder: Path, root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not folder.is_dir():
        return out
    for p in sorted(folder.rglob("*.json")):
        rel = str(p.relative_to(root))
        try:
            if p.stat().st_size > SMALL_JSON:
                out[rel] = f"<{p.stat().st_size} bytes, not copied>"
                continue
            out[rel] = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            out[rel] = f"<unreadable: {type(exc).__name__}>"
    return out


def _find(obj: Any, keys: set[str]) -> list[tuple[str, Any]]:
    """(dotted path, value) of every entry whose key is in ``keys``, depth first."""
    found: list[tuple[str, Any]] = []

    def walk(o: Any, path: str) -> None:
        if isinstance(o, Mapping):
            for k, v in o.items():
                p = f"{path}.{k}" if path else str(k)
                if str(k) in keys and not isinstance(v, Mapping):
                    found.append((p, v))
                walk(v, p)
        elif isinstance(o, list):
            for i, v in enumerate(o[:50]):
                walk(v, f"{path}[{i}]")

    walk(obj, "")
    return found


def _first(obj: Any, keys: Sequence[str]) -> Any:
    """The first non-empty value found for the keys, tried in the given order."""
    for k in keys:
        for _, v in _find(obj, {k}):
            if v not in (None, "", [], {}):
                return v
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        out = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def _llm(s: Settings) -> dict[str, Any]:
    return {
        "endpoint": scrub_url(s.base_url) if s.base_url else "local llama-server (OPENAI_BASE_URL unset)",
        "model": s.model,
        "endpoint_id": s.endpoint_id,
        "timeout_s": s.timeout,
        "max_retries": s.max_retries,
    }


def _stats(dp: DatasetPaths) -> dict[str, Any]:
    if not dp.corpus_stats.exists():
        return {}
    try:
        return json.loads(dp.corpus_stats.read_text(encoding="utf-8"))
    except ValueError:
        return {"error": "stats.json unreadable"}


def _dataset(dp: DatasetPaths, stats: Mapping[str, Any]) -> dict[str, Any]:
    hashes = {
        name: sha256_file(p)
        for name, p in (("chunks", dp.chunks), ("queries", dp.queries), ("qrels", dp.qrels))
        if p.exists()
    }
    return {
        "name": dp.name,
        "source": str(dp.source),
        "results": str(dp.root),
        "relevance_unit": stats.get("unit"),
        "corpus_hash": stats.get("corpus_hash"),
        "file_sha256": hashes,
    }


def _chunking(stats: Mapping[str, Any]) -> Any:
    if stats.get("chunking"):
        return stats["chunking"]
    if isinstance(stats.get("params"), dict):
        return {"kind": stats.get("kind"), **stats["params"], "chunk_chars": stats.get("chunk_chars")}
    return "not recorded in stats.json"


def _runs(dp: DatasetPaths, variants: Sequence[str] | None) -> dict[str, Any]:
    if not dp.runs_dir.is_dir():
        return {}
    return {
        p.stem: {"sha256": sha256_file(p), "bytes": p.stat().st_size}
        for p in sorted(dp.runs_dir.glob("*.trec"))
        if variants is None or p.stem in variants
    }


def _rrf(recorded: Mapping[str, Any]) -> dict[str, Any]:
    from rerankeval.retrieve import fusion

    found = _find(recorded, {"rrf_k", "rrf", "fusion", "k_rrf"})
    return {
        "recorded": dict(found) or "not recorded by the stages",
        "formula": "score = sum over legs of w / (k + rank), rank 1-based (Cormack et al. 2009)",
        "library_default_k": fusion.RRF_K,
        "qdrant_equivalent_k": fusion.RRF_K + 1,
    }  # Qdrant ranks from 0: its k is the paper's k + 1


def _bm25(index_man: Mapping[str, Any], index_files: Mapping[str, Any]) -> Any:
    if index_man.get("bm25_params"):
        return {
            "params": index_man["bm25_params"],
            "analyzer": index_man.get("analyzer"),
            "vocab_size": index_man.get("vocab_size"),
            "dir": index_man.get("bm25_dir"),
        }
    return dict(_find(index_files, {"k1", "b", "epsilon", "analyzer"})) or "not recorded in index/"


def _embedding(index_man: Mapping[str, Any], index_files: Mapping[str, Any]) -> Any:
    return (
        {k: index_man.get(k) for k in ("model_id", "model", "model_key", "dim") if k in index_man}
        or _first(index_files, ["embedding_model", "model_id", "model_name", "model"])
        or "not recorded in index/"
    )


def _relative(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (no absolute path of this machine in a shared
    manifest), else as it is."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _qdrant(dp: DatasetPaths, settings: Settings, index_man: Mapping[str, Any], recorded: Any) -> dict[str, Any]:
    url = settings.qdrant_url
    backend = index_man.get("backend")
    mode = (
        "server"
        if url
        else {
            "edge": "embedded (qdrant-edge shard, Qdrant's own engine)",
            "client": "embedded (qdrant-client local mode)",
        }.get(str(backend), "embedded (backend not recorded)")
    )
    return {
        "mode": mode,  # the backend the index was built with, said once (issue 35 item 9)
        "url": scrub_url(url) if url else None,
        "path": None if url else _relative(dp.qdrant_path),
        "collection": index_man.get("collection"),
        "client_version": library_versions(["qdrant-client"])["qdrant-client"],
        "server_version": _first(recorded, ["qdrant_version", "server_version"]),
    }


def build_manifest(
    dp: DatasetPaths,
    settings: Settings,
    variants: Sequence[str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything needed to reproduce the evaluation of ``dp``, already redacted.

    ``settings``: the settings in use (the caller's: nothing here reads the environment), whose LLM endpoint and
    Qdrant location the manifest records and whose secrets it scrubs.
    """
    stats = _stats(dp)
    index_files = _small_jsons(dp.index_dir, dp.root)
    stage_files: dict[str, Any] = {}
    for stage in ("retrieve", "rerank", "analyse"):
        stage_files.update(_small_jsons(dp.stage_dir(stage), dp.root))
    recorded = {"index": index_files, "stages": stage_files}
    index_man = _read_json(dp.index_manifest)  # stage 02 (rerankeval.index.manifest.IndexInfo)
    rerank_sum = _read_json(dp.rerank_summary)  # stage 04
    manifest: dict[str, Any] = {
        "created_utc": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "dataset": _dataset(dp, stats),
        "corpus_stats": stats,
        "chunking": _chunking(stats),
        "bm25": _bm25(index_man, index_files),
        "embedding_model": _embedding(index_man, index_files),
        "qdrant": _qdrant(dp, settings, index_man, recorded),
        "rrf": _rrf(recorded),
        "llm": {
            **_llm(settings),
            "recorded_by_rerank": {k: rerank_sum.get(k) for k in ("model", "endpoint", "config") if k in rerank_sum}
            or "no rerank summary",
        },
        "runs": _runs(dp, variants),
        "recorded_by_stages": recorded,
        "libraries": library_versions(),
        "git": _git(),
        "paths": {"results": str(dp.roots.results), "cache": str(dp.roots.cache), "qdrant": str(dp.roots.qdrant)},
    }
    if extra:
        manifest["analysis"] = dict(extra)
        if (extra.get("judging") or {}).get("judgments"):  # grades recorded while exploring, merged by 05
            manifest["judgments"] = extra["judging"]["judgments"]
    return redact(_json_safe(manifest), settings)


def write_manifest(dp: DatasetPaths, manifest: Mapping[str, Any], settings: Settings | None = None) -> Path:
    """Write the (re-redacted) manifest to ``dp.manifest`` atomically."""
    return atomic_write_json(dp.manifest, redact(_json_safe(dict(manifest)), settings))


def read_manifest(dp: DatasetPaths) -> dict[str, Any] | None:
    if not dp.manifest.exists():
        return None
    try:
        return redact(json.loads(dp.manifest.read_text(encoding="utf-8")))
    except ValueError:
        return None
