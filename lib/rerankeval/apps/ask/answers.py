"""One cited answer asked through the one cached call (:class:`Asker`), its citations checked (:func:`checked`),
and a run's answers with their counts (:class:`Result`, the stage's result)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rerankeval.apps.ask import citations
from rerankeval.apps.ask.inputs import Passage, Question
from rerankeval.apps.ask.params import Params
from rerankeval.apps.ask.reply import AnswerReply, AnswerStrict, messages, read_answer, salvage, template_hash
from rerankeval.core.ioutil import sha256_text
from rerankeval.core.paths import Roots
from rerankeval.core.settings import Settings
from rerankeval.llm import budget, schemas
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.call import AsksLLM, CachedLLM, Call, CallStats
from rerankeval.llm.client import LLMClient, Reply

CACHE_VERSION = 1
SEED = 0  # the generation seed of every answer (part of its cache key)
TASK = "ask"  # what the endpoint's answers are measured as, for the next plan (:class:`rerankeval.llm.rates.Replies`)


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

    def __init__(
        self, settings: Settings, params: Params, cache: LLMCache | None = None, client: LLMClient | None = None
    ):
        """``params``: the answer's token budget, re-asks, timeout and whether the reply cache serves (``cache``,
        None: the default one); ``client``: a client to use instead of one opened on ``settings``."""
        self.settings = settings
        cache = cache if cache is not None else LLMCache.under(Roots.of(settings).cache, enabled=params.use_cache)
        self.llm = CachedLLM.open(
            settings, cache, client, timeout=params.timeout_s, keep_failures=True, retry_failed=params.retry_failed
        )
        self.cache, self.client, self.model = self.llm.cache, self.llm.client, self.llm.model
        self.endpoint = self.llm.endpoint
        self.max_tokens, self.seed, self.content_retries = params.max_answer_tokens, SEED, params.content_retries
        self.stats = CallStats()  # of every answer this asker gave

    def material(self, question: str, passages: Sequence[Passage], max_tokens: int) -> dict[str, Any]:
        """Everything the reply depends on: its cache key."""
        return {
            "v": CACHE_VERSION,
            "task": "ask",
            "model": self.model,
            "endpoint": self.endpoint,
            "template": template_hash(),
            "schema": schemas.schema_hash(AnswerStrict),
            "gen": {"temperature": 0, "seed": self.seed, "max_tokens": max_tokens},
            "question": question,
            "passages": [[p.label, p.unit, sha256_text(p.text)] for p in passages],
        }

    def call(self, question: str, passages: Sequence[Passage], max_tokens: int) -> Call:
        """The call for one question (its messages, reply schema and cache key)."""
        return Call(
            messages(question, passages),
            self.material(question, passages, max_tokens),
            max_tokens,
            response_format=schemas.response_format(AnswerStrict, "cited_answer"),
            seed=self.seed,
            task=TASK,
        )

    def ask(self, q: Question, passages: list[Passage], qrels: Mapping[str, Mapping[str, int]]) -> Answer:
        """One question: ask, re-ask after an unusable reply (twice the tokens after a cut-off one), then
        salvage the last unusable reply (also when a re-ask fails); a failed first call fails the answer.
        A cached reply is used only when it reads; a fresh one is cached only then (:mod:`rerankeval.llm.call`)."""
        ans = Answer(q.text, q.qid, passages)
        label = f"question {q.qid}" if q.qid else "a free-text question"

        def reask(call: Call, reply: Reply) -> Call:
            return self.call(q.text, passages, call.max_tokens * 2) if reply.finish_reason == "length" else call

        got = self.llm.call(
            self.call(q.text, passages, self.max_tokens),
            read_answer,
            self.stats,
            retries=self.content_retries,
            label=label,
            reask=reask,
        )
        ans.cached = got.cached
        if got.ok:
            return checked(ans, got.value, qrels)
        failure = [f"{got.failure.error_class}: {got.failure}"] if got.failure is not None else []
        salvaged = salvage(got.reply.content) if got.reply is not None else None
        ans.status, ans.error = ("repaired" if salvaged else "failed"), ";".join([*got.errors, *failure])
        return checked(ans, salvaged, qrels)

    def estimate(self, questions: Sequence[Question], passages: Sequence[list[Passage]]) -> budget.Plan:
        """Calls, cache hits and tokens before any call, as the reranker prints it: each answer up to
        ``max_answer_tokens`` and up to ``content_retries`` re-asks of twice that (a cut-off answer), a range until
        a run on this endpoint has measured how long its answers are and how many are re-asked."""
        s_per_token, source = self.llm.measured_rate()
        replies = self.llm.replies(TASK)
        tasks, previous = [], ""
        for i, (q, ps) in enumerate(zip(questions, passages, strict=True)):
            call = self.call(q.text, ps, self.max_tokens)
            est = budget.task_estimate(
                self.llm.cached(call.material),
                call.prompt,
                previous,
                replies,
                most=self.max_tokens,
                reasks=self.content_retries,
                reask_most=2 * self.max_tokens,
            )
            tasks.append((q.qid or f"free-{i}", "ask", [est]))
            previous = call.prompt
        plan = budget.plan(
            tasks, price=(0.0, 0.0), max_calls=0, max_cost=0.0, s_per_token=s_per_token, rate_source=source
        )
        plan.what = "questions"
        return plan


# -- one run over many questions --
@dataclass
class Result:
    """Stage 07's result: every question's answer, where its passages came from, the model and the calls."""

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
            "variant": self.variant,
            "k": self.k,
            "model": self.model,
            "endpoint": self.endpoint,
            "notes": self.notes,
            "questions": len(self.answers),
            "judged": len(judged),
            "status": {s: sum(a.status == s for a in self.answers) for s in ("ok", "repaired", "failed")},
            "flagged": sum(a.flagged for a in self.answers),
            "not_in_documents": sum(a.not_in_documents for a in self.answers),
            "citations": sum(len(a.citations) for a in self.answers),
            "citation_checks": {
                s: sum(c.status == s for a in self.answers for c in a.citations) for s in (citations.OK, *citations.BAD)
            },
            "citation_precision": None if math.isnan(prec) else round(prec, 4),
            "precision_over": n,
            "gold_cited": sum(bool(a.gold_cited) for a in judged),
            "gold_given": sum(bool(a.gold_given) for a in self.answers),
        }
