"""The one reader of ``.env`` files, for Python and for the Makefile alike (standard library only).

The Makefile runs before the venv exists, so it calls this file with the system ``python3``:
``python3 lib/rerankeval/core/envfile.py .env RERANKEVAL_CACHE`` prints the value the last assignment of
``RERANKEVAL_CACHE`` in ``.env`` gives (nothing when none does), exactly as :mod:`rerankeval.core.settings`
reads it. The syntax is python-dotenv's (what pydantic-settings used before):

- ``NAME=value``, optionally preceded by ``export``; blank lines and ``# comment`` lines are skipped;
- unquoted values end at `` #`` (whitespace then ``#``: an inline comment) and lose trailing whitespace;
  ``a#b`` keeps its ``#``; ``NAME= # note`` is empty;
- ``'single quoted'`` values are literal (only ``\\'`` and ``\\\\`` are escapes), ``"double quoted"`` ones
  decode ``\\n``, ``\\t``, ``\\"``, ``\\\\`` ...; both may span lines and be followed by a comment;
- ``${OTHER}`` and ``${OTHER:-default}`` expand to a value assigned earlier in the file, else the
  environment's, else the default (else empty); a bare ``NAME`` line unsets NAME;
- CRLF line ends and a UTF-8 byte-order mark are accepted.

A line that fits none of these is skipped with a warning naming the file and the line.
"""

from __future__ import annotations

import codecs
import os
import re
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path

_NEWLINE = re.compile(r"\r\n|\n|\r")
_BLANK = re.compile(r"\s*", re.M)
_EXPORT = re.compile(r"(?:export[^\S\r\n]+)?")
_QUOTED_KEY = re.compile(r"'([^']+)'")
_KEY = re.compile(r"([^=#\s]+)")
_SPACE = re.compile(r"[^\S\r\n]*")
_EQUALS = re.compile(r"(=[^\S\r\n]*)")
_SINGLE = re.compile(r"'((?:\\.|[^'\\])*)'", re.S)
_DOUBLE = re.compile(r'"((?:\\.|[^"\\])*)"', re.S)
_UNQUOTED = re.compile(r"([^\r\n]*)")
_COMMENT = re.compile(r"(?:[^\S\r\n]*#[^\r\n]*)?")
_END = re.compile(r"[^\S\r\n]*(?:\r\n|\n|\r|$)")
_REST = re.compile(r"[^\r\n]*(?:\r\n|\n|\r)?")
_DOUBLE_ESCAPES = re.compile(r"\\[\\'\"abfnrtv]")
_SINGLE_ESCAPES = re.compile(r"\\[\\']")
_VARIABLE = re.compile(r"\$\{(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}")


class EnvFileWarning(UserWarning):
    """A line of a ``.env`` file that could not be read (it is skipped)."""


class _NoMatch(Exception):
    pass


def _take(rx: re.Pattern[str], text: str, pos: int) -> tuple[tuple[str, ...], int]:
    m = rx.match(text, pos)
    if m is None:
        raise _NoMatch
    return m.groups(), m.end()


def _unescape(rx: re.Pattern[str], s: str) -> str:
    return rx.sub(lambda m: codecs.decode(m.group(0), "unicode-escape"), s)


def _value(text: str, pos: int) -> tuple[str, int]:
    ch = text[pos : pos + 1]
    if ch == "'":
        (v,), pos = _take(_SINGLE, text, pos)
        return _unescape(_SINGLE_ESCAPES, v), pos
    if ch == '"':
        (v,), pos = _take(_DOUBLE, text, pos)
        return _unescape(_DOUBLE_ESCAPES, v), pos
    if ch in ("", "\n", "\r"):
        return "", pos
    (v,), pos = _take(_UNQUOTED, text, pos)
    return re.sub(r"\s+#.*", "", v).rstrip(), pos


def parse(text: str, source: str = ".env") -> list[tuple[str, str | None]]:
    """``(name, value)`` of every assignment in ``text``, in order (value None for a bare ``NAME``)."""
    text = text.removeprefix("\ufeff")
    out: list[tuple[str, str | None]] = []
    pos, line = 0, 1
    while pos < len(text):
        start, stmt_line = pos, line
        try:
            _, pos = _take(_BLANK, text, pos)
            stmt_line = line + len(_NEWLINE.findall(text[start:pos]))
            if pos >= len(text):
                break
            _, pos = _take(_EXPORT, text, pos)
            key: str | None = None
            if text[pos : pos + 1] == "'":
                (key,), pos = _take(_QUOTED_KEY, text, pos)
            elif text[pos : pos + 1] != "#":
                (key,), pos = _take(_KEY, text, pos)
            _, pos = _take(_SPACE, text, pos)
            value: str | None = None
            if text[pos : pos + 1] == "=":
                (eq,), pos = _take(_EQUALS, text, pos)
                if len(eq) > 1 and text[pos : pos + 1] == "#":  # `NAME= # note`: empty, the rest a comment
                    value = ""
                else:
                    value, pos = _value(text, pos)
            _, pos = _take(_COMMENT, text, pos)
            _, pos = _take(_END, text, pos)
            if key is not None:
                out.append((key, value))
        except _NoMatch:
            _, pos = _take(_REST, text, pos)
            warnings.warn(
                f"{source}, line {stmt_line}: cannot read {text[start:pos].strip()[:80]!r} (expected "
                "NAME=value, see .env.example); the line is ignored",
                EnvFileWarning,
                stacklevel=2,
            )
        line += len(_NEWLINE.findall(text[start:pos]))
    return out


def _expand(value: str, known: Mapping[str, str | None]) -> str:
    def one(m: re.Match[str]) -> str:
        got = known.get(m["name"], m["default"] or "")
        return got if got is not None else ""  # a bare NAME earlier in the file unset it

    return _VARIABLE.sub(one, value)


def read_env_file(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every variable ``path`` assigns (the last assignment wins), ``${...}`` expanded; {} when it is absent.

    ``environ`` (default ``os.environ``) answers ``${NAME}`` for names the file did not assign before.
    Raises ValueError naming the file when it is not UTF-8 text.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{p} is not UTF-8 text ({exc.reason} at byte {exc.start}): save it as UTF-8 (see .env.example)"
        ) from None
    env = dict(os.environ if environ is None else environ)
    values: dict[str, str | None] = {}
    for key, value in parse(text, str(p)):
        values[key] = None if value is None else _expand(value, {**env, **values})
    return {k: v for k, v in values.items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    """``envfile.py FILE NAME``: print NAME's value from FILE (nothing, and status 0, when it has none)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python3 envfile.py FILE NAME", file=sys.stderr)
        return 2
    warnings.simplefilter("always", EnvFileWarning)
    warnings.formatwarning = lambda msg, *a, **k: f"[.env] WARNING: {msg}\n"  # type: ignore[assignment]
    try:
        value = read_env_file(args[0]).get(args[1], "")
    except ValueError as exc:
        print(f"[.env] ERROR: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
