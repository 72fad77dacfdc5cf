"""Reply schemas for each prompt mode, generated from pydantic models.

Two models per reply: a *strict* one whose JSON schema is sent as ``response_format`` (ids and grades
limited to what is valid, no extra keys) and a *lenient* one used to parse the reply, so a reply that
breaks the rules (unknown ids, out-of-range grades) is still read, repaired and counted rather than
thrown away.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from rerankeval.core.ioutil import sha256_json


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- lenient parsing models (what we accept back) --
class ListwiseReply(BaseModel):
    ranking: list[int]


class ScoreItem(BaseModel):
    id: int
    score: float


class PointwiseBatchReply(BaseModel):
    scores: list[ScoreItem]


class PointwiseSingleReply(BaseModel):
    score: float


class YesNoReply(BaseModel):
    relevant: str


# -- strict generation schemas (what we ask for) --
def _ids(n: int) -> Any:
    return Literal[tuple(range(1, n + 1))]  # type: ignore[valid-type]


def listwise_model(n: int) -> type[BaseModel]:
    """``{"ranking": [ids 1..n]}``: RankGPT-style identifiers, most relevant first."""
    return create_model(
        "ListwiseRanking",
        __base__=_Strict,
        ranking=(list[_ids(n)], Field(description=f"all identifiers 1..{n}, most relevant first")),
    )


GRADE = Literal[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]


def pointwise_model(n: int) -> type[BaseModel]:
    """``{"scores": [{"id": i, "score": 0..10}, ...]}`` for a batch, ``{"score": 0..10}`` for one passage."""
    if n == 1:
        return create_model("PointwiseGrade", __base__=_Strict, score=(GRADE, ...))
    item = create_model("PassageGrade", __base__=_Strict, id=(_ids(n), ...), score=(GRADE, ...))
    return create_model("PointwiseGrades", __base__=_Strict, scores=(list[item], ...))


class YesNoStrict(_Strict):
    """``{"relevant": "yes"|"no"}``: the answer is the first yes/no token of the reply (see core.yes_prob)."""

    relevant: Literal["yes", "no"]


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


def response_format(model: type[BaseModel], name: str) -> dict[str, Any]:
    """OpenAI ``response_format`` for structured outputs with this model's schema."""
    return {
        "type": "json_schema",
        "json_schema": {"name": name, "strict": True, "schema": json_schema(model)},
    }


def schema_hash(model: type[BaseModel] | None) -> str:
    return sha256_json(json_schema(model)) if model is not None else "none"
