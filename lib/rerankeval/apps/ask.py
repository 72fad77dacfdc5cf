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
:mod:`rerankeval.apps.citations`; nothing is silent. A model that echoes a key it was shown (or a URL password, or
its ``Basic`` token) does not put it anywhere: the one cached call redacts every reply before it is read (so the
answers, the table and the notebook are clean), and what is written (``ask/answers.jsonl``, ``ask/summary.json``)
passes through the same redactor again (:func:`rerankeval.llm.scrub.redact_tree`, i.e.
:func:`rerankeval.core.settings.redact`), for a question or a passage that holds one.

Where things are: the questions and passages in :mod:`.ask_inputs`, the prompt, reply schema and salvage in
:mod:`.ask_reply`, the asker, the checks and the result in :mod:`.ask_answers`, the table in :mod:`.ask_html`;
this module runs and writes the stage and re-exports their names.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from rerankeval.apps.ask_answers import CACHE_VERSION, Answer, Asker, AskResult, checked  # noqa: F401 (re-exported)
from rerankeval.apps.ask_html import answers_html  # noqa: F401 (re-exported)
from rerankeval.apps.ask_inputs import (  # noqa: F401 (re-exported)
    DEFAULT_N,
    Passage,
    PassageSource,
    Question,
    default_questions,
    resolve_variant,
    to_questions,
    unit_label,
    winner,
)
from rerankeval.apps.ask_reply import (  # noqa: F401 (re-exported)
    NOT_IN_DOCS_TEXT,
    SYSTEM,
    USER,
    AnswerReply,
    AnswerStrict,
    CitationReply,
    CitationStrict,
    messages,
    read_reply,
    salvage,
    template_hash,
)
from rerankeval.core import progress as progress_mod
from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl
from rerankeval.core.log import get_logger
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings, load_settings
from rerankeval.corpus import contract as corpus
from rerankeval.llm import budget
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.client import LLMClient
from rerankeval.llm.scrub import redact_tree
from rerankeval.rerank.stage import endpoint_kind

log = get_logger(__name__)


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
    t0 = time.perf_counter()
    with Asker(settings, cache, client, max_tokens=max_answer_tokens, seed=seed, content_retries=content_retries,
               timeout=timeout) as asker:
        plan = asker.estimate(qs, passages)
        if progress:  # on the console before the first call (when there is one to send), and on the page
            text = budget.announce(plan, (0.0, 0.0), warn=False, stage="answers")
            log.info(f"{text[:-1]}; the time is prompt processing only: writing up to {max_answer_tokens} tokens "
                     "per answer comes on top.")
        answers = _ask_all(asker, qs, passages, qrels, progress)
        model, stats = asker.model, asker.stats
    result = AskResult(answers, variant, k, [note, *source.notes], model, endpoint_kind(settings), plan.to_dict(),
                       stats)
    if progress and plan.fresh_calls:
        progress_mod.say(final_line(result, time.perf_counter() - t0))
    return result


def _ask_all(asker: Asker, qs: Sequence[Question], passages: Sequence[list[Passage]],
             qrels: Mapping[str, Mapping[str, int]], progress: bool) -> list[Answer]:
    """Every question's answer, with a progress line per question done (after the first seconds) and the
    heartbeat while an answer is awaited."""
    beat = progress_mod.Heartbeat(total=len(qs), unit="answer") if progress else progress_mod.QUIET
    asker.heartbeat = beat
    answers: list[Answer] = []
    with beat, progress_mod.Progress(len(qs), desc="answers", unit="question",
                                     mode=None if progress else "off") as bar:
        for q, ps in zip(qs, passages, strict=True):
            answers.append(asker.ask(q, ps, qrels))
            bar.update(1, calls=asker.stats.calls, cache_hits=asker.stats.cache_hits)
    return answers


def final_line(result: AskResult, seconds: float) -> str:
    """The console's last line of a run: answers and their status, calls, cache hits, seconds."""
    status = result.summary()["status"]
    return (f"answers: {len(result.answers)} answered ({status['ok']} ok, {status['repaired']} repaired, "
            f"{status['failed']} failed); {result.stats.calls} calls, {result.stats.cache_hits} from the cache; "
            f"{seconds:.0f} s")


def write_answers(dp: DatasetPaths, result: AskResult) -> dict[str, Path]:
    """``ask/answers.jsonl`` (one answer per line, with its passages and checks) and ``ask/summary.json``, their
    text redacted (an answer may echo a key the model was shown)."""
    stage = dp.stage_dir("ask")
    rows = [{**{k: v for k, v in asdict(a).items() if k != "cached"},
             "precision": None if math.isnan(a.precision) else a.precision, "flagged": a.flagged}
            for a in result.answers]
    return {"answers": atomic_write_jsonl(stage / "answers.jsonl", redact_tree(rows)),
            "summary": atomic_write_json(stage / "summary.json", redact_tree(result.summary()))}
