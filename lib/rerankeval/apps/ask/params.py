"""Stage 07's parameters (:class:`Params`): the one home of their defaults. Notebook 07's parameters cell has the
same names and defaults (a test checks) and builds them in one line, ``Params.of(globals())``; below the face every
function takes them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rerankeval.core.paths import DEFAULT_DATASET


@dataclass(frozen=True)
class Params:
    """Stage 07's parameters: notebook 07's parameters cell has the same names and defaults (a test checks)."""

    dataset: str = DEFAULT_DATASET  # the caller resolves it to the DatasetPaths given to run()
    questions: Sequence[str] = ()  # judged query ids or texts, or any free text; empty: n_questions judged queries
    n_questions: int = 5  # judged queries answered when questions is empty (spread evenly over the sorted ids)
    variant: str = ""  # variant whose top k passages the LLM reads; empty: the winner of 05 (hybrid before it)
    k: int = 5  # passages per question given to the LLM
    max_answer_tokens: int = 256  # completion budget per answer (a cut-off reply is re-asked with twice this)
    max_passage_chars: int = 600  # passage text sent to the LLM is clipped to this many characters
    timeout_s: float = 600.0  # seconds one answer may take
    content_retries: int = 1  # re-asks after an unreadable reply, then what can be read is salvaged
    use_cache: bool = True  # re-use cached LLM replies; False asks afresh and refreshes the cache
    retry_failed: bool = False  # ask again the answers a run kept as failed (else a warm run re-reads them)

    def __post_init__(self) -> None:
        if self.k < 1 or self.max_answer_tokens < 16 or self.content_retries < 0:
            raise ValueError(
                f"need k >= 1 (passages per question), max_answer_tokens >= 16 and content_retries >= 0, "
                f"got {self.k}/{self.max_answer_tokens}/{self.content_retries}: set them in 07's "
                "parameters (or ask.Params)"
            )

    @classmethod
    def of(cls, values: Params | Mapping[str, Any]) -> Params:
        """From a mapping (e.g. the notebook's ``globals()``): the names of the fields are taken, the rest ignored."""
        if isinstance(values, cls):
            return values
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dict(values).items() if k in names})
