"""Ask: answers with citations from the top passages of one retrieval variant, and a check of each citation.

Typical use (what notebooks/07-ask.ipynb does)::

    from rerankeval import rerank
    from rerankeval.apps import ask
    from rerankeval.llm import server as llm_server
    dp = paths.resolve_dataset("debian-manuals")
    with llm_server.ensure_endpoint() as env:
        result = ask.answer(dp, [], settings=rerank.load_settings(env))   # 5 judged queries, the winner
    display(HTML(ask.answers_html(result)))

For each question the passages are the top ``k`` units of ``variant`` (default: the analysis' winner on
its headline metric, read from ``analyse/summary.json`` and ``metrics.csv``; ``hybrid`` when there is no
analysis). A judged query (given by id or by its exact text) is answered from the saved run file of that
variant, nothing recomputed; free text is searched with the :class:`~rerankeval.retrieve.stage.Retriever` over
the saved indexes (a variant the retriever cannot search, e.g. ``hybrid_rerank``, is replaced by
``hybrid`` for free text, with a note). Each passage is the text of the unit's best chunk in that
variant's chunk run (else the unit's first chunk), labelled ``file p.N`` (PDF) or by document id (BEIR).

The LLM gets the passages through the one cached call (:mod:`rerankeval.llm.call`: the reranker's client,
settings and content-addressed reply cache); its reply follows :class:`AnswerStrict` (answer, citations with label and
quote, ``not_in_documents``). An unreadable reply is re-asked ``content_retries`` times (the attempt is
part of the cache key, as in the reranker), then salvaged where possible (a cut-off JSON's answer and
complete citations; prose with ``[label]`` citations); otherwise the answer's status says why it failed.
Only a reply that reads is cached: an unusable one (even when salvaged) is asked again by the next run, and
a cached entry that does not read is replaced by a fresh reply. The checks are in
:mod:`rerankeval.apps.citations`; nothing is silent. What is written (``ask/answers.jsonl``, ``ask/summary.json``)
is redacted: a model that echoes a key it was shown does not put it on disk.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from rerankeval.apps import citations
from rerankeval.core import progress as progress_mod
from rerankeval.core import runs
from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl, sha256_json, sha256_text
from rerankeval.core.names import HYBRID
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings, load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.evaluate.analyse import read_summary
from rerankeval.llm import budget, schemas
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import AsksLLM, CachedLLM, Call, CallStats
from rerankeval.llm.client import LLMClient, Reply
from rerankeval.llm.repair import Unusable, parse
from rerankeval.llm.scrub import redact_tree
from rerankeval.report.htmlsafe import esc
from rerankeval.rerank import prompts
from rerankeval.rerank.stage import endpoint_kind

CACHE_VERSION = 1
DEFAULT_N = 5
NOT_IN_DOCS_TEXT = "not in the documents"

SYSTEM = "You answer questions from the passages you are given, and you cite the passages you use."
USER = (
    "Answer the question using only the passages below. Each passage starts with its label in square brackets.\n"
    "Cite each passage you use by its label, written exactly as shown (without the brackets), with a short quote "
    "copied word for word from that passage. If the passages do not contain the answer, set not_in_documents to "
    'true and answer "not in the documents".\n'
    'Reply only with JSON: {{"answer": "...", "citations": [{{"label": "...", "quote": "..."}}], '
    '"not_in_documents": false}}.\n\n'
    "Question: {question}\n\n"
    "{passages}\n\n"
    "Question: {question}\n"
    "JSON answer:"
)


# -- the reply: strict schema sent as response_format, lenient model to read it --
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CitationStrict(_Strict):
    label: str = Field(description="the passage's label, as shown in square brackets")
    quote: str = Field(description="a short span copied word for word from that passage")


class AnswerStrict(_Strict):
    answer: str
    citations: list[CitationStrict]
    not_in_documents: bool


class CitationReply(BaseModel):
    label: str = ""
    quote: str | None = None


class AnswerReply(BaseModel):
    answer: str = ""
    citations: list[CitationReply] = Field(default_factory=list)
    not_in_documents: bool = False


# -- inputs --
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


def winner(dp: DatasetPaths) -> str | None:
    """The analysis' best variant on its headline metric among those that answered every query, or None."""
    summary = read_summary(dp)
    if summary is None or not dp.metrics_csv.exists():
        return None
    table = corpus.read_table(dp.metrics_csv, ids=("variant",))  # a variant named "NA" or "null" is a name
    col = summary.headline_metric
    if "variant" not in table or col not in table or table[col].isna().all():
        return None
    full = table[~table.variant.map(lambda v: bool(summary.missing.get(v)))]
    table = full if len(full) else table
    return str(table.loc[table[col].idxmax(), "variant"])


def resolve_variant(dp: DatasetPaths, variant: str = "") -> tuple[str, str]:
    """(variant to use, a note saying where it comes from)."""
    if variant:
        return variant, f"variant {variant} (chosen)"
    best = winner(dp)
    if best:
        return best, f"variant {best}: the analysis' winner on its headline metric (05-analyse)"
    return HYBRID, f"variant {HYBRID}: no analysis yet (run 05-analyse to use its winner)"


def default_questions(dp: DatasetPaths, n: int = DEFAULT_N) -> list[Question]:
    """``n`` judged queries spread evenly over the judged queries sorted by id (deterministic)."""
    queries, qrels = corpus.load_queries(dp), corpus.load_qrels(dp)
    judged = sorted(q for q in queries if any(g > 0 for g in qrels.get(q, {}).values()))
    if n <= 0 or not judged:
        return []
    m = min(n, len(judged))  # steps of (len - 1) / (m - 1) >= 1: distinct picks, first and last included
    picks = [round(i * (len(judged) - 1) / max(1, m - 1)) for i in range(m)]
    return [Question(queries[judged[i]], judged[i]) for i in picks]


def to_questions(dp: DatasetPaths, questions: Sequence[str], n: int = DEFAULT_N) -> list[Question]:
    """Judged queries (named by id or exact text) keep their id; anything else is free text."""
    if not questions:
        return default_questions(dp, n)
    queries = corpus.load_queries(dp)
    by_text: dict[str, str] = {}
    for q, t in sorted(queries.items()):
        by_text.setdefault(citations.norm_text(t), q)
    out = []
    for item in questions:
        qid = item if item in queries else by_text.get(citations.norm_text(item))
        out.append(Question(queries[qid], qid) if qid else Question(str(item)))
    return out


def unit_label(unit: str, source: Any, page: Any) -> str:
    """``file p.N`` for a PDF page, the unit (document) id otherwise."""
    if isinstance(page, float) and math.isnan(page) or page is None or page == "":
        return unit
    return f"{source} p.{int(page)}"


# -- passages --
class PassageSource:
    """The top ``k`` passages of ``variant`` for judged (saved run) and free-text (retriever) questions."""

    def __init__(self, dp: DatasetPaths, variant: str, k: int, max_chars: int = 600, leg_k: int = 100):
        self.dp, self.variant, self.k, self.max_chars, self.leg_k = dp, variant, k, max_chars, leg_k
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
                raise corpus.StageMissing(f"{path} is missing: run the stage that writes the {variant} run "
                                          "(03-retrieve, or 04-rerank for hybrid_rerank), or pick another variant.")
            chunk_path = next((p for p in (self.dp.chunk_run_file(variant), self.dp.chunk_run_file(HYBRID))
                               if p.exists()), None)
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

    def free(self, texts: Mapping[str, str]) -> dict[str, list[Passage]]:
        """Search ``texts`` (key -> question) with the saved indexes."""
        from rerankeval.retrieve.stage import BASE_VARIANTS, Retriever

        variant = self.variant
        if variant not in BASE_VARIANTS:
            variant = HYBRID
            self.notes.append(f"free-text questions are searched with {HYBRID}: {self.variant} cannot search "
                              "new text here (it needs the LLM stage or a model)")
        with Retriever(self.dp, progress=False) as r:
            res = r.search(variant, texts, leg_k=self.leg_k)
        best = runs.best_chunks(res.chunk_run, self.unit_of)
        return {key: self._passages(res.run.get(key, {}), best.get(key, {})) for key in texts}

    def for_questions(self, questions: Sequence[Question]) -> list[list[Passage]]:
        free = {f"free-{i}": q.text for i, q in enumerate(questions) if q.qid is None}
        found = self.free(free) if free else {}
        return [self.judged(q.qid) if q.qid else found[f"free-{i}"] for i, q in enumerate(questions)]


def messages(question: str, passages: Sequence[Passage]) -> list[dict[str, str]]:
    body = "\n\n".join(f"[{p.label}] {p.text}" for p in passages)
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": USER.format(question=question, passages=body)}]


def template_hash() -> str:
    return sha256_json([SYSTEM, USER])


# -- reading a reply --
def _read_answer(reply: Reply) -> AnswerReply:
    return read_reply(reply.content)


def read_reply(content: str) -> AnswerReply:
    """The reply as :class:`AnswerReply`; raises :class:`Unusable` (caller re-asks, then salvages)."""
    obj = cast(AnswerReply, parse(content, AnswerReply)[0])
    if not obj.answer.strip() and not obj.citations and not obj.not_in_documents:
        raise Unusable("EmptyAnswer", "the reply has no answer, no citation and no not_in_documents flag")
    return obj


_ANSWER = re.compile(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)', re.S)
_BRACKETED = re.compile(r"\[([^\[\]\n]{1,200})\]")


def _json_string(raw: str) -> str:
    """A JSON string body that may be cut off mid-escape, decoded as far as it goes."""
    for end in range(len(raw), max(-1, len(raw) - 7), -1):
        try:
            return json.loads(f'"{raw[:end]}"')
        except json.JSONDecodeError:
            continue
    return raw


def salvage(content: str) -> AnswerReply | None:
    """What can be read from an unusable reply: a cut-off JSON's answer and complete citations, or prose
    whose ``[label]`` mentions are taken as citations; None when nothing is there."""
    body = (content or "").strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    m = _ANSWER.search(body)
    if m:
        tail = body[m.end():]
        cites = []
        for raw in re.findall(r"\{[^{}]*\}", tail):
            try:
                cites.append(CitationReply.model_validate(json.loads(raw)))
            except (json.JSONDecodeError, ValueError):
                continue
        flag = bool(re.search(r'"not_in_documents"\s*:\s*true', body))
        return AnswerReply(answer=_json_string(m.group(1)), citations=cites, not_in_documents=flag)
    if body and not body.startswith(("{", "[")):
        return AnswerReply(answer=body, citations=[CitationReply(label=x) for x in _BRACKETED.findall(body)])
    return None


# -- answers and their checks --
@dataclass
class Answer:
    """One question's answer; ``status``: ok, repaired (salvaged from an unusable reply) or failed."""

    question: str
    qid: str | None
    passages: list[Passage]
    answer: str = ""
    citations: list[citations.Cited] = field(default_factory=list)
    not_in_documents: bool = False
    status: str = "ok"
    error: str = ""
    precision: float = math.nan  # citation precision against the qrels (judged questions)
    gold_cited: bool | None = None
    gold_given: bool | None = None  # a relevant unit was among the passages (judged questions)
    cached: bool = False

    @property
    def flagged(self) -> bool:
        """True when a citation is fabricated or its quote is not in the passage."""
        return citations.flagged(self.citations)


def checked(ans: Answer, reply: AnswerReply | None, qrels: Mapping[str, Mapping[str, int]]) -> Answer:
    """``ans`` with the reply's answer, its citations checked and, for a judged question, scored."""
    if ans.qid is not None and ans.qid in qrels:
        ans.gold_given = any(qrels[ans.qid].get(p.unit, 0) > 0 for p in ans.passages)
    if reply is None:
        return ans
    labels = {p.label: p.unit for p in ans.passages}
    texts = {p.unit: p.text for p in ans.passages}
    ans.answer = reply.answer
    ans.citations = citations.check_citations([(c.label, c.quote) for c in reply.citations], labels, texts)
    ans.not_in_documents = citations.says_not_in_documents(reply.answer, reply.not_in_documents)
    if ans.qid is not None and ans.qid in qrels:
        ans.precision = citations.citation_precision(ans.citations, qrels[ans.qid])
        ans.gold_cited = citations.gold_cited(ans.citations, qrels[ans.qid])
    return ans


class Asker(AsksLLM):
    """Asks one endpoint for cited answers through the reranker's client and reply cache (a context manager)."""

    def __init__(self, settings: Settings | None = None, cache: LLMCache | None = None,
                 client: LLMClient | None = None, *, max_tokens: int = 256, seed: int = 0, content_retries: int = 1,
                 timeout: float | None = None):
        if max_tokens < 16 or content_retries < 0:
            raise ValueError(f"need max_answer_tokens >= 16 and content_retries >= 0, got {max_tokens}/"
                             f"{content_retries}")
        self.settings = settings or load_settings()
        self.llm = CachedLLM.open(self.settings, cache, client, timeout=timeout)
        self.cache, self.client, self.model = self.llm.cache, self.llm.client, self.llm.model
        self.endpoint = self.llm.endpoint
        self.max_tokens, self.seed, self.content_retries = max_tokens, seed, content_retries
        self.stats = CallStats()  # of every answer this asker gave

    def material(self, question: str, passages: Sequence[Passage], max_tokens: int) -> dict[str, Any]:
        """Everything the reply depends on: its cache key."""
        return {
            "v": CACHE_VERSION, "task": "ask", "model": self.model, "endpoint": self.endpoint,
            "template": template_hash(), "schema": schemas.schema_hash(AnswerStrict),
            "gen": {"temperature": 0, "seed": self.seed, "max_tokens": max_tokens},
            "question": question, "passages": [[p.label, p.unit, sha256_text(p.text)] for p in passages],
        }

    def call(self, question: str, passages: Sequence[Passage], max_tokens: int) -> Call:
        """The call for one question (its messages, reply schema and cache key)."""
        return Call(messages(question, passages), self.material(question, passages, max_tokens), max_tokens,
                    response_format=schemas.response_format(AnswerStrict, "cited_answer"), seed=self.seed)

    def ask(self, q: Question, passages: list[Passage], qrels: Mapping[str, Mapping[str, int]]) -> Answer:
        """One question: ask, re-ask after an unusable reply (twice the tokens after a cut-off one), then
        salvage the last unusable reply (also when a re-ask fails); a failed first call fails the answer.
        A cached reply is used only when it reads; a fresh one is cached only then (:mod:`rerankeval.llm.call`)."""
        ans = Answer(q.text, q.qid, passages)
        label = f"question {q.qid}" if q.qid else "a free-text question"

        def reask(call: Call, reply: Reply) -> Call:
            return self.call(q.text, passages, call.max_tokens * 2) if reply.finish_reason == "length" else call

        got = self.llm.call(self.call(q.text, passages, self.max_tokens), _read_answer, self.stats,
                            retries=self.content_retries, label=label, reask=reask)
        ans.cached = got.cached
        if got.ok:
            return checked(ans, got.value, qrels)
        failure = [f"{got.failure.error_class}: {got.failure}"] if got.failure is not None else []
        salvaged = salvage(got.reply.content) if got.reply is not None else None
        ans.status, ans.error = ("repaired" if salvaged else "failed"), ";".join([*got.errors, *failure])
        return checked(ans, salvaged, qrels)

    def estimate(self, questions: Sequence[Question], passages: Sequence[list[Passage]]) -> budget.Plan:
        """Calls, cache hits and tokens before any call (first attempts only), as the reranker prints it."""
        s_per_token, source = self.llm.measured_rate()
        tasks, previous = [], ""
        for i, (q, ps) in enumerate(zip(questions, passages, strict=True)):
            call = self.call(q.text, ps, self.max_tokens)
            hit = self.cache.get(self.cache.key(call.material)) is not None
            tasks.append((q.qid or f"free-{i}", "ask", [budget.call_estimate(hit, call.prompt, previous,
                                                                               self.max_tokens)]))
            previous = call.prompt
        return budget.plan(tasks, price=(0.0, 0.0), max_calls=0, max_cost=0.0, s_per_token=s_per_token,
                           rate_source=source)


# -- one run over many questions --
@dataclass
class AskResult:
    answers: list[Answer]
    variant: str
    k: int
    notes: list[str]
    model: str  # the model id the endpoint answered with
    endpoint: str  # "local llama-server" or the endpoint's host
    plan: dict[str, Any]
    stats: CallStats

    def precision(self) -> tuple[float, int]:
        """(mean citation precision, number of judged answers with a citation it averages over)."""
        vals = [a.precision for a in self.answers if not math.isnan(a.precision)]
        return (sum(vals) / len(vals) if vals else math.nan), len(vals)

    def summary(self) -> dict[str, Any]:
        """Counts and the citation-precision figure (written to ``ask/summary.json``)."""
        prec, n = self.precision()
        judged = [a for a in self.answers if a.gold_cited is not None]
        return {
            "variant": self.variant, "k": self.k, "model": self.model, "endpoint": self.endpoint, "notes": self.notes,
            "questions": len(self.answers), "judged": len(judged),
            "status": {s: sum(a.status == s for a in self.answers) for s in ("ok", "repaired", "failed")},
            "flagged": sum(a.flagged for a in self.answers),
            "not_in_documents": sum(a.not_in_documents for a in self.answers),
            "citations": sum(len(a.citations) for a in self.answers),
            "citation_checks": {s: sum(c.status == s for a in self.answers for c in a.citations)
                                for s in (citations.OK, *citations.BAD)},
            "citation_precision": None if math.isnan(prec) else round(prec, 4), "precision_over": n,
            "gold_cited": sum(bool(a.gold_cited) for a in judged),
            "gold_given": sum(bool(a.gold_given) for a in self.answers),
        }


def answer(dp: DatasetPaths, questions: Sequence[str] = (), variant: str = "", k: int = 5, *, n: int = DEFAULT_N,
           max_answer_tokens: int = 256, max_passage_chars: int = 600, settings: Settings | None = None,
           cache: LLMCache | None = None, client: LLMClient | None = None, seed: int = 0, content_retries: int = 1,
           timeout: float | None = None, progress: bool = True) -> AskResult:
    """Answer ``questions`` (judged query ids or texts, or free text; empty: ``n`` judged queries) from the top
    ``k`` passages of ``variant`` (empty: the analysis' winner), with citations checked (module docstring).
    ``timeout``: seconds one answer may take (default: the settings' ``RERANK_TIMEOUT``)."""
    if k < 1:
        raise ValueError(f"k must be >= 1 (passages per question), got {k}")
    variant, note = resolve_variant(dp, variant)
    qs = to_questions(dp, questions, n)
    source = PassageSource(dp, variant, k, max_passage_chars)
    passages = source.for_questions(qs)
    qrels = corpus.load_qrels(dp)
    settings = settings or load_settings()
    with Asker(settings, cache, client, max_tokens=max_answer_tokens, seed=seed, content_retries=content_retries,
               timeout=timeout) as asker:
        plan = asker.estimate(qs, passages)
        if progress:
            print(f"{plan.message(priced=False)[:-1]}; the time is prompt processing only: writing up to "
                  f"{max_answer_tokens} tokens per answer comes on top.", flush=True)
        beat = progress_mod.Heartbeat(total=len(qs), unit="answer") if progress else progress_mod.QUIET
        asker.heartbeat = beat
        with beat:
            answers = [asker.ask(q, ps, qrels) for q, ps in zip(qs, passages, strict=True)]
        model, stats = asker.model, asker.stats
    return AskResult(answers, variant, k, [note, *source.notes], model, endpoint_kind(settings), plan.to_dict(),
                     stats)


def _cites_text(a: Answer) -> str:
    return "; ".join(f"[{c.label}] {c.status}" + (f': "{c.quote}"' if c.quote else "") for c in a.citations)


def answers_frame(result: AskResult) -> pd.DataFrame:
    """One row per answer: question, answer, checked citations, precision, flags, status."""
    rows = [{
        "qid": a.qid or "", "question": a.question, "answer": a.answer, "not_in_documents": a.not_in_documents,
        "citations": _cites_text(a), "flagged": a.flagged, "citation_precision": a.precision,
        "gold_cited": a.gold_cited, "gold_given": a.gold_given, "status": a.status, "error": a.error,
        "cached": a.cached,
    } for a in result.answers]
    return pd.DataFrame(rows, columns=["qid", "question", "answer", "not_in_documents", "citations", "flagged",
                                       "citation_precision", "gold_cited", "gold_given", "status", "error",
                                       "cached"])


def write_answers(dp: DatasetPaths, result: AskResult) -> dict[str, Path]:
    """``ask/answers.jsonl`` (one answer per line, with its passages and checks) and ``ask/summary.json``, their
    text redacted (an answer may echo a key the model was shown)."""
    stage = dp.stage_dir("ask")
    rows = [{**{k: v for k, v in asdict(a).items() if k != "cached"},
             "precision": None if math.isnan(a.precision) else a.precision, "flagged": a.flagged}
            for a in result.answers]
    return {"answers": atomic_write_jsonl(stage / "answers.jsonl", redact_tree(rows)),
            "summary": atomic_write_json(stage / "summary.json", redact_tree(result.summary()))}


# -- the table, escaped --
STYLE = """
<style>
.rre-ask{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;font-size:13px;margin:0 0 1.2em 0}
.rre-ask table{border-collapse:collapse!important;width:100%!important;table-layout:fixed!important}
.rre-ask th,.rre-ask td{border:none!important;border-bottom:1px solid #ddd!important;padding:4px 6px!important;
 vertical-align:top!important;text-align:left!important;overflow-wrap:anywhere;white-space:normal!important;
 background:#fff!important}
.rre-ask th{background:#eef1f4!important}
.rre-ask tr.flag td{background:#fde8e8!important}
.rre-ask .bad{color:#b00020;font-weight:bold}
.rre-ask .ok{color:#1b6e1b;font-weight:bold}
.rre-ask .nid{color:#8a5a00;font-style:italic}
.rre-ask .mv{color:#666;font-size:11px}
.rre-ask .n{width:6em!important}
</style>
"""


def _cite_html(c: citations.Cited) -> str:
    ok = c.status == citations.OK
    mark = '<span class="ok">\u2713</span>' if ok else f'<span class="bad">\u2717 {esc(c.status)}</span>'
    quote = f' <span class="mv">\u201c{esc(c.quote)}\u201d</span>' if c.quote else ""
    return f"<div>{mark} [{esc(c.label)}]{quote}</div>"


def _row_html(a: Answer) -> str:
    nid = '<div class="nid">not in the documents</div>' if a.not_in_documents else ""
    status = a.status if not a.error else f"{a.status}: {a.error}"
    cites = "".join(_cite_html(c) for c in a.citations) or '<span class="mv">no citation</span>'
    gold = "" if a.gold_cited is None else ("yes" if a.gold_cited else "no")
    gold += "" if a.gold_given is None else f' <span class="mv">(gold {"" if a.gold_given else "not "}given)</span>'
    prec = "" if math.isnan(a.precision) else f"{a.precision:.2f}"
    qid = f'<div class="mv">{esc(a.qid)}</div>' if a.qid else '<div class="mv">free text</div>'
    return (f'<tr class="{"flag" if a.flagged else ""}"><td>{esc(a.question)}{qid}</td><td>{esc(a.answer)}{nid}</td>'
            f'<td>{cites}</td><td class="n">{esc(prec)}</td><td class="n">{gold}</td>'
            f'<td class="n">{esc(status)}</td></tr>')


def answers_html(result: AskResult) -> str:
    """The answers as one table (a row in red when a citation is fabricated or misquoted), all text escaped."""
    prec, n = result.precision()
    figure = (f"citation precision {prec:.2f} over {n} judged answers with citations" if n
              else "no judged answer cites anything: no citation precision")
    head = (f"<p>Answers written by <b>{esc(result.model)}</b> ({esc(result.endpoint)}) from the top {result.k} "
            f"passages of <b>{esc(result.variant)}</b>; {esc(figure)}. A red row cites a passage the model was not "
            "given or quotes what that passage does not say.</p>")
    rows = "".join(_row_html(a) for a in result.answers) or '<tr><td colspan="6">no questions</td></tr>'
    return (f'{STYLE}<div class="rre-ask">{head}<table><thead><tr><th>question</th><th>answer</th>'
            '<th>citations (checked)</th><th class="n">citation precision</th><th class="n">gold cited</th>'
            f'<th class="n">status</th></tr></thead><tbody>{rows}</tbody></table></div>')
