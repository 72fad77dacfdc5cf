"""The key of a variant's run (issue 24): everything stage 03's run of a variant depends on, hashed.

A variant's run is a function of its inputs, so :func:`rerankeval.retrieve.stage.write` saves the key beside its run
files (:mod:`rerankeval.retrieve.runstore`) and the next run reads them back while the key computed then is the
same. The parts of the key (:func:`key_parts`):

- ``corpus``: the SHA-256 of stage 01's chunk table (``corpus/chunks.jsonl``: chunk ids, units, texts);
- ``index``: stage 02's manifest (collection, model key, BM25 directory, parameters and analyser, backend,
  dimension), without its timings and the store's location (the collection name is content-addressed);
- ``store``: the Qdrant backend configured now, whether a server (``QDRANT_URL``) is used and whether dense search
  is forced exact (``RERANKEVAL_DENSE_EXACT``);
- ``queries``: the judged queries, id and text;
- ``params``: only the parameters the variant reads (:func:`reads`: ``vector`` and ``bm25`` read ``leg_k`` only,
  so a new ``rrf_k`` or ``pool_k`` reads them back; a variant this module does not know reads them all);
- ``code``: the code version of the variant's search (:func:`rerankeval.retrieve.codeversion.code_parts`);
- ``extra``: the cross-encoder's weights (:func:`rerankeval.retrieve.cross_encoder.identity`) or, for
  ``hybrid_reformulate``, the LLM's identity (:func:`rewrite_identity`: the rewrite's cache-key material without
  the query: model, endpoint, prompt, schema, generation).

A ``hybrid_reformulate`` run is keyed only when every rewrite asked had a usable reply (:func:`rewrite_replies`: those
replies are in the LLM cache, and the key file names their cache keys). The Qdrant comparison has a key of its own
(:func:`comparison_key`). Nothing here reads or writes a run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rerankeval.core import names
from rerankeval.core.ioutil import sha256_file, sha256_json
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.retrieve import codeversion, reformulate, variants
from rerankeval.retrieve.params import Params

if TYPE_CHECKING:
    import pandas as pd

FORMAT = 1  # the key's layout (and its key file's)
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
INDEX_VOLATILE = ("actions", "seconds", "qdrant")  # how the last build went and where the store lives


@dataclass(frozen=True)
class Inputs:
    """The inputs every variant of one run shares (None: not there, so nothing can be read back)."""

    corpus: str | None
    index: str | None
    store: str
    queries: str
    cache: Path  # where the code version's tree hashes are kept (dp.roots.cache; not a part of the key)

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
        return cls(corpus, index, store, sha256_json(sorted(queries.items())), dp.roots.cache)


def key_parts(inputs: Inputs, variant: str, params: Mapping[str, Any], extra: Any = None) -> dict[str, Any]:
    """Everything ``variant``'s run depends on (``params``: the budget and step parameters; only those the variant
    :func:`reads` are kept); its hash is the key (:func:`key_of`)."""
    return {
        "format": FORMAT,
        "variant": variant,
        "corpus": inputs.corpus,
        "index": inputs.index,
        "store": inputs.store,
        "queries": inputs.queries,
        "params": {k: _plain(params.get(k)) for k in reads(variant)},
        "code": codeversion.code_parts(variant, inputs.cache),
        "extra": extra,
    }


def reads(variant: str) -> tuple[str, ...]:
    """The parameters ``variant``'s run depends on (every budget parameter for a class not in :data:`READS`)."""
    if variant == names.HYBRID_REFORMULATE:
        return REWRITE_READS
    cls = variants.REGISTRY.get(variant)
    return READS.get(cls, BUDGET) if cls is not None else BUDGET


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (tuple, list)) else value


def key_of(parts: Mapping[str, Any]) -> str:
    """The key: the hash of :func:`key_parts`."""
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


# -- the rewrite LLM of hybrid_reformulate --
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


def rewrite_replies(
    ledger: pd.DataFrame | None, queries: Mapping[str, str], settings: Settings
) -> tuple[list[str] | None, str]:
    """(the LLM cache keys of the replies a ``hybrid_reformulate`` run used, ""), or (None, why the run is not to be
    read back: a rewrite asked had no usable reply, or the model is not named)."""
    asked = ledger[ledger.status != reformulate.NOT_REWRITTEN] if ledger is not None else None
    failed = asked is None or reformulate.failed_calls(asked).any()
    if failed or rewrite_identity(settings) is None:
        return None, "a rewrite failed" if failed else "no model name"
    return rewrite_keys(settings, [queries[q] for q in asked.qid]), ""


# -- the Qdrant comparison --
def comparison_key(keys: Mapping[str, Mapping[str, Any]], p: Params, cache: Path) -> str:
    """The Qdrant comparison's key: both hybrids' keys (``keys``: variant -> its key parts), the parameters it reads
    and its code version (its tree hashes kept in ``cache``)."""
    return sha256_json(
        {
            "runs": [key_of(keys[v]) for v in (names.HYBRID, names.QDRANT_HYBRID) if v in keys],
            "params": [p.explain_queries, p.final_k, p.leg_k, p.rrf_k],
            "code": codeversion.code_version(names.QDRANT_HYBRID, cache),
        }
    )
