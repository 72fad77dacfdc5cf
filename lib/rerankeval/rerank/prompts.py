"""Prompt templates for the four modes. Their hash is part of every cache key.

Layout for prompt caching: what a query's calls share comes first (system message, instructions, query),
then the passage(s), then a short reminder. llama-server keeps the last prompt's KV cache in its slot
(``cache_prompt``, on by default), so a query's second and later calls only process the passage and the
reminder (checked by ``bench/rerank.py`` from the server's ``timings.cache_n``).
"""

from __future__ import annotations

import re

from rerankeval.core.ioutil import sha256_json

LISTWISE_SYSTEM = (
    "You are RankGPT, an intelligent assistant that can rank passages based on their relevancy to the query."
)
LISTWISE_USER = (
    "I will provide you with {n} passages, each indicated by a numerical identifier []. "
    "Rank the passages based on their relevance to the search query.\n\n"
    "Search Query: {query}\n\n"
    "{passages}\n\n"
    "Search Query: {query}\n"
    "Rank the {n} passages above based on their relevance to the search query, most relevant first. "
    "List every identifier from 1 to {n} exactly once. "
    'Reply only with JSON: {{"ranking": [identifiers]}}.'
)

POINTWISE_SYSTEM = "You are a careful search relevance assessor."
POINTWISE_USER_ONE = (
    "How relevant is the passage below to the query, from 0 (unrelated) to 10 (it directly answers the query "
    "or gives the evidence asked for)? "
    'Reply only with JSON: {{"score": <integer 0-10>}}.\n\n'
    "Query: {query}\n\n"
    "Passage: {passage}\n\n"
    "Grade (0-10):"
)
POINTWISE_USER_BATCH = (
    "For each of the passages below, how relevant is it to the query, from 0 (unrelated) to 10 (it "
    "directly answers the query or gives the evidence asked for)? Grade every passage exactly once. "
    'Reply only with JSON: {{"scores": [{{"id": <passage number>, "score": <integer 0-10>}}, ...]}}.\n\n'
    "Query: {query}\n\n"
    "{passages}\n\n"
    "Grades for the {n} passages (0-10):"
)

YESNO_SYSTEM = "You are a careful search relevance assessor."
YESNO_USER_JSON = (
    "Is the passage relevant to the query: does it answer the query or give evidence about it? "
    'Reply only with JSON: {{"relevant": "yes"}} or {{"relevant": "no"}}.\n\n'
    "Query: {query}\n\n"
    "Passage: {passage}\n\n"
    "Relevant (yes or no)?"
)
YESNO_USER_PLAIN = (
    "Is the passage relevant to the query: does it answer the query or give evidence about it? "
    "Answer with one word, yes or no.\n\n"
    "Query: {query}\n\n"
    "Passage: {passage}\n\n"
    "Relevant (yes or no)?"
)

# Zhuang et al., "A Setwise Approach for Effective and Highly Efficient Zero-shot Ranking with Large Language
# Models", SIGIR 2024: the model picks the most relevant of a small set, by its label (their prompt, JSON reply)
SETWISE_LABELS = "ABCDEFGHIJ"
SETWISE_SYSTEM = "You are a careful search relevance assessor."
SETWISE_USER = (
    'Given a query "{query}", which of the following passages is the most relevant one to the query?\n\n'
    "{passages}\n\n"
    "Output only the label of the most relevant passage ({labels}). "
    'Reply only with JSON: {{"most_relevant": "<label>"}}.'
)

TEMPLATES = {
    "listwise": (LISTWISE_SYSTEM, LISTWISE_USER),
    "pointwise": (POINTWISE_SYSTEM, POINTWISE_USER_ONE, POINTWISE_USER_BATCH),
    "yesno": (YESNO_SYSTEM, YESNO_USER_JSON),
    "yesno-plain": (YESNO_SYSTEM, YESNO_USER_PLAIN),
    "setwise": (SETWISE_SYSTEM, SETWISE_USER, SETWISE_LABELS),
}


def template_hash(kind: str) -> str:
    return sha256_json(TEMPLATES[kind])


_WS = re.compile(r"\s+")


def clip(text: str, max_chars: int) -> str:
    """Collapse white space and cut at a word boundary to at most ``max_chars`` (0 = no limit)."""
    t = _WS.sub(" ", text or "").strip()
    if max_chars and len(t) > max_chars:
        cut = t[:max_chars]
        sp = cut.rfind(" ")
        t = (cut[:sp] if sp > max_chars // 2 else cut).rstrip() + " ..."
    return t


def numbered(passages: list[str]) -> str:
    return "\n".join(f"[{i}] {p}" for i, p in enumerate(passages, start=1))


def listwise(query: str, passages: list[str]) -> list[dict[str, str]]:
    user = LISTWISE_USER.format(n=len(passages), query=query, passages=numbered(passages))
    return [{"role": "system", "content": LISTWISE_SYSTEM}, {"role": "user", "content": user}]


def pointwise(query: str, passages: list[str]) -> list[dict[str, str]]:
    if len(passages) == 1:
        user = POINTWISE_USER_ONE.format(query=query, passage=passages[0])
    else:
        user = POINTWISE_USER_BATCH.format(query=query, n=len(passages), passages=numbered(passages))
    return [{"role": "system", "content": POINTWISE_SYSTEM}, {"role": "user", "content": user}]


def yesno(query: str, passage: str, json_reply: bool = True) -> list[dict[str, str]]:
    tmpl = YESNO_USER_JSON if json_reply else YESNO_USER_PLAIN
    return [
        {"role": "system", "content": YESNO_SYSTEM},
        {"role": "user", "content": tmpl.format(query=query, passage=passage)},
    ]


def setwise(query: str, passages: list[str]) -> list[dict[str, str]]:
    """Which of ``passages`` (labelled A, B, ... in this order) is the most relevant to ``query``."""
    if not 2 <= len(passages) <= len(SETWISE_LABELS):
        raise ValueError(f"a setwise prompt shows 2 to {len(SETWISE_LABELS)} passages, got {len(passages)}")
    labels = SETWISE_LABELS[: len(passages)]
    body = "\n".join(f"Passage {lab}: {p}" for lab, p in zip(labels, passages, strict=True))
    user = SETWISE_USER.format(query=query, passages=body, labels=", ".join(labels))
    return [{"role": "system", "content": SETWISE_SYSTEM}, {"role": "user", "content": user}]
