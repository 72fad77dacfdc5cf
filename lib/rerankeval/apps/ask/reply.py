"""The cited answer's prompt and reply: the strict schema sent as ``response_format``, the lenient model it is
read with, and the salvage of an unusable reply (a cut-off JSON's answer and citations; prose with ``[label]``)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import cast

from pydantic import BaseModel, ConfigDict, Field

from rerankeval.apps.ask.inputs import Passage
from rerankeval.core.ioutil import sha256_json
from rerankeval.llm.client import Reply
from rerankeval.llm.repair import Unusable, parse

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


def messages(question: str, passages: Sequence[Passage]) -> list[dict[str, str]]:
    body = "\n\n".join(f"[{p.label}] {p.text}" for p in passages)
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER.format(question=question, passages=body)},
    ]


def template_hash() -> str:
    return sha256_json([SYSTEM, USER])


# -- reading a reply --
def read_answer(reply: Reply) -> AnswerReply:
    """:func:`read_reply` of a reply (the ``read`` of :meth:`rerankeval.llm.call.CachedLLM.call`)."""
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
        tail = body[m.end() :]
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
