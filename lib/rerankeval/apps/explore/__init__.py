"""The explorer: one query, every variant's top k side by side (notebook ``00-explore``, what ``make lab`` opens).

::

    from rerankeval.apps import explore
    from rerankeval.core import paths
    from rerankeval.core.settings import load_settings
    dp = paths.resolve_dataset("debian-manuals", load_settings())
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
- Free text is searched through the same :class:`rerankeval.retrieve.retriever.Retriever` over the **saved**
  indexes of stage 02 (never rebuilt: missing indexes are an error saying to run 02), with each variant's recorded
  parameters; the ``hybrid_rerank`` column goes through the same cached LLM reranker as stage 04
  (:meth:`rerankeval.rerank.reranker.Reranker.rerank_query`, with the configuration 04 recorded). When no LLM
  endpoint is configured or it does not answer, that column is shown as unavailable; the rest still works.

:class:`~rerankeval.apps.explore.engine.Explorer` keeps the loaded runs, corpus and indexes between queries (a warm
query costs only its own search); :func:`show` and :func:`judge` use one explorer per dataset, opened by
:func:`explorer` with the settings given to it (else those of the environment and ``.env``, read once there: the
explorer's one door for its settings, handed down to the live search and the widget). :func:`widget` is the
ipywidgets UI (a text box, a dropdown of judged and example queries, one status line saying what it is doing, grade
buttons under each hit with the unjudged ones marked, and "answers it" under each hit of free text).

:data:`__all__` is the explorer's public face (what the notebook, the README and the guide call). Behind it each
name has one home; import those from their module: ``session`` (one explorer per dataset: ``explorer``, ``show``,
``judge``, ``next_to_judge``, ``judging_table``, ``widget``); ``questions`` (``drafts``, ``draft_source``,
``review``, ``promote``, ``add_question``); ``engine`` (``Explorer``, ``example_queries``); ``texts`` (the
snippets and the marked terms); ``view`` (``Exploration``, ``Column``, ``Hit`` and their HTML); ``search`` (free
text: ``LiveSearch``, ``close_all``); ``queue`` (what to judge next: ``NextUnits``); ``ui`` and ``review_widget``
(the ipywidgets UI). The face's names load on first use (PEP 562), so importing ``rerankeval.apps.explore.view``
does not import the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rerankeval.core.face import lazy

if TYPE_CHECKING:
    from rerankeval.apps.explore.questions import add_question, draft_source, drafts, promote, review
    from rerankeval.apps.explore.search import close_all
    from rerankeval.apps.explore.session import explorer, judge, judging_table, next_to_judge, show, widget

__all__ = [
    "add_question",
    "close_all",
    "draft_source",
    "drafts",
    "explorer",
    "judge",
    "judging_table",
    "next_to_judge",
    "promote",
    "review",
    "show",
    "widget",
]

_SESSION = ("explorer", "judge", "judging_table", "next_to_judge", "show", "widget")
_QUESTIONS = ("add_question", "draft_source", "drafts", "promote", "review")
_HOME = {
    **dict.fromkeys(_SESSION, "rerankeval.apps.explore.session"),
    **dict.fromkeys(_QUESTIONS, "rerankeval.apps.explore.questions"),
    "close_all": "rerankeval.apps.explore.search",
}


__getattr__, __dir__ = lazy(__name__, _HOME)
