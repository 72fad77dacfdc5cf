"""The calls each reranking mode makes (their prompts, reply schemas and cache keys) and how it reads the replies.

:class:`ModeCalls` asks the model what one pool needs in the configured mode and reads the replies into LLM scores;
the :class:`~rerankeval.rerank.reranker.Reranker` owns one (``rr.calls``) and turns the scores into an order, a
fallback and a ledger row. Each call goes through the one cached call, :meth:`rerankeval.llm.call.CachedLLM.call`.

``setwise`` (Zhuang et al., "A Setwise Approach for Effective and Highly Efficient Zero-shot Ranking with Large
Language Models", SIGIR 2024): the pool is heap-sorted (:func:`.scores.setwise_heapsort`), each sift-down step
asking which of a node and its ``set_size - 1`` children is the most relevant (``{"most_relevant": "B"}``). A
label the model wraps ("Passage B", "2") is repaired and counted; a call without a usable reply picks the candidate
the first stage ranked highest (the authors' code keeps the node), and a query none of whose calls answered falls
back to the fused order.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model

from rerankeval.core.ioutil import sha256_text
from rerankeval.llm import schemas
from rerankeval.llm.call import CachedLLM, Call, CallStats
from rerankeval.llm.client import Reply
from rerankeval.llm.repair import Counts, Unusable, parse, repair_order, repair_scores
from rerankeval.rerank import prompts
from rerankeval.rerank.config import CACHE_VERSION, Candidate, RerankConfig
from rerankeval.rerank.scores import rank_scores, setwise_heapsort, sliding_windows, yes_prob

T = TypeVar("T")


# -- setwise replies: the strict schema asked for, the lenient one read, and the label repair --
class SetwiseReply(BaseModel):
    most_relevant: str | int


def setwise_model(m: int) -> type[BaseModel]:
    """``{"most_relevant": "A".."<m-th letter>"}``."""
    labels = Literal[tuple(prompts.SETWISE_LABELS[:m])]  # type: ignore[valid-type]
    return create_model(
        "SetwiseChoice",
        __config__=ConfigDict(extra="forbid"),
        most_relevant=(labels, Field(description="label of the most relevant passage")),
    )


_LABEL = re.compile(r"^\W*(?:passage\s*)?\[?([A-J]|\d{1,2})\]?\W*$", re.I)


def read_choice(content: str, m: int) -> tuple[int, Counts]:
    """The 0-based index of the passage the reply picks of ``m``; a wrapped label ("Passage B", "[2]", a bare
    ``B`` instead of JSON) is read and counted as repaired. Raises :class:`Unusable`."""
    try:
        raw, repaired = str(parse(content, SetwiseReply)[0].most_relevant).strip(), False
    except Unusable:
        raw, repaired = (content or "").strip(), True  # not the JSON asked for: maybe a bare label
        if not _LABEL.match(raw):
            raise
    hit = _LABEL.match(raw)
    label = hit.group(1).upper() if hit else ""
    idx = int(label) - 1 if label.isdigit() else prompts.SETWISE_LABELS.find(label) if label else -1
    if not 0 <= idx < m:
        raise Unusable("WrongShape", f"no passage label A-{prompts.SETWISE_LABELS[m - 1]} in {raw[:80]!r}")
    return idx, Counts(n_invalid=int(repaired or raw != label or label.isdigit()))


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


def _fused_best(pool: list[Candidate], ids: list[int]) -> int:
    """The index in ``ids`` of the candidate the first stage ranked highest."""
    return min(range(len(ids)), key=lambda j: pool[ids[j]].fused_rank)


class ModeCalls:
    """The LLM calls of the four modes with ``config``, through ``llm`` (the reranker's cached call)."""

    def __init__(self, config: RerankConfig, llm: CachedLLM) -> None:
        self.config, self.llm = config, llm
        self.cache, self.model, self.endpoint = llm.cache, llm.model, llm.endpoint

    def scores(
        self, query: str, pool: list[Candidate], texts: list[str], stats: CallStats
    ) -> tuple[list[float | None] | None, Counts]:
        """LLM scores by presented index (None: not scored; all None: nothing usable) and the repair counts."""
        fn = {"listwise": self._listwise, "pointwise": self._pointwise, "yesno": self._yesno, "setwise": self._setwise}[
            self.config.mode
        ]
        return fn(query, pool, texts, stats)

    # -- the calls each mode makes --
    def _yesno_spec(self, query: str, cand: Candidate, text: str) -> CallSpec:
        j = self.config.yesno_json
        return CallSpec(
            "yesno" if j else "yesno-plain",
            prompts.yesno(query, text, j),
            schemas.YesNoStrict if j else None,
            "relevance_answer",
            [cand],
            [text],
            max_tokens=12 if j else 1,
            top_logprobs=self.config.top_logprobs,
        )

    def _pointwise_spec(self, query: str, cands: list[Candidate], texts: list[str]) -> CallSpec:
        m = len(cands)
        return CallSpec(
            "pointwise",
            prompts.pointwise(query, texts),
            schemas.pointwise_model(m),
            "pointwise_grades",
            cands,
            texts,
            max_tokens=12 if m == 1 else 14 * m + 24,
            top_logprobs=0,
        )

    def _listwise_spec(self, query: str, cands: list[Candidate], texts: list[str]) -> CallSpec:
        m = len(cands)
        return CallSpec(
            "listwise",
            prompts.listwise(query, texts),
            schemas.listwise_model(m),
            "listwise_ranking",
            cands,
            texts,
            max_tokens=5 * m + 24,
            top_logprobs=0,
        )

    def _setwise_spec(self, query: str, cands: list[Candidate], texts: list[str]) -> CallSpec:
        m = len(cands)
        return CallSpec(
            "setwise",
            prompts.setwise(query, texts),
            setwise_model(m),
            "setwise_choice",
            cands,
            texts,
            max_tokens=16,
            top_logprobs=0,
        )

    def specs(self, query: str, pool: list[Candidate], texts: list[str]) -> list[CallSpec]:
        """Every call one pool needs, in order. Listwise windows after the first are shown on the input
        order (their real contents depend on the earlier windows' replies): good for estimates only. Setwise
        sets follow the cached replies where there are some, else a model agreeing with the fused order."""
        cfg = self.config
        if cfg.mode == "setwise":
            return self._setwise_specs(query, pool, texts)
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
    def material(self, spec: CallSpec, query: str) -> dict[str, Any]:
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

    def call(self, stats: CallStats, spec: CallSpec, query: str, read: Callable[[Reply], Any]) -> Any | None:
        """``read(reply)`` of a cached or fresh reply (:meth:`.CachedLLM.call`); None on failure."""
        rf = schemas.response_format(spec.strict, spec.schema_name) if spec.strict is not None else None
        call = Call(
            spec.messages,
            self.material(spec, query),
            spec.max_tokens,
            response_format=rf,
            seed=self.config.seed,
            top_logprobs=spec.top_logprobs,
        )
        got = self.llm.call(call, read, stats, retries=self.config.content_retries)
        return got.value if got.ok else None

    def _repaired_call(
        self, stats: CallStats, spec: CallSpec, query: str, read: Callable[[Reply], tuple[T, Counts]], counts: Counts
    ) -> T | None:
        """:meth:`call` of a reply read as (value, repair counts): the counts are added to ``counts``."""
        got = self.call(stats, spec, query, read)
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
        return rank_scores(cur, n), counts  # rank-derived LLM score: 1 at the top, 0 at the bottom

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
            scores[i] = self.call(stats, self._yesno_spec(query, c, t), query, lambda r: yes_prob(r, json_reply))
        return scores, Counts()

    def _setwise(self, query: str, pool: list[Candidate], texts: list[str], stats: CallStats):
        """Setwise heap sort (Zhuang et al. 2024) of the pool; rank-derived scores, 1 at the top."""
        counts = Counts()
        answered, asked = [0], [0]

        def best(ids: list[int]) -> int:
            spec = self._setwise_spec(query, [pool[i] for i in ids], [texts[i] for i in ids])
            m = len(ids)
            got = self._repaired_call(stats, spec, query, lambda r: read_choice(r.content, m), counts)
            asked[0] += 1
            answered[0] += got is not None
            return _fused_best(pool, ids) if got is None else got  # no usable reply: the first stage decides

        order = setwise_heapsort(list(range(len(pool))), self.config.set_size - 1, self.config.setwise_k, best)
        if asked[0] and not answered[0]:
            return None, counts
        return rank_scores(order, len(pool)), counts

    def _setwise_specs(self, query: str, pool: list[Candidate], texts: list[str]) -> list[CallSpec]:
        """The sets :meth:`_setwise` would ask about: a cached reply's choice where there is one, else the
        candidate best in the fused order (exact on a warm cache, an estimate on a cold one)."""
        out: list[CallSpec] = []

        def best(ids: list[int]) -> int:
            spec = self._setwise_spec(query, [pool[i] for i in ids], [texts[i] for i in ids])
            out.append(spec)
            cached = self.cache.get(self.cache.key(self.material(spec, query)))
            try:
                return read_choice(Reply.from_cache(cached).content, len(ids))[0]
            except (Unusable, TypeError, KeyError, ValueError, AttributeError):
                return _fused_best(pool, ids)

        setwise_heapsort(list(range(len(pool))), self.config.set_size - 1, self.config.setwise_k, best)
        return out
