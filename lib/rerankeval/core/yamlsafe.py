"""The one YAML reader of parameters (``params/*.yaml``, ``--set name=value``, ``P="..."``): PyYAML's safe loader
with what a parameters file never needs refused before it can do harm.

- **Anchors and aliases** (``&a`` / ``*a``): an alias bomb (a few lines that expand to billions of nodes) passes
  ``yaml.safe_load`` and is expanded later, when the parameters are hashed or printed. Refused while composing,
  naming the file and line; write the value out instead.
- **YAML 1.1 number forms** that read as another number than the one typed: ``010`` is octal (8), ``1:30`` is
  base 60 (90). Refused with the number probably meant ("did you mean 10?") and how to write text instead.
  Hex (``0x1A``) and binary (``0b101``) mean the same in Python and are kept.
- **Sizes**: the text's bytes, the number of nodes and the nesting depth are bounded.

A leaf module (imports nothing of ours but :mod:`rerankeval.core.errors`). Syntax errors stay ``yaml.YAMLError``;
the refusals above raise :class:`YamlRefused`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from rerankeval.core.errors import ReRankEvalError

MAX_BYTES = 256 * 1024  # a parameters file is a few hundred bytes; params/sweep.yaml 1.4 kB
MAX_NODES = 10_000  # scalars, lists and mappings together
MAX_DEPTH = 50  # nesting of lists and mappings

_OCTAL = re.compile(r"[-+]?0[0-7_]+")  # YAML 1.1's octal int: 010 -> 8 (refused when that is not 10)
_BASE60 = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")  # 1:30 -> 90, 1:30.5 -> 90.5


class YamlRefused(ReRankEvalError, ValueError):
    """YAML that parses but is refused (an alias, a YAML 1.1 number form, too big); the message says where and
    how to write it instead."""


def _where(source: str, mark: yaml.Mark | None, with_line: bool) -> str:
    return f"{source}, line {mark.line + 1}" if with_line and mark is not None else source


def _meant(raw: str) -> str:
    """The number a person typing ``raw`` (``010``, ``-007``) most likely meant: its decimal reading."""
    sign = raw[0] if raw[0] in "+-" else ""
    digits = raw.lstrip("+-").replace("_", "").lstrip("0") or "0"
    return f"{'-' if sign == '-' else ''}{digits}"


class _CheckedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing anchors, aliases, YAML 1.1 octal and base-60 numbers, and too many nodes."""

    source = "<yaml>"
    with_line = True
    max_nodes = MAX_NODES

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0

    def _refuse(self, mark: yaml.Mark | None, why: str) -> YamlRefused:
        return YamlRefused(f"{_where(self.source, mark, self.with_line)}: {why}")

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            kind = f"an alias *{event.anchor}" if isinstance(event, yaml.AliasEvent) else f"an anchor &{event.anchor}"
            raise self._refuse(
                event.start_mark,
                f"{kind}: anchors and aliases are not accepted in "
                "parameters (they can expand to more than memory holds); write the value out",
            )
        self._nodes += 1
        if self._nodes > self.max_nodes:
            raise self._refuse(
                event.start_mark,
                f"more than {self.max_nodes} values; parameters are a few names "
                "and short lists: remove what is not a parameter",
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise self._refuse(event.start_mark, f"lists or mappings nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        raw = str(self.construct_scalar(node)).strip()
        if _BASE60.fullmatch(raw):
            raise self._base60(node, raw)
        value = super().construct_yaml_int(node)
        if _OCTAL.fullmatch(raw) and str(value) != (meant := _meant(raw)):
            raise self._refuse(
                node.start_mark,
                f"{raw} reads as the octal number {value} (YAML 1.1); did you mean "
                f"{meant}? Write {meant}, or quote it ('{raw}') for text",
            )
        return value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        raw = str(self.construct_scalar(node)).strip()
        if _BASE60.fullmatch(raw):
            raise self._base60(node, raw)
        return super().construct_yaml_float(node)

    def _base60(self, node: yaml.ScalarNode, raw: str) -> YamlRefused:
        value = super().construct_yaml_float(node) if "." in raw else super().construct_yaml_int(node)
        plain = raw.replace(":", "").replace("_", "")
        return self._refuse(
            node.start_mark,
            f"{raw} reads as the base-60 number {value} (YAML 1.1); did you mean "
            f"{plain}? Write the number you mean, or quote it ('{raw}') for text",
        )


_CheckedLoader.add_constructor("tag:yaml.org,2002:int", _CheckedLoader.construct_yaml_int)
_CheckedLoader.add_constructor("tag:yaml.org,2002:float", _CheckedLoader.construct_yaml_float)


def load(
    text: str, source: str, *, with_line: bool = True, max_bytes: int = MAX_BYTES, max_nodes: int = MAX_NODES
) -> Any:
    """``text`` parsed as YAML (``source``: what the messages call it, e.g. the file; ``with_line``: add the line).
    Raises :class:`YamlRefused` (see the module docstring) or ``yaml.YAMLError`` for a syntax error."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise YamlRefused(
            f"{source}: {size} bytes, more than the {max_bytes} a parameters text may hold; "
            "keep parameters short (name: value lines)"
        )
    loader = type("Loader", (_CheckedLoader,), {"source": source, "with_line": with_line, "max_nodes": max_nodes})
    instance = loader(text)
    try:
        return instance.get_single_data()
    finally:
        instance.dispose()


def load_file(path: Path, *, max_bytes: int = MAX_BYTES, max_nodes: int = MAX_NODES) -> Any:
    """The YAML file ``path`` through :func:`load`; its size is checked before it is read."""
    size = path.stat().st_size
    if size > max_bytes:
        raise YamlRefused(
            f"{path}: {size} bytes, more than the {max_bytes} a parameters file may hold; "
            "is it the right file? Parameters are a few `name: value` lines"
        )
    return load(path.read_text(encoding="utf-8"), str(path), max_bytes=max_bytes, max_nodes=max_nodes)
