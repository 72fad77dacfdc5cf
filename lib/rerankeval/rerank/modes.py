"""The calls each reranking mode makes (their prompts, reply schemas and cache keys) and how it reads the replies.

:class:`ModeCalls` is the part of :class:`~rerankeval.rerank.reranker.Reranker` that talks to the model: each
call goes through the one cached call, :meth:`rerankeval.llm.call.CachedLLM.call`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from rerankeval.core.ioutil import sha256_text
from rerankeval.llm import schemas
from rerankeval.llm.call import CachedLLM, Call, CallStats
from rerankeval.llm.client import Reply
from rerankeval.llm.repair import Counts, Unusable, parse, repair_order, repair_scores
from rerankeval.rerank import prompts
from rerankeval.rerank.config import CACHE_VERSION, Candidate, RerankConfig
from rerankeval.rerank.scores import sliding_windows, yes_prob

T = TypeVar("T")


@dataclass
class CallSpec:
    """One LLM call: the prompt, the reply schema and the candidates it is about."""

    kind: str  # prompt template (see prompts.TEMPLATES)
    messages: list[dict[str, str]]
    strict: type[BaseModel] | None
    schema_name: str
    cands: list[Candidate]
    texts: list[str]
    max_tokens: int
    top_logprobs: int

    @property
    def prompt(self) -> str:
        return "\n".join(m["content"] for m in self.messages)


class ModeCalls:
    """The LLM calls of the three modes, on ``self.llm`` with ``self.config``."""

    config: RerankConfig
    llm: CachedLLM
    model: str
    endpoint: str

    # -- the calls each mode makes --
    def _yesno_spec(self, query: str, cand: Candidate, text: str) -> CallSpec:
        j = self.config.yesno_json
        return CallSpec("yesno" if j else "yesno-plain", prompts.yesno(query, text, j),
                        schemas.YesNoStrict if j else None, "relevance_answer", [cand], [text],
                        max_tokens=12 if j else 1, top_logprobs=self.config.top_logprobs)

    def _pointwise_spec(self, query: str, cands: list[Candidate], texts: list[str]) -> CallSpec:
        m = len(cands)
        return CallSpec("pointwise", prompts.pointwise(query, texts), schemas.pointwise_model(m), "pointwise_grades",
                        cands, texts, max_tokens=12 if m == 1 else 14 * m + 24, top_logprobs=0)

    def _listwise_spec(self, query: str, cands: list[Candidate], texts: list[str]) -> CallSpec:
        m = len(cands)
        return CallSpec("listwise", prompts.listwise(query, texts), schemas.listwise_model(m), "listwise_ranking",
                        cands, texts, max_tokens=5 * m + 24, top_logprobs=0)

    def specs(self, query: str, pool: list[Candidate], texts: list[str]) -> list[CallSpec]:
        """Every call one pool needs, in order. Listwise windows after the first are shown on the input
        order (their real contents depend on the earlier windows' replies): good for estimates only."""
        cfg = self.config
        if cfg.mode == "yesno":
            return [self._yesno_spec(query, c, t) for c, t in zip(pool, texts, strict=True)]
        if cfg.mode == "pointwise":
            starts = range(0, len(pool), cfg.batch_size)
            return [
                self._pointwise_spec(query, pool[s : s + cfg.batch_size], texts[s : s + cfg.batch_size]) for s in starts
            ]
        return [
            self._listwise_spec(query, pool[s:e], texts[s:e])
            for s, e in sliding_windows(len(pool), cfg.window, cfg.step)
        ]

    # -- one LLM call, cached, with re-asks after unreadable replies --
    def _material(self, spec: CallSpec, query: str) -> dict[str, Any]:
        """Everything the reply depends on: its cache key."""
        return {
            "v": CACHE_VERSION,
            "model": self.model,
            "endpoint": self.endpoint,
            "template": prompts.template_hash(spec.kind),
            "schema": schemas.schema_hash(spec.strict),
            "gen": {
                "temperature": 0,
                "seed": self.config.seed,
                "max_tokens": spec.max_tokens,
                "top_logprobs": spec.top_logprobs,
            },
            "query": query,
            "candidates": [[c.docid, sha256_text(t)] for c, t in zip(spec.cands, spec.texts, strict=True)],
        }

    def _call(self, stats: CallStats, spec: CallSpec, query: str, read: Callable[[Reply], Any]) -> Any | None:
        """``read(reply)`` of a cached or fresh reply (:meth:`.CachedLLM.call`); None on failure."""
        rf = schemas.response_format(spec.strict, spec.schema_name) if spec.strict is not None else None
        call = Call(spec.messages, self._material(spec, query), spec.max_tokens, response_format=rf,
                    seed=self.config.seed, top_logprobs=spec.top_logprobs)
        got = self.llm.call(call, read, stats, retries=self.config.content_retries)
        return got.value if got.ok else None

    def _repaired_call(self, stats: CallStats, spec: CallSpec, query: str,
                       read: Callable[[Reply], tuple[T, Counts]], counts: Counts) -> T | None:
        """:meth:`_call` of a reply read as (value, repair counts): the counts are added to ``counts``."""
        got = self._call(stats, spec, query, read)
        if got is None:
            return None
        counts += got[1]
        return got[0]

    # -- the modes: each returns LLM scores by presented index (None = not scored) and repair counts --
    def _listwise(self, query: str, pool: list[Candidate], texts: list[str], stats: CallStats):
        cfg = self.config
        n = len(pool)
        cur = list(range(n))
        counts = Counts()
        informative = False
        for s, e in sliding_windows(n, cfg.window, cfg.step):
            sub = cur[s:e]
            m = len(sub)

            def read(reply: Reply, m: int = m) -> tuple[list[int], Counts]:
                obj, _ = parse(reply.content, schemas.ListwiseReply, array_key="ranking")
                perm, c = repair_order(obj.ranking, m)
                if c.n_missing >= m:
                    raise Unusable("EmptyRanking", f"the ranking names none of the {m} passages: {obj.ranking!r}"[:200])
                return perm, c

            spec = self._listwise_spec(query, [pool[i] for i in sub], [texts[i] for i in sub])
            perm = self._repaired_call(stats, spec, query, read, counts)
            if perm is None:
                continue
            informative = True
            cur[s:e] = [sub[j] for j in perm]
        if not informative:
            return None, counts
        # rank-derived LLM score: 1 at the top, 0 at the bottom
        scores: list[float | None] = [0.0] * n
        for pos, i in enumerate(cur):
            scores[i] = (n - 1 - pos) / (n - 1) if n > 1 else 1.0
        return scores, counts

    def _pointwise(self, query: str, pool: list[Candidate], texts: list[str], stats: CallStats):
        cfg = self.config
        n = len(pool)
        scores: list[float | None] = [None] * n
        counts = Counts()
        for s in range(0, n, cfg.batch_size):
            idx = list(range(s, min(n, s + cfg.batch_size)))
            m = len(idx)

            def read(reply: Reply, m: int = m) -> tuple[list[float | None], Counts]:
                if m == 1:
                    obj, _ = parse(reply.content, schemas.PointwiseSingleReply)
                    items = [(1, obj.score)]
                else:
                    obj, _ = parse(reply.content, schemas.PointwiseBatchReply, array_key="scores")
                    items = [(it.id, it.score) for it in obj.scores]
                vals, c = repair_scores(items, m)
                if all(v is None for v in vals):
                    raise Unusable("NoValidScore", f"no grade from 0 to 10 for any of the {m} passages")
                return vals, c

            spec = self._pointwise_spec(query, [pool[i] for i in idx], [texts[i] for i in idx])
            vals = self._repaired_call(stats, spec, query, read, counts)
            for j, v in zip(idx, vals or [None] * m, strict=True):
                scores[j] = v
        return scores, counts

    def _yesno(self, query: str, pool: list[Candidate], texts: list[str], stats: CallStats):
        json_reply = self.config.yesno_json
        scores: list[float | None] = [None] * len(pool)
        for i, (c, t) in enumerate(zip(pool, texts, strict=True)):
            # a failed call leaves None: the candidate keeps its fused place (n_failed)
            scores[i] = self._call(stats, self._yesno_spec(query, c, t), query, lambda r: yes_prob(r, json_reply))
        return scores, Counts()
