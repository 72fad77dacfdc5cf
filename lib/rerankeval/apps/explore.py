"""The explorer: one query, every variant's top k side by side (notebook ``00-explore``, what ``make lab`` opens).

::

    from rerankeval.apps import explore
    from rerankeval.core import paths
    dp = paths.resolve_dataset("debian-manuals")
    explore.show(dp, "how do I change the keyboard layout", k=10)   # free text: a live search
    explore.show(dp, "q12")                                          # a judged query: its saved runs
    explore.judge(dp, "q12", "debian-handbook.pdf#p33", 2)           # a grade, merged by the next make report

Each column is one variant: rank, score, unit id, a snippet with the query's terms highlighted (every text
HTML-escaped), the grade when the query is judged (``?`` marks a unit nobody judged), and for the rerankers
(``hybrid_rerank``, ``cross_encoder``) each unit's rank in the fused ``hybrid`` list before reranking. The
reranker's ledger row (status, repairs, retries, latency, cache) is shown above the columns.

- A query id of ``queries.jsonl`` (or its exact text) shows the **saved** run files of stages 03/04 and the
  ledger row of stage 04: nothing is recomputed.
- Free text is searched through the same :class:`rerankeval.retrieve.stage.Retriever` over the **saved** indexes of
  stage 02 (never rebuilt: missing indexes are an error saying to run 02), with each variant's recorded
  parameters; the ``hybrid_rerank`` column goes through the same cached LLM reranker as stage 04
  (:meth:`rerankeval.rerank.Reranker.rerank_query`, with the configuration 04 recorded). When no LLM endpoint is
  configured or it does not answer, that column is shown as unavailable; the rest still works.

:class:`Explorer` keeps the loaded runs, corpus and indexes between queries (a warm query costs only its own
search); :func:`show` and :func:`judge` use one explorer per dataset. :func:`widget` is the ipywidgets UI (a
text box, a dropdown of judged and example queries, and a grade button), when ipywidgets is installed.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from rerankeval.core import runs
from rerankeval.core.names import CROSS_ENCODER, HYBRID, HYBRID_RERANK
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.runs import Run, ranked
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate import judgments, metrics
from rerankeval.report.htmlsafe import SNIPPET_CHARS, esc

RERANKED = (HYBRID_RERANK, CROSS_ENCODER)  # columns that show each unit's hybrid rank before reranking
FREE_QID = "free-text"
_WORD = re.compile(r"\w+")


@dataclass
class Hit:
    rank: int
    unit_id: str
    score: float
    grade: int | None  # None: no judgment for this (query, unit)
    snippet: str  # plain text
    where: str  # source file, title, page
    before: int | None = None  # rank in the hybrid list (reranked columns)


@dataclass
class Column:
    variant: str
    hits: list[Hit] = field(default_factory=list)
    unavailable: str = ""  # why the column is empty (no index, no LLM endpoint ...)


@dataclass(repr=False)
class Exploration:
    """One query across every variant; ``_repr_html_`` renders it (escaped), :meth:`frame` as a table."""

    dataset: str
    query: str
    qid: str | None  # None: free text
    live: bool  # True: searched now; False: read from the saved runs
    k: int
    columns: list[Column]
    gold: dict[str, int]  # the query's judgments (empty: none)
    ledger: dict[str, Any] | None  # the reranker's ledger row for this query
    terms: frozenset[str]
    seconds: float
    mark: Callable[[str], str] | None = field(default=None, repr=False)  # escaped text with query terms marked

    def frame(self) -> pd.DataFrame:
        """One row per variant and rank: variant, rank, unit_id, score, grade, rank_before, snippet."""
        rows = [[c.variant, h.rank, h.unit_id, h.score, h.grade, h.before, h.snippet] for c in self.columns
                for h in c.hits]
        return pd.DataFrame(rows, columns=["variant", "rank", "unit_id", "score", "grade", "rank_before", "snippet"])

    def _repr_html_(self) -> str:
        return render_html(self)

    def __repr__(self) -> str:
        return (f"<Exploration of {self.qid or 'free text'} in {self.dataset}: {len(self.columns)} variants, "
                f"top {self.k}>")


# --------------------------------------------------------------------------- snippets and highlighting
class _Texts:
    """Chunk texts and places, the first chunk of each unit, and the query-term analyser (stems)."""

    def __init__(self, dp: DatasetPaths):
        from rerankeval.index.bm25 import Analyzer

        df = corpus.load_chunks(dp)
        self.rows = {r.chunk_id: r for r in df.itertuples(index=False)}
        self.unit_of = dict(zip(df.chunk_id, df.unit_id, strict=True))
        first = df.sort_values(["unit_id", "start"], kind="stable").drop_duplicates("unit_id")
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

    def marked(self, text: str, terms: frozenset[str]) -> str:
        """``text`` HTML-escaped, the words whose stem is a query term wrapped in ``<mark>``."""
        parts, pos = [], 0
        for m in _WORD.finditer(text):
            if self.stem(m.group()) in terms:
                parts += [esc(text[pos : m.start()]), f"<mark>{esc(m.group())}</mark>"]
                pos = m.end()
        return "".join(parts) + esc(text[pos:])


def _where(row: Any) -> str:
    page = row.page
    page = None if page is None or (isinstance(page, float) and math.isnan(page)) else int(page)
    parts = [str(x) for x in (row.source, row.title) if x and not (isinstance(x, float) and math.isnan(x))]
    return " \u00b7 ".join(parts + ([f"p.{page}"] if page is not None else []))


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
        self._qrels: runs.Qrels | None = None
        self._live: LiveSearch | None = None  # opened on the first free-text query

    @property
    def qrels(self) -> runs.Qrels:
        """The qrels with the grades recorded while exploring (re-read after :meth:`judge`)."""
        if self._qrels is None:
            self._qrels = judgments.merged_qrels(self.dp, corpus.load_qrels(self.dp))[0]
        return self._qrels

    def resolve(self, query: str) -> str | None:
        """The query id ``query`` names (an id of queries.jsonl, or exactly its text), else None (free text)."""
        q = str(query).strip()
        return q if q in self.table else self.by_text.get(" ".join(q.lower().split()))

    def show(self, query: str, k: int = 10) -> Exploration:
        """Every variant's top ``k`` for ``query`` (a query id, or free text): see the module docstring."""
        t0 = time.perf_counter()
        if not str(query).strip():
            raise ValueError("empty query: type a question, or give a query id of queries.jsonl")
        qid = self.resolve(query)
        text = self.table[qid] if qid else str(query).strip()
        terms = self.texts.terms(text)
        if qid is not None:
            found = {v: (run.get(qid, {}), self._best(v).get(qid, {}), "") for v, run in self.runs.items()}
            ledger = _ledger_row(self.ledger, qid)
        else:
            found, ledger = self.live().search(text, list(self.runs))
        gold = dict(self.qrels.get(qid, {})) if qid else {}
        hybrid = found.get(HYBRID, ({}, {}, ""))[0]
        columns = [self._column(v, *found[v], terms, k, gold, hybrid) for v in self.runs if v in found]
        return Exploration(self.dp.name, text, qid, qid is None, k, columns, gold, ledger, terms,
                           time.perf_counter() - t0, lambda s: self.texts.marked(s, terms))

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
            self._live = LiveSearch(self.dp, self.texts.unit_of)
        return self._live

    def judge(self, qid: str, unit_id: str, grade: int, replace: bool = False) -> str:
        """Record a grade (see :func:`rerankeval.evaluate.judgments.record`); shown at once, merged by the next 05."""
        out = judgments.record(self.dp, qid, unit_id, grade, replace=replace)
        self._qrels = None
        return out

    def examples(self, n: int = 3) -> list[str]:
        """The diff view's largest changes: the ``n`` queries whose headline metric moves most between hybrid
        and hybrid_rerank (per_query.csv of stage 05); the first judged queries when 05 has not run."""
        return example_queries(self.dp, n) or [q for q in self.table if q in self.qrels][:n]

    def close(self) -> None:
        if self._live is not None:
            self._live.close()
            self._live = None


_OPEN: weakref.WeakSet[LiveSearch] = weakref.WeakSet()  # live searches whose store is open


@atexit.register
def close_all() -> None:
    """Close every open live search (its embedded Qdrant store). Registered with :mod:`atexit`: a plain script
    that called :func:`show` with free text would otherwise leave the store to ``QdrantClient.__del__`` at
    interpreter shutdown, which prints an ``ImportError: sys.meta_path is None`` traceback."""
    for live in list(_OPEN):
        live.close()


def _ledger_row(ledger: pd.DataFrame | None, qid: str) -> dict[str, Any] | None:
    if ledger is None or ledger.empty:
        return None
    rows = ledger[(ledger.qid == qid) & (ledger["pass"] == "main")]
    return rows.iloc[0].to_dict() if len(rows) else None


def example_queries(dp: DatasetPaths, n: int = 3, pair: Sequence[str] = (HYBRID, HYBRID_RERANK)) -> list[str]:
    """Up to ``n`` query ids with the largest headline change between ``pair`` (as 05's diff view), or []."""
    if not dp.per_query_csv.exists():
        return []
    from rerankeval.evaluate.analyse import read_summary

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


def show(dp: DatasetPaths, query: str, k: int = 10) -> Exploration:
    """Every variant's top ``k`` for ``query`` side by side (displays as HTML in a notebook)."""
    return explorer(dp).show(query, k)


def judge(dp: DatasetPaths, qid: str, unit_id: str, grade: int, replace: bool = False) -> str:
    """Record ``grade`` for a shown unit into ``dp.judgments(split)``; the next ``make report`` merges it."""
    if str(dp.root) in _EXPLORERS:
        return _EXPLORERS[str(dp.root)].judge(qid, unit_id, grade, replace)
    return judgments.record(dp, qid, unit_id, grade, replace=replace)


def judging_table(dp: DatasetPaths) -> pd.DataFrame | str:
    """Judged@k per variant and the size of the review pool, as stage 05 recorded them (or why not yet)."""
    from rerankeval.evaluate.analyse import read_summary

    summary = read_summary(dp)
    j = summary.judging if summary else {}
    if not j.get("judged_at_k"):
        return "No Judged@k yet: 05-analyse records it (make report)."
    merged = j.get("judgments") or {}
    table = pd.Series(j["judged_at_k"], name=f"Judged@{j['k']}").rename_axis("variant").to_frame()
    table["unjudged units in the pool (all variants)"] = j.get("unjudged_units")
    table["grades merged from the judgments file"] = merged.get("merged", 0)
    return table


# --------------------------------------------------------------------------- HTML
STYLE = """<style>
.rre-x{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;font-size:13px;margin:0 0 1.4em 0}
.rre-x .q{background:#f4f6f8;border-left:4px solid #4c72b0;padding:.4em .6em;margin:.6em 0}
.rre-x .cols{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
.rre-x .col{flex:1 1 300px;min-width:280px;max-width:100%}
.rre-x h4{margin:.4em 0 .2em 0;font-size:14px}
.rre-x table{border-collapse:collapse!important;width:100%!important;table-layout:fixed!important}
.rre-x td,.rre-x th{border:none!important;border-bottom:1px solid #ddd!important;padding:3px 5px!important;
 vertical-align:top!important;text-align:left!important;overflow-wrap:anywhere;white-space:normal!important;
 background:#fff!important}
.rre-x th{background:#eef1f4!important}
.rre-x .rk{width:2.2em!important;text-align:right!important}
.rre-x .g{width:3.8em!important}
.rre-x tr.gold td{background:#e3f4e1!important}
.rre-x tr.gold td.g{font-weight:bold;color:#1b6e1b}
.rre-x .unit{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.rre-x .mv{color:#666;font-size:11px}
.rre-x .snip{color:#333;font-size:12px}
.rre-x mark{background:#fff3a3;padding:0}
.rre-x .na{color:#a33}
</style>"""


def _ledger_html(row: Mapping[str, Any] | None) -> str:
    if not row:
        return ""
    repairs = sum(int(row.get(c) or 0) for c in ("n_invalid", "n_duplicate", "n_missing"))
    status = str(row.get("status", ""))
    parts = [f"status <b class=\"{'na' if status != 'ok' else ''}\">{esc(status)}</b>", f"repairs {repairs}",
             f"failed calls {esc(row.get('n_failed', 0))}", f"retries {esc(row.get('retries', 0))}",
             f"latency {float(row.get('latency_s') or 0):.2f} s",
             f"LLM calls {esc(row.get('llm_calls', 0))} ({esc(row.get('cache_hits', 0))} from the cache)",
             f"model {esc(row.get('model', ''))}"]
    err = f"; errors: {esc(row['error'])}" if row.get("error") else ""
    return f'<div class="mv">{HYBRID_RERANK} ledger: {", ".join(parts)}{err}</div>'


def _column_html(c: Column, x: Exploration) -> str:
    if c.unavailable:
        return (f'<div class="col"><h4>{esc(c.variant)}</h4><div class="na">unavailable: {esc(c.unavailable)}'
                "</div></div>")
    rows = []
    for h in c.hits:
        g = "" if h.grade is None else (f"gold {h.grade}" if h.grade > 0 else "0")
        g = "?" if h.grade is None and x.gold else g
        snip = x.mark(h.snippet) if x.mark else esc(h.snippet)
        before = "" if h.before is None else f" \u00b7 hybrid #{h.before}"
        rows.append(f'<tr class="{"gold" if (h.grade or 0) > 0 else ""}"><td class="rk">{h.rank}</td>'
                    f'<td class="g">{esc(g)}</td><td><span class="unit">{esc(h.unit_id)}</span> '
                    f'<span class="mv">score {h.score:.4g}{esc(before)}</span><br><span class="mv">{esc(h.where)}'
                    f'</span><div class="snip">{snip}</div></td></tr>')
    judged = sum(h.grade is not None for h in c.hits)
    cov = f" \u00b7 Judged@{x.k} {judged / len(c.hits):.2f}" if x.gold and c.hits else ""
    body = "".join(rows) or '<tr><td colspan="3" class="na">no results</td></tr>'
    return (f'<div class="col"><h4>{esc(c.variant)} <span class="mv">{esc(cov)}</span></h4><table><thead><tr>'
            f'<th class="rk">#</th><th class="g">grade</th><th>unit / snippet</th></tr></thead><tbody>{body}'
            "</tbody></table></div>")


def render_html(x: Exploration) -> str:
    """The side-by-side view of ``x`` as static HTML (every text escaped, query terms marked)."""
    how = "live search over the saved indexes" if x.live else "the saved runs of stages 03/04"
    judged = (f"{len(x.gold)} judged units ({sum(g > 0 for g in x.gold.values())} relevant); ? = not judged"
              if x.gold else "no judgments for this query")
    head = (f'<div class="q"><b>{esc(x.qid or "free text")}</b>: {esc(x.query)}<br><span class="mv">'
            f"{esc(x.dataset)} \u00b7 top {x.k} from {esc(how)} \u00b7 {esc(judged)} \u00b7 {x.seconds:.2f} s"
            f"</span>{_ledger_html(x.ledger)}</div>")
    cols = "".join(_column_html(c, x) for c in x.columns)
    return f'{STYLE}<div class="rre-x">{head}<div class="cols">{cols}</div></div>'


def widget(dp: DatasetPaths, k: int = 10) -> Any:
    """The ipywidgets explorer: a text box and a dropdown of queries, the view, and a grade button for a shown
    unit of a judged query. Without ipywidgets (or inside a chain run) it says how to call :func:`show`."""
    try:
        import ipywidgets as w
    except ImportError:
        return ("ipywidgets is not installed: call explore.show(dp, query, k) and explore.judge(dp, qid, unit_id, "
                "grade) instead (or pip install ipywidgets for the interactive explorer).")
    if in_chain():
        return "Interactive explorer: open this notebook in JupyterLab (make lab)."
    ex = explorer(dp)
    picks = [(f"{q}: {ex.table[q][:70]}", q) for q in dict.fromkeys(ex.examples(5) + list(ex.table))]
    text = w.Text(placeholder="type a question, or a query id, and press Enter", layout=w.Layout(width="60%"),
                  continuous_update=False)
    pick = w.Dropdown(options=[("(pick a query)", "")] + picks, layout=w.Layout(width="60%"))
    depth = w.BoundedIntText(value=k, min=1, max=100, description="k")
    out, status = w.Output(), w.HTML()
    scale = list(range(judgments.grade_scale(corpus.load_qrels(dp)) + 1))  # the dataset's grades, 0 to its top
    unit, grade = w.Dropdown(description="unit", options=[]), w.Dropdown(description="grade", options=scale)
    record = w.Button(description="Record grade", disabled=True)
    state: dict[str, Any] = {}

    def run(query: str) -> None:
        out.clear_output()
        with out:
            try:
                x = state["x"] = ex.show(query, depth.value)
            except (ValueError, FileNotFoundError) as exc:
                print(exc)
                return
            from IPython.display import display

            display(x)
        unit.options = list(dict.fromkeys(h.unit_id for c in x.columns for h in c.hits))
        record.disabled = x.qid is None
        status.value = "" if x.qid else "free text: add the query to queries.jsonl to judge its units"

    def on_record(_: Any) -> None:
        x = state["x"]
        try:
            done = esc(f"{ex.judge(x.qid, unit.value, int(grade.value))}: {x.qid} / {unit.value} = {grade.value} "
                       "(merged into the qrels by the next make report)")
        except ValueError as exc:  # JudgmentConflict included: shown, nothing overwritten
            done = f'<span style="color:#a33">{esc(exc)}</span>'
        run(x.qid)
        status.value = done

    text.observe(lambda ch: ch["new"].strip() and run(ch["new"]), names="value")
    pick.observe(lambda ch: ch["new"] and run(ch["new"]), names="value")
    record.on_click(on_record)
    return w.VBox([text, pick, depth, out, w.HBox([unit, grade, record]), status])


def in_chain() -> bool:
    """True inside a chain run (papermill): no interactive UI is drawn there."""
    from rerankeval.core.progress import STAGE_ENV

    return bool(os.environ.get(STAGE_ENV, "").strip())


# --------------------------------------------------------------------------- free text: a live search
class LiveSearch:
    """Free-text search through stage 03's :class:`~rerankeval.retrieve.stage.Retriever` over the saved indexes, with
    each variant's recorded parameters, and stage 04's cached LLM reranker with its recorded configuration."""

    def __init__(self, dp: DatasetPaths, unit_of: Mapping[str, str]):
        from rerankeval.retrieve.stage import Retriever

        self.dp, self.unit_of = dp, unit_of
        try:
            self.retriever = Retriever(dp, progress=False)
        except FileNotFoundError as exc:  # StageMissing: no index manifest, or one built from other chunks
            raise corpus.StageMissing(
                f"free-text search needs the saved indexes of {dp.name}, and they are missing or stale ({exc}). "
                f"Fix: run the chain up to 02 (make report DATASET={dp.name}, or python -m rerankeval.chain "
                f"--dataset {dp.name} --only 01 --only 02); the explorer never builds indexes. Query ids of "
                "queries.jsonl still work: they read the saved runs.") from None
        self._ce: Any = None
        _OPEN.add(self)

    def _params(self, v: str) -> dict[str, Any]:
        import json

        rec = self.dp.variant_record(v)
        got = json.loads(rec.read_text(encoding="utf-8")) if rec.exists() else {}
        return {k: got[k] for k in ("leg_k", "pool_k", "rrf_k", "weights") if got.get(k) is not None}

    def _retrieve(self, v: str, text: str) -> tuple[Run, dict[str, str], str]:
        from rerankeval.retrieve.stage import VARIANTS

        if v not in VARIANTS:
            return {}, {}, "a run from another system: only its saved queries can be shown (give a query id)"
        kw: dict[str, Any] = {}
        if v == CROSS_ENCODER:
            kw["cross_encoder"] = self._cross_encoder()
            if kw["cross_encoder"] is None:
                return {}, {}, "no cross-encoder weights on this machine (see 03-retrieve)"
        res = self.retriever.search(v, {FREE_QID: text}, **self._params(v), **kw)
        return res.run.get(FREE_QID, {}), runs.best_chunks(res.chunk_run, self.unit_of).get(FREE_QID, {}), ""

    def _cross_encoder(self) -> Any:
        if self._ce is None:
            from rerankeval.retrieve import cross_encoder

            found = cross_encoder.find_cross_encoder(None)
            self._ce = cross_encoder.load_cross_encoder(found) if found is not None else False
        return self._ce or None

    def search(self, text: str, variants: Sequence[str]) -> tuple[dict[str, tuple[Run, dict, str]], dict | None]:
        """variant -> (unit scores, unit -> best chunk, why unavailable) for ``text``; the reranker's ledger row."""
        found = {v: self._retrieve(v, text) for v in dict.fromkeys([HYBRID, *variants]) if v != HYBRID_RERANK}
        ledger = None
        if HYBRID_RERANK in variants:
            run, why, ledger = self._rerank(text, *found[HYBRID][:2])
            found[HYBRID_RERANK] = (run, found[HYBRID][1], why)
        return found, ledger

    def _rerank(self, text: str, hybrid: Run, best: Mapping[str, str]) -> tuple[Run, str, dict | None]:
        """Stage 04's reranking of the hybrid pool for ``text`` (cached replies are free), or why not."""
        import json

        from rerankeval.llm.server import check_endpoint
        from rerankeval.rerank import Candidate, LLMCache, RerankConfig, Reranker, load_settings

        if not self.dp.rerank_summary.exists():
            return {}, "stage 04 has not run (no rerank summary): run 04-rerank first", None
        summary = json.loads(self.dp.rerank_summary.read_text(encoding="utf-8"))
        settings = load_settings()
        if not settings.configured:
            return {}, "no LLM endpoint configured: make lab starts one, or set OPENAI_BASE_URL in .env", None
        problem = check_endpoint(settings, timeout=3.0)
        if problem:
            return {}, problem, None
        cfg = {k: (tuple(v) if isinstance(v, list) else v) for k, v in summary["config"].items()}
        cfg.update(max_calls=0, max_cost=0.0)  # 04's run budget is not the explorer's (not in the cache key)
        pool_k = int(summary.get("pool_k") or len(hybrid))
        items = ranked(hybrid)
        pool = [Candidate(d, self.retriever.texts[best[d]], float(s), i) for i, (d, s) in enumerate(items[:pool_k])]
        with Reranker(RerankConfig(**cfg), settings=settings, cache=LLMCache()) as rr:
            res = rr.rerank_query(FREE_QID, text, pool)
        order = res.order + [d for d, _ in items[pool_k:]]
        return {d: 1.0 / (i + 1) for i, d in enumerate(order)}, "", res.row

    def close(self) -> None:
        self.retriever.close()
        _OPEN.discard(self)
