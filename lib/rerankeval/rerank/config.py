"""Stage 04's parameters (:class:`Params`, the one home of their defaults), the reranker's view of them
(:class:`RerankConfig`) and the records of one query (the modes are described in :mod:`.core`; ``setwise``:
Zhuang et al., SIGIR 2024, in :mod:`.modes`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rerankeval.core.paths import DEFAULT_DATASET
from rerankeval.llm.budget import check_price

MODES = ("listwise", "pointwise", "yesno", "setwise")
MAX_SET = 10  # setwise: the most passages one call shows (labels A-J)
NO_STABILITY = "none"  # no stability pass
STABILITY = (NO_STABILITY, "reversed", "shuffled")
MAIN_PASS = "main"  # the ledger's and the candidates' pass of the reranking itself (the others: STABILITY)
CACHE_VERSION = 1


@dataclass(frozen=True)
class Params:
    """Stage 04's parameters: notebook 04's parameters cell has the same names and defaults (a test checks)."""

    dataset: str = DEFAULT_DATASET  # the caller resolves it to the DatasetPaths given to run()
    pool_k: int = 10  # fused candidates per query the LLM reorders (the rest keep their fused order)
    mode: str = "yesno"  # listwise, pointwise, yesno or setwise (rerank.core)
    alpha: float = 0.1  # LLM weight in the blend with the fused score; 1 = LLM order only (bench/rerank_modes.py)
    window: int = 20  # listwise: passages per call
    step: int = 10  # listwise: window stride
    batch_size: int = 1  # pointwise: candidates graded per call
    yesno_json: bool = False  # yesno: False asks for one plain token; True constrains the reply to JSON
    set_size: int = 4  # setwise: candidates per call (a heap node and its set_size - 1 children)
    setwise_k: int = 0  # setwise: top places the heap sort settles; 0: the whole pool
    max_passage_chars: int = 200  # candidate text sent to the LLM is clipped to this many characters (0: whole)
    max_queries: int = 0  # 0: all queries; else the first N by qid
    concurrency: int = 1  # queries reranked in parallel
    stability: str = NO_STABILITY  # none, reversed or shuffled: rerank again with the pool in that order, compare
    seed: int = 0  # generation seed (and the shuffle seed of the stability pass)
    price_per_mtok: Sequence[float] = (0.0, 0.0)  # USD per 1M prompt and completion tokens
    max_calls: int = 0  # budget: LLM requests this run may send (cache hits are free); 0: no limit
    max_cost: float = 0.0  # budget: USD this run may spend at price_per_mtok; 0: no limit
    use_cache: bool = True  # re-use cached LLM replies; False asks afresh and refreshes the cache
    expand_n: int = 2  # neighbour expansion: chunks of the same page added around each candidate (0: none)
    expand_chars: int = 300  # neighbour expansion: at most this many characters added per candidate
    expand_compare: bool = False  # True: rerank the same pool again with expansion (hybrid_rerank_expand)

    def __post_init__(self) -> None:
        if self.pool_k < 1:
            raise ValueError(f"pool_k must be >= 1, got {self.pool_k}")
        if self.stability not in STABILITY:
            raise ValueError(f"stability must be one of {STABILITY}, got {self.stability!r}")
        if self.expand_n < 0 or self.expand_chars < 0:
            raise ValueError(f"expand_n and expand_chars must be >= 0, got {self.expand_n} and {self.expand_chars}")
        self.config()  # the reranker's checks

    @classmethod
    def of(cls, params: Params | Mapping[str, Any]) -> Params:
        """From a mapping (e.g. the notebook's globals): known names are taken, the rest ignored."""
        if isinstance(params, cls):
            return params
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(params).items() if k in names})

    def config(self) -> RerankConfig:
        """The reranker's configuration: every field of it that is a parameter, taken from here."""
        mine = {f.name for f in dataclasses.fields(self)}
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(RerankConfig) if f.name in mine}
        return RerankConfig(**{**shared, "price_per_mtok": check_price(self.price_per_mtok)})


@dataclass(frozen=True, kw_only=True)
class RerankConfig:
    """What the reranker reads: built by :meth:`Params.config` (the fields it shares with :class:`Params` have no
    default here), plus two settings of the reranker's own. Recorded in ``rerank/summary.json`` as ``config``."""

    mode: str
    alpha: float
    window: int
    step: int
    batch_size: int
    set_size: int
    setwise_k: int
    max_passage_chars: int
    seed: int
    top_logprobs: int = 10  # yesno: alternatives read at the answer token
    yesno_json: bool
    content_retries: int = 1  # re-asks after an unreadable reply (transport retries are the client's)
    concurrency: int
    price_per_mtok: tuple[float, float]
    max_calls: int
    max_cost: float

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.window < 2 or not 1 <= self.step <= self.window:
            raise ValueError(f"need window >= 2 and 1 <= step <= window, got {self.window}/{self.step}")
        if self.batch_size < 1 or self.concurrency < 1 or self.content_retries < 0:
            raise ValueError("batch_size and concurrency must be >= 1, content_retries >= 0")
        if not 2 <= self.set_size <= MAX_SET or self.setwise_k < 0:
            raise ValueError(
                f"setwise needs 2 <= set_size <= {MAX_SET} and setwise_k >= 0 (0 = the whole pool), "
                f"got {self.set_size}/{self.setwise_k}"
            )
        if self.max_calls < 0 or self.max_cost < 0:
            raise ValueError(
                f"max_calls and max_cost must be >= 0 (0 = no limit), got {self.max_calls}/{self.max_cost}"
            )


@dataclass(frozen=True)
class Candidate:
    docid: str
    text: str
    fused: float  # first-stage score
    fused_rank: int  # 0-based position in the fused list


@dataclass
class QueryResult:
    qid: str
    pass_name: str
    order: list[str]  # the pool, reranked
    llm_scores: dict[str, float | None]
    presented: list[str]
    row: dict[str, Any]


Task = tuple[str, str, list[Candidate]]  # (qid, pass, pool in the order the LLM sees it)
