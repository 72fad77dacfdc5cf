"""Figures drawn again only when what they show changed (issue 24: a notebook whose inputs did not change
recomputes nothing, its figures included).

:func:`show` displays and saves ``draw(*args, **kwargs)`` as :func:`rerankeval.report.plots.show` does, unless the
PNG saved under the same name was drawn by the same code from equal arguments: then that PNG is displayed again as
it is, without drawing and without importing matplotlib. Beside the figure, a hidden key file
(``.<notebook>-<name>.png.key``: neither a figure of the report nor an input of the chain's fingerprints) holds the
hash of what the figure depends on, and the PNG's own hash:

- the drawing function (module and name), the source of its module and of :mod:`rerankeval.report.plots` and
  :mod:`rerankeval.report.captions`, and matplotlib's version;
- the arguments: a DataFrame or Series by its values (:func:`pandas.util.hash_pandas_object`, exact), index,
  columns and dtypes; numbers, text, lists and mappings as they are. An argument of another type, or one pandas
  cannot hash, makes the figure uncached (always drawn).

A key file that does not match, or a PNG that changed on disk, means: draw it. Drawing is deterministic (a forced
chain run writes byte-identical figures, ``tests/apps/chain/test_chain.py``), so a figure shown again is the
figure drawing would give.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from rerankeval.core.errors import ReRankEvalError
from rerankeval.core.ioutil import atomic_write_text, sha256_file, sha256_json
from rerankeval.report import captions, plots

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMAT = 1


class Uncachable(ReRankEvalError, TypeError):
    """An argument the key cannot be made of (the figure is drawn every time)."""


def _plain(x: Any) -> Any:
    """``x`` as JSON for the key: exact for frames and series, as is for plain values."""
    if isinstance(x, pd.DataFrame | pd.Series):
        try:
            values = pd.util.hash_pandas_object(x, index=True).to_numpy().tobytes().hex()
        except TypeError as exc:  # unhashable cells (lists, dicts)
            raise Uncachable(str(exc)) from None
        shape = (
            {"columns": [str(c) for c in x.columns], "dtypes": [str(d) for d in x.dtypes]}
            if isinstance(x, pd.DataFrame)
            else {"name": str(x.name), "dtype": str(x.dtype)}
        )
        return {"values": sha256_json(values), "index": [str(n) for n in x.index.names], **shape}
    if x is None or isinstance(x, bool | int | float | str):
        return x
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    raise Uncachable(f"a {type(x).__name__}")


@cache
def _file_hash(module: str) -> str | None:
    import importlib.util

    spec = importlib.util.find_spec(module)
    return sha256_file(spec.origin) if spec is not None and spec.origin else None


def key(draw: Callable[..., Figure], args: tuple, kwargs: Mapping[str, Any]) -> str:
    """The hash of everything the figure ``draw(*args, **kwargs)`` depends on (raises :class:`Uncachable`)."""
    code = {m: _file_hash(m) for m in dict.fromkeys((draw.__module__, plots.__name__, captions.__name__))}
    return sha256_json(
        {
            "format": FORMAT,
            "draw": f"{draw.__module__}.{draw.__qualname__}",
            "code": code,
            "matplotlib": metadata.version("matplotlib"),
            "args": _plain(list(args)),
            "kwargs": _plain(dict(kwargs)),
        }
    )


def key_file(png: Path) -> Path:
    return png.with_name(f".{png.name}.key")


def _saved(png: Path, want: str) -> bool:
    try:
        rec = json.loads(key_file(png).read_text(encoding="utf-8"))
        return rec["key"] == want and png.is_file() and sha256_file(png) == rec["png"]
    except (OSError, ValueError, TypeError, KeyError):
        return False


def show(
    figures_dir: str | Path, name: str, draw: Callable[..., Figure], *args: Any, notebook: str = "05", **kwargs: Any
) -> bool:
    """Display ``draw(*args, **kwargs)`` saved as ``<notebook>-<name>.png`` (:func:`rerankeval.report.plots.show`),
    or the same figure saved earlier from equal inputs (see the module docstring). True when it was drawn."""
    png = plots.figure_path(figures_dir, name, notebook)
    try:
        want = key(draw, args, kwargs)
    except Uncachable:
        want = None
    if want is not None and _saved(png, want):
        plots.display_png(png)
        return False
    key_file(png).unlink(missing_ok=True)  # the figure is about to change: its old key no longer vouches for it
    plots.show(draw(*args, **kwargs), figures_dir, name, notebook)
    if want is not None:
        atomic_write_text(key_file(png), json.dumps({"key": want, "png": sha256_file(png)}) + "\n")
    return True
