"""The sweep's legs kept on disk (issue 24): a second sweep over the same inputs reads its legs back, not searched.

A leg (dense or BM25 at the sweep's deepest ``leg_k``, for one BM25 ``k1``/``b``) is a function of the chunk table,
the indexes, the Qdrant backend, the queries, its depth and parameters, and the code that searches: the key is stage
03's run key of the matching variant (:func:`rerankeval.retrieve.runkey.key_parts`: ``vector`` or ``bm25``)
with the BM25 parameters and the sweep engine's own source hash added. An entry
(``results/<dataset>/sweep/legs/<leg>-<key>.json.gz``) holds its full key and is used only when that key equals the
one computed now and the file reads; anything else (another input or code version, a damaged file) is ignored and
the leg searched again and re-saved. Chunking points (scratch datasets) are not cached here. The seconds per query
kept are the search's, so the sweep's cost columns still say what a leg costs.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rerankeval.core.ioutil import atomic_write_bytes, sha256_json
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run
from rerankeval.core.settings import Settings
from rerankeval.retrieve import codeversion, runkey

FORMAT = 1
VARIANT = {"dense": "vector", "bm25": "bm25"}  # the stage 03 variant whose search a leg is


class LegCache:
    """Legs of one dataset and query set on disk; :meth:`get` and :meth:`put` by leg, depth and BM25 parameters."""

    def __init__(self, dp: DatasetPaths, queries: Mapping[str, str], settings: Settings) -> None:
        self.dir = dp.sweep_dir / "legs"
        self.inputs = runkey.Inputs.of(dp, queries, settings)
        self.engine_code = codeversion.source_hash(Path(__file__).with_name("grid.py"), dp.roots.cache)
        self.hits, self.misses = 0, 0
        self.reasons: list[str] = []

    @property
    def usable(self) -> bool:
        """False when the chunk table or index manifest is missing (nothing to key a leg on)."""
        return self.inputs.corpus is not None and self.inputs.index is not None

    def parts(self, which: str, leg_k: int, bm25: tuple[float, float] | None) -> dict[str, Any]:
        extra = {"bm25": list(bm25) if bm25 else None, "sweep_engine": self.engine_code}
        return runkey.key_parts(self.inputs, VARIANT[which], {"leg_k": int(leg_k)}, extra)

    def path(self, which: str, key: str) -> Path:
        return self.dir / f"{which}-{key[:24]}.json.gz"

    def get(self, which: str, leg_k: int, bm25: tuple[float, float] | None) -> tuple[Run, float] | None:
        """The saved leg and its seconds per query, or None (and the reason in :attr:`reasons`)."""
        if not self.usable:
            return None
        key = sha256_json(self.parts(which, leg_k, bm25))
        path = self.path(which, key)
        try:
            entry = json.loads(gzip.decompress(path.read_bytes()))
            ok = entry.get("format") == FORMAT and entry.get("key") == key and isinstance(entry.get("run"), dict)
        except FileNotFoundError:
            return self._miss(f"{which}: no saved leg")
        except (OSError, EOFError, ValueError, AttributeError):
            return self._miss(f"{which}: {path.name} is damaged")
        if not ok:
            return self._miss(f"{which}: {path.name} holds another key")
        self.hits += 1
        return entry["run"], float(entry["seconds_per_query"])

    def _miss(self, why: str) -> None:
        self.misses += 1
        self.reasons.append(why)
        return None

    def put(self, which: str, leg_k: int, bm25: tuple[float, float] | None, run: Run, seconds_per_query: float) -> None:
        if not self.usable:
            return
        key = sha256_json(self.parts(which, leg_k, bm25))
        try:
            data = json.dumps({"format": FORMAT, "key": key, "seconds_per_query": seconds_per_query, "run": run})
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.path(which, key), gzip.compress(data.encode("utf-8"), compresslevel=1))
        except (TypeError, ValueError, OSError) as exc:  # not saved: the next sweep searches this leg again
            self.reasons.append(f"{which}: not saved ({exc})"[:200])
