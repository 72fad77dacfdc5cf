"""Cached runs of stage 03 (issue 24): a variant whose inputs did not change is read back, not searched again.

The stage asks this module for each variant (:func:`fetch`) and for the Qdrant comparison (:func:`comparison`);
what cannot be read back is searched by :mod:`rerankeval.retrieve.search` (stage -> runcache -> search: the
walk goes one way, nothing here calls back into the stage).

A variant's run is a function of its inputs, so :func:`rerankeval.retrieve.stage.write` saves, next to
``runs/<variant>.trec``, a small key file ``runs/<variant>.key.json`` (:func:`key_file`, written atomically and
last, after the run files it vouches for) holding the hash of everything the run depends on:

- ``corpus``: the SHA-256 of stage 01's chunk table (``corpus/chunks.jsonl``: chunk ids, units, texts);
- ``index``: stage 02's manifest (collection, model key, BM25 directory, parameters and analyser, backend,
  dimension), without its timings and the store's location (the collection name is content-addressed);
- ``store``: the Qdrant backend configured now, whether a server (``QDRANT_URL``) is used and whether dense search
  is forced exact (``RERANKEVAL_DENSE_EXACT``);
- ``queries``: the judged queries, id and text;
- ``params``: only the parameters the variant reads (:func:`reads`: ``vector`` and ``bm25`` read ``leg_k`` only,
  so a new ``rrf_k`` or ``pool_k`` reads them back; a variant this module does not know reads them all);
- ``code``: the code version, a hash of the *syntax tree* of every package module the variant's search runs
  through (:func:`code_version`) plus the versions of the libraries that compute scores (:data:`LIBRARIES`);
- ``extra``: the cross-encoder's weights (folder, file sizes and times) or, for ``hybrid_reformulate``, the LLM's
  identity (the rewrite's cache-key material without the query: model, endpoint, prompt, schema, generation).

Why a source hash rather than a version constant per variant: a constant must be bumped by hand on every change
that alters a run, and a forgotten bump silently serves stale runs; the hash cannot be forgotten. The syntax
tree (``ast.dump``) rather than the text, so comments and formatting do not invalidate; docstrings and any code
edit do (conservative: a needless recompute costs seconds, a stale run costs a wrong answer). Parsing and dumping
the ~18 modules costs ~0.3 s a run, so each tree hash is also kept in ``<cache>/code-trees.json`` under the hash of
the file's text and the Python version (:data:`TREES`): the same text gives the same tree, and a file that does not
read is ignored and rebuilt.

A run is read back only when the key file reads, its key equals the key computed now, and every file it names
(unit run, chunk run, the rewrite ledger) still has the recorded SHA-256; anything else (a missing or corrupt
file, another code version, another input) is ignored and the variant searched again, with the reason
(:meth:`Lookup.reason`). A ``hybrid_reformulate`` run is saved only when every rewrite asked had a usable reply
(those replies are in the LLM cache), and read back only while each of those replies is still in the LLM cache.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rerankeval.core import names
from rerankeval.core.ioutil import atomic_write_json, sha256_file, sha256_json, sha256_text
from rerankeval.core.paths import DatasetPaths, cache_dir
from rerankeval.core.runs import Run
from rerankeval.core.settings import Settings
from rerankeval.retrieve import cross_encoder, reformulate, search, variants
from rerankeval.retrieve.params import Params
from rerankeval.retrieve.retriever import Retrieval

if TYPE_CHECKING:
    import pandas as pd

    from rerankeval.llm.cache import LLMCache

FORMAT = 1  # the key file's layout
BUDGET = ("leg_k", "pool_k", "rrf_k", "weights")  # what every variant is given (variants.Params)
LEGS_ONLY = {variants.VectorLeg: ("leg_k",), variants.Bm25Leg: ("leg_k",)}
READS: dict[type, tuple[str, ...]] = {  # built-in classes only (exact class): what their search reads
    **LEGS_ONLY,
    variants.Hybrid: ("leg_k", "rrf_k", "weights"),
    variants.QdrantHybrid: ("leg_k", "rrf_k", "weights"),
    variants.HybridCombSum: ("leg_k", "weights"),
    variants.HybridCombMnz: ("leg_k", "weights"),
    variants.HybridDbsf: ("leg_k", "weights"),
    variants.QdrantDbsf: ("leg_k", "weights"),
    variants.CrossEncoderRerank: BUDGET,
}
REWRITE_READS = ("leg_k", "rrf_k", "weights", "threshold", "guard_k")  # hybrid_reformulate: hybrid + its step
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
    "rerankeval.retrieve.runcache",
    "rerankeval.retrieve.search",
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


def key_file(dp: DatasetPaths, variant: str) -> Path:
    """``runs/<variant>.key.json``, beside the variant's run file (not a ``*.trec``: no stage reads it as a run)."""
    return dp.run_file(variant).with_suffix(".key.json")


def reads(variant: str) -> tuple[str, ...]:
    """The parameters ``variant``'s run depends on (every budget parameter for a class not in :data:`READS`)."""
    if variant == names.HYBRID_REFORMULATE:
        return REWRITE_READS
    cls = variants.REGISTRY.get(variant)
    return READS.get(cls, BUDGET) if cls is not None else BUDGET


# -- the code version --
def _module_file(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(spec.origin) if spec is not None and spec.origin else None


TREES = "code-trees.json"  # in the cache folder: "<python>:<sha256 of a file's text>" -> its syntax-tree hash
TREES_MAX = 2048  # entries kept (each edit of a module adds one): past it the file starts again
_trees: dict[str, str] | None = None  # this process's copy of the file


def _known_trees() -> dict[str, str]:
    global _trees
    if _trees is None:
        try:
            got = json.loads((cache_dir() / TREES).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            got = {}
        ok = isinstance(got, dict)
        _trees = {k: v for k, v in got.items() if isinstance(v, str) and len(v) == 64} if ok else {}
    return _trees


@lru_cache(maxsize=256)
def _tree_hash(path: str, mtime_ns: int, size: int) -> str:
    """The hash of a Python file's syntax tree (comments and layout do not count); from :data:`TREES` when this
    Python has seen the same text before."""
    source = Path(path).read_text(encoding="utf-8")
    text_key = f"{'.'.join(map(str, sys.version_info[:3]))}:{sha256_text(source)}"
    trees = _known_trees()
    if (hit := trees.get(text_key)) is not None:
        return hit
    tree = sha256_json(ast.dump(ast.parse(source, filename=path)))
    if len(trees) >= TREES_MAX:
        trees.clear()
    trees[text_key] = tree
    try:
        atomic_write_json(cache_dir() / TREES, trees)
    except OSError:  # a read-only cache: the hash is still right, only not kept
        pass
    return tree


def source_hash(path: Path) -> str:
    st = path.stat()
    return _tree_hash(str(path), st.st_mtime_ns, st.st_size)


def variant_modules(variant: str) -> list[str]:
    """The package modules ``variant``'s search runs through: the common ones, its extras and, for a registered
    class defined elsewhere (a user's variant), the modules of its class hierarchy."""
    mods = [*COMMON_MODULES, *EXTRA_MODULES.get(variant, ())]
    cls = variants.REGISTRY.get(names.HYBRID if variant == names.HYBRID_REFORMULATE else variant)
    for klass in inspect.getmro(cls) if cls is not None else ():
        if klass.__module__ not in mods and klass.__module__ not in ("builtins", "abc"):
            mods.append(klass.__module__)
    return mods


def code_parts(variant: str) -> dict[str, Any]:
    """The syntax-tree hash of each of :func:`variant_modules` and the versions of :data:`LIBRARIES`."""
    files = {m: (source_hash(p) if (p := _module_file(m)) is not None else None) for m in variant_modules(variant)}
    return {"modules": files, "libraries": _library_versions()}


def code_version(variant: str) -> str:
    """``variant``'s code version: the hash of :func:`code_parts`."""
    return sha256_json(code_parts(variant))


@lru_cache(maxsize=1)
def _library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = None
    return out


# -- what the variants share: corpus, index, store, queries --
INDEX_VOLATILE = ("actions", "seconds", "qdrant")  # how the last build went and where the store lives


@dataclass(frozen=True)
class Inputs:
    """The inputs every variant of one run shares (None: not there, so nothing can be read back)."""

    corpus: str | None
    index: str | None
    store: str
    queries: str

    @classmethod
    def of(cls, dp: DatasetPaths, queries: Mapping[str, str], settings: Settings) -> Inputs:
        """The shared inputs of ``dp``'s runs for ``queries``, on the Qdrant store ``settings`` configure."""
        corpus = sha256_file(dp.chunks) if dp.chunks.is_file() else None
        try:
            manifest = json.loads(dp.index_manifest.read_text(encoding="utf-8"))
            index = sha256_json({k: v for k, v in manifest.items() if k not in INDEX_VOLATILE})
        except (OSError, ValueError, AttributeError):
            index = None
        s = settings
        store = f"{s.qdrant_backend}{'+server' if s.qdrant_url else ''}{'+exact' if s.dense_exact else ''}"
        return cls(corpus, index, store, sha256_json(sorted(queries.items())))


def key_parts(inputs: Inputs, variant: str, params: Mapping[str, Any], extra: Any = None) -> dict[str, Any]:
    """Everything ``variant``'s run depends on (``params``: the budget and step parameters; only those the variant
    :func:`reads` are kept); its hash is the key."""
    return {
        "format": FORMAT,
        "variant": variant,
        "corpus": inputs.corpus,
        "index": inputs.index,
        "store": inputs.store,
        "queries": inputs.queries,
        "params": {k: _plain(params.get(k)) for k in reads(variant)},
        "code": code_parts(variant),
        "extra": extra,
    }


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (tuple, list)) else value


def key_of(parts: Mapping[str, Any]) -> str:
    return sha256_json(parts)


def what_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """In words, which inputs differ between two key parts ("rrf_k 60 -> 30", "the code (retrieve.fusion)")."""
    said = []
    for part in ("corpus", "index", "store", "queries", "extra", "format"):
        if old.get(part) != new.get(part):
            said.append(
                {
                    "corpus": "the chunk table",
                    "index": "the indexes",
                    "store": "the Qdrant backend",
                    "queries": "the queries",
                    "extra": "the model",
                    "format": "the key format",
                }[part]
            )
    op, np_ = old.get("params") or {}, new.get("params") or {}
    said += [f"{k} {op.get(k)!r} -> {np_.get(k)!r}" for k in sorted(set(op) | set(np_)) if op.get(k) != np_.get(k)]
    oc, nc = old.get("code") or {}, new.get("code") or {}
    mods = [
        ".".join(m.split(".")[-2:])
        for m in (nc.get("modules") or {})
        if (oc.get("modules") or {}).get(m) != nc["modules"][m]
    ]
    if mods or oc.get("libraries") != nc.get("libraries"):
        said.append(f"the code ({', '.join(mods) or 'library versions'})")
    return ", ".join(said) or "its inputs"


# -- the key file --
@dataclass
class Lookup:
    """What :func:`load` found: the saved runs (``found``) or why not (``reason``)."""

    variant: str
    reason: str = ""
    run: Run | None = None
    chunk_run: Run | None = None
    entry: dict[str, Any] | None = None
    seconds: float = 0.0

    @property
    def found(self) -> bool:
        return self.run is not None


def _files(dp: DatasetPaths, variant: str, ledger: Path | None) -> dict[str, Path]:
    files = {"run": dp.run_file(variant), "chunk_run": dp.chunk_run_file(variant)}
    return {**files, "ledger": ledger} if ledger is not None else files


def load(dp: DatasetPaths, variant: str, parts: Mapping[str, Any], ledger: Path | None = None) -> Lookup:
    """The saved runs of ``variant`` when its key file matches ``parts`` and its files are intact."""
    t0 = time.perf_counter()
    out = Lookup(variant)
    path = key_file(dp, variant)
    if not path.is_file():
        out.reason = "no saved run" if not dp.run_file(variant).exists() else "no key file beside its run"
        return out
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        ok = isinstance(entry, dict) and entry.get("format") == FORMAT and isinstance(entry.get("files"), dict)
    except (OSError, UnicodeDecodeError, ValueError):
        ok = False
    if not ok:
        out.reason = f"its key file {path.name} is unreadable"
        return out
    if entry.get("key") != key_of(parts):
        out.reason = f"changed: {what_changed(entry.get('parts') or {}, parts)}"
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


def _read_run(path: Path) -> Run:
    """A run file whose hash matched the one :func:`~rerankeval.core.runs.write_trec` gave it, so its lines are
    well formed, ranked and strictly decreasing per query: read without :func:`~rerankeval.core.runs.read_trec`'s
    per-line checks and sort (the same run, several times faster)."""
    out: dict[str, dict[str, float]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        q, _, doc, _, score, _ = line.split()
        out.setdefault(q, {})[doc] = float(score)
    return out


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
            "format": FORMAT,
            "key": key_of(parts),
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


# -- the model a variant asks: cross-encoder weights, the rewrite LLM --
def cross_encoder_identity(spec: str | Path) -> dict[str, Any] | None:
    """The cross-encoder ``spec`` found on disk (:func:`~rerankeval.retrieve.cross_encoder.find_cross_encoder`) as
    its folder's files (name, size, modification time; no weights are read), or None when none is on disk."""
    found = cross_encoder.find_cross_encoder(spec)
    if found is None:
        return None
    folder = found if isinstance(found, Path) else _hub_folder(found)
    files = (
        sorted(
            (p.relative_to(folder).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*")
            if p.is_file()
        )
        if folder is not None
        else None
    )
    return {"model": str(found) if isinstance(found, Path) else found, "files": files}


def _hub_folder(name: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    hit = try_to_load_from_cache(name, "config.json")
    return Path(hit).parent if isinstance(hit, str) else None


def rewrite_material(settings: Settings, query: str) -> dict[str, Any] | None:
    """The rewrite's LLM cache-key material for ``query`` (:meth:`~rerankeval.retrieve.reformulate.Rewriter.material`,
    the one definition, on the configured model and endpoint), or None without an endpoint and a model name
    (``RERANK_MODEL``; a model found only by asking the endpoint cannot be checked without a request)."""
    from types import SimpleNamespace

    from rerankeval.llm.scrub import endpoint_identity

    if not settings.base_url or not settings.model:
        return None
    asker = SimpleNamespace(
        client=SimpleNamespace(model=settings.model), endpoint=endpoint_identity(settings), seed=0
    )  # the seed open_rewriter's Rewriter uses
    return reformulate.Rewriter.material(asker, query)  # type: ignore[arg-type]


def rewrite_identity(settings: Settings) -> dict[str, Any] | None:
    """The LLM a rewrite asks (the material without the query), or None (see :func:`rewrite_material`)."""
    material = rewrite_material(settings, "")
    return None if material is None else {k: v for k, v in material.items() if k != "query"}


def rewrite_keys(settings: Settings, texts: list[str]) -> list[str]:
    """The LLM cache keys of the rewrites of ``texts``."""
    from rerankeval.llm.cache import LLMCache

    return [LLMCache.key(rewrite_material(settings, t)) for t in texts]


def replies_cached(entry: Mapping[str, Any], cache: Any) -> bool:
    """Every rewrite reply a saved ``hybrid_reformulate`` run used is still in the LLM cache ``cache``."""
    return all(cache.get(k) is not None for k in entry.get("llm_keys") or [])


# -- the stage's questions: each variant's runs, the Qdrant comparison --
@dataclass
class Fetched:
    """One variant as :func:`fetch` got it: its runs (``retrieval``; None: skipped, ``skipped`` says why), read
    back or searched (``note``), the key parts :func:`store` saves (None: not to be read back), the seconds of the
    search that made a run read back, the rewrite ledger and the LLM cache keys of its replies."""

    retrieval: Retrieval | None = None
    note: str = ""
    skipped: str = ""
    parts: dict[str, Any] | None = None
    read_back: float | None = None
    ledger: pd.DataFrame | None = None
    llm_keys: list[str] | None = None


def fetch(
    dp: DatasetPaths,
    searcher: search.Searcher,
    v: str,
    queries: Mapping[str, str],
    p: Params,
    inputs: Inputs,
    *,
    cache: LLMCache | None,
) -> Fetched:
    """``v``'s runs: read back when its inputs did not change since :func:`store` (and ``p.reuse_runs``), else
    searched (:func:`rerankeval.retrieve.search.search`) on the settings of ``searcher``."""
    settings, extra = searcher.settings, None
    if v == names.CROSS_ENCODER:
        extra = cross_encoder_identity(cross_encoder.model_name(p.cross_encoder_model, settings))
        if extra is None:
            return Fetched(skipped=f"Skipping {v}: {cross_encoder.NOT_ON_DISK}")
    elif v == names.HYBRID_REFORMULATE:
        extra = rewrite_identity(settings)
    budget = {
        "leg_k": p.leg_k,
        "pool_k": p.pool_k,
        "rrf_k": p.rrf_k,
        "weights": None,
        "threshold": p.reformulate_threshold,
        "guard_k": p.reformulate_guard_k,
    }
    parts = key_parts(inputs, v, budget, extra)
    why = _read_back(dp, v, parts, queries, p, cache) if p.reuse_runs else "reuse_runs is off"
    if isinstance(why, Fetched):
        return why
    found = search.search(searcher, v, queries, p, cache=cache)
    if found.retrieval is None:
        return Fetched(skipped=found.skipped)
    out = Fetched(found.retrieval, parts=parts, ledger=found.ledger)
    if v == names.HYBRID_REFORMULATE:
        why = _rewrites_saved(out, queries, settings, why if extra is not None else "no LLM model named")
    out.note = f"searched ({why})"
    return out


def _read_back(
    dp: DatasetPaths, v: str, parts: dict, queries: Mapping[str, str], p: Params, cache: LLMCache | None
) -> Fetched | str:
    """``v``'s saved runs, or why they cannot be read back."""
    ledger = dp.retrieve_dir / reformulate.LEDGER if v == names.HYBRID_REFORMULATE else None
    hit = load(dp, v, parts, ledger)
    if not hit.found:
        return hit.reason
    rows = None
    if ledger is not None:
        from rerankeval.llm.cache import LLMCache

        if not replies_cached(hit.entry, cache if cache is not None else LLMCache()):
            return "a rewrite's reply is no longer in the LLM cache"
        rows = reformulate.read_ledger(dp)
    found = variants.complete(variants.Runs(hit.run, hit.chunk_run), queries)
    record = {**hit.entry["record"], **p.budget().record()}
    return Fetched(
        Retrieval(v, found.run, found.chunk_run, hit.seconds, record),
        "unchanged, read back",
        parts=parts,
        read_back=float(hit.entry.get("seconds") or 0.0),
        ledger=rows,
    )


def _rewrites_saved(out: Fetched, queries: Mapping[str, str], settings: Settings, why: str) -> str:
    """Keep ``hybrid_reformulate``'s key only when every rewrite asked had a usable reply (so the replies are in
    the LLM cache) and the model is named; note the LLM cache keys; return the reason to show."""
    ledger = out.ledger
    asked = ledger[ledger.status != reformulate.NOT_REWRITTEN] if ledger is not None else None
    failed = asked is None or reformulate.failed_calls(asked).any()
    if failed or rewrite_identity(settings) is None:
        out.parts = None
        return f"{why}; not saved for reading back: {'a rewrite failed' if failed else 'no model name'}"
    out.llm_keys = rewrite_keys(settings, [queries[q] for q in asked.qid])
    return why


COMPARISON = "qdrant_comparison.json"  # in dp.retrieve_dir: the Qdrant comparison and its key


def comparison(
    dp: DatasetPaths,
    searcher: search.Searcher,
    found: Mapping[str, Retrieval],
    keys: Mapping[str, Mapping[str, Any]],
    queries: Mapping[str, str],
    p: Params,
) -> tuple[search.QdrantComparison | None, str | None]:
    """(the Qdrant comparison, its key): read back when both hybrids' inputs (``keys``) and its own did not change,
    else computed (:func:`rerankeval.retrieve.search.compare_qdrant`); (None, None) unless both hybrids ran."""
    if not {names.HYBRID, names.QDRANT_HYBRID} <= set(found):
        return None, None
    key = sha256_json(
        {
            "runs": [key_of(keys[v]) for v in (names.HYBRID, names.QDRANT_HYBRID) if v in keys],
            "params": [p.explain_queries, p.final_k, p.leg_k, p.rrf_k],
            "code": code_version(names.QDRANT_HYBRID),
        }
    )
    try:
        saved = json.loads((dp.retrieve_dir / COMPARISON).read_text(encoding="utf-8"))
        if p.reuse_runs and saved["key"] == key:
            return search.QdrantComparison(**saved["comparison"]), key
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return search.compare_qdrant(searcher.get(), found, queries, p), key


def store_comparison(dp: DatasetPaths, key: str, found: search.QdrantComparison) -> Path:
    """Write the Qdrant comparison with its key (:func:`comparison` reads it back)."""
    return atomic_write_json(dp.retrieve_dir / COMPARISON, {"key": key, "comparison": asdict(found)})
