"""Stage 07 run and written: :func:`run` answers the questions of :class:`~rerankeval.apps.ask.params.Params` from
the top ``k`` passages of a variant and checks every citation; :func:`write` saves ``ask/answers.jsonl`` and
``ask/summary.json``; :func:`answer` is the free-text entry (``run`` with these questions)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from rerankeval.apps.ask.answers import Answer, Asker, Result
from rerankeval.apps.ask.inputs import Passage, PassageSource, Question, resolve_variant, to_questions
from rerankeval.apps.ask.params import Params
from rerankeval.core import progress as progress_mod
from rerankeval.core.ioutil import atomic_write_json, atomic_write_jsonl
from rerankeval.core.log import get_logger
from rerankeval.core.paths import DatasetPaths
from rerankeval.core.settings import Settings
from rerankeval.corpus import contract as corpus
from rerankeval.llm import budget
from rerankeval.llm.cache import LLMCache
from rerankeval.llm.client import LLMClient
from rerankeval.llm.scrub import redact_tree
from rerankeval.rerank.stage import endpoint_kind

log = get_logger(__name__)


def run(
    dp: DatasetPaths,
    params: Params,
    settings: Settings,
    *,
    cache: LLMCache | None = None,
    client: LLMClient | None = None,
    progress: bool = True,
) -> Result:
    """Answer ``params.questions`` (judged query ids or texts, or free text; none: ``params.n_questions`` judged
    queries) from the top ``params.k`` passages of ``params.variant`` (empty: the analysis' winner), with
    citations checked (the package's docstring); writes nothing (:func:`write`). The LLM is the one of
    ``settings``, its replies cached in ``cache`` (None: the one under ``dp.roots.cache``, ``params.use_cache``);
    ``progress``: the plan before the first call, a line per answer and the final line."""
    variant, note = resolve_variant(dp, params.variant)
    qs = to_questions(dp, params)
    source = PassageSource(dp, variant, params)
    passages = source.for_questions(qs, settings)
    qrels = corpus.load_qrels(dp)
    t0 = time.perf_counter()
    cache = cache if cache is not None else LLMCache.under(dp.roots.cache, enabled=params.use_cache)
    with Asker(settings, params, cache, client) as asker:
        plan = asker.estimate(qs, passages)
        if progress:  # on the console before the first call (when there is one to send), and on the page
            text = budget.announce(plan, (0.0, 0.0), warn=False, stage="answers")
            log.info(text)
        answers = _ask_all(asker, qs, passages, qrels, progress)
        model, stats = asker.model, asker.stats
    result = Result(
        answers, variant, params.k, [note, *source.notes], model, endpoint_kind(settings), plan.to_dict(), stats
    )
    if progress and plan.fresh_calls:
        progress_mod.say(final_line(result, time.perf_counter() - t0))
    return result


def answer(dp: DatasetPaths, questions: Sequence[str], settings: Settings, params: Params | None = None) -> Result:
    """The free-text entry: :func:`run` with ``questions`` (any text, or judged query ids or texts) in place of
    ``params.questions`` (``params`` None: the defaults of :class:`Params`)."""
    return run(dp, dataclasses.replace(params or Params(), questions=tuple(questions)), settings)


def _ask_all(
    asker: Asker,
    qs: Sequence[Question],
    passages: Sequence[list[Passage]],
    qrels: Mapping[str, Mapping[str, int]],
    progress: bool,
) -> list[Answer]:
    """Every question's answer, with a progress line per question done (after the first seconds) and the
    heartbeat while an answer is awaited."""
    beat = progress_mod.Heartbeat(total=len(qs), unit="answer") if progress else progress_mod.QUIET
    asker.heartbeat = beat
    answers: list[Answer] = []
    with beat, progress_mod.Progress(len(qs), desc="answers", unit="question", mode=None if progress else "off") as bar:
        for q, ps in zip(qs, passages, strict=True):
            answers.append(asker.ask(q, ps, qrels))
            bar.update(1, calls=asker.stats.calls, cache_hits=asker.stats.cache_hits)
    return answers


def final_line(result: Result, seconds: float) -> str:
    """The console's last line of a run: answers and their status, calls, cache hits, seconds."""
    status = result.summary()["status"]
    return (
        f"answers: {len(result.answers)} answered ({status['ok']} ok, {status['repaired']} repaired, "
        f"{status['failed']} failed); {result.stats.calls} calls, {result.stats.cache_hits} from the cache; "
        f"{seconds:.0f} s"
    )


def write(dp: DatasetPaths, result: Result) -> dict[str, Path]:
    """``ask/answers.jsonl`` (one answer per line, with its passages and checks) and ``ask/summary.json``, their
    text redacted (an answer may echo a key the model was shown)."""
    stage = dp.stage_dir("ask")
    rows = [
        {
            **{k: v for k, v in asdict(a).items() if k != "cached"},
            "precision": None if math.isnan(a.precision) else a.precision,
            "flagged": a.flagged,
        }
        for a in result.answers
    ]
    return {
        "answers": atomic_write_jsonl(stage / "answers.jsonl", redact_tree(rows)),
        "summary": atomic_write_json(stage / "summary.json", redact_tree(result.summary())),
    }
