"""The units the questions stage may ask about: their text rebuilt from the chunks, sampled in turn over files."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pandas as pd

from rerankeval.core.ioutil import sha256_text
from rerankeval.corpus.unithash import unit_texts


@dataclass
class Unit:
    """A unit the LLM may be asked about: its id, file, label, the passage shown and the sha256 of its whole text
    (:func:`rerankeval.corpus.unithash.unit_hashes`; recorded with the draft)."""

    uid: str
    source: str
    place: str
    text: str
    sha256: str = ""


def sample_units(chunks: pd.DataFrame, seed: int, min_chars: int, max_chars: int) -> list[Unit]:
    """Units with at least ``min_chars`` of text, stratified over files: a seeded random order within each file,
    then the files taken in turn (the first unit of every file, then the second ...)."""
    texts = unit_texts(chunks)
    first = chunks.sort_values(["unit_id", "start"], kind="stable").drop_duplicates("unit_id").set_index("unit_id")
    rng = random.Random(seed)
    per_file: dict[str, list[Unit]] = {}
    for uid in sorted(texts):
        if len(texts[uid]) < min_chars:
            continue
        row = first.loc[uid]
        page = row.get("page")
        place = f"{row.source}, page {int(page)}" if pd.notna(page) and page != "" else f"document {uid}"
        per_file.setdefault(str(row.source), []).append(
            Unit(uid, str(row.source), place, texts[uid][:max_chars], sha256_text(texts[uid]))
        )
    for units in per_file.values():
        rng.shuffle(units)
    order: list[Unit] = []
    for i in range(max((len(u) for u in per_file.values()), default=0)):
        order.extend(units[i] for units in per_file.values() if i < len(units))
    return order
