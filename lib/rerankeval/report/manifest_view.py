"""The reproducibility manifest as a table people read (key / value, nested sections as sub-tables, numbers
rounded), for the index; the raw JSON stays in ``manifest.json``, linked beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rerankeval.evaluate.views import DASH, cell, rounded

MAX_ITEMS = 60  # a longer section (e.g. every library) is cut, with a note; manifest.json has it all
Row = dict[str, Any]


def _scalar_list(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(not isinstance(x, (Mapping, list, tuple)) for x in v)


def rows(obj: Mapping[str, Any], digits: int = 4) -> list[Row]:
    """``[{"key", "value", "children"}]``: a scalar (or a list of scalars) is a ``value`` (rounded to ``digits``
    significant digits, yes/no, "–" when missing); a mapping, or a list of mappings, is ``children``."""
    out: list[Row] = []
    items = list(obj.items())
    for k, v in items[:MAX_ITEMS]:
        v = rounded(v, digits)
        if isinstance(v, Mapping):
            out.append({"key": str(k), "value": "" if v else DASH, "children": rows(v, digits)})
        elif isinstance(v, (list, tuple)) and not _scalar_list(v):
            sub = {str(i + 1): x for i, x in enumerate(v)}
            out.append({"key": str(k), "value": "", "children": rows(sub, digits)})
        else:
            out.append({"key": str(k), "value": str(cell(v, digits)) if v != "" else DASH, "children": []})
    if len(items) > MAX_ITEMS:
        out.append({"key": "\u2026", "value": f"{len(items) - MAX_ITEMS} more in manifest.json", "children": []})
    return out
