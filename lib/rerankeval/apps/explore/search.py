"""The explorer's free text: a live search through stage 03's retriever over the saved indexes, and stage 04's
cached LLM reranker with its recorded configuration; every open search is closed at exit. Part of
:mod:`rerankeval.apps.explore`.

The search says what it is doing through its ``say`` callback (the widget's status line: "searching vector (2 of
6 variants)…", "loading the encoder…"), and while it loads a model (the encoder on the first free-text query, the
cross-encoder) the model libraries' progress bars, logs and warnings are off (:func:`quiet_models`): nothing of
them reaches the cell's output."""

from __future__ import annotations

import atexit
import contextlib
import logging
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from rerankeval.core import runs
from rerankeval.core.names import BM25, CROSS_ENCODER, HYBRID, HYBRID_RERANK
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run, ranked
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus

FREE_QID = "free-text"
_OPEN: weakref.WeakSet[LiveSearch] = weakref.WeakSet()  # live searches whose store is open


@atexit.register
def close_all() -> None:
    """Close every open live search (its embedded Qdrant store). Registered with :mod:`atexit`: a plain script
    that called :func:`show` with free text would otherwise leave the store to ``QdrantClient.__del__`` at
    interpreter shutdown, which prints an ``ImportError: sys.meta_path is None`` traceback."""
    for live in list(_OPEN):
        live.close()


@contextlib.contextmanager
def quiet_models() -> Iterator[None]:
    """transformers', huggingface_hub's and sentence-transformers' progress bars (the "Loading weights" bar), logs
    and warnings off inside the block, restored after it: what a model load prints is not the explorer's output.
    Imports transformers: use it only where a model is loaded anyway."""
    from huggingface_hub import utils as hub
    from transformers.utils import logging as tlog

    bars, hub_off, level = tlog.is_progress_bar_enabled(), hub.are_progress_bars_disabled(), tlog.get_verbosity()
    st = logging.getLogger("sentence_transformers")
    st_level = st.level
    tlog.disable_progress_bar()
    hub.disable_progress_bars()
    tlog.set_verbosity_error()
    st.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        st.setLevel(st_level)
        tlog.set_verbosity(level)
        if bars:
            tlog.enable_progress_bar()  # (turns huggingface_hub's bars on too: set back just below)
        (hub.disable_progress_bars if hub_off else hub.enable_progress_bars)()


class LiveSearch:
    """Free-text search through stage 03's :class:`~rerankeval.retrieve.retriever.Retriever` over the saved indexes,
    with each variant's recorded parameters, and stage 04's cached LLM reranker with its recorded configuration."""

    def __init__(
        self, dp: DatasetPaths, unit_of: Mapping[str, str], settings: Settings, say: Callable[[str], None] = print
    ):
        from rerankeval.retrieve.retriever import Retriever

        self.dp, self.unit_of, self.settings, self.say = dp, unit_of, settings, say
        self.llm_scores: dict[str, float | None] = {}  # the last live rerank's own scores, by unit
        try:
            self.retriever = Retriever(dp, settings, progress=False)
        except FileNotFoundError as exc:  # StageMissing: no index manifest, or one built from other chunks
            raise corpus.StageMissing(
                f"free-text search needs the saved indexes of {dp.name}, and they are missing or stale ({exc}). "
                f"Fix: run the chain up to 02 (make report DATASET={dp.name}, or python -m rerankeval.apps.chain "
                f"--dataset {dp.name} --only 01 --only 02); the explorer never builds indexes. Query ids of "
                "queries.jsonl still work: they read the saved runs."
            ) from None
        self._ce: Any = None
        _OPEN.add(self)

    def _params(self, v: str) -> dict[str, Any]:
        import json

        rec = self.dp.variant_record(v)
        got = json.loads(rec.read_text(encoding="utf-8")) if rec.exists() else {}
        return {k: got[k] for k in ("leg_k", "pool_k", "rrf_k", "weights") if got.get(k) is not None}

    def _retrieve(self, v: str, text: str) -> tuple[Run, dict[str, str], str]:
        from rerankeval.retrieve.retriever import VARIANTS

        if v not in VARIANTS:
            return {}, {}, "a run from another system: only its saved queries can be shown (give a query id)"
        kw: dict[str, Any] = {}
        if v == CROSS_ENCODER:
            kw["cross_encoder"] = self._cross_encoder()
            if kw["cross_encoder"] is None:
                return {}, {}, "no cross-encoder weights on this machine (see 03-retrieve)"
        with self._loading(v, text):
            res = self.retriever.search(v, {FREE_QID: text}, **self._params(v), **kw)
        return res.run.get(FREE_QID, {}), runs.best_chunks(res.chunk_run, self.unit_of).get(FREE_QID, {}), ""

    def _loading(self, v: str, text: str) -> contextlib.AbstractContextManager[None]:
        """:func:`quiet_models` (and a word in the status) when searching ``v`` for ``text`` loads the in-process
        encoder now (not loaded yet, and the text's vector not in the embeddings cache)."""
        enc = self.retriever.embedder
        if v == BM25 or getattr(enc, "kind", "") != "in-process" or enc.loaded or enc.all_cached([text]):
            return contextlib.nullcontext()
        self.say(f"loading the encoder {enc.model_id} (the first free-text search only)\u2026")
        return quiet_models()

    def _cross_encoder(self) -> Any:
        if self._ce is None:
            from rerankeval.retrieve import cross_encoder

            spec = cross_encoder.model_name(None, self.settings)  # the configured one (a bare None raised TypeError)
            found = cross_encoder.find_cross_encoder(spec, self.dp.roots.cache)
            if found is not None:
                self.say("loading the cross-encoder (the first free-text search only)\u2026")
            with quiet_models() if found is not None else contextlib.nullcontext():
                self._ce = cross_encoder.load_cross_encoder(found, None) if found is not None else False
        return self._ce or None

    def search(self, text: str, variants: Sequence[str]) -> tuple[dict[str, tuple[Run, dict, str]], dict | None]:
        """variant -> (unit scores, unit -> best chunk, why unavailable) for ``text``; the reranker's ledger row."""
        todo = [v for v in dict.fromkeys([HYBRID, *variants]) if v != HYBRID_RERANK]
        found = {}
        for i, v in enumerate(todo, start=1):
            self.say(f"searching {v} ({i} of {len(todo)} variants)\u2026")
            found[v] = self._retrieve(v, text)
        ledger, self.llm_scores = None, {}
        if HYBRID_RERANK in variants:
            run, why, ledger = self._rerank(text, *found[HYBRID][:2])
            found[HYBRID_RERANK] = (run, found[HYBRID][1], why)
        return found, ledger

    def _rerank(self, text: str, hybrid: Run, best: Mapping[str, str]) -> tuple[Run, str, dict | None]:
        """Stage 04's reranking of the hybrid pool for ``text`` (cached replies are free), or why not."""
        import json
        from dataclasses import replace

        from rerankeval.llm.cache import LLMCache
        from rerankeval.llm.server import check_endpoint
        from rerankeval.rerank.config import Candidate, Params
        from rerankeval.rerank.reranker import Reranker

        if not self.dp.rerank_summary.exists():
            return {}, "stage 04 has not run (no rerank summary): run 04-rerank first", None
        summary = json.loads(self.dp.rerank_summary.read_text(encoding="utf-8"))
        settings = self.settings
        if not settings.configured:
            return {}, "no LLM endpoint configured: make lab starts one, or set OPENAI_BASE_URL in .env", None
        self.say("reranking with the LLM: checking its endpoint\u2026")
        problem = check_endpoint(settings, timeout=3.0)
        if problem:
            return {}, problem, None
        cfg = {k: (tuple(v) if isinstance(v, list) else v) for k, v in summary["config"].items()}
        cfg.update(max_calls=0, max_cost=0.0)  # 04's run budget is not the explorer's (not in the cache key)
        pool_k = int(summary.get("pool_k") or len(hybrid))
        items = ranked(hybrid)
        pool = [Candidate(d, self.retriever.texts[best[d]], float(s), i) for i, (d, s) in enumerate(items[:pool_k])]
        with Reranker(replace(Params().config(), **cfg), settings, cache=LLMCache.under(self.dp.roots.cache)) as rr:
            _report_calls(rr, text, pool, self.say)
            res = rr.rerank_query(FREE_QID, text, pool)
        self.llm_scores = dict(res.llm_scores)
        order = res.order + [d for d, _ in items[pool_k:]]
        return {d: 1.0 / (i + 1) for i, d in enumerate(order)}, "", res.row

    def close(self) -> None:
        self.retriever.close()
        _OPEN.discard(self)


def _report_calls(rr: Any, text: str, pool: Sequence[Any], say: Callable[[str], None]) -> None:
    """Make ``rr`` (a :class:`~rerankeval.rerank.reranker.Reranker`) say how far the pool's LLM calls are, through
    its one cached call (``rr.llm.call``): ``reranking 10 candidates with <model>: 3/4 calls`` (a cached reply
    counts too: it is a step of the ranking)."""
    from rerankeval.rerank import prompts

    total = len(rr.calls.specs(text, list(pool), [prompts.clip(c.text, rr.config.max_passage_chars) for c in pool]))
    done, call = [0], rr.llm.call
    head = f"reranking {len(pool)} candidates with {rr.model} ({rr.config.mode})"
    say(f"{head}: 0/{total} calls\u2026")

    def counted(*args: Any, **kw: Any) -> Any:
        got = call(*args, **kw)
        done[0] += 1
        say(f"{head}: {done[0]}/{max(total, done[0])} calls\u2026")
        return got

    rr.llm.call = counted
