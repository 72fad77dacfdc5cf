"""Run the numbered notebooks in order with papermill and render the HTML report.

``python -m rerankeval.apps.chain --dataset NAME_OR_PATH [--set key=value ...] [--only NN] [--allow-fallback]``
(or the console command ``rerankeval-chain``) is what ``make report`` calls. Parameters come from
``params/default.yaml``, then ``params/<dataset>.yaml``, then ``--set``; each notebook receives only the parameters
its ``parameters`` cell declares. Executed notebooks go to ``results/<dataset>/executed/``, HTML to
``results/<dataset>/report/``; the index links every notebook that has a rendered page, this run's or an earlier
one's (marked "earlier run"). The explorer ``00-explore`` (what ``make lab`` opens first) reads what 01-05 saved,
so the chain runs it after 05 and before 06+.

Before any notebook runs the chain checks what it can: the settings (environment and ``.env``, read once by
:func:`main` and passed down), each parameter against the type its notebook's ``parameters`` cell declares
(``rrf_k: int = 60``), parameters that must agree (``pool_k >= final_k``), that the results folder is writable, the
dataset's files, and, when the LLM notebook is in the run, that the LLM endpoint answers (the local llama-server is
started and must become healthy). A dead endpoint stops the run with its URL and the fix, unless fallbacks were
asked for: ``--allow-fallback`` or ``--set allow_fallback=true`` (``make report P="allow_fallback=true"``), in which
case every rerank call falls back to the fused order. The endpoint's settings reach the notebook kernels through
their environment only.

A notebook whose inputs are unchanged since its last success is skipped (``[chain] 03-retrieve.ipynb up to date
(skipped)``) and its executed copy and page are reused: its fingerprint (``executed/<stem>.fingerprint.json``) holds
the notebook file, its parameters, the package's code, the settings that choose models, endpoints and backends, and
every file it read and folder it listed under the dataset folder and ``results/<dataset>/``, traced in its kernel
(:mod:`~rerankeval.apps.chain.files`). ``--force`` (``make report FORCE=1``) runs every notebook.

Executed notebooks and pages are replaced atomically (a temporary file, then ``os.replace``): a full disk
leaves the last complete copy, never a truncated one, and ends the run with one ``[chain] ERROR`` line naming
the folder and the OS error.

Exit status: 0 done; 1 a notebook failed (the run stops, names the notebook and cell, keeps the executed
copy and still writes the index); 2 a problem found before the run (settings, dataset, parameters, results
folder, endpoint); 130 interrupted by Ctrl-C, 143 by SIGTERM (the index shows what finished; re-run the same
command to resume: every finished stage is cached). A second Ctrl-C kills a notebook's kernel that did not stop; a
third ends the chain at once with one line, without updating the index (:class:`Interrupt`).

This module runs the notebooks and reports; the parts it uses live beside it:
:mod:`~rerankeval.apps.chain.params` (the notebooks, their parameters and the type checks),
:mod:`~rerankeval.apps.chain.preflight` (the checks before the run, the endpoint, the fallback verdict),
:mod:`~rerankeval.apps.chain.signals` (Ctrl-C and SIGTERM) and :mod:`~rerankeval.apps.chain.files` (atomic
saves, OS errors as the user reads them, the index's page records).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rerankeval.apps.chain.files import (
    atomic_saves,
    chain_engine,
    code_version,
    forget_fingerprint,
    index_pages,
    kernel_os_hint,
    notebook_key,
    os_error,
    read_records,
    record_fingerprint,
    redact_file,
    shown_path,
    trace_line,
    up_to_date,
)
from rerankeval.apps.chain.params import (
    PreflightError,
    declared_parameters,
    load_params,
    notebooks,
    override_texts,
    split_params,
    typed_parameters,
    unknown_parameters,
)
from rerankeval.apps.chain.preflight import (
    ALLOW_FALLBACK,
    check_baseline,
    check_dataset,
    check_parameters,
    check_writable,
    endpoint_fix,
    llm_fallbacks,
    llm_fell_back,
    needs_llm,
    request_kinds,
    start_endpoint,
    wants_llm,
)
from rerankeval.apps.chain.signals import (
    EXIT_TERMINATED,
    SIGNALS,
    Interrupt,
    kernel_manager_class,
)
from rerankeval.core import paths
from rerankeval.core.settings import Settings, load_settings

# jsonschema (under nbformat and papermill) imports its optional IRI checker, rfc3987_syntax, which builds 38 lark
# grammars at import: 3 of a warm run's seconds. Nothing here validates an IRI (nbformat's schema has none).
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

KERNEL = "rerankeval"
EXIT_FAILED = 1  # a notebook failed
EXIT_PREFLIGHT = 2  # a problem found before the run


def notebook_params(nb: Path, dp: paths.DatasetPaths, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters papermill gives ``nb``: the ones its ``parameters`` cell declares, and the dataset."""
    return {**{k: v for k, v in params.items() if k in declared_parameters(nb)}, "dataset": str(dp.source)}


def run_notebook(
    nb: Path,
    dp: paths.DatasetPaths,
    params: Mapping[str, Any],
    kernel: str,
    env: Mapping[str, str],
    interrupt: Interrupt,
    exec_lines: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Execute one notebook, keep and render its executed copy; the index entry for it (``exec_lines``: run in
    the kernel before the notebook, the read trace of :class:`Freshness`). The kernel starts with this process's
    progress mode and the notebook's name as its stage (:func:`rerankeval.core.progress.configure_line`: its lines
    read ``[04-rerank] rerank: ...``), and ``RERANKEVAL_STAGE`` in its environment (``Settings.stage``)."""
    interrupt.in_notebook = True  # from here a signal stops the kernel, never raises (not inside these imports)
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from rerankeval.core.progress import DISPLAY, STAGE_ENV, configure_line

    nb_params = notebook_params(nb, dp, params)
    out, html = dp.executed_notebook(nb.name), dp.notebook_html(nb.stem)
    exit_log = dp.executed_dir / f"{nb.stem}.kernel-exit.log"  # what the kernel printed while shutting down
    earlier = out.stat().st_mtime_ns if out.exists() else None  # an earlier run's copy, until this run saves
    print(f"[chain] {nb.name} ...", flush=True)
    t0 = time.perf_counter()
    status, error = "ok", None
    try:
        atomic_saves(dp.executed_dir)
        papermill.execute_notebook(
            str(nb),
            str(out),
            parameters=nb_params,
            kernel_name=kernel,
            progress_bar=False,
            cwd=str(paths.ROOT),
            engine_name=chain_engine(),
            kernel_manager_class=kernel_manager_class(
                {**env, STAGE_ENV: nb.stem}, interrupt, (configure_line(DISPLAY.mode, nb.stem), *exec_lines), exit_log
            ),
        )
    except KeyboardInterrupt:
        interrupt.hit = True
    except PapermillExecutionError as exc:
        status, error = (
            "failed",
            (
                f"{nb.name} failed in cell {exc.cell_index} (execution count "
                f"{exc.exec_count}): {exc.ename}: {exc.evalue}{kernel_os_hint(exc.evalue)}"
            ),
        )
    except OSError as exc:  # saving the executed copy: a full disk, a folder that became read-only
        status, error = "failed", f"{nb.name} stopped: {os_error(exc, dp.executed_dir)}"
    except Exception as exc:  # kernel died, missing kernel, bad parameters...
        status, error = "failed", f"{nb.name} could not be executed: {type(exc).__name__}: {exc}"
    finally:
        interrupt.kernel_done()
        with contextlib.suppress(OSError):
            if exit_log.stat().st_size == 0:
                exit_log.unlink()
    if interrupt.hit:
        verb, what, _ = interrupt.how
        status, error = "interrupted", f"{nb.name} was {verb} ({what}); re-run to resume"
    seconds = time.perf_counter() - t0
    if out.exists() and (status == "ok" or out.stat().st_mtime_ns != earlier):
        status, error = _render_page(dp, nb, status, error)
    print(f"[chain] {nb.name} {status.upper() if status != 'ok' else 'ok'} in {seconds:.1f} s", flush=True)
    return {
        "name": nb.stem,
        "href": html.name,
        "status": status,
        "seconds": round(seconds, 1),
        "error": error,
        "rerun": True,
        "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def _render_page(dp: paths.DatasetPaths, nb: Path, status: str, error: str | None) -> tuple[str, str | None]:
    """Redact the executed copy and render its page; ``(status, error)``, with a page that could not be written."""
    from rerankeval.report import pages as pages_mod

    out = dp.executed_notebook(nb.name)
    try:
        redact_file(out)
        pages_mod.render_notebook_html(out, dp.notebook_html(nb.stem), pages_mod.questions_note(dp), roots=dp.roots)
    except OSError as exc:
        problem = f"{nb.name}: its page was not rendered: {os_error(exc, dp.report_dir)}"
        return ("failed", problem) if status == "ok" else (status, f"{error}; {problem}")
    return status, error


class Freshness:
    """Which notebooks are up to date (skipped) and the fingerprints of those that ran (see
    :mod:`~rerankeval.apps.chain.files`); ``force``: none is up to date, every notebook runs."""

    def __init__(
        self,
        dp: paths.DatasetPaths,
        params: Mapping[str, Any],
        settings: Settings,
        allow_fallback: bool,
        force: bool,
        trace_dir: Path,
    ) -> None:
        self.dp, self.params, self.settings, self.force, self.trace_dir = dp, params, settings, force, trace_dir
        self.extra = {"allow_fallback": allow_fallback}
        self.code = code_version()
        self.started: dict[str, int] = {}

    def key(self, nb: Path) -> dict[str, Any]:
        return notebook_key(nb, notebook_params(nb, self.dp, self.params), self.code, self.extra, self.settings)

    def skips(self, nb: Path) -> bool:
        return not self.force and up_to_date(self.dp, nb, self.key(nb))

    def before(self, nb: Path) -> tuple[str, ...]:
        """Forget ``nb``'s fingerprint and start its trace: the kernel's start-up line."""
        forget_fingerprint(self.dp, nb)
        self.started[nb.stem] = time.time_ns()
        return (trace_line(self.trace_dir / f"{nb.stem}.reads", [self.dp.source, self.dp.root]),)

    def after(self, nb: Path, used_llm: bool = False) -> None:
        """Record ``nb``'s fingerprint, unless some of its LLM calls fell back (``used_llm``: it may have made some;
        :func:`~rerankeval.apps.chain.preflight.llm_fallbacks`): then it runs again next time."""
        fell_back = llm_fallbacks(self.dp, nb, self.started[nb.stem]) if used_llm else None
        if fell_back:
            print(
                f"[chain] {nb.name}: {fell_back}; not recorded as up to date: the next run runs it again and asks "
                "only those calls (the usable replies are cached)",
                flush=True,
            )
            return
        record_fingerprint(self.dp, nb, self.key(nb), self.trace_dir / f"{nb.stem}.reads", self.started[nb.stem])


def _skipped_page(dp: paths.DatasetPaths, nb: Path) -> dict[str, Any]:
    print(f"[chain] {nb.name} up to date (skipped)", flush=True)
    earlier = read_records(dp).get(nb.stem) or {}
    return {
        "name": nb.stem,
        "href": dp.notebook_html(nb.stem).name,
        "status": "ok",
        "seconds": None,
        "error": None,
        "rerun": True,
        "skipped": True,
        "finished": earlier.get("finished"),
    }  # when it last ran


def _uses_llm(nb: Path, params: Mapping[str, Any]) -> bool:
    return needs_llm(nb) or wants_llm(nb, params)


def _execute_all(
    dp: paths.DatasetPaths,
    nbs: list[Path],
    params: Mapping[str, Any],
    settings: Settings,
    kernel: str,
    allow_fallback: bool,
    interrupt: Interrupt,
    pages: list[dict[str, Any]],
    force: bool = False,
) -> None:
    """Run ``nbs`` in order until one fails or is interrupted, appending their index entries to ``pages``; a
    notebook whose inputs are unchanged since its last success is skipped (unless ``force``).

    ``pages`` is the caller's list, so the entries of the notebooks that finished survive a Ctrl-C that raises
    between two notebooks (:class:`Interrupt` raises there). The LLM endpoint is started before the first notebook
    when a notebook that uses it is not up to date, else only if one turns out to need a run after all.
    """
    import tempfile

    with contextlib.ExitStack() as stack:
        fresh = Freshness(
            dp,
            params,
            settings,
            allow_fallback,
            force,
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rerankeval-reads-"))),
        )
        env: dict[str, str] | None = None
        stale = [nb for nb in nbs if not fresh.skips(nb)]
        kinds = request_kinds(stale, params)  # one tiny real chat completion of each is sent before they run
        # a configured endpoint is checked before the first notebook (a dead one stops the run in a second); the
        # local server is started only when the first LLM notebook comes, so its build (make report runs it in the
        # background) is off the critical path of 01 and 02 (issue 36 item 1)
        if settings.configured and any(_uses_llm(nb, params) for nb in stale):
            env = start_endpoint(stack, settings, allow_fallback or not any(needs_llm(nb) for nb in stale), kinds)
            interrupt.reclaim()  # the local server's SIGTERM handler would skip the partial report's line
        for nb in nbs:
            if fresh.skips(nb):
                pages.append(_skipped_page(dp, nb))
                continue
            if env is None and _uses_llm(nb, params):
                env = start_endpoint(stack, settings, allow_fallback or not needs_llm(nb), kinds)
                interrupt.reclaim()
            pages.append(run_notebook(nb, dp, params, kernel, env or {}, interrupt, fresh.before(nb)))
            interrupt.in_notebook = False  # only now: a Ctrl-C while its page is rendered must not lose it
            if pages[-1]["status"] != "ok" or interrupt.hit:
                break
            with interrupt.deferred():  # its record and fingerprint whole (their lazy imports too), then a signal
                if needs_llm(nb) and not allow_fallback:
                    pages[-1]["llm_problem"] = llm_fell_back(dp)
                if not pages[-1].get("llm_problem"):
                    fresh.after(nb, _uses_llm(nb, params))


def _preload() -> None:
    """Import what the end of the run needs (the index's renderer, pandas and numpy under it) before a notebook
    runs, inside :meth:`Interrupt.deferred`: a Ctrl-C landing in a half-done import of numpy left a module that
    raised (or segfaulted) when the index was written."""
    import rerankeval.report.render  # noqa: F401
    import rerankeval.rerank.ledger  # noqa: F401 - llm_fell_back's, after 04


def _write_index(dp: paths.DatasetPaths, pages: list[dict[str, Any]]) -> tuple[str | None, OSError | None]:
    """``(where the index is, None)``, or ``(None, the OS error)`` when it could not be written."""
    from rerankeval.report import render as report

    try:
        return shown_path(report.write_index(dp, index_pages(dp, pages))), None
    except OSError as exc:
        return None, exc


def _finish(
    dp: paths.DatasetPaths,
    pages: list[dict[str, Any]],
    interrupted: bool,
    t0: float,
    settings: Settings,
    signum: int = signal.SIGINT,
) -> int:
    """Write the index and print the last lines; the exit status (``signum``: what interrupted the run)."""
    index, index_error = _write_index(dp, pages)
    report_at = index or f"the index was not updated ({os_error(index_error, dp.report_dir, with_fix=False)})"
    done = [p["name"] for p in pages if p["status"] == "ok"]
    if interrupted:
        verb, what, status = SIGNALS.get(signum, SIGNALS[signal.SIGINT])
        print(
            f"\n[chain] {verb} ({what}); finished: {', '.join(done) or 'none'}; report (partial): {report_at}; "
            "re-run the same command to resume (finished stages are cached)",
            file=sys.stderr,
            flush=True,
        )
        return status
    failed = next((p for p in pages if p["status"] != "ok"), None)
    if failed:
        kept = dp.executed_notebook(f"{failed['name']}.ipynb").exists()
        print(
            f"\n[chain] ERROR: {failed['error']}\n[chain] "
            f"{'executed copy kept at ' + shown_path(dp.executed_dir) if kept else 'no executed copy was saved'}; "
            f"report (partial): {report_at}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_FAILED
    if index_error:
        print(
            f"\n[chain] ERROR: the report index was not updated: {os_error(index_error, dp.report_dir)}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_FAILED
    fell_back = next((p["llm_problem"] for p in pages if p.get("llm_problem")), None)
    if fell_back:
        fix = f"\n{endpoint_fix(settings.configured)}" if fell_back["endpoint"] else ""
        print(f"\n[chain] ERROR: {fell_back['text']}.{fix}\n[chain] report: {index}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    times = ", ".join(
        f"{p['name'][:2]} {'skipped' if p.get('skipped') else format(p['seconds'], '.0f') + ' s'}" for p in pages
    )
    print(
        f"[chain] done: {len(pages)} notebook(s) in {time.perf_counter() - t0:.0f} s ({times}); report: {index}",
        flush=True,
    )
    return 0


def run_chain(
    dataset: str,
    settings: Settings,
    overrides: list[str] | None = None,
    only: list[str] | None = None,
    kernel: str = KERNEL,
    allow_fallback: bool = False,
    force: bool = False,
) -> int:
    """Check, run and report with ``settings`` (:func:`main`'s); the exit status (see the module docstring).
    Raises :class:`PreflightError`. ``force``: run every notebook, also those whose inputs are unchanged since their
    last success."""
    t0 = time.perf_counter()
    dp = paths.resolve_dataset(dataset, settings)
    params = load_params(dp.name, overrides or [])
    allow_fallback = bool(params.pop(ALLOW_FALLBACK, False)) or allow_fallback
    nbs = notebooks(only)
    if not nbs:
        raise PreflightError(
            f"no notebooks match {only!r} in {paths.NOTEBOOKS_DIR} (give a number such as "
            "--only 05, or a notebook name)"
        )
    unknown_parameters(params, override_texts(overrides or []))
    params = typed_parameters(nbs, params, override_texts(overrides or []))
    check_parameters(nbs, params)
    check_baseline(dp, nbs, params)
    check_dataset(dp, nbs, params)
    check_writable(dp)
    interrupt = Interrupt()
    pages: list[dict[str, Any]] = []
    with interrupt.installed():
        try:
            with interrupt.deferred():
                _preload()
            _execute_all(dp, nbs, params, settings, kernel, allow_fallback, interrupt, pages, force)
        except KeyboardInterrupt:
            interrupt.hit = True
        except SystemExit as exc:  # SIGTERM while the local LLM server started: its own handler stopped it
            if exc.code != EXIT_TERMINATED:
                raise
            interrupt.hit, interrupt.signum = True, signal.SIGTERM
        with interrupt.deferred(finishing=True):  # the index and the last line, whatever is pressed meanwhile
            return _finish(dp, pages, interrupt.hit, t0, settings, interrupt.signum)


def main(argv: list[str] | None = None) -> int:
    """The chain's entry point (``python -m rerankeval.apps.chain``, ``rerankeval-chain``): the one place it reads
    the settings (environment and ``.env``); the exit status."""
    ap = argparse.ArgumentParser(prog="python -m rerankeval.apps.chain", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--dataset",
        default=os.environ.get("DATASET", paths.DEFAULT_DATASET),
        help="dataset name under data/ or ../shared/data, or a folder path",
    )
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a notebook parameter (repeatable)",
    )
    ap.add_argument(
        "--params",
        default="",
        metavar="'K=V K2=V2'",
        help="several --set at once, split before each name= (what make report P=... passes)",
    )
    ap.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="NN",
        help="run only notebooks whose name starts with this (repeatable)",
    )
    ap.add_argument("--kernel", default=KERNEL, help="Jupyter kernel name (default: %(default)s)")
    ap.add_argument(
        "--allow-fallback",
        action="store_true",
        help="run even when the LLM endpoint does not answer (every rerank call falls back to the "
        "fused order); same as --set allow_fallback=true",
    )
    ap.add_argument(
        "--force",
        action="store_true",
        help="run every notebook, also those whose inputs are unchanged since their last success (make report FORCE=1)",
    )
    args = ap.parse_args(argv)
    try:
        settings = load_settings()  # the chain's one read of the environment and .env: passed down from here
    except ValueError as exc:  # a malformed value (RERANK_TIMEOUT=0)
        print(f"[chain] ERROR: {exc}", file=sys.stderr)
        return EXIT_PREFLIGHT
    from rerankeval.core import progress

    progress.configure(settings)  # RERANKEVAL_PROGRESS: this process's display, and its kernels' (run_notebook)
    try:
        overrides = [*split_params(args.params), *args.overrides]
        return run_chain(args.dataset, settings, overrides, args.only, args.kernel, args.allow_fallback, args.force)
    except (paths.DatasetNotFound, PreflightError) as exc:
        print(f"[chain] ERROR: {exc}", file=sys.stderr)
        return EXIT_PREFLIGHT
    except KeyboardInterrupt as exc:  # before the notebooks started, or again while the index was being written
        verb, what, status = SIGNALS.get(getattr(exc, "signum", signal.SIGINT), SIGNALS[signal.SIGINT])
        print(f"\n[chain] {verb} ({what}); the report index may be out of date", file=sys.stderr)
        return status
