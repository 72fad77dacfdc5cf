"""Stage 07, ask: answers with citations from the top passages of one retrieval variant, and a check of each
citation. The face of the stage; ``from rerankeval.apps import ask`` then (what notebooks/07-ask.ipynb does)::

    result = ask.run(dp, ask.Params.of(globals()), settings)   # asks the LLM of settings, writes nothing
    ask.write(dp, result)                                      # ask/answers.jsonl, ask/summary.json
    result = ask.answer(dp, ["how do I pin a package version?"], settings)   # free text, in JupyterLab

For each question the passages are the top ``k`` units of ``variant`` (default: the analysis' winner on its
headline metric, as 05 saved it in ``analyse/winner.json``; ``hybrid`` when there is no analysis). A judged query
(given by id or by its exact text) is answered from the saved run file of that variant, nothing recomputed; free
text is searched with the :class:`~rerankeval.retrieve.retriever.Retriever` over the saved indexes (a variant the
retriever cannot search, e.g. ``hybrid_rerank``, is replaced by ``hybrid`` for free text, with a note). Each
passage is the text of the unit's best chunk in that variant's chunk run (else the unit's first chunk), labelled
``file p.N`` (PDF) or by document id (BEIR).

The LLM gets the passages through the one cached call (:mod:`rerankeval.llm.call`: the reranker's client, settings
and content-addressed reply cache); its reply follows ``AnswerStrict`` (answer, citations with label and quote,
``not_in_documents``). An unreadable reply is re-asked ``content_retries`` times (the attempt is part of the cache
key, as in the reranker), then salvaged where possible (a cut-off JSON's answer and complete citations; prose with
``[label]`` citations); otherwise the answer's status says why it failed. Only a reply that reads is cached: an
unusable one (even when salvaged) is asked again by the next run, and a cached entry that does not read is replaced
by a fresh reply. Nothing is silent. A model that echoes a key it was shown (or a URL password, or its ``Basic``
token) does not put it anywhere: the one cached call redacts every reply before it is read, and what is written
passes through the same redactor again (:func:`rerankeval.llm.scrub.redact_tree`), for a question or a passage that
holds one.

:data:`__all__` is the stage's public face: ``Params`` (the one home of its defaults), ``Result``,
``run(dp, params, settings)``, ``write(dp, result)`` and ``answer`` (the free-text entry). Behind it each name has
one home; import those from their module: ``params``; ``inputs`` (the questions, the variant, the passages:
``Question``, ``Passage``, ``PassageSource``); ``reply`` (the prompt, the reply schema, the salvage); ``answers``
(``Asker``, ``Answer``, ``checked``, ``Result``); ``citations`` (the checks, pure functions); ``html`` (the table,
``answers_html``); ``stage`` (run, write, answer). The face's names load on first use (PEP 562), so importing
``rerankeval.apps.ask.citations`` does not import the stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rerankeval.core.face import lazy

if TYPE_CHECKING:
    from rerankeval.apps.ask.answers import Result
    from rerankeval.apps.ask.params import Params
    from rerankeval.apps.ask.stage import answer, run, write

__all__ = ["Params", "Result", "answer", "run", "write"]

_HOME = {
    "Params": "rerankeval.apps.ask.params",
    "Result": "rerankeval.apps.ask.answers",
    "run": "rerankeval.apps.ask.stage",
    "write": "rerankeval.apps.ask.stage",
    "answer": "rerankeval.apps.ask.stage",
}


__getattr__, __dir__ = lazy(__name__, _HOME)
