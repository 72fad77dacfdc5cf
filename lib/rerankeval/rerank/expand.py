"""Neighbour expansion for the LLM reranker (issue 11): each candidate chunk carries its neighbours' text.

A chunk cut at a boundary can lose the heading or sentence that gives it meaning. Expansion re-attaches
the text of up to ``expand_n`` neighbouring chunks of the same relevance unit, nearest first (previous,
next, second previous, second next, ...), within a budget of ``expand_chars`` added characters.

- **Never across a unit.** Neighbours come from the same relevance unit: a page of a PDF (chunks never
  cross a page, :func:`rerankeval.corpus.textnorm.chunk_text`), a document of a BEIR corpus (one chunk each, so
  nothing is added). Crossing a page inside a PDF is not allowed on purpose: the page is what is judged and
  ranked, and text from page p+1 would let the reranker promote page p for an answer it does not hold.
- **No repeated text.** Chunks overlap (01's ``chunk_overlap``); a neighbour adds only the part of the
  page the text so far does not cover, from the chunk offsets (``start``) stage 01 records.
- **The budget.** A neighbour that does not fit whole is cut to the remaining budget at a word boundary
  (a previous neighbour keeps its end, a next one its beginning); that side then stops, so the expanded
  text is always one contiguous stretch of the page.

Stage 04 reranks the same pool twice, without and with expansion (variants ``hybrid_rerank`` and
``hybrid_rerank_expand``, same model and settings); the expanded texts the LLM saw are written to
``dp.stage_dir("rerank") / "expanded.csv"``. With ``expand_n = 0`` nothing changes. (The name is catalogued, with
its stage and description, in :mod:`rerankeval.core.names`, as ``hybrid_rerank``'s is; the registry of
:mod:`rerankeval.retrieve.variants` holds only variants that search.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_text
from rerankeval.core.log import get_logger
from rerankeval.core.names import HYBRID_RERANK_EXPAND
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.corpus.contract import load_chunks
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.scrub import redact_frame, redact_tree
from rerankeval.rerank import prompts
from rerankeval.rerank.config import NO_STABILITY, Params, RerankConfig
from rerankeval.rerank.core import Expansion, Inputs, rerank
from rerankeval.rerank.ledger import write_ledger

log = get_logger(__name__)

EXPANDED_CSV = "expanded.csv"
EXPANDED_COLUMNS = ["qid", "docid", "chunk_id", "neighbours", "chars_added", "text"]


@dataclass(frozen=True)
class Piece:
    chunk_id: str
    start: int  # offset of the chunk in its unit's normalised text
    text: str

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclass(frozen=True)
class Expanded:
    text: str  # before + chunk + after
    neighbours: tuple[str, ...]  # chunk ids added, in the order they were taken
    chars_added: int  # characters of neighbour text (separators not counted)


class Neighbours:
    """The chunks of each relevance unit in page order, for :meth:`expand`."""

    def __init__(self, chunks: pd.DataFrame) -> None:
        self._units: dict[str, list[Piece]] = {}
        self._where: dict[str, tuple[str, int]] = {}
        for uid, group in chunks.groupby("unit_id", sort=False):
            ordered = group.sort_values("start", kind="stable")
            pieces = [
                Piece(c, int(s), t) for c, s, t in zip(ordered.chunk_id, ordered.start, ordered.text, strict=True)
            ]
            self._units[str(uid)] = pieces
            self._where.update({p.chunk_id: (str(uid), i) for i, p in enumerate(pieces)})

    def unit(self, chunk_id: str) -> list[Piece]:
        """The chunks of ``chunk_id``'s unit, in order."""
        return self._units[self._where[chunk_id][0]]

    def expand(self, chunk_id: str, expand_n: int, expand_chars: int) -> Expanded:
        """``chunk_id``'s text with up to ``expand_n`` neighbours of its unit, at most ``expand_chars`` added."""
        if expand_n < 0 or expand_chars < 0:
            raise ValueError(f"expand_n and expand_chars must be >= 0, got {expand_n} and {expand_chars}")
        uid, i = self._where[chunk_id]
        w = _Window(self._units[uid], i, expand_chars)
        while len(w.taken) < expand_n and w.budget > 0 and (w.open["prev"] or w.open["next"]):
            for side in ("prev", "next"):
                if len(w.taken) < expand_n and w.budget > 0 and w.open[side]:
                    w.grow(side)
        return Expanded(
            " ".join([*reversed(w.before), w.pieces[i].text, *w.after]), tuple(w.taken), expand_chars - w.budget
        )


class _Window:
    """The stretch of a unit covered so far around one chunk, grown one neighbour at a time."""

    def __init__(self, pieces: list[Piece], i: int, budget: int) -> None:
        self.pieces, self.lo, self.hi, self.budget = pieces, i, i, budget
        self.span = (pieces[i].start, pieces[i].end)
        self.before: list[str] = []
        self.after: list[str] = []
        self.taken: list[str] = []
        self.open = {"prev": i > 0, "next": i < len(pieces) - 1}

    def grow(self, side: str) -> None:
        """Add the next neighbour on ``side`` (cut to the budget; a cut, or the unit's edge, closes the side)."""
        j = self.lo - 1 if side == "prev" else self.hi + 1
        p = self.pieces[j]
        new = _new_text(p, self.span, side)
        cut = _cut(new, self.budget, keep_end=side == "prev")
        if cut:
            (self.before if side == "prev" else self.after).append(cut)
            self.taken.append(p.chunk_id)
            self.budget -= len(cut)
        if side == "prev":
            self.lo, self.span = j, (min(p.start, self.span[0]), self.span[1])
            self.open[side] = len(cut) == len(new) and j > 0
        else:
            self.hi, self.span = j, (self.span[0], max(p.end, self.span[1]))
            self.open[side] = len(cut) == len(new) and j < len(self.pieces) - 1


def _new_text(p: Piece, covered: tuple[int, int], side: str) -> str:
    """The part of neighbour ``p`` outside the ``covered`` span (chunks overlap), stripped."""
    if side == "prev":
        return p.text[: max(0, covered[0] - p.start)].strip()
    return p.text[max(0, covered[1] - p.start) :].strip()


def _cut(text: str, budget: int, keep_end: bool) -> str:
    """``text`` if it fits ``budget``, else its end (``keep_end``) or beginning cut at a word boundary."""
    if len(text) <= budget:
        return text
    if keep_end:
        part = text[len(text) - budget :]
        sp = part.find(" ")
        return part[sp + 1 :].strip() if sp >= 0 else ""
    part = text[:budget]
    sp = part.rfind(" ")
    return part[:sp].strip() if sp >= 0 else ""


def expanded_config(config: RerankConfig, expand_chars: int) -> RerankConfig:
    """The reranker settings for expanded passages: the same, with the clip grown by ``expand_chars``
    (0 = no clip stays 0), so the chunk itself is shown as far as without expansion."""
    limit = config.max_passage_chars + expand_chars if config.max_passage_chars else 0
    return replace(config, max_passage_chars=limit)


def expand_pools(
    chunk_ids: Mapping[str, Mapping[str, str]],
    neighbours: Neighbours,
    expand_n: int,
    expand_chars: int,
    max_passage_chars: int,
) -> tuple[dict[str, dict[str, str]], pd.DataFrame]:
    """(qid -> unit -> expanded text, the table of what the LLM is shown: :data:`EXPANDED_COLUMNS`).

    ``chunk_ids``: qid -> unit -> the chunk that represents it in the pool (see
    :func:`rerankeval.rerank.stage.load`); the table's ``text`` is clipped to ``max_passage_chars``
    exactly as the reranker clips it (:func:`rerankeval.rerank.prompts.clip`)."""
    texts: dict[str, dict[str, str]] = {}
    rows: list[list[Any]] = []
    for q, units in chunk_ids.items():
        texts[q] = {}
        for d, cid in units.items():
            e = neighbours.expand(cid, expand_n, expand_chars)
            texts[q][d] = e.text
            rows.append([q, d, cid, " ".join(e.neighbours), e.chars_added, prompts.clip(e.text, max_passage_chars)])
    return texts, pd.DataFrame(rows, columns=EXPANDED_COLUMNS)


def rerank_expanded(
    dp: DatasetPaths, inputs: Inputs, params: Params, *, settings: Settings, progress: bool
) -> Expansion:
    """Stage 04's second arm: the same pool, model and settings as ``hybrid_rerank``, each candidate expanded by
    ``params.expand_n`` neighbours (at most ``params.expand_chars`` characters); :func:`write` writes it."""
    cfg = expanded_config(params.config(), params.expand_chars)
    qids = set(inputs.qids)
    texts, shown = expand_pools(
        {q: c for q, c in inputs.chunk_ids.items() if q in qids},
        Neighbours(load_chunks(dp)),
        params.expand_n,
        params.expand_chars,
        cfg.max_passage_chars,
    )
    # no stability pass in this arm: it is compared with the main pass of hybrid_rerank
    result = rerank(
        replace(inputs, texts=texts),
        cfg,
        pool_k=params.pool_k,
        stability=NO_STABILITY,
        settings=settings,
        cache=LLMCache.under(dp.roots.cache, enabled=params.use_cache),
        progress=progress,
    )
    log.info(
        f"{HYBRID_RERANK_EXPAND}: {len(result.run)} queries, {len(shown)} candidates; "
        f"{(shown.neighbours != '').mean():.0%} got a neighbour, {shown.chars_added.mean():.0f} characters "
        f"added on average; {result.wall_s:.0f} s."
    )
    return Expansion(result, shown, params.expand_n, params.expand_chars)


def write(dp: DatasetPaths, arm: Expansion) -> dict[str, Path]:
    """The expanded rerank's run (``runs/hybrid_rerank_expand.trec``), its ledger, candidates, record and the
    texts shown, all next to stage 04's own files (whose ``hybrid_rerank`` outputs stay untouched). Their text
    is redacted as stage 04's is (:mod:`rerankeval.llm.scrub`): an endpoint may echo a key, e.g. in the
    model id it lists, and a page may hold one."""
    stage, result, variant = dp.stage_dir("rerank"), arm.result, HYBRID_RERANK_EXPAND
    ledger = result.ledger.copy()
    if len(ledger):
        ledger["variant"] = variant
    record = {
        "variant": variant,
        "pool_k": result.pool_k,
        "expand_n": arm.expand_n,
        "expand_chars": arm.expand_chars,
        "model": result.model,
        "max_passage_chars": result.config.max_passage_chars,
        "queries": int(len(result.run)),
        "wall_s": round(result.wall_s, 2),
    }
    return {
        "run": runs.write_trec(result.run, dp.run_file(variant), tag=variant),
        "ledger": write_ledger(ledger, stage / f"{variant}_ledger.csv"),
        "candidates": atomic_write_text(
            stage / f"{variant}_candidates.csv", redact_frame(result.candidates).to_csv(index=False)
        ),
        "expanded": atomic_write_text(stage / EXPANDED_CSV, redact_frame(arm.shown).to_csv(index=False)),
        "record": atomic_write_json(stage / f"{variant}.json", redact_tree(record)),
    }


def read_shown(dp: DatasetPaths) -> pd.DataFrame | None:
    """The expanded texts the LLM was shown (``expanded.csv``), or None when 04 did not expand."""
    p = dp.stage_dir("rerank") / EXPANDED_CSV
    return pd.read_csv(p, dtype={"qid": str, "docid": str}, keep_default_na=False) if p.exists() else None
