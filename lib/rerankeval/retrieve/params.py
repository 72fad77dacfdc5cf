"""Stage 03's parameters (:class:`Params`): the one home of their defaults. Notebook 03's parameters cell has the
same names and defaults (a test checks) and builds them in one line, ``Params.of(globals())``; below the stage's
face every function takes them, or keyword-only arguments without defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rerankeval.core.names import BM25, CROSS_ENCODER, HYBRID, HYBRID_REFORMULATE, QDRANT_HYBRID, VECTOR
from rerankeval.core.paths import DEFAULT_DATASET
from rerankeval.index.qdrant.rrf import RRF_K
from rerankeval.retrieve import reformulate
from rerankeval.retrieve.variants import Budget


@dataclass(frozen=True)
class Params:
    """Stage 03's parameters: notebook 03's parameters cell has the same names and defaults (a test checks)."""

    dataset: str = DEFAULT_DATASET  # the caller resolves it to the DatasetPaths given to run()
    leg_k: int = 100  # chunks per leg
    pool_k: int = 10  # hybrid units the cross_encoder reorders (the LLM reranker's pool in 04)
    final_k: int = 10  # cutoff of the headline metric (and of the Qdrant comparison's first overlap)
    rrf_k: int = RRF_K  # paper convention 1/(rrf_k + rank); Qdrant is sent rrf_k + 1
    variants: Sequence[str] = (VECTOR, BM25, HYBRID, QDRANT_HYBRID, CROSS_ENCODER, HYBRID_REFORMULATE)
    cross_encoder_model: str = ""  # local folder or cached name; empty: the configured one, else the default
    explain_queries: int = 50  # queries of the Qdrant comparison (Qdrant's local sparse search is slow)
    reformulate_threshold: float = reformulate.THRESHOLD
    reformulate_guard_k: int = reformulate.GUARD_K
    reuse_runs: bool = True  # read back a variant whose inputs did not change (False: search every one again)

    @classmethod
    def of(cls, values: Params | Mapping[str, Any]) -> Params:
        """From a mapping (e.g. the notebook's ``globals()``): the names of the fields are taken, the rest ignored."""
        if isinstance(values, cls):
            return values
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(values).items() if k in names})

    def budget(self) -> Budget:
        """The budget every variant is searched with (no weights: equal)."""
        return Budget(leg_k=self.leg_k, pool_k=self.pool_k, rrf_k=self.rrf_k)
