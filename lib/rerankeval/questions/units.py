"""The units the questions stage may ask about: their text rebuilt from the chunks, sampled in turn over files."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pandas as pd


@dataclass
class Unit:
    """A unit the LLM may be asked about: its id, file, label and the passage shown."""

    uid: str
    source: str
    place: str
    text: str


def unit_texts(chunks: pd.DataFrame) -> dict[str, str]:
    """Each unit's text rebuilt from its chunks (overlapping spans of the normalised page text, by offset)."""
    out: dict[str, str] = {}
    for uid, group in chunks.sort_values(["unit_id", "start"], kind="stable").groupby("unit_id", sort=False):
        text = ""
        for start, part in zip(group.start, group.text, strict=True):
            start = int(start) if pd.notna(start) else len(text)
            text = text[:start] + str(part) if start <= len(text) else text + " " + str(part)
        out[str(uid)] = text
    return out


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
        per_file.setdefault(str(row.source), []).append(Unit(uid, str(row.source), place, texts[uid][:max_chars]))
    for units in per_file.values():
        rng.shuffle(units)
    order: list[Unit] = []
    for i in range(max((len(u) for u in per_file.values()), default=0)):
        order.extend(units[i] for units in per_file.values() if i < len(units))
    return order
