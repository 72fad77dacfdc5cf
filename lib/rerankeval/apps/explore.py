"""The explorer: one query, every variant's top k side by side (notebook ``00-explore``, what ``make lab`` opens).

::

    from rerankeval.apps import explore
    from rerankeval.core import paths
    dp = paths.resolve_dataset("debian-manuals")
    explore.show(dp, "how do I change the keyboard layout", k=10)   # free text: a live search
    explore.show(dp, "dm-012")                                       # a judged query: its saved runs
    explore.judge(dp, "dm-012", "debian-policy.pdf#p27", 1)          # a grade, merged by the next make report
    explore.next_to_judge(dp, 5)                                     # the units that settle a comparison, and why
    explore.add_question(dp, "which file lists the archives apt downloads packages from?",
                         ["debian-reference.en.pdf#p68"])            # a question of your own, with its answer
    explore.drafts(dp)                                               # generated questions and their review state
    explore.review(dp, "gen-1a2b3c4d5e", "accept")                   # (a draft's id) or "reject", or "edit"
    explore.promote(dp)                                              # accepted drafts -> queries.jsonl + qrels

Each column is one variant: rank, score, unit id, a snippet with the query's terms highlighted (every text
HTML-escaped), the grade when the query is judged (``?`` marks a unit nobody judged), and for the rerankers
(``hybrid_rerank``, ``cross_encoder``) each unit's rank in the fused ``hybrid`` list before reranking; the
``hybrid_rerank`` column shows the LLM's own score of each unit it ranked (stage 04's ``rerank/candidates.csv``, or
the live rerank's), the run's 1/rank below ``pool_k``. The reranker's ledger row (status, repairs, retries,
latency, cache) is shown above the columns. A live search says each step (opening the indexes, loading the encoder,
each variant, each LLM call of the rerank) to ``say`` (the widget's status line; ``show(..., say=print)`` prints
them; by default the DEBUG log, so a notebook cell shows only the result).

- A query id of ``queries.jsonl`` (or its exact text) shows the **saved** run files of stages 03/04 and the
  ledger row of stage 04: nothing is recomputed.
- Free text is searched through the same :class:`rerankeval.retrieve.stage.Retriever` over the **saved** indexes of
  stage 02 (never rebuilt: missing indexes are an error saying to run 02), with each variant's recorded
  parameters; the ``hybrid_rerank`` column goes through the same cached LLM reranker as stage 04
  (:meth:`rerankeval.rerank.Reranker.rerank_query`, with the configuration 04 recorded). When no LLM endpoint is
  configured or it does not answer, that column is shown as unavailable; the rest still works.

:class:`Explorer` keeps the loaded runs, corpus and indexes between queries (a warm query costs only its own
search); :func:`show` and :func:`judge` use one explorer per dataset. :func:`widget` is the ipywidgets UI (a
text box, a dropdown of judged and example queries, one status line saying what it is doing, grade buttons under
each hit with the unjudged ones marked, and "answers it" under each hit of free text).

This module holds the explorer and its public functions; the parts live beside it and are re-exported here:
:mod:`~rerankeval.apps.explore_view` (what is shown and its HTML), :mod:`~rerankeval.apps.explore_search` (free
text: the live search), :mod:`~rerankeval.apps.explore_queue` (what to judge next: :func:`next_to_judge`) and
:mod:`~rerankeval.apps.explore_widget` (the ipywidgets UI, with a "Next to judge" button and the comparisons' status
refreshed after each grade).
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from rerankeval.apps import explore_queue, explore_widget
from rerankeval.apps.explore_queue import NextUnits
from rerankeval.apps.explore_search import FREE_QID, LiveSearch, close_all
from rerankeval.apps.explore_view import Column, Exploration, Hit, render_html
from rerankeval.apps.explore_widget import in_chain
from rerankeval.core import runs
from rerankeval.core.log import get_logger
from rerankeval.core.names import CROSS_ENCODER, HYBRID, HYBRID_RERANK
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import ranked
from rerankeval.corpus import contract as corpus
from rerankeval.corpus.snippets import SNIPPET_CHARS, first_chunks, place
from rerankeval.evaluate import judgments, metrics
from rerankeval.evaluate.analysis_records import read_summary

log = get_logger(__name__)

__all__ = [  # the explorer's API, wherever each part lives (the notebook, tests and bench use these names)
    "FREE_QID", "RERANKED", "Column", "Exploration", "Explorer", "Hit", "LiveSearch", "NextUnits", "close_all",
    "add_question", "draft_source", "drafts", "example_queries", "explorer", "in_chain", "judge", "judging_table",
    "next_to_judge", "promote", "render_html", "review", "show", "widget",
]

RERANKED = (HYBRID_RERANK, CROSS_ENCODER)  # columns that show each unit's hybrid rank before reranking
_WORD = re.compile(r"\w+")
_ID_LIKE = re.compile(r"([A-Za-z]{1,12}[-_]?)(\d{1,6})")  # one token, letters then digits: q12, dm-012, t3


# --------------------------------------------------------------------------- snippets and highlighting
class _Texts:
    """Chunk texts and places, the first chunk of each unit, and the query-term analyser (stems)."""

    def __init__(self, dp: DatasetPaths):
        from rerankeval.index.bm25 import Analyzer

        df = corpus.load_chunks(dp)
        self.rows = {r.chunk_id: r for r in df.itertuples(index=False)}
        self.unit_of = dict(zip(df.chunk_id, df.unit_id, strict=True))
        first = first_chunks(df)
        self.first = dict(zip(first.unit_id, first.chunk_id, strict=True))
        self.analyzer = Analyzer()
        self._stems: dict[str, str | None] = {}

    def terms(self, text: str) -> frozenset[str]:
        return frozenset(self.analyzer(text))

    def stem(self, word: str) -> str | None:
        w = word.lower()
        if w not in self._stems:
            got = self.analyzer(w)
            self._stems[w] = got[0] if got else None
        return self._stems[w]

    def hit(self, rank: int, unit: str, score: float, chunk: str | None, terms: frozenset[str]) -> Hit:
        row = self.rows.get(chunk or self.first.get(unit, ""))
        if row is None:
            return Hit(rank, unit, score, None, "", "")
        return Hit(rank, unit, score, None, self.window(row.text, terms), _where(row))

    def window(self, text: str, terms: frozenset[str], limit: int = SNIPPET_CHARS) -> str:
        """About ``limit`` characters of ``text`` around its first query term (whitespace collapsed)."""
        s = " ".join(str(text or "").split())
        first = next((m.start() for m in _WORD.finditer(s) if self.stem(m.group()) in terms), 0)
        start = 0 if first < limit // 3 else s.rfind(" ", 0, first - limit // 4) + 1
        out = s[start:]
        out = out if len(out) <= limit else out[: limit - 1].rstrip() + "\u2026"
        return ("\u2026" if start else "") + out

    def marked(self, text: str, terms: frozenset[str]) -> list[tuple[str, bool]]:
        """``text`` cut into (piece, is a query term): the words whose stem is a query term stand alone (the
        template marks them; every piece is escaped there)."""
        parts, pos = [], 0
        for m in _WORD.finditer(text):
            if self.stem(m.group()) in terms:
                parts += [(text[pos : m.start()], False), (m.group(), True)]
                pos = m.end()
        return [p for p in [*parts, (text[pos:], False)] if p[0]]


def _where(row: Any) -> str:
    return place(row.source, row.title, row.page)


# --------------------------------------------------------------------------- the explorer
class Explorer:
    """The saved runs, corpus, judgments and (on first free-text query) indexes of one dataset, kept warm."""

    def __init__(self, dp: DatasetPaths):
        self.dp = dp
        self.texts = _Texts(dp)
        self.table = corpus.load_queries(dp)
        self.by_text = {" ".join(t.lower().split()): q for q, t in self.table.items()}
        files = runs.discover_runs(dp.runs_dir) if dp.runs_dir.is_dir() else {}
        if not files:
            raise corpus.StageMissing(f"no run files in {dp.runs_dir}: run the chain first (make report, or "
                                      "notebooks 01-05); the explorer reads their saved outputs")
        self.runs = {v: runs.read_trec(p) for v, p in files.items()}
        self.best = {v: runs.best_chunks(runs.read_trec(dp.chunk_run_file(v)), self.texts.unit_of)
                     for v in files if dp.chunk_run_file(v).exists()}
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
        now = explore_queue.judgments_signature(self.dp)
        if self._qrels is not None and now != self._signature:
            self._notes.append(explore_queue.changed_note(self.dp))
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
        return Exploration(self.dp.name, text, qid, qid is None, k, columns, gold, ledger, terms,
                           time.perf_counter() - t0, lambda s: self.texts.marked(s, terms), note)

    def _best(self, v: str) -> dict[str, dict[str, str]]:
        """qid -> unit -> the chunk that brought it in: the variant's chunk run, else (a reranker without one)
        the hybrid run's, whose best chunk is the passage the reranker saw."""
        return self.best.get(v) or (self.best.get(HYBRID, {}) if v in RERANKED else {})

    def _column(self, v: str, run: Mapping[str, float], best: Mapping[str, str], why: str, terms: frozenset[str],
                k: int, gold: Mapping[str, int], hybrid: Mapping[str, float]) -> Column:
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
            self._live = LiveSearch(self.dp, self.texts.unit_of, say=lambda m: self.say(m))
        return self._live

    def judge(self, qid: str, unit_id: str, grade: int, replace: bool = False) -> str:
        """Record a grade (see :func:`rerankeval.evaluate.judgments.record`); shown at once, merged by the next 05."""
        out = judgments.record(self.dp, qid, unit_id, grade, replace=replace)
        self._qrels = None
        note = explore_queue.unretrieved_note(self.runs, qid, unit_id)
        return f"{out} ({note})" if note else out

    def next_to_judge(self, n: int = 5, mode: str = "queue", seed: int = 0) -> NextUnits:
        """The next ``n`` units to judge and the status of each comparison (:mod:`.explore_queue`)."""
        return explore_queue.next_units(self, n, mode, seed)

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
    rows = ledger[(ledger.qid == qid) & (ledger["pass"] == "main")]
    return rows.iloc[0].to_dict() if len(rows) else None


def _llm_scores(dp: DatasetPaths) -> dict[str, dict[str, float]]:
    """qid -> unit -> the reranker's own score in stage 04's main pass (``rerank/candidates.csv``), or {}."""
    if not dp.rerank_candidates.is_file():
        return {}
    df = corpus.read_table(dp.rerank_candidates, ids=("qid", "docid", "pass"))
    df = df[(df["pass"] == "main") & df.llm_score.notna()]
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


# --------------------------------------------------------------------------- one explorer per dataset
_EXPLORERS: dict[str, Explorer] = {}


def explorer(dp: DatasetPaths, reload: bool = False) -> Explorer:
    """The dataset's explorer, created on first use and kept (warm) for the session; ``reload`` re-reads the
    saved runs (after the chain ran again)."""
    key = str(dp.root)
    if reload and key in _EXPLORERS:
        _EXPLORERS.pop(key).close()
    if key not in _EXPLORERS:
        _EXPLORERS[key] = Explorer(dp)
    return _EXPLORERS[key]


def show(dp: DatasetPaths, query: str, k: int = 10, say: Callable[[str], None] | None = None) -> Exploration:
    """Every variant's top ``k`` for ``query`` side by side (displays as HTML in a notebook); ``say`` hears each
    step of a live search (e.g. ``say=print``)."""
    return explorer(dp).show(query, k, say)


def judge(dp: DatasetPaths, qid: str, unit_id: str, grade: int, replace: bool = False) -> str:
    """Record ``grade`` for a shown unit into ``dp.judgments(split)``; the next ``make report`` merges it."""
    if str(dp.root) in _EXPLORERS:
        return _EXPLORERS[str(dp.root)].judge(qid, unit_id, grade, replace)
    out = judgments.record(dp, qid, unit_id, grade, replace=replace)
    saved = runs.discover_runs(dp.runs_dir) if dp.runs_dir.is_dir() else {}
    note = explore_queue.unretrieved_note({v: runs.read_trec(p) for v, p in saved.items()}, qid, unit_id)
    return f"{out} ({note})" if note else out


def next_to_judge(dp: DatasetPaths, n: int = 5, mode: str = "queue", seed: int = 0) -> NextUnits:
    """The next ``n`` units to judge, from the saved runs and the qrels with the explorer's judgments (nothing is
    re-run): ``mode="queue"`` the units that move an undecided comparison most (with why), ``"sample"`` the next
    units of a random sample for prediction-powered intervals; and one status line per comparison ("hybrid vs
    vector: undecided — at most 23 judgments could decide it; 6 done"). See :mod:`.explore_queue`."""
    return explorer(dp).next_to_judge(n, mode, seed)


def drafts(dp: DatasetPaths) -> pd.DataFrame:
    """The drafted questions (``queries.draft.jsonl``) with their review status; prints the review progress."""
    from rerankeval.questions import review as review_mod

    log.info(review_mod.progress(dp, judged=len(judgments.read_judgments(dp.judgments(judgments.split_of(dp))))))
    return review_mod.table(dp)


def review(dp: DatasetPaths, qid: str, action: str, text: str | None = None) -> str:
    """Accept, edit (``text=``, then accepted) or reject a drafted question; what was recorded and the progress.
    Units that also answer it are graded with :func:`judge`."""
    from rerankeval.questions import review as review_mod

    d = review_mod.review(dp, qid, action, text)
    return (f"{qid}: {d.status} ({d.text!r}); {review_mod.progress(dp)}. The next make report evaluates the "
            f"reviewed set.")


def promote(dp: DatasetPaths) -> str:
    """Move the accepted (and edited) drafts into ``queries.jsonl`` and the human qrels (see
    :func:`rerankeval.questions.review.promote`); after it the dataset has human questions, so the drafts not
    reviewed yet are no longer evaluated. A second call adds nothing."""
    from rerankeval.questions import review as review_mod

    return review_mod.promote(dp, judgments.split_of(dp))


def add_question(dp: DatasetPaths, text: str, relevant: Sequence[str] | Mapping[str, int]) -> str:
    """Add a free-text question to the dataset's ``queries.jsonl`` under the next id (``dm-061`` after ``dm-060``),
    with its grades appended to ``qrels/<split>.tsv``: ``relevant`` is a list of unit ids (each given the top grade
    of the dataset's scale) or ``{unit_id: grade}``. Lines already there are never rewritten; the next ``make
    report`` evaluates the question. What was written, as a sentence."""
    from rerankeval.corpus import queryset

    question = " ".join(str(text or "").split())
    if not question:
        raise ValueError("add_question needs the question's text: add_question(dp, 'how do I ...', relevant=[...])")
    top = judgments.grade_scale(corpus.load_qrels(dp))
    given = dict(relevant) if isinstance(relevant, Mapping) else {u: top for u in relevant}
    grades = {str(u): judgments.as_grade(g, top) for u, g in given.items()}
    if not any(grades.values()):
        raise ValueError("add_question needs at least one relevant unit (grade above 0), e.g. relevant="
                         "['debian-faq.en.pdf#p12']: a question with no relevant unit is not evaluated")
    units = set(corpus.unit_of(dp).values())
    for u in grades:
        if u not in units:
            raise ValueError(f"{judgments.unknown_unit(dp, u, units)}; give unit ids the explorer shows")
    split = judgments.split_of(dp)
    had_human = queryset.query_source(dp, split).kind == queryset.HUMAN
    meta = {"source": "explorer", "added_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    qid = queryset.append_human(dp, [{"_id": None, "text": question, "metadata": meta}], {None: grades}, split)[0]
    tail = "" if had_human else (" The dataset now has human questions, which win over drafts: the drafts are no "
                                 "longer evaluated (promote the accepted ones with explore.promote(dp)).")
    return (f"{qid} added to {dp.source_queries} with {len(grades)} grade(s) in {dp.source_qrels(split)}; the next "
            f"make report evaluates it (then explore.show(dp, {qid!r})).{tail}")


def draft_source(dp: DatasetPaths, qid: str) -> str:
    """The unit a drafted question was written from, and its text (to check the question against)."""
    from rerankeval.questions import review as review_mod

    unit, text = review_mod.source_passage(dp, qid)
    return f"{unit}: {text}"


def judging_table(dp: DatasetPaths) -> pd.DataFrame | str:
    """Judged@k per variant and the size of the review pool, as stage 05 recorded them (or why not yet)."""
    summary = read_summary(dp)
    j = summary.judging if summary else {}
    if not j.get("judged_at_k"):
        return "No Judged@k yet: 05-analyse records it (make report)."
    merged = j.get("judgments") or {}
    table = pd.Series(j["judged_at_k"], name=f"Judged@{j['k']}").rename_axis("variant").to_frame()
    table["unjudged units in the pool (all variants)"] = j.get("unjudged_units")
    table["grades merged from the judgments file"] = merged.get("merged", 0)
    return table


def widget(dp: DatasetPaths, k: int = 10) -> Any:
    """The ipywidgets explorer: a text box (and Search), a dropdown of queries, one status line, the view with a
    row of grade buttons (0 to the dataset's top grade) under each hit of a query id, unjudged hits marked, and
    "answers it" under each hit of free text (added as a question). Without ipywidgets (or inside a chain run) a
    Markdown message says how to call :func:`show`."""
    return explore_widget.widget(dp, k, explorer, add_question)
