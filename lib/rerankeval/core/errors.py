"""The one base of every error the workbench raises on purpose (a leaf module: imports nothing).

``except ReRankEvalError`` catches any of them; each also keeps its standard base (``ValueError``,
``FileNotFoundError``, ``RuntimeError`` ...), so code that catches those still works.
"""

from __future__ import annotations


class ReRankEvalError(Exception):
    """Something the user can fix: the message says what went wrong and how."""
