"""The chain's notebooks and their parameters: which notebooks run in which order, the parameters from
``params/*.yaml`` and ``--set``, and the types each notebook's ``parameters`` cell declares (``rrf_k: int = 60``),
checked and, in the clear cases, converted before anything runs. Part of :mod:`rerankeval.apps.chain`."""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from rerankeval.core import paths, yamlsafe
from rerankeval.core.errors import ReRankEvalError


class PreflightError(ReRankEvalError):
    """A problem found before any notebook runs; the message says what is wrong and how to fix it."""


EXPLORER_AFTER = "05"  # 00-explore reads the indexes and runs 01-05 saved: the chain runs it right after 05
QUESTIONS_AFTER = "02"  # 08-questions drafts questions for a corpus that has none: 03 on need them
RUNS_AFTER = {"00": EXPLORER_AFTER, "08": QUESTIONS_AFTER, "09": "04"}  # notebooks out of their place in the chain


def _chain_order(nb: Path) -> tuple[str, str]:
    """By number, except ``00-*`` (the explorer ``make lab`` opens first), which runs after ``EXPLORER_AFTER``
    and before any later notebook (06, 07 ...), and ``08-questions`` (added later), which runs after 02."""
    number = nb.name[:2]
    return (RUNS_AFTER[number] + "+" if number in RUNS_AFTER else number, nb.name)


def notebooks(only: list[str] | None = None) -> list[Path]:
    """The numbered notebooks (``NN-name.ipynb``) in chain order (see :func:`_chain_order`), optionally
    filtered by number or name."""
    found = sorted(paths.NOTEBOOKS_DIR.glob("[0-9][0-9]-*.ipynb"), key=_chain_order)
    if only:
        found = [p for p in found if any(p.name.startswith(o) or p.stem == o for o in only)]
    return found


def split_params(text: str) -> list[str]:
    """``make report P="..."`` as ``--set`` items: split before each ``name=``, so that a list value may hold
    spaces (``"pool_k=30 variants=[vector, bm25]"`` -> ``["pool_k=30", "variants=[vector, bm25]"]``)."""
    return [p for p in re.split(r"\s+(?=[A-Za-z_][A-Za-z0-9_]*=)", text.strip()) if p]


def override_texts(overrides: list[str]) -> dict[str, str]:
    """``key -> value`` as typed in each ``--set key=value`` (before YAML parsing; the last one wins)."""
    return {k.strip(): v for k, sep, v in (item.partition("=") for item in overrides) if sep and k.strip()}


def _read_params_file(f: Path) -> dict[str, Any]:
    """One ``params/*.yaml`` file through :mod:`rerankeval.core.yamlsafe` (no aliases, no YAML 1.1 number forms,
    bounded size): a mapping of parameter names to values, else :class:`PreflightError` naming the file and line."""
    try:
        loaded = yamlsafe.load_file(f) or {}
    except yamlsafe.YamlRefused as exc:
        raise PreflightError(str(exc)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f", line {mark.line + 1}" if mark is not None else ""
        raise PreflightError(
            f"{f}{at}: not valid YAML ({getattr(exc, 'problem', None) or exc}); "
            "expected `name: value` lines, e.g. `pool_k: 10`"
        ) from None
    if not isinstance(loaded, dict):
        raise PreflightError(f"{f}: expected a mapping of parameter names to values (name: value lines)")
    return loaded


def _read_override(item: str) -> tuple[str, Any]:
    """``--set key=value`` as ``(key, the value read as YAML)`` through :mod:`rerankeval.core.yamlsafe`."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise PreflightError(f'--set {item!r}: expected key=value (e.g. --set pool_k=30, or P="pool_k=30")')
    try:
        return key.strip(), yamlsafe.load(value, f"--set {item!r}", with_line=False)
    except yamlsafe.YamlRefused as exc:
        raise PreflightError(str(exc)) from None
    except yaml.YAMLError as exc:
        problem = str(getattr(exc, "problem", None) or exc).strip()
        raise PreflightError(
            f"--set {item!r}: the value is not valid YAML ({problem}); e.g. --set ks=[1,3,5] "
            f'or P="variants=[vector, bm25]"; quote text with \' or "'
        ) from None


def load_params(dataset_name: str, overrides: list[str]) -> dict[str, Any]:
    """``params/default.yaml``, then ``params/<dataset>.yaml``, then each ``--set key=value`` (the last wins)."""
    params: dict[str, Any] = {}
    for f in (paths.PARAMS_DIR / "default.yaml", paths.PARAMS_DIR / f"{dataset_name}.yaml"):
        if f.is_file():
            params.update(_read_params_file(f))
    params.update(_read_override(item) for item in overrides)
    return params


def unknown_parameters(params: Mapping[str, Any], typed: Mapping[str, str]) -> None:
    """Parameters no notebook declares: an error for one typed after ``--set``/``P=`` that is close to a declared
    name (a typo: its value would be lost: ``pool_kk`` -> did you mean ``pool_k``?), else one warning line, with
    the close names when there are some. ``typed``: the ``--set`` values as typed (:func:`override_texts`)."""
    declared = set().union(*(declared_parameters(nb) for nb in notebooks()))
    unknown = sorted(set(params) - declared - {"dataset"})
    close = {k: difflib.get_close_matches(k, sorted(declared), n=3, cutoff=0.75) for k in unknown}
    typos = [k for k in unknown if k in typed and close[k]]
    if typos:
        lines = [
            f"{k}: no notebook declares it; did you mean {' or '.join(close[k])}? "
            f'e.g. P="{close[k][0]}={typed[k].strip()}"'
            for k in typos
        ]
        raise PreflightError("unknown parameter(s), found before running anything:\n  " + "\n  ".join(lines))
    if unknown:
        said = [k + (f" (did you mean {' or '.join(close[k])}?)" if close[k] else "") for k in unknown]
        print(
            f"[chain] WARNING: no notebook declares the parameter(s) {', '.join(said)}; they are ignored "
            f"(see the parameters cell at the top of each notebook)",
            file=sys.stderr,
        )


def _parameters_cell(nb: Path) -> list[ast.stmt]:
    """The statements of the notebook's cell tagged ``parameters`` (empty without one)."""
    st = nb.stat()
    return ast.parse(_parameters_source(str(nb), st.st_mtime_ns, st.st_size)).body


@functools.lru_cache(maxsize=64)
def _parameters_source(path: str, mtime_ns: int, size: int) -> str:  # noqa: ARG001 - the file's state is the key
    """The source of the cell tagged ``parameters`` ("" without one), read once per state of the file (the chain
    asks for each notebook's parameters a few dozen times before anything runs). A notebook in the current format
    (nbformat 4) is read as the JSON it is; an older one through nbformat's conversion."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("nbformat") != 4:
        import nbformat

        data = nbformat.read(path, as_version=4)
    for cell in data["cells"]:
        source = cell.get("source", "")
        if cell.get("cell_type") == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            return "".join(source) if isinstance(source, list) else source
    return ""


def declared_parameters(nb: Path) -> set[str]:
    """Names assigned in the notebook's cell tagged ``parameters`` (parsed as Python, comments and all)."""
    names: set[str] = set()
    for node in _parameters_cell(nb):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _as_typed(value: Any) -> str:
    """A literal as one types it after ``--set name=`` (YAML): ``60``, ``yesno``, ``false``, ``[1,3,5]``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_as_typed(v) for v in value) + "]"
    return str(value) if isinstance(value, (str, int, float)) else repr(value)


def declared_types(nb: Path) -> dict[str, tuple[str, str, str]]:
    """``name -> (annotation, the cell's line, its default as typed after --set name=)`` for each annotated
    assignment of the notebook's ``parameters`` cell (``rrf_k: int = 60`` -> ``("int", "rrf_k: int = 60", "60")``)."""
    out = {}
    for node in _parameters_cell(nb):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            try:
                default = _as_typed(ast.literal_eval(node.value)) if node.value is not None else ""
            except (ValueError, SyntaxError):
                default = ast.unparse(node.value)
            out[node.target.id] = (ast.unparse(node.annotation), ast.unparse(node), default)
    return out


def effective_parameters(nb: Path, params: Mapping[str, Any]) -> dict[str, Any]:
    """What the notebook will run with: its parameters cell's literal defaults, overridden by ``params``."""
    values: dict[str, Any] = {}
    for node in _parameters_cell(nb):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            with contextlib.suppress(ValueError, SyntaxError):
                values[node.target.id] = ast.literal_eval(node.value)
    declared = declared_parameters(nb)
    values.update({k: v for k, v in params.items() if k in declared})
    return values


_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict}
_EXPECTED = {
    "int": "a whole number",
    "float": "a number",
    "str": "text",
    "bool": "true or false",
    "list": "a list, e.g. [a, b]",
    "dict": "a mapping, e.g. {a: 1}",
}


def _coerce(annotation: str, value: Any, text: str | None) -> Any:
    """``value`` as the notebook's type when YAML read it otherwise but the meaning is clear: a ``str``
    parameter given ``42``, ``1.0`` or ``yes`` (the text as typed), or nothing (empty); a ``float`` given
    ``1e-3`` (YAML 1.1 reads that as text)."""
    if annotation == "str" and value is None:
        return ""
    if annotation == "str" and isinstance(value, (int, float)) and (text is not None or not isinstance(value, bool)):
        return text.strip() if text is not None else str(value)
    if annotation == "float" and isinstance(value, str):
        with contextlib.suppress(ValueError):
            return float(value)
    return value


def _type_ok(annotation: str, value: Any) -> bool:
    want = _TYPES[annotation]
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


def typed_parameters(
    nbs: list[Path], params: Mapping[str, Any], texts: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``params`` checked against the types the notebooks' ``parameters`` cells declare (``rrf_k: int = 60``),
    with the clear cases converted (:func:`_coerce`); raise :class:`PreflightError` naming each parameter, the
    type expected and the value given. ``texts``: the ``--set`` values as typed (:func:`override_texts`)."""
    texts = texts or {}
    out = dict(params)
    problems: dict[str, list[str]] = {}
    for nb in nbs:
        for name, (annotation, line, default) in declared_types(nb).items():
            if name == "dataset" or name not in out or annotation not in _TYPES:
                continue
            value = _coerce(annotation, out[name], texts.get(name))
            if _type_ok(annotation, value):
                out[name] = value
                continue
            if name in problems:
                problems[name].append(nb.stem)
                continue
            shown = repr(texts[name].strip()) if name in texts else repr(value)
            declared = line if len(line) <= 60 else line[:57] + "..."
            problems[name] = [
                f"{name} = {shown}: expected {annotation} ({_EXPECTED[annotation]}), as declared by "
                f'`{declared}`; e.g. P="{name}={default}" (in ',
                nb.stem,
            ]
    if problems:
        lines = [f"{msg}{', '.join(where)})" for msg, *where in problems.values()]
        raise PreflightError("parameters of the wrong type, found before running anything:\n  " + "\n  ".join(lines))
    return out
