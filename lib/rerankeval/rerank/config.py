"""Stage 04's reranking parameters and the records of one query (the modes are described in :mod:`.core`;
``setwise``: Zhuang et al., SIGIR 2024, in :mod:`.modes`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rerankeval.core.names import HYBRID_RERANK

MODES = ("listwise", "pointwise", "yesno", "setwise")
MAX_SET = 10  # setwise: the most passages one call shows (labels A-J)
STABILITY = ("none", "reversed", "shuffled")
VARIANT = HYBRID_RERANK
CACHE_VERSION = 1


@dataclass(frozen=True)
class RerankConfig:
    mode: str = "yesno"
    alpha: float = 0.1  # weight of the LLM score in the blend; 1 = LLM order only (see bench/rerank_modes.py)
    window: int = 20  # listwise: passages per call
    step: int = 10  # listwise: window stride
    batch_size: int = 1  # pointwise: candidates per call
    set_size: int = 4  # setwise: candidates per call (a heap node and its set_size - 1 children)
    setwise_k: int = 0  # setwise: top places the heap sort settles (the rest keep heap order); 0 = the whole pool
    max_passage_chars: int = 200  # passage text is clipped to this many characters (0 = whole text); bench/rerank.py
    seed: int = 0
    top_logprobs: int = 10  # yesno
    yesno_json: bool = True  # yesno: constrain the reply to {"relevant": "yes"|"no"}
    content_retries: int = 1  # re-asks after an unreadable reply (transport retries are the client's)
    concurrency: int = 1  # queries reranked in parallel
    price_per_mtok: tuple[float, float] = (0.0, 0.0)  # USD per 1M (prompt, completion) tokens
    max_calls: int = 0  # budget: LLM requests this run may send (cache hits are free); 0 = no limit
    max_cost: float = 0.0  # budget: USD this run may spend at price_per_mtok; 0 = no limit

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
            raise ValueError(f"setwise needs 2 <= set_size <= {MAX_SET} and setwise_k >= 0 (0 = the whole pool), "
                             f"got {self.set_size}/{self.setwise_k}")
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
