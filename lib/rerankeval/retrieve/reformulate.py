"""``hybrid_reformulate`` (issue 11): the LLM rewrites queries whose first stage looks weak, with a revert guard.

Query rewriting is a step composed with the hybrid, not a variant of its own (PyTerrier's composition, as its
pseudo-relevance feedback ``bm25 >> rm3 >> bm25``: Macdonald and Tonellotto, "Declarative Experimentation in
Information Retrieval using PyTerrier", ICTIR 2020): stage 03 searches ``hybrid``, :class:`Reformulate` rewrites
the weak queries and fuses the legs of each kept rewrite with the original's (:meth:`Reformulate.apply`). The LLM
is used only through :mod:`rerankeval.llm`. Per query:

1. **Weak?** The ``hybrid`` run's top fused score (RRF over the unit-mapped dense and BM25 legs, at most
   ``2 / (rrf_k + 1)`` when both legs put the same unit first) is compared with ``threshold``. At or above
   it the query is ``not_rewritten`` and its result is exactly ``hybrid``'s.
2. **Rewrite.** Below it the LLM rewrites the query (JSON schema ``{"query": "..."}``, temperature 0, through
   the one cached LLM call, :mod:`rerankeval.llm.call`; its tokens, calls and seconds are counted and written
   in the record, which 05's cost table reads; the plan is said on the console before the first call).
3. **Guard (no relevance judgments).** The rewrite is retrieved by both legs, and its legs are scored by
   :func:`guard_measure`: ``(agreement@k, top fused score)``, where agreement@k is the share of the top ``k``
   units the dense and BM25 legs have in common (two independent retrievers agreeing is evidence that the
   query is clear to the index). The rewrite is ``kept`` only when its measure is strictly better than the
   original's (compared as a pair: agreement first, then the top fused score); then the query's result is the
   RRF of all four legs (original and rewrite, dense and BM25). Otherwise it is ``reverted``: the original
   result, unchanged.
4. **LLM down.** A failed or unusable rewrite keeps the original result and says why (``llm_failed``); the
   variant never fails the chain. An unusable reply is not cached (the next run asks again), and a cached
   one that does not read is replaced by a fresh reply.

The ledger ``dp.stage_dir("retrieve") / "hybrid_reformulate_ledger.csv"`` has one row per query:
:data:`LEDGER_COLUMNS` (status, scores, the rewrite text, the error).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from rerankeval.core.ioutil import atomic_write_text, sha256_json
from rerankeval.core.names import HYBRID_REFORMULATE
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run, ranked, to_units
from rerankeval.core.settings import Settings
from rerankeval.index.qdrant.rrf import RRF_K
from rerankeval.retrieve.fusion import rrf
from rerankeval.retrieve.source import Legs

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from rerankeval.llm.cache import LLMCache
    from rerankeval.llm.client import LLMClient, Reply

VARIANT = HYBRID_REFORMULATE
NOT_REWRITTEN, KEPT, REVERTED, LLM_FAILED = "not_rewritten", "kept", "reverted", "llm_failed"
STATUSES = (NOT_REWRITTEN, KEPT, REVERTED, LLM_FAILED)
THRESHOLD = 0.032  # top fused score below which a query is rewritten (2/61 = 0.0328: both legs agree on the top)
GUARD_K = 10  # depth of the leg agreement
LEDGER = f"{HYBRID_REFORMULATE}_ledger.csv"
NO_NEW_QUERY = "NoNewQuery"  # an llm_failed row's error when the reply read but repeated the query: not a failed call
LEDGER_COLUMNS = [
    "qid",
    "query",
    "status",
    "top_score",
    "rewrite",
    "agreement",
    "top",
    "rewrite_agreement",
    "rewrite_top",
    "cache_hit",
    "seconds",
    "error",
]
CACHE_VERSION = 1
TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "saved_prompt_tokens", "saved_completion_tokens")

SYSTEM = "You rewrite search queries for a search engine over technical documentation."
USER = (
    "The search query below found no clearly matching passage. Rewrite it as one search query that keeps its "
    "meaning and uses the words the documentation itself would use: spell out abbreviations, name the "
    "commands, files or concepts involved. "
    'Reply only with JSON: {{"query": "<the rewritten query>"}}.\n\n'
    "Query: {query}"
)
MAX_TOKENS = 64


class RewriteReply(BaseModel):
    query: str


class RewriteStrict(RewriteReply):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Measure:
    """The judgment-free guard measure of one query's two legs (compared as a pair, agreement first)."""

    agreement: float  # |top-k dense units ∩ top-k bm25 units| / k
    top: float  # the top fused (RRF) score of the two legs

    def key(self) -> tuple[float, float]:
        return (round(self.agreement, 12), round(self.top, 12))


def guard_measure(
    dense_units: Mapping[str, float], bm25_units: Mapping[str, float], k: int = GUARD_K, rrf_k: int = RRF_K
) -> Measure:
    """:class:`Measure` of one query's unit-level legs (``unit -> score``, any order: they are ranked)."""
    top_d = {d for d, _ in ranked(dense_units)[:k]}
    top_b = {d for d, _ in ranked(bm25_units)[:k]}
    fused = rrf([{"q": dict(dense_units)}, {"q": dict(bm25_units)}], k=rrf_k)["q"]
    return Measure(len(top_d & top_b) / k if k else 0.0, max(fused.values(), default=0.0))


def keep_rewrite(original: Measure, rewrite: Measure) -> bool:
    """True when the rewrite's legs score strictly better (ties keep the original)."""
    return rewrite.key() > original.key()


class Rewriter:
    """One query rewrite per call, through the one cached LLM call (:meth:`rerankeval.llm.call.CachedLLM.call`;
    ``rewrite`` never raises). ``stats`` counts every rewrite's calls and tokens."""

    def __init__(self, client: LLMClient, cache: LLMCache, endpoint: str, seed: int = 0, local: bool = False) -> None:
        from rerankeval.llm.breaker import Breaker
        from rerankeval.llm.call import CachedLLM, CallStats

        self.llm = CachedLLM(client, cache, endpoint=endpoint, local=local, breaker=Breaker(threshold=1))
        self.seed = seed
        self.stats = CallStats()

    @property
    def client(self) -> LLMClient:
        return self.llm.client

    @property
    def cache(self) -> LLMCache:
        return self.llm.cache

    @property
    def endpoint(self) -> str:
        return self.llm.endpoint

    def material(self, query: str) -> dict[str, Any]:
        """Everything the reply depends on: its cache key."""
        from rerankeval.llm import schemas

        return {
            "v": CACHE_VERSION,
            "purpose": HYBRID_REFORMULATE,
            "model": self.client.model,
            "endpoint": self.endpoint,
            "template": sha256_json([SYSTEM, USER]),
            "schema": schemas.schema_hash(RewriteStrict),
            "gen": {"temperature": 0, "seed": self.seed, "max_tokens": MAX_TOKENS},
            "query": query,
        }

    def plan(self, queries: Mapping[str, str]) -> Any:
        """The cost plan (:class:`rerankeval.llm.budget.Plan`) of rewriting ``queries``: one call each."""
        from rerankeval.llm import budget

        tasks, previous = [], ""
        for q, text in queries.items():
            hit = self.cache.get(self.cache.key(self.material(text))) is not None
            prompt = SYSTEM + "\n" + USER.format(query=text)
            tasks.append((q, "rewrite", [budget.call_estimate(hit, prompt, previous, MAX_TOKENS / 2)]))
            previous = prompt
        rate, source = self.llm.measured_rate()
        return budget.plan(tasks, price=(0.0, 0.0), max_calls=0, max_cost=0.0, s_per_token=rate, rate_source=source)

    def announce(self, queries: Mapping[str, str]) -> str:
        """Say the rewrite plan on the console before the first call (03 has no price: tokens, not dollars)."""
        from rerankeval.llm import budget

        return budget.announce(self.plan(queries), (0.0, 0.0), warn=False, stage="rewrite")

    def rewrite(self, query: str) -> tuple[str | None, bool, str]:
        """(the rewrite or None, served from the cache, the error class when there is no rewrite).

        After an unreachable endpoint the later calls are not sent, not even served from the cache (they fail
        at once, same error class)."""
        from rerankeval.llm import schemas
        from rerankeval.llm.call import Call

        if down := self.llm.breaker.open:
            return None, False, down
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER.format(query=query)}]
        call = Call(
            messages,
            self.material(query),
            MAX_TOKENS,
            seed=self.seed,
            response_format=schemas.response_format(RewriteStrict, "query_rewrite"),
        )
        got = self.llm.call(call, _read_rewrite, self.stats)
        if not got.ok:
            return None, False, got.failure.error_class if got.failure else got.errors[-1]
        text = got.value
        if not text or text.casefold() == " ".join(query.split()).casefold():
            return None, got.cached, NO_NEW_QUERY
        return text, got.cached, ""


def _read_rewrite(reply: Reply) -> str:
    """The rewritten query of a reply, whitespace collapsed (raises :class:`~rerankeval.llm.repair.Unusable`)."""
    from rerankeval.llm.repair import parse

    return " ".join(parse(reply.content, RewriteReply)[0].query.split())


class Reformulate:
    """The rewrite step after a first ``hybrid`` search: weak queries rewritten, guarded, fused with the original.

    ``rewriter`` None (no endpoint) leaves every weak query ``llm_failed`` with its original result. After
    :meth:`apply`, ``ledger`` holds one row per query (:data:`LEDGER_COLUMNS`)."""

    def __init__(self, rewriter: Rewriter | None = None, threshold: float = THRESHOLD, guard_k: int = GUARD_K) -> None:
        self.rewriter, self.threshold, self.guard_k = rewriter, threshold, guard_k
        self.ledger = pd.DataFrame(columns=LEDGER_COLUMNS)

    def apply(
        self, source: Legs, queries: Mapping[str, str], base: tuple[Run, Run], *, leg_k: int, rrf_k: int
    ) -> tuple[Run, Run]:
        """(unit run, chunk run) for ``queries`` from ``base``, the hybrid's (unit run, chunk run) of every query."""
        base_run, base_chunks = base
        weak = {q: t for q, t in queries.items() if _top(base_run[q]) < self.threshold}
        if self.rewriter is not None and weak:
            self.rewriter.announce(weak)
        rewrites = {q: self._rewrite(t) for q, t in weak.items()}
        new = {q: r[0] for q, r in rewrites.items() if r[0]}
        legs, new_legs = _LegRuns(source, queries, leg_k), _LegRuns(source, new, leg_k)
        run, chunk_run, rows = dict(base_run), dict(base_chunks), []
        for q, text in queries.items():
            row = {
                "qid": q,
                "query": text,
                "top_score": _top(base_run[q]),
                "status": NOT_REWRITTEN,
                "rewrite": "",
                "cache_hit": False,
                "seconds": 0.0,
                "error": "",
            }
            if q in rewrites:
                rewrite, hit, error, seconds = rewrites[q]
                row.update(rewrite=rewrite or "", cache_hit=hit, error=error, seconds=seconds, status=LLM_FAILED)
            if q in new:
                before, after = legs.measure(q, self.guard_k, rrf_k), new_legs.measure(q, self.guard_k, rrf_k)
                row.update(
                    agreement=before.agreement,
                    top=before.top,
                    rewrite_agreement=after.agreement,
                    rewrite_top=after.top,
                    status=KEPT if keep_rewrite(before, after) else REVERTED,
                )
                if row["status"] == KEPT:
                    run[q], chunk_run[q] = _fuse(q, [legs, new_legs], rrf_k, source.unit_of)
            rows.append(row)
        self.ledger = pd.DataFrame(rows).reindex(columns=LEDGER_COLUMNS)
        return run, chunk_run

    def _rewrite(self, text: str) -> tuple[str | None, bool, str, float]:
        t0 = time.perf_counter()
        if self.rewriter is None:
            return None, False, "NoEndpoint", 0.0
        rewrite, hit, error = self.rewriter.rewrite(text)
        return rewrite, hit, error, round(time.perf_counter() - t0, 4)

    def no_endpoint(self, problem: str) -> None:
        """Say why there was no endpoint (``problem``) in the ledger's error column of every query that fell back."""
        if problem:
            self.ledger.loc[self.ledger.status == LLM_FAILED, "error"] = f"NoEndpoint: {problem}"

    def record(self) -> dict[str, Any]:
        """The step's parameters and counts, written in the variant's record: with the rewrites' tokens, those of
        the requests sent now (``prompt_tokens``, ``completion_tokens``) and those the cache served
        (``saved_prompt_tokens``, ``saved_completion_tokens``), as in the rerank ledger; ``llm_calls``,
        ``llm_cache_hits`` and ``llm_seconds`` (a cached reply keeps its original latency) for 05's cost table."""
        ledger = self.ledger
        stats = self.rewriter.stats if self.rewriter is not None else None
        tokens = {k: getattr(stats, k, 0) for k in TOKEN_FIELDS}
        return {
            "threshold": self.threshold,
            "guard_k": self.guard_k,
            "rewritten": int(ledger.status.isin([KEPT, REVERTED]).sum()),
            "kept": int((ledger.status == KEPT).sum()),
            **tokens,
            "llm_calls": getattr(stats, "calls", 0),
            "llm_cache_hits": getattr(stats, "cache_hits", 0),
            "llm_seconds": round(getattr(stats, "llm_seconds", 0.0), 4),
        }


class _LegRuns:
    """The dense and BM25 chunk legs of some queries, and the same mapped to units."""

    def __init__(self, source: Legs, queries: Mapping[str, str], leg_k: int) -> None:
        self.dense = source.dense_leg(queries, leg_k) if queries else {}
        self.bm25 = source.bm25_leg(queries, leg_k) if queries else {}
        self.dense_units, self.bm25_units = to_units(self.dense, source.unit_of), to_units(self.bm25, source.unit_of)

    def measure(self, q: str, k: int, rrf_k: int) -> Measure:
        return guard_measure(self.dense_units.get(q, {}), self.bm25_units.get(q, {}), k, rrf_k)


def _top(units: Mapping[str, float]) -> float:
    return max(units.values(), default=0.0)


def _fuse(q: str, legs: list[_LegRuns], rrf_k: int, unit_of: Mapping[str, str]) -> tuple[dict, dict]:
    """RRF of the four legs of ``q`` (original and rewrite, dense and BM25): units and chunks."""
    chunk_legs: list[Run] = [{q: leg.get(q, {})} for g in legs for leg in (g.dense, g.bm25)]
    unit_legs: list[Run] = [to_units(r, unit_of) for r in chunk_legs]
    return rrf(unit_legs, k=rrf_k)[q], rrf(chunk_legs, k=rrf_k)[q]


def write_ledger(dp: DatasetPaths, ledger: pd.DataFrame) -> Path:
    """``dp.stage_dir("retrieve") / LEDGER``, its text redacted (a rewrite may echo a key the model was shown)."""
    from rerankeval.llm.scrub import redact_frame

    return atomic_write_text(dp.stage_dir("retrieve") / LEDGER, redact_frame(ledger).to_csv(index=False))


def failed_calls(ledger: pd.DataFrame) -> pd.Series:
    """The ledger's rows whose rewrite had no usable LLM reply (``llm_failed``, but not a reply that only repeated
    the query): a run after the endpoint is fixed asks them again."""
    return (ledger.status.astype(str) == LLM_FAILED) & (ledger.error.astype(str) != NO_NEW_QUERY)


def read_ledger(dp: DatasetPaths) -> pd.DataFrame | None:
    """The saved rewrite ledger (:func:`write_ledger`) as :meth:`Reformulate.apply` made it (text columns as text,
    empty numbers as NaN, ``cache_hit`` as bool, :data:`LEDGER_COLUMNS`), or None when there is none."""
    p = dp.retrieve_dir / LEDGER
    if not p.exists():
        return None
    text = ["qid", "query", "status", "rewrite", "error"]
    df = pd.read_csv(
        p,
        dtype={c: str for c in text},
        keep_default_na=False,
        na_values={c: [""] for c in LEDGER_COLUMNS if c not in text and c != "cache_hit"},
    )
    df["cache_hit"] = df["cache_hit"].astype(str).eq("True")
    return df.reindex(columns=LEDGER_COLUMNS)


@contextlib.contextmanager
def open_rewriter(settings: Settings, cache: LLMCache) -> Iterator[tuple[Rewriter | None, str]]:
    """(a :class:`Rewriter` on the endpoint of ``settings``, "") or (None, why not): never raises for a missing or
    dead endpoint. ``cache``: the LLM reply cache (e.g. ``LLMCache.under(dp.roots.cache)``)."""
    from rerankeval.core.settings import redact
    from rerankeval.llm.client import LLMCallError, LLMClient
    from rerankeval.llm.scrub import endpoint_identity

    stack = contextlib.ExitStack()
    rewriter, problem = None, ""
    try:
        client = LLMClient(settings, max_retries=1)
        stack.callback(client.close)
        rewriter = Rewriter(
            client,
            cache,
            endpoint_identity(settings),
            local=(settings.endpoint_id or "").startswith("llama-server"),
        )
    except (LLMCallError, ValueError) as exc:
        stack.close()
        problem = redact(str(exc))[:300]
    with stack:
        yield rewriter, problem


def describe(ledger: pd.DataFrame, threshold: float) -> str:
    """One sentence: how many queries were weak, rewritten and kept, reverted, or fell back."""
    n = ledger.status.value_counts()
    weak = len(ledger) - int(n.get(NOT_REWRITTEN, 0))
    return (
        f"{weak} of {len(ledger)} queries had a top hybrid score below {threshold}: {int(n.get(KEPT, 0))} "
        f"rewrites kept, {int(n.get(REVERTED, 0))} reverted by the guard, {int(n.get(LLM_FAILED, 0))} without a "
        "usable rewrite (original result kept)."
    )


def threshold_figure(ledger: pd.DataFrame, threshold: float, title: str = "") -> Figure:
    """The top hybrid scores the threshold is picked from, with the threshold marked."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist(ledger.top_score.astype(float), bins=30)
    ax.axvline(threshold, color="red", label=f"threshold {threshold} (below: rewritten)")
    ax.set(xlabel="top hybrid (RRF) score", ylabel="queries", title=title)
    ax.legend()
    return fig


def rewritten(ledger: pd.DataFrame) -> pd.DataFrame:
    """The queries sent to the LLM: what it wrote and what the guard decided."""
    cols = ["qid", "query", "status", "rewrite", "agreement", "rewrite_agreement", "top", "rewrite_top", "error"]
    return ledger.loc[ledger.status != NOT_REWRITTEN, cols]
