"""The code version of a variant's search (issue 24): a hash of the *syntax tree* of every package module the search
runs through (:func:`variant_modules`) plus the versions of the libraries that compute scores (:data:`LIBRARIES`).

Stage 03's run key holds it (:func:`rerankeval.retrieve.runkey.key_parts`, part ``code``), and the sweep's leg cache
hashes its own engine with :func:`source_hash` (:mod:`rerankeval.experiments.legcache`).

Why a source hash rather than a version constant per variant: a constant must be bumped by hand on every change
that alters a run, and a forgotten bump silently serves stale runs; the hash cannot be forgotten. The syntax
tree (``ast.dump``) rather than the text, so comments and formatting do not invalidate; docstrings and any code
edit do (conservative: a needless recompute costs seconds, a stale run costs a wrong answer). Parsing and dumping
the ~20 modules costs ~0.3 s a run, so each tree hash is also kept in ``<cache>/code-trees.json`` under the hash of
the file's text and the Python version (:data:`TREES`): the same text gives the same tree, and a file that does not
read is ignored and rebuilt. ``cache``: that cache folder (the caller's, e.g. ``dp.roots.cache``).
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from rerankeval.core import names
from rerankeval.core.ioutil import atomic_write_json, sha256_json, sha256_text
from rerankeval.retrieve import variants

COMMON_MODULES = (
    "rerankeval.core.runs",
    "rerankeval.corpus.contract",
    "rerankeval.index.bm25",
    "rerankeval.index.embed",
    "rerankeval.index.build",
    "rerankeval.index.manifest",
    "rerankeval.index.encoder",
    "rerankeval.index.qdrant.store",
    "rerankeval.index.qdrant.edge",
    "rerankeval.index.qdrant.rrf",
    "rerankeval.retrieve.fusion",
    "rerankeval.retrieve.variants",
    "rerankeval.retrieve.source",
    "rerankeval.retrieve.retriever",
    "rerankeval.retrieve.stage",
    "rerankeval.retrieve.runkey",
    "rerankeval.retrieve.runstore",
    "rerankeval.retrieve.codeversion",
    "rerankeval.retrieve.search",
    "rerankeval.retrieve.qdrant_compare",
    "rerankeval.retrieve.params",
)
EXTRA_MODULES = {
    names.CROSS_ENCODER: ("rerankeval.retrieve.cross_encoder",),
    names.HYBRID_REFORMULATE: (
        "rerankeval.retrieve.reformulate",
        "rerankeval.llm.call",
        "rerankeval.llm.repair",
        "rerankeval.llm.schemas",
    ),
}
LIBRARIES = (
    "numpy",
    "qdrant-client",
    "qdrant-edge-py",
    "rank-bm25",
    "PyStemmer",
    "sentence-transformers",
    "torch",
    "transformers",
)
TREES = "code-trees.json"  # in the cache folder: "<python>:<sha256 of a file's text>" -> its syntax-tree hash
TREES_MAX = 2048  # entries kept (each edit of a module adds one): past it the file starts again
_trees: dict[Path, dict[str, str]] = {}  # cache folder -> this process's copy of its file


def code_version(variant: str, cache: Path) -> str:
    """``variant``'s code version: the hash of :func:`code_parts`."""
    return sha256_json(code_parts(variant, cache))


def code_parts(variant: str, cache: Path) -> dict[str, Any]:
    """The syntax-tree hash of each of :func:`variant_modules` and the versions of :data:`LIBRARIES`."""
    mods = variant_modules(variant)
    files = {m: (source_hash(p, cache) if (p := _module_file(m)) is not None else None) for m in mods}
    return {"modules": files, "libraries": _library_versions()}


def variant_modules(variant: str) -> list[str]:
    """The package modules ``variant``'s search runs through: the common ones, its extras and, for a registered
    class defined elsewhere (a user's variant), the modules of its class hierarchy."""
    mods = [*COMMON_MODULES, *EXTRA_MODULES.get(variant, ())]
    cls = variants.REGISTRY.get(names.HYBRID if variant == names.HYBRID_REFORMULATE else variant)
    for klass in inspect.getmro(cls) if cls is not None else ():
        if klass.__module__ not in mods and klass.__module__ not in ("builtins", "abc"):
            mods.append(klass.__module__)
    return mods


def source_hash(path: Path, cache: Path) -> str:
    """The hash of the syntax tree of the Python file ``path`` (comments and layout do not count), kept in
    ``cache`` (:data:`TREES`)."""
    st = path.stat()
    return _tree_hash(str(path), st.st_mtime_ns, st.st_size, cache)


def _module_file(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(spec.origin) if spec is not None and spec.origin else None


@lru_cache(maxsize=256)
def _tree_hash(path: str, mtime_ns: int, size: int, cache: Path) -> str:
    """:func:`source_hash` of the file as it is at ``mtime_ns`` and ``size``; from :data:`TREES` when this Python has
    seen the same text before."""
    source = Path(path).read_text(encoding="utf-8")
    text_key = f"{'.'.join(map(str, sys.version_info[:3]))}:{sha256_text(source)}"
    trees = _known_trees(cache)
    if (hit := trees.get(text_key)) is not None:
        return hit
    tree = sha256_json(ast.dump(ast.parse(source, filename=path)))
    if len(trees) >= TREES_MAX:
        trees.clear()
    trees[text_key] = tree
    try:
        atomic_write_json(cache / TREES, trees)
    except OSError:  # a read-only cache: the hash is still right, only not kept
        pass
    return tree


def _known_trees(cache: Path) -> dict[str, str]:
    if cache not in _trees:
        try:
            got = json.loads((cache / TREES).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            got = {}
        ok = isinstance(got, dict)
        _trees[cache] = {k: v for k, v in got.items() if isinstance(v, str) and len(v) == 64} if ok else {}
    return _trees[cache]


@lru_cache(maxsize=1)
def _library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = None
    return out
