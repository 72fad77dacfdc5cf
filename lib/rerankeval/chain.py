"""Run the numbered notebooks in order with papermill and render the HTML report.

``python -m rerankeval.chain --dataset NAME_OR_PATH [--set key=value ...]`` is what ``make report``
calls. Parameters come from ``params/default.yaml``, then ``params/<dataset>.yaml``, then ``--set``;
each notebook receives only the parameters its ``parameters`` cell declares. Executed notebooks go to
``results/<dataset>/executed/``, HTML to ``results/<dataset>/report/``. When a notebook fails the run
stops, names the notebook and cell, keeps the executed copy, still writes the report index, and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from . import paths

KERNEL = "rerankeval"


def notebooks(only: list[str] | None = None) -> list[Path]:
    """The numbered notebooks (``NN-name.ipynb``) in order, optionally filtered by number or name."""
    found = sorted(p for p in paths.NOTEBOOKS_DIR.glob("[0-9][0-9]-*.ipynb"))
    if only:
        found = [p for p in found if any(p.name.startswith(o) or p.stem == o for o in only)]
    return found


def load_params(dataset_name: str, overrides: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for f in (paths.PARAMS_DIR / "default.yaml", paths.PARAMS_DIR / f"{dataset_name}.yaml"):
        if f.is_file():
            loaded = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
            if not isinstance(loaded, dict):
                raise SystemExit(f"{f}: expected a mapping of parameter names to values")
            params.update(loaded)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--set {item!r}: expected key=value (e.g. --set pool_k=30)")
        params[key.strip()] = yaml.safe_load(value)
    return params


def declared_parameters(nb: Path) -> set[str]:
    """Names assigned in the notebook's cell tagged ``parameters`` (parsed as Python, comments and all)."""
    import ast

    import nbformat

    for cell in nbformat.read(nb, as_version=4).cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            names: set[str] = set()
            for node in ast.parse(cell.source).body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names.add(node.target.id)
                elif isinstance(node, ast.Assign):
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            return names
    return set()


def _needs_llm(nb: Path) -> bool:
    return "rerank" in nb.stem


def _redact_file(path: Path) -> None:
    """Remove any configured secret from an executed notebook before it is kept or rendered."""
    from .settings import redact

    text = path.read_text(encoding="utf-8")
    clean = redact(text)
    if clean != text:
        from .ioutil import atomic_write_text

        atomic_write_text(path, clean)


def run_chain(dataset: str, overrides: list[str] | None = None, only: list[str] | None = None,
              kernel: str = KERNEL) -> int:
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from . import report

    dp = paths.resolve_dataset(dataset)
    params = load_params(dp.name, overrides or [])
    nbs = notebooks(only)
    if not nbs:
        raise SystemExit(f"no notebooks match {only!r} in {paths.NOTEBOOKS_DIR}")
    declared_all = {nb: declared_parameters(nb) for nb in nbs}
    unknown = sorted(set(params) - set().union(*declared_all.values()) - {"dataset"})
    if unknown:
        print(f"[chain] WARNING: no notebook declares the parameter(s) {', '.join(unknown)}; they are ignored "
              f"(see the parameters cell at the top of each notebook)", file=sys.stderr)
    dp.executed_dir.mkdir(parents=True, exist_ok=True)
    dp.report_dir.mkdir(parents=True, exist_ok=True)
    pages: list[dict[str, Any]] = []
    failed: str | None = None
    with contextlib.ExitStack() as stack:
        llm_env: dict[str, str] | None = None
        for nb in nbs:
            declared = declared_all[nb]
            nb_params = {k: v for k, v in params.items() if k in declared}
            nb_params["dataset"] = str(dp.source)
            out = dp.executed_dir / nb.name
            html = dp.report_dir / f"{nb.stem}.html"
            if _needs_llm(nb) and llm_env is None:
                from .llm_server import ensure_endpoint

                llm_env = stack.enter_context(ensure_endpoint())
                os.environ.update(llm_env)
            print(f"[chain] {nb.name} ...", flush=True)
            t0 = time.perf_counter()
            error = None
            try:
                papermill.execute_notebook(
                    str(nb), str(out), parameters=nb_params, kernel_name=kernel,
                    progress_bar=False, cwd=str(paths.ROOT),
                )
            except PapermillExecutionError as exc:
                error = (f"{nb.name} failed in cell {exc.cell_index} (execution count {exc.exec_count}): "
                         f"{exc.ename}: {exc.evalue}")
            except Exception as exc:  # kernel died, missing kernel, bad parameters...
                error = f"{nb.name} could not be executed: {type(exc).__name__}: {exc}"
            seconds = time.perf_counter() - t0
            if out.exists():
                _redact_file(out)
                report.render_notebook_html(out, html)
            pages.append({"name": nb.stem, "href": html.name, "status": "failed" if error else "ok",
                          "seconds": round(seconds, 1), "error": error})
            print(f"[chain] {nb.name} {'FAILED' if error else 'ok'} in {seconds:.1f} s", flush=True)
            if error:
                failed = error
                break
    index = report.write_index(dp, pages)
    if failed:
        print(f"\n[chain] ERROR: {failed}\n[chain] executed copy kept at {dp.executed_dir}; "
              f"report (partial) at {index}", file=sys.stderr)
        return 1
    print(f"[chain] report: {index}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rerankeval.chain", description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default=os.environ.get("DATASET", paths.DEFAULT_DATASET),
                    help="dataset name under data/ or ../shared/data, or a folder path")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a notebook parameter (repeatable)")
    ap.add_argument("--only", action="append", default=None, metavar="NN",
                    help="run only notebooks whose name starts with this (repeatable)")
    ap.add_argument("--kernel", default=KERNEL, help="Jupyter kernel name (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        return run_chain(args.dataset, args.overrides, args.only, args.kernel)
    except paths.DatasetNotFound as exc:
        print(f"[chain] ERROR: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
