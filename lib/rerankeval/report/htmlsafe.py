"""Escaping for the few places that put a value into markup outside a template: :func:`esc`.

HTML is built by the Jinja2 templates (``templates/``, autoescape on: :mod:`rerankeval.report.render` for the pages,
:mod:`rerankeval.report.fragments` for what notebooks display); a ``<script>`` inside a PDF, a query or a model
reply renders as text. The diff view's functions live in :mod:`~rerankeval.report.fragments`.
"""

from __future__ import annotations

import html
import math
from typing import Any

__all__ = ["esc"]


def esc(value: Any) -> str:
    """HTML-escape anything (quotes too), ``None``/NaN as an empty string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return html.escape(str(value), quote=True)
