"""The package's log, set up once: what a stage tells the notebook's reader (what it wrote, its plan, a fallback).

``log = get_logger(__name__)`` in a module, then ``log.info("wrote ...")``. The first call gives the
``rerankeval`` logger (level INFO unless set otherwise) two handlers, message only:

- INFO and below to the current ``sys.stdout``: in a notebook that is the cell's output, where ``print`` put it;
- WARNING and above to the current ``sys.stderr``, as Python's last-resort handler showed them before.

The streams are looked up when a line is written (as :data:`logging.lastResort` does), so a kernel's cell, an
ipywidgets ``Output`` or pytest's capture receives it. Records still propagate to the root logger, which has no
handler in a Jupyter kernel: each line shows once (a root handler of your own, e.g. ``logging.basicConfig()``,
shows it a second time; set ``logging.getLogger("rerankeval").propagate = False`` then). Lines for the chain's
terminal are :mod:`rerankeval.core.progress`'s, not the log's.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

PACKAGE = "rerankeval"


class _CurrentStream(logging.StreamHandler):
    """A StreamHandler on whatever ``sys.stdout`` (or ``sys.stderr``) is when a line is written."""

    def __init__(self, which: str, levels: logging.Filter | None = None):
        self._which = which
        super().__init__()
        if levels is not None:
            self.addFilter(levels)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return getattr(sys, self._which)

    @stream.setter
    def stream(self, _: TextIO) -> None:  # StreamHandler.__init__ sets it; the current one is always used
        pass


class _Below(logging.Filter):
    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < self.level


def _setup() -> logging.Logger:
    """The package logger with its two handlers (added once, also across a module reload)."""
    root = logging.getLogger(PACKAGE)
    if not any(isinstance(h, _CurrentStream) or type(h).__name__ == "_CurrentStream" for h in root.handlers):
        out, err = _CurrentStream("stdout", _Below(logging.WARNING)), _CurrentStream("stderr")
        err.setLevel(logging.WARNING)
        for h in (out, err):
            h.setFormatter(logging.Formatter("%(message)s"))
            root.addHandler(h)
    if root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    return root


def get_logger(name: str) -> logging.Logger:
    """The logger of module ``name`` (under ``rerankeval``), the package's handlers set up on first use."""
    _setup()
    return logging.getLogger(name)
