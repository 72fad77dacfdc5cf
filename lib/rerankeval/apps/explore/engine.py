"""The explorer of one dataset: its saved runs, corpus, judgments and (on the first free-text query) indexes, kept
warm between queries (see :mod:`rerankeval.apps.explore` for what it shows)."""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from rerankeval.apps.explore import queue
from rerankeval.apps.explore.queue import NextUnits
from rerankeval.apps.explore.search import LiveSearch
from rerankeval.apps.explore.texts import Texts
from rerankeval.apps.explore.view import Column, Exploration
from rerankeval.core import runs
from rerankeval.core.log import get_logger
from rerankeval.core.names import CROSS_ENCODER, HYBRID, HYBRID_RERANK
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import ranked
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import judgments, metrics
from rerankeval.evaluate.analysis_records import read_summary
from rerankeval.rerank.config import MAIN_PASS

log = get_logger(__name__)

RERANKED = (HYBRID_RERANK, CROSS_ENCODER)  # columns that show each unit's hybrid rank before reranking
_ID_LIKE = re.compile(r"([A-Za-z]{1,12}[-_]?)(\d{1,6})")  # one token, letters then digits: q12, dm-012, t3


class Explorer:
    """The saved runs, corpus, judgments and (on first free-text query) indexes of one dataset, kept warm."""

    def __init__(self, dp: DatasetPaths, settings: Settings):
        self.dp, self.settings = dp, settings  # the live search's indexes and LLM endpoint
        self.texts = Texts(dp)
        self.table = corpus.load_queries(dp)
        self.by_text = {" ".join(t.lower().split()): q for q, t in self.table.items()}
        files = runs.discover_runs(dp.runs_dir) if dp.runs_dir.is_dir() else {}
        if not files:
            raise corpus.StageMissing(
                f"no run files in {dp.runs_dir}: run the chain first (make report, or "
                "notebooks 01-05); the explorer reads their saved outputs"
            )
        self.runs = {v: runs.read_trec(p) for v, p in files.items()}
        self.best = {
            v: runs.best_chunks(runs.read_trec(dp.chunk_run_file(v)), self.texts.unit_of)
            for v in files
            if dp.chunk_run_file(v).exists()
        }
        from rerankeval.rerank.ledger import read_ledger

        self.ledger = read_ledger(dp.ledger, missing_ok=True)
        self.llm_scores = _llm_scores(dp)
        self._qrels: runs.Qrels | None = None
        self._signature: tuple[int, int] | None = None  # the judgments file as last read (mtime, size)
        self._notes: list[str] = []  # said by the next next_to_judge (e.g. the judgments file changed on disk)
        self._live: LiveSearch | None = None  # opened on the first free-text query
        self.say: Callable[[str], None] = log.debug  # what the live search is doing (the widget: its status line)

    @property
    def original_qrels(self) -> runs.Qrels:
        """The dataset's own qrels, without the grades recorded while exploring."""
        return corpus.load_qrels(self.dp)

    @property
    def qrels(self) -> runs.Qrels:
        """The qrels with the grades recorded while exploring (re-read after :meth:`judge`, and when the judgments
        file changed on disk since it was read: another explorer, a process or an edit; said once)."""
        now = queue.judgments_signature(self.dp)
        if self._qrels is not None and now != self._signature:
            self._notes.append(queue.changed_note(self.dp))
            log.warning(self._notes[-1])
            self._qrels = None
        if self._qrels is None:
            self._qrels = judgments.merged_qrels(self.dp, self.original_qrels)[0]
            self._signature = now
        return self._qrels

    def take_notes(self) -> list[str]:
        """What the explorer noticed since last asked (and forgets it)."""
        out, self._notes = self._notes, []
        return out

    def resolve(self, query: str) -> str | None:
        """The query id ``query`` names (an id of queries.jsonl, or exactly its text), else None (free text)."""
        q = str(query).strip()
        return q if q in self.table else self.by_text.get(" ".join(q.lower().split()))

    def did_you_mean(self, query: str) -> str:
        """For an id-like string that is no query id (``q12``): the id it most likely means, as a sentence; else ""."""
        q = str(query).strip()
        if q in self.table or not _ID_LIKE.fullmatch(q):
            return ""
        number = int(_ID_LIKE.fullmatch(q).group(2))
        same = [i for i in self.table if (m := _ID_LIKE.fullmatch(i)) and int(m.group(2)) == number]
        guess = same or difflib.get_close_matches(q, list(self.table), n=1, cutoff=0.5)
        where = f"did you mean {guess[0]}?" if guess else f"ids look like {next(iter(self.table), '?')}."
        return f"{q!r} is not a query id of {self.dp.name} ({where}); searched as free text instead."

    def show(self, query: str, k: int = 10, say: Callable[[str], None] | None = None) -> Exploration:
        """Every variant's top ``k`` for ``query`` (a query id, or free text): see the module docstring. ``say``
        hears what a live search is doing ("loading the encoder…", "searching vector (2 of 6 variants)…"),
        instead of the log."""
        if say is None:
            return self._show(query, k)
        before, self.say = self.say, say
        try:
            return self._show(query, k)
        finally:
            self.say = before

    def _show(self, query: str, k: int) -> Exploration:
        t0 = time.perf_counter()
        if not str(query).strip():
            raise ValueError("empty query: type a question, or give a query id of queries.jsonl")
        qid = self.resolve(query)
        note = "" if qid else self.did_you_mean(query)
        text = self.table[qid] if qid else str(query).strip()
        terms = self.texts.terms(text)
        if qid is not None:
            found = {v: (run.get(qid, {}), self._best(v).get(qid, {}), "") for v, run in self.runs.items()}
            ledger, scored = _ledger_row(self.ledger, qid), self.llm_scores.get(qid, {})
        else:
            found, ledger = self.live().search(text, list(self.runs))
            scored = self.live().llm_scores
        gold = dict(self.qrels.get(qid, {})) if qid else {}
        hybrid = found.get(HYBRID, ({}, {}, ""))[0]
        columns = [self._column(v, *found[v], terms, k, gold, hybrid) for v in self.runs if v in found]
        for h in (h for c in columns if c.variant == HYBRID_RERANK for h in c.hits):
            h.llm_score = scored.get(h.unit_id)
        return Exploration(
            self.dp.name,
            text,
            qid,
            qid is None,
            k,
            columns,
            gold,
            ledger,
            terms,
            time.perf_counter() - t0,
            lambda s: self.texts.marked(s, terms),
            note,
        )

    def _best(self, v: str) -> dict[str, dict[str, str]]:
        """qid -> unit -> the chunk that brought it in: the variant's chunk run, else (a reranker without one)
        the hybrid run's, whose best chunk is the passage the reranker saw."""
        return self.best.get(v) or (self.best.get(HYBRID, {}) if v in RERANKED else {})

    def _column(
        self,
        v: str,
        run: Mapping[str, float],
        best: Mapping[str, str],
        why: str,
        terms: frozenset[str],
        k: int,
        gold: Mapping[str, int],
        hybrid: Mapping[str, float],
    ) -> Column:
        if why:
            return Column(v, unavailable=why)
        before = {d: i for i, (d, _) in enumerate(ranked(hybrid), start=1)} if v in RERANKED else {}
        hits = []
        for i, (d, s) in enumerate(ranked(run)[:k], start=1):
            h = self.texts.hit(i, d, float(s), best.get(d), terms)
            h.grade, h.before = gold.get(d), before.get(d)
            hits.append(h)
        return Column(v, hits)

    def live(self) -> LiveSearch:
        """The live search over the saved indexes (opened once; raises when stage 02 has not run)."""
        if self._live is None:
            self.say("opening the saved indexes (the first free-text search only)\u2026")
            self._live = LiveSearch(self.dp, self.texts.unit_of, self.settings, say=lambda m: self.say(m))
        return self._live

    def judge(self, qid: str, unit_id: str, grade: int, replace: bool = False) -> str:
        """Record a grade (see :func:`rerankeval.evaluate.judgments.record`); shown at once, merged by the next 05."""
        out = judgments.record(self.dp, qid, unit_id, grade, replace=replace)
        self._qrels = None
        note = queue.unretrieved_note(self.runs, qid, unit_id)
        return f"{out} ({note})" if note else out

    def next_to_judge(self, n: int = 5, mode: str = "queue", seed: int = 0) -> NextUnits:
        """The next ``n`` units to judge and the status of each comparison (:mod:`.queue`)."""
        return queue.next_units(self, n, mode, seed)

    def examples(self, n: int = 3) -> list[str]:
        """The diff view's largest changes: the ``n`` queries whose headline metric moves most between hybrid
        and hybrid_rerank (per_query.csv of stage 05); the first judged queries when 05 has not run."""
        return example_queries(self.dp, n) or [q for q in self.table if q in self.qrels][:n]

    def close(self) -> None:
        if self._live is not None:
            self._live.close()
            self._live = None


def _ledger_row(ledger: pd.DataFrame | None, qid: str) -> dict[str, Any] | None:
    if ledger is None or ledger.empty:
        return None
    rows = ledger[(ledger.qid == qid) & (ledger["pass"] == MAIN_PASS)]
    return rows.iloc[0].to_dict() if len(rows) else None


def _llm_scores(dp: DatasetPaths) -> dict[str, dict[str, float]]:
    """qid -> unit -> the reranker's own score in stage 04's main pass (``rerank/candidates.csv``), or {}."""
    if not dp.rerank_candidates.is_file():
        return {}
    df = corpus.read_table(dp.rerank_candidates, ids=("qid", "docid", "pass"))
    df = df[(df["pass"] == MAIN_PASS) & df.llm_score.notna()]
    out: dict[str, dict[str, float]] = {}
    for q, d, s in zip(df.qid, df.docid, df.llm_score, strict=True):
        out.setdefault(q, {})[d] = float(s)
    return out


def example_queries(dp: DatasetPaths, n: int = 3, pair: Sequence[str] = (HYBRID, HYBRID_RERANK)) -> list[str]:
    """Up to ``n`` query ids with the largest headline change between ``pair`` (as 05's diff view), or []."""
    if not dp.per_query_csv.exists():
        return []
    summary = read_summary(dp)
    # ids as written: a query or variant id "NA", "nan", "null" or "None" is an id, not a missing value
    per_query = corpus.read_table(dp.per_query_csv, ids=("variant", "qid", "metric"))
    headline = summary.headline_metric if summary else f"ndcg@{10}"
    w = metrics.wide(per_query, headline)
    if not set(pair) <= set(w.columns):
        return []
    change = (w[pair[1]] - w[pair[0]]).abs().sort_values(ascending=False, kind="stable")
    return [str(q) for q in change.index[:n]]
