"""Neighbour expansion (issue 11): unit boundaries, the character budget, no repeated overlap; closed-form."""

from __future__ import annotations

import pandas as pd
import pytest

from rerankeval.corpus.textnorm import chunk_text
from rerankeval.rerank import expand
from rerankeval.rerank.config import Params

PAGE = " ".join(f"w{i:02d}" for i in range(20))  # 79 characters, words of 3 + a space


def _rows(unit: str, text: str, size: int = 20, overlap: int = 8) -> list[dict]:
    return [
        {"chunk_id": f"{unit}#c{s.start}", "unit_id": unit, "start": s.start, "text": s.text}
        for s in chunk_text(text, size, overlap)
    ]


@pytest.fixture
def nb() -> expand.Neighbours:
    # three units: pages 1 and 2 of a.pdf, page 1 of b.pdf; rows shuffled to show that order comes from start
    rows = _rows("a.pdf#p1", PAGE) + _rows("a.pdf#p2", "NEXTPAGE " * 6) + _rows("b.pdf#p1", "OTHERDOC " * 6)
    return expand.Neighbours(pd.DataFrame(rows[::-1]))


def test_chunks_of_the_page_are_known_in_order(nb):
    # chunk_text(PAGE, 20, 8): starts 0, 12, 24, 36, 48, 60; each chunk overlaps the previous by one or two words
    assert [p.start for p in nb.unit("a.pdf#p1#c24")] == [0, 12, 24, 36, 48, 60]
    assert nb.unit("a.pdf#p1#c24")[2].text == "w06 w07 w08 w09 w10"


@pytest.mark.parametrize(
    ("n", "chars", "text", "taken", "added"),
    [
        (0, 100, "w06 w07 w08 w09 w10", (), 0),  # expand_n = 0: the chunk itself
        (2, 0, "w06 w07 w08 w09 w10", (), 0),  # no budget: the chunk itself
        (1, 100, "w03 w04 w05 w06 w07 w08 w09 w10", ("a.pdf#p1#c12",), 11),  # the previous first, overlap not repeated
        (2, 100, "w03 w04 w05 w06 w07 w08 w09 w10 w11 w12 w13", ("a.pdf#p1#c12", "a.pdf#p1#c36"), 22),
        (2, 9, "w04 w05 w06 w07 w08 w09 w10", ("a.pdf#p1#c12",), 7),  # cut to the budget at a word, side closed
        (2, 5, "w05 w06 w07 w08 w09 w10", ("a.pdf#p1#c12",), 3),
        (2, 2, "w06 w07 w08 w09 w10", (), 0),  # not one word fits
    ],
)
def test_expansion_and_budget_closed_form(nb, n, chars, text, taken, added):
    e = nb.expand("a.pdf#p1#c24", n, chars)
    assert (e.text, e.neighbours, e.chars_added) == (text, taken, added)
    assert e.chars_added <= chars


def test_everything_reconstructs_the_page_and_never_crosses_it(nb):
    for p in nb.unit("a.pdf#p1#c0"):
        e = nb.expand(p.chunk_id, 100, 10_000)
        assert e.text == PAGE  # the whole page, each word once, nothing from page 2 or from b.pdf
        assert all(c.startswith("a.pdf#p1#") for c in e.neighbours)
        assert e.chars_added == len(PAGE) - len(p.text) - len(e.neighbours)  # one separator per neighbour


def test_first_and_last_chunk_grow_one_way(nb):
    assert nb.expand("a.pdf#p1#c0", 1, 100).text == "w00 w01 w02 w03 w04 w05 w06 w07"
    assert nb.expand("a.pdf#p1#c60", 1, 100).text == "w12 w13 w14 w15 w16 w17 w18 w19"


def test_a_one_chunk_unit_gets_nothing():
    one = expand.Neighbours(
        pd.DataFrame(
            [
                {"chunk_id": "d1", "unit_id": "d1", "start": 0, "text": "a doc"},
                {"chunk_id": "d2", "unit_id": "d2", "start": 0, "text": "another"},
            ]
        )
    )
    assert one.expand("d1", 3, 500) == expand.Expanded("a doc", (), 0)


def test_negative_parameters_are_refused(nb):
    with pytest.raises(ValueError, match="expand_n and expand_chars must be >= 0"):
        nb.expand("a.pdf#p1#c0", -1, 10)


def test_pools_and_the_table_of_what_the_llm_sees(nb):
    texts, shown = expand.expand_pools({"q1": {"a.pdf#p1": "a.pdf#p1#c24"}}, nb, 1, 100, max_passage_chars=20)
    assert texts == {"q1": {"a.pdf#p1": "w03 w04 w05 w06 w07 w08 w09 w10"}}
    assert list(shown.columns) == expand.EXPANDED_COLUMNS
    assert shown.iloc[0].to_dict() == {
        "qid": "q1",
        "docid": "a.pdf#p1",
        "chunk_id": "a.pdf#p1#c24",
        "neighbours": "a.pdf#p1#c12",
        "chars_added": 11,
        "text": "w03 w04 w05 w06 w07 ...",
    }  # clipped as prompts.clip clips it


def test_expanded_config_grows_the_clip_by_the_budget():
    assert expand.expanded_config(Params(max_passage_chars=400).config(), 300).max_passage_chars == 700
    assert expand.expanded_config(Params(max_passage_chars=0).config(), 300).max_passage_chars == 0
    assert expand.expanded_config(Params(alpha=0.3).config(), 0) == Params(alpha=0.3).config()


def test_expand_n_zero_gives_the_chunk_texts_unchanged(nb):
    # with expand_n = 0 the LLM sees exactly what hybrid_rerank shows: same texts, same settings, same cache keys
    pools = {"q1": {"a.pdf#p1": "a.pdf#p1#c24", "b.pdf#p1": "b.pdf#p1#c0"}}
    texts, shown = expand.expand_pools(pools, nb, 0, 300, max_passage_chars=0)
    assert texts == {"q1": {"a.pdf#p1": "w06 w07 w08 w09 w10", "b.pdf#p1": nb.unit("b.pdf#p1#c0")[0].text}}
    assert list(shown.neighbours) == ["", ""] and list(shown.chars_added) == [0, 0]
