"""A stage package's face, loaded on first use (PEP 562): each package ``__init__`` lists its names and their home
modules, and this builds its ``__getattr__`` and ``__dir__`` once, so importing a submodule of the package (say
``rerankeval.rerank.ledger``) does not import the whole stage."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy(package: str, homes: Mapping[str, str], submodules: Sequence[str] = ()) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``: a name of ``homes`` (name -> its module, absolute or relative to
    the package) is imported from its home when first asked for; a name of ``submodules`` is that submodule; any
    other name is an AttributeError that lists the face."""

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        if name not in homes:
            face = ", ".join([*homes, *submodules])
            raise AttributeError(
                f"module {package!r} has no attribute {name!r}; its face is {face} "
                f"(other names: import them from their module under {package})"
            )
        home = homes[name]
        return getattr(importlib.import_module(home if home.startswith("rerankeval.") else f"{package}.{home}"), name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes, *submodules})

    return __getattr__, __dir__
