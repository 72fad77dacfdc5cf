"""Reproducibility manifest: what data, parameters, models, endpoints and code produced these numbers.

Read only from what the stages saved (``dp.corpus_stats``, small JSON files in ``dp.index_dir`` and the
retrieve/rerank stage folders, the run files) and from the environment's non-secret settings. It never
holds secrets: every value whose key looks like a key, token, secret or password is replaced by
``[REDACTED]``, credentials are stripped from URLs, and the configured API key is scrubbed from the text.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .ioutil import atomic_write_json, sha256_file
from .paths import ROOT, DatasetPaths, cache_dir, qdrant_dir, results_dir

REDACTED = "[REDACTED]"
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

# words that make a key secret on their own, and qualifiers that make "key"/"token" secret
_SECRET_WORDS = {
    "secret",
    "secrets",
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "bearer",
    "cookie",
    "apikey",
    "signature",
}
_KEY_QUALIFIERS = {"api", "access", "secret", "private", "auth", "signing", "encryption", "client", "session"}
_SECRET_VALUE = re.compile(
    r"(?:\bsk-[A-Za-z0-9_\-]{12,}|\bhf_[A-Za-z0-9]{16,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bxox[abpr]-[A-Za-z0-9\-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b|(?i:bearer)\s+[A-Za-z0-9._\-+/=]{8,})"
)


def _words(key: str) -> list[str]:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key))
    return [w for w in re.split(r"[^a-z0-9]+", s.lower()) if w]


def looks_secret(key: str) -> bool:
    """True for keys naming a key/token/secret/password (``api_key``, ``OPENAI_API_KEY``, ``hfToken``).

    ``key`` counts only when qualified (``api_key``, ``private_key``; a bare ``key`` too); ``token`` when
    it is the last word (``hf_token``, ``access_token``). Counts and settings such as ``prompt_tokens``,
    ``max_tokens``, ``token_pattern``, ``tokenizer``, ``model_key`` or ``cache_key`` are not secrets.
    """
    ws = _words(key)
    if not ws:
        return False
    if any(w in _SECRET_WORDS for w in ws) or "".join(ws) in {
        "apikey",
        "accesskey",
        "secretkey",
        "privatekey",
    }:
        return True
    if "key" in ws and (ws == ["key"] or any(w in _KEY_QUALIFIERS for w in ws)):
        return True
    return ws[-1] == "token"


def scrub_url(url: str) -> str:
    """A URL without user:password and without secret-looking query parameters."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = urlencode(
        [(k, REDACTED if looks_secret(k) else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _scrub_text(s: str) -> str:
    s = _SECRET_VALUE.sub(REDACTED, s)
    if "://" in s:
        s = re.sub(r"[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s\"'<>]+", lambda m: scrub_url(m.group(0)), s)
    return s


def redact(obj: Any) -> Any:
    """A copy of ``obj`` with secret-keyed values replaced and secrets scrubbed from strings."""
    if isinstance(obj, Mapping):
        return {
            str(k): (REDACTED if looks_secret(str(k)) and v not in (None, "") else redact(v))
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return _scrub_text(obj)
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


def _llm() -> dict[str, Any]:
    try:
        from .settings import load_settings

        s = load_settings()
    except Exception as exc:  # settings are optional for the manifest
        return {"error": f"could not read LLM settings: {type(exc).__name__}"}
    return {
        "endpoint": scrub_url(s.base_url) if s.base_url else "local llama-server (OPENAI_BASE_URL unset)",
        "model": s.model,
        "endpoint_id": s.endpoint_id,
        "timeout_s": s.timeout,
        "max_retries": s.max_retries,
    }


def build_manifest(
    dp: DatasetPaths,
    variants: Sequence[str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything needed to reproduce the evaluation of ``dp``, already redacted."""
    stats: dict[str, Any] = {}
    if dp.corpus_stats.exists():
        try:
            stats = json.loads(dp.corpus_stats.read_text(encoding="utf-8"))
        except ValueError:
            stats = {"error": "stats.json unreadable"}
    index_files = _small_jsons(dp.index_dir, dp.root)
    stage_files = {}
    for stage in ("retrieve", "rerank", "analyse"):
        stage_files.update(_small_jsons(dp.stage_dir(stage), dp.root))
    recorded = {"index": index_files, "stages": stage_files}

    run_files = {}
    if dp.runs_dir.is_dir():
        for p in sorted(dp.runs_dir.glob("*.trec")):
            if variants is None or p.stem in variants:
                run_files[p.stem] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
    data_hashes = {
        name: sha256_file(p)
        for name, p in (("chunks", dp.chunks), ("queries", dp.queries), ("qrels", dp.qrels))
        if p.exists()
    }

    try:
        from . import fusion

        rrf_default = {
            "formula": "score = sum over legs of w / (k + rank), rank 1-based (Cormack et al. 2009)",
            "library_default_k": fusion.RRF_K,
            "qdrant_equivalent_k": fusion.qdrant_k(fusion.RRF_K),
        }
    except Exception:  # pragma: no cover - fusion module missing
        rrf_default = {"formula": "not available"}
    rrf_recorded = _find(recorded, {"rrf_k", "rrf", "fusion", "k_rrf"})

    qdrant_url = os.environ.get("QDRANT_URL")
    index_man = _read_json(dp.index_dir / "manifest.json")  # stage 02 (rerankeval.index.IndexInfo)
    rerank_sum = _read_json(dp.stage_dir("rerank") / "summary.json")  # stage 04
    if index_man.get("bm25_params"):
        bm25: Any = {
            "params": index_man["bm25_params"],
            "analyzer": index_man.get("analyzer"),
            "vocab_size": index_man.get("vocab_size"),
            "dir": index_man.get("bm25_dir"),
        }
    else:
        bm25 = {
            p: v for p, v in _find(index_files, {"k1", "b", "epsilon", "analyzer"})
        } or "not recorded in index/"
    embedding = {
        k: index_man.get(k) for k in ("model_id", "model", "model_key", "dim") if k in index_man
    } or (
        _first(index_files, ["embedding_model", "model_id", "model_name", "model"])
        or "not recorded in index/"
    )
    manifest: dict[str, Any] = {
        "created_utc": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "dataset": {
            "name": dp.name,
            "source": str(dp.source),
            "results": str(dp.root),
            "relevance_unit": stats.get("unit"),
            "corpus_hash": stats.get("corpus_hash"),
            "file_sha256": data_hashes,
        },
        "corpus_stats": stats,
        "chunking": stats.get("chunking")
        or (
            {"kind": stats.get("kind"), **stats["params"], "chunk_chars": stats.get("chunk_chars")}
            if isinstance(stats.get("params"), dict)
            else None
        )
        or "not recorded in stats.json",
        "bm25": bm25,
        "embedding_model": embedding,
        "qdrant": {
            "mode": "server" if qdrant_url else "embedded (qdrant-client local mode)",
            "url": scrub_url(qdrant_url) if qdrant_url else None,
            "path": None if qdrant_url else str(dp.qdrant_path),
            "recorded_by_index": index_man.get("qdrant"),
            "collection": index_man.get("collection"),
            "client_version": library_versions(["qdrant-client"])["qdrant-client"],
            "server_version": _first(recorded, ["qdrant_version", "server_version"]),
        },
        "rrf": {"recorded": {p: v for p, v in rrf_recorded} or "not recorded by the stages", **rrf_default},
        "llm": {
            **_llm(),
            "recorded_by_rerank": {
                k: rerank_sum.get(k) for k in ("model", "endpoint", "config") if k in rerank_sum
            }
            or "no rerank summary",
        },
        "runs": run_files,
        "recorded_by_stages": recorded,
        "libraries": library_versions(),
        "git": _git(),
        "paths": {"results": str(results_dir()), "cache": str(cache_dir()), "qdrant": str(qdrant_dir())},
    }
    if extra:
        manifest["analysis"] = dict(extra)
    return _final_scrub(redact(_json_safe(manifest)))


def _configured_secrets() -> list[str]:
    keys = [os.environ.get("OPENAI_API_KEY")]
    try:
        from .settings import load_settings

        keys.append(load_settings().api_key)
    except Exception:  # a malformed .env must not stop redaction
        pass
    return sorted({k for k in keys if k and len(k) >= 4}, key=len, reverse=True)


def _final_scrub(obj: Any) -> Any:
    """Belt and braces: remove the literal configured API key from every string."""
    secrets = _configured_secrets()
    if not secrets:
        return obj

    def walk(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: walk(v) for k, v in o.items()}
        if isinstance(o, list):
            return [walk(v) for v in o]
        if isinstance(o, str):
            for sec in secrets:
                o = o.replace(sec, REDACTED)
            return o
        return o

    return walk(obj)


def write_manifest(dp: DatasetPaths, manifest: Mapping[str, Any]) -> Path:
    """Write the (re-redacted) manifest to ``dp.manifest`` atomically."""
    return atomic_write_json(dp.manifest, _final_scrub(redact(_json_safe(dict(manifest)))))


def read_manifest(dp: DatasetPaths) -> dict[str, Any] | None:
    if not dp.manifest.exists():
        return None
    try:
        return redact(json.loads(dp.manifest.read_text(encoding="utf-8")))
    except ValueError:
        return None
