"""The arithmetic of reranking: RankGPT's sliding windows, min-max blending, Kendall's tau, p(yes) from logprobs.

- Sliding windows: Sun et al., "Is ChatGPT Good at Search? Investigating Large Language Models as Re-Ranking
  Agents", EMNLP 2023 (RankGPT).
- p(yes) / (p(yes) + p(no)) from the answer token's probabilities: Nogueira et al., "Document Ranking with a
  Pretrained Sequence-to-Sequence Model", Findings of EMNLP 2020 (monoT5), as used for LLM yes/no relevance.
- Kendall, "A New Measure of Rank Correlation", Biometrika 1938.
"""

from __future__ import annotations

import math
import random

from rerankeval.llm import schemas
from rerankeval.llm.client import Reply
from rerankeval.llm.repair import Unusable, parse
from rerankeval.rerank.config import Candidate


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



def perturb(pool: list[Candidate], how: str, seed: int, qid: str) -> list[Candidate]:
    if how == "reversed":
        return list(reversed(pool))
    out = list(pool)
    random.Random(f"{seed}:{qid}").shuffle(out)
    return out
