"""The arithmetic of reranking: RankGPT's sliding windows, min-max blending, Kendall's tau, p(yes) from logprobs.

- Sliding windows: Sun et al., "Is ChatGPT Good at Search? Investigating Large Language Models as Re-Ranking
  Agents", EMNLP 2023 (RankGPT).
- p(yes) / (p(yes) + p(no)) from the answer token's probabilities: Nogueira et al., "Document Ranking with a
  Pretrained Sequence-to-Sequence Model", Findings of EMNLP 2020 (monoT5), as used for LLM yes/no relevance.
- Kendall, "A New Measure of Rank Correlation", Biometrika 1938.
- Setwise heap sort: Zhuang et al., "A Setwise Approach for Effective and Highly Efficient Zero-shot Ranking with
  Large Language Models", SIGIR 2024 (their code: ielab/llm-rankers, ``SetwiseLlmRanker.heapSort``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import TypeVar

from rerankeval.llm import schemas
from rerankeval.llm.client import Reply
from rerankeval.llm.repair import Unusable, parse
from rerankeval.rerank.config import Candidate

T = TypeVar("T")


def sliding_windows(n: int, window: int, step: int) -> list[tuple[int, int]]:
    """RankGPT's windows ``(start, end)`` from the bottom of the list to the top."""
    if n <= window:
        return [(0, n)] if n else []
    out = []
    end = n
    while True:
        start = max(0, end - window)
        out.append((start, end))
        if start == 0:
            return out
        end -= step


def minmax(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [(v - lo) / (hi - lo) if hi > lo else 0.0 for v in values]


def kendall_tau(a: list[str], b: list[str]) -> float:
    """Kendall's tau between two orderings of the same items (1 = same order, -1 = reversed)."""
    pos = {d: i for i, d in enumerate(b)}
    n = len(a)
    if n < 2:
        return 1.0
    conc = disc = 0
    for i in range(n):
        for j in range(i + 1, n):
            if pos[a[i]] < pos[a[j]]:
                conc += 1
            else:
                disc += 1
    return (conc - disc) / (n * (n - 1) / 2)


_YES, _NO = {"yes"}, {"no"}


def _norm_token(tok: str) -> str:
    return tok.strip().strip("\"'`.,:;!{}[] \n\t").lower()


def yes_prob(reply: Reply, json_reply: bool) -> float:
    """p(yes) / (p(yes) + p(no)) at the first yes/no token of the reply; raises Unusable."""
    for t in reply.logprobs or []:
        norm = _norm_token(t["token"])
        if norm in _YES or norm in _NO:
            p_yes = sum(math.exp(lp) for tok, lp in t["top"] if _norm_token(tok) in _YES)
            p_no = sum(math.exp(lp) for tok, lp in t["top"] if _norm_token(tok) in _NO)
            if p_yes + p_no > 0:
                return p_yes / (p_yes + p_no)
            return 1.0 if norm in _YES else 0.0
    # no logprobs (or no yes/no token in them): read the answer itself
    if json_reply:
        answer = parse(reply.content, schemas.YesNoReply)[0].relevant
    else:
        answer = (reply.content or "").split()[0] if (reply.content or "").split() else ""
    norm = _norm_token(answer)
    if norm in _YES:
        return 1.0
    if norm in _NO:
        return 0.0
    raise Unusable("NoYesNo", f"no yes/no answer in {reply.content[:80]!r}")


def setwise_heapsort(items: list[T], children: int, k: int, best: Callable[[list[T]], int]) -> list[T]:
    """``items`` most relevant first, by a ``children``-ary max-heap whose every sift-down step asks
    ``best(node and its children)`` for the index of the most relevant (0: the node stays); the heap sort stops
    once the top ``k`` are settled (``k`` = 0: all), the rest in heap order. Zhuang et al. 2024's heap sort."""
    arr, n = list(items), len(items)
    k = k or n

    def sift(size: int, i: int) -> None:
        while children * i + 1 < size:
            inds = [i, *range(children * i + 1, min(children * (i + 1) + 1, size))]
            j = best([arr[x] for x in inds])
            top = inds[j] if 0 <= j < len(inds) else i
            if top == i:
                return
            arr[i], arr[top] = arr[top], arr[i]
            i = top

    for i in range(n // children, -1, -1):
        sift(n, i)
    for ranked, end in enumerate(range(n - 1, 0, -1), start=1):
        arr[end], arr[0] = arr[0], arr[end]
        if ranked == k:
            break
        sift(end, 0)
    return arr[::-1]


def rank_scores(order: list[int], n: int) -> list[float | None]:
    """Scores by presented index from an order of indices: 1 at the top, 0 at the bottom (1 for a pool of one)."""
    scores: list[float | None] = [0.0] * n
    for pos, i in enumerate(order):
        scores[i] = (n - 1 - pos) / (n - 1) if n > 1 else 1.0
    return scores


def perturb(pool: list[Candidate], how: str, seed: int, qid: str) -> list[Candidate]:
    if how == "reversed":
        return list(reversed(pool))
    out = list(pool)
    random.Random(f"{seed}:{qid}").shuffle(out)
    return out
