"""Questions for a corpus that has none: drafted by an LLM from sampled units, checked, written beside the user's files.

Owns the questions stage (``draft``: sampling, the prompt, the checks, ``queries.draft.jsonl`` and
``qrels/draft.tsv``) and its notebook ``08-questions``. It sits beside ``retrieve`` and ``rerank`` in the layers:
it may import ``llm``, ``corpus`` and ``core``; nothing below imports it. The file format and which questions
stage 01 evaluates with are :mod:`rerankeval.corpus.queryset`'s.
"""
