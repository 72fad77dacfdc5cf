"""What a cited answer is asked about: the questions (judged queries or free text), the variant whose passages
are used (the analysis' winner by default, as 05 saved it) and the top ``k`` passages of each question."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rerankeval.apps.ask.params import Params
from rerankeval.core import runs
from rerankeval.core.names import HYBRID
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.textnorm import norm_text
from rerankeval.evaluate.analysis_records import read_winner, winner_is_distinguishable
from rerankeval.rerank import prompts


@dataclass(frozen=True)
class Question:
    """A question; ``qid`` is set for a judged query (its passages come from the saved run file)."""

    text: str
    qid: str | None = None


@dataclass(frozen=True)
class Passage:
    label: str  # what the model sees in square brackets and must cite
    unit: str  # relevance unit id (page or document)
    text: str  # the text given to the model (clipped)


def resolve_variant(dp: DatasetPaths, variant: str) -> tuple[str, str]:
    """(variant to use, a note saying where it comes from): ``variant``, else the analysis' best variant on its
    headline metric among those that answered every query (``analyse/winner.json``), else hybrid."""
    if variant:
        return variant, f"variant {variant} (chosen)"
    best = read_winner(dp)
    if best:
        if winner_is_distinguishable(dp):
            return best, f"variant {best}: the analysis' winner on its headline metric (05-analyse)"
        return best, (
            f"variant {best}: the best mean on the headline metric (05-analyse), not distinguishable from the next"
        )
    return HYBRID, f"variant {HYBRID}: no analysis yet (run 05-analyse to use its winner)"


def default_questions(dp: DatasetPaths, n: int) -> list[Question]:
    """``n`` judged queries spread evenly over the judged queries sorted by id (deterministic)."""
    queries, qrels = corpus.load_queries(dp), corpus.load_qrels(dp)
    judged = sorted(q for q in queries if any(g > 0 for g in qrels.get(q, {}).values()))
    if n <= 0 or not judged:
        return []
    m = min(n, len(judged))  # steps of (len - 1) / (m - 1) >= 1: distinct picks, first and last included
    picks = [round(i * (len(judged) - 1) / max(1, m - 1)) for i in range(m)]
    return [Question(queries[judged[i]], judged[i]) for i in picks]


def to_questions(dp: DatasetPaths, params: Params) -> list[Question]:
    """``params.questions``: judged queries (named by id or exact text) keep their id; anything else is free text.
    None given: ``params.n_questions`` judged queries (:func:`default_questions`)."""
    if not params.questions:
        return default_questions(dp, params.n_questions)
    queries = corpus.load_queries(dp)
    by_text: dict[str, str] = {}
    for q, t in sorted(queries.items()):
        by_text.setdefault(norm_text(t), q)
    out = []
    for item in params.questions:
        qid = item if item in queries else by_text.get(norm_text(item))
        out.append(Question(queries[qid], qid) if qid else Question(str(item)))
    return out


def unit_label(unit: str, source: Any, page: Any) -> str:
    """``file p.N`` for a PDF page, the unit (document) id otherwise."""
    if isinstance(page, float) and math.isnan(page) or page is None or page == "":
        return unit
    return f"{source} p.{int(page)}"


# -- passages --
class PassageSource:
    """The top ``params.k`` passages of ``variant`` for judged (saved run) and free-text (retriever) questions,
    each clipped to ``params.max_passage_chars``."""

    def __init__(self, dp: DatasetPaths, variant: str, params: Params):
        self.dp, self.variant, self.k, self.max_chars = dp, variant, params.k, params.max_passage_chars
        chunks = corpus.load_chunks(dp)
        self.texts = corpus.chunk_texts(dp)
        self.unit_of = dict(zip(chunks.chunk_id, chunks.unit_id, strict=True))
        first = chunks.sort_values(["unit_id", "start"], kind="stable").drop_duplicates("unit_id")
        self.first_chunk = dict(zip(first.unit_id, first.chunk_id, strict=True))
        self.labels = {u: unit_label(u, s, p) for u, s, p in zip(first.unit_id, first.source, first.page, strict=True)}
        self.notes: list[str] = []
        self._saved: dict[str, tuple[runs.Run, dict[str, dict[str, str]]]] = {}

    def _passages(self, run: Mapping[str, float], best: Mapping[str, str]) -> list[Passage]:
        out = []
        for unit, _ in runs.ranked(run)[: self.k]:
            chunk = best.get(unit) or self.first_chunk.get(unit)
            text = prompts.clip(self.texts.get(chunk, ""), self.max_chars)
            out.append(Passage(self.labels.get(unit, unit), unit, text))
        return out

    def _read(self, variant: str) -> tuple[runs.Run, dict[str, dict[str, str]]]:
        """A saved unit run and each query's best chunk per unit (from its chunk run, or hybrid's)."""
        if variant not in self._saved:
            path = self.dp.run_file(variant)
            if not path.exists():
                raise corpus.StageMissing(
                    f"{path} is missing: run the stage that writes the {variant} run "
                    "(03-retrieve, or 04-rerank for hybrid_rerank), or pick another variant."
                )
            chunk_path = next(
                (p for p in (self.dp.chunk_run_file(variant), self.dp.chunk_run_file(HYBRID)) if p.exists()), None
            )
            best = runs.best_chunks(runs.read_trec(chunk_path), self.unit_of) if chunk_path else {}
            self._saved[variant] = (runs.read_trec(path), best)
        return self._saved[variant]

    def judged(self, qid: str) -> list[Passage]:
        """From the saved run; a query the variant did not answer (e.g. 04's max_queries) uses hybrid's run."""
        run, best = self._read(self.variant)
        if qid not in run and self.variant != HYBRID:
            self.notes.append(f"query {qid} is not in the {self.variant} run: its passages come from {HYBRID}")
            run, best = self._read(HYBRID)
        return self._passages(run.get(qid, {}), best.get(qid, {}))

    def free(self, texts: Mapping[str, str], settings: Settings) -> dict[str, list[Passage]]:
        """Search ``texts`` (key -> question) with the saved indexes, as stage 03 searches by default (its
        :class:`~rerankeval.retrieve.params.Params`), with the encoder ``settings`` configure."""
        from rerankeval.retrieve.params import Params as RetrieveParams
        from rerankeval.retrieve.retriever import BASE_VARIANTS, Retriever

        variant = self.variant
        if variant not in BASE_VARIANTS:
            variant = HYBRID
            self.notes.append(
                f"free-text questions are searched with {HYBRID}: {self.variant} cannot search "
                "new text here (it needs the LLM stage or a model)"
            )
        defaults = RetrieveParams()
        with Retriever(self.dp, settings, progress=False) as r:
            res = r.search(variant, texts, leg_k=defaults.leg_k, pool_k=defaults.pool_k, rrf_k=defaults.rrf_k)
        best = runs.best_chunks(res.chunk_run, self.unit_of)
        return {key: self._passages(res.run.get(key, {}), best.get(key, {})) for key in texts}

    def for_questions(self, questions: Sequence[Question], settings: Settings) -> list[list[Passage]]:
        """Each question's passages (free text searched with ``settings``' encoder)."""
        free = {f"free-{i}": q.text for i, q in enumerate(questions) if q.qid is None}
        found = self.free(free, settings) if free else {}
        return [self.judged(q.qid) if q.qid else found[f"free-{i}"] for i, q in enumerate(questions)]
