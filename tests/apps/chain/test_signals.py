"""Issue 32 defect 7 and issue 35 item 14: Ctrl-C pressed two or three times, and SIGTERM while an LLM stage runs.

Ctrl-C pressed 2-3 times during 04 crashed the chain 4 of 4 times (a segfault, rc 139, or a raw traceback from a
half-done import of pandas/numpy while the index was written); SIGTERM during 08 left no "[chain] ... report
(partial)" line (the local LLM server's context had replaced the chain's SIGTERM handler with its own).

A real ``python -m rerankeval.apps.chain``-like process (``chain.main``) runs stand-in notebooks on the python3
kernel; the LLM stage's notebook announces itself with a marker file and blocks, so every signal lands inside it, on
any machine. The endpoint is the fake LLM, given by a stand-in of ``llm.server.endpoint`` that, like the local
server's, installs its own SIGTERM handler while it lives.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from fakellm import FakeLLM
from rerankeval.apps.chain import signals as chain_signals

RUNNER = '''\
import contextlib, os, pathlib, signal, sys, time
from pathlib import Path


class SlowNumpy:
    """A loaded machine, where importing numpy's core takes seconds: the test's signal lands inside the import,
    in a module that numpy's C extension imports while it initialises (numpy._core._exceptions): interrupted
    there, numpy stays unusable in the process ("Unable to import required dependency numpy")."""

    done = False

    def find_spec(self, name, path=None, target=None):
        marker = os.environ.get("TEST_NUMPY_MARKER")
        if marker and not self.done and name == "numpy._core._exceptions":
            self.done = True
            pathlib.Path(marker).touch()
            time.sleep(3)
        return None


sys.meta_path.insert(0, SlowNumpy())
from rerankeval.core import paths

paths.NOTEBOOKS_DIR = Path(sys.argv[1])
from rerankeval.llm import server


@contextlib.contextmanager
def endpoint(settings, **kwargs):
    """As the local server's context does: its own SIGTERM handler while it lives (it stops the server)."""
    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        if os.environ.get("TEST_START_MARKER"):  # a server that takes its time to start
            pathlib.Path(os.environ["TEST_START_MARKER"]).touch()
            time.sleep(60)
        served = {"base_url": sys.argv[3], "api_key": "sk-fake", "model": "fake-reranker"}
        yield settings.model_copy(update=served)
    finally:
        signal.signal(signal.SIGTERM, old)


server.endpoint = endpoint
from rerankeval.apps import chain

sys.exit(chain.main(["--dataset", sys.argv[2], "--kernel", "python3"]))
'''

BLOCK = """\
import os, pathlib, signal, time
if os.environ.get("TEST_IGNORE_SIGTERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a kernel busy where SIGTERM does not stop it
pathlib.Path(os.environ["TEST_MARKER"]).touch()
while True:
    time.sleep(0.1)
"""


def _notebook(folder: Path, name: str, body: str) -> None:
    cell = new_code_cell('dataset: str = ""  # the chain passes the folder')
    cell.metadata["tags"] = ["parameters"]
    nb = new_notebook(
        cells=[cell, new_code_cell(body)],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(nb, folder / f"{name}.ipynb")


def _start(
    tmp_path: Path, dataset: Path, llm_stage: str, fake: FakeLLM, first: bool = True, **env: str
) -> subprocess.Popen:
    """The chain on ``02-first`` (unless not ``first``) and ``llm_stage``, which blocks (:data:`BLOCK`)."""
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    if first:
        _notebook(nbs, "02-first", "print('first done')")
    _notebook(nbs, llm_stage, BLOCK)
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER, encoding="utf-8")
    full = {
        **os.environ,
        "RERANKEVAL_RESULTS": str(tmp_path / "res"),
        "PYTHONHASHSEED": "0",
        "TEST_MARKER": str(tmp_path / "inside"),
        **env,
    }
    for key in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RERANK_ENDPOINT_ID"):
        full.pop(key, None)
    return subprocess.Popen(
        [sys.executable, str(runner), str(nbs), str(dataset), fake.base_url],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    t_end = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the chain ended (rc {proc.returncode}) before {marker.name}:\n{out}\n{err[-3000:]}")
        if time.monotonic() > t_end:
            proc.kill()
            pytest.fail(f"no {marker.name} within {timeout:.0f} s")
        time.sleep(0.05)


def _wait_inside(tmp_path: Path, proc: subprocess.Popen) -> None:
    """Until the LLM stage's notebook runs its blocking cell."""
    _wait_for(tmp_path / "inside", proc)


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the chain did not stop within {timeout:.0f} s:\n{out}\n{err[-3000:]}")


def _assert_one_clean_line(proc: subprocess.Popen, stdout: str, stderr: str, verb: str, status: int) -> list[str]:
    assert proc.returncode == status, f"rc {proc.returncode}\n{stdout}\n{stderr[-3000:]}"
    for noise in ("Traceback", "KeyboardInterrupt", "Segmentation", "Exception ignored", "SystemExit"):
        assert noise not in stderr, stderr[-3000:]
    lines = [ln for ln in stderr.splitlines() if ln.startswith(f"[chain] {verb} (")]
    assert len(lines) == 1, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == lines[0], stderr[-3000:]  # the last word is that line
    return lines


def test_three_quick_ctrl_c_during_04_end_with_one_line_and_rc_130(tmp_path, tiny_beir):
    """A kernel that does not stop on the first (busy where SIGTERM is ignored): the second kills it, the third
    ends the chain at once, with one line."""
    with FakeLLM() as fake:
        proc = _start(tmp_path, tiny_beir, "04-rerank", fake, TEST_IGNORE_SIGTERM="1")
        _wait_inside(tmp_path, proc)
        for _ in range(3):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.4)
        stdout, stderr = _finish(proc)
    _assert_one_clean_line(proc, stdout, stderr, "interrupted", chain_signals.EXIT_INTERRUPTED)


def test_ctrl_c_again_while_the_chain_imports_numpy_ends_with_one_line_and_rc_130(tmp_path, tiny_beir):
    """The reported crash: 04 the first notebook to run (01-03 up to date), the second and third Ctrl-C landed in
    the chain's own first import of pandas/numpy (for 04's page and the index), leaving numpy half-imported: a
    traceback or a segfault."""
    numpy_marker = tmp_path / "importing-numpy"
    with FakeLLM() as fake:
        proc = _start(tmp_path, tiny_beir, "04-rerank", fake, first=False, TEST_NUMPY_MARKER=str(numpy_marker))
        _wait_inside(tmp_path, proc)
        proc.send_signal(signal.SIGINT)
        _wait_for(numpy_marker, proc)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = _finish(proc)
    _assert_one_clean_line(proc, stdout, stderr, "interrupted", chain_signals.EXIT_INTERRUPTED)


def test_a_second_ctrl_c_kills_a_kernel_that_does_not_stop_and_the_index_is_written(tmp_path, tiny_beir):
    with FakeLLM() as fake:
        proc = _start(tmp_path, tiny_beir, "04-rerank", fake, TEST_IGNORE_SIGTERM="1")
        _wait_inside(tmp_path, proc)
        proc.send_signal(signal.SIGINT)
        time.sleep(3)  # the kernel ignores the first: still running
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        stdout, stderr = _finish(proc)
    line = _assert_one_clean_line(proc, stdout, stderr, "interrupted", chain_signals.EXIT_INTERRUPTED)[0]
    assert "finished: 02-first;" in line and "report (partial): " in line and "index.html" in line


def test_sigterm_during_08_with_the_endpoint_s_own_handler_says_report_partial(tmp_path, tiny_beir):
    with FakeLLM() as fake:
        proc = _start(tmp_path, tiny_beir, "08-questions", fake)
        _wait_inside(tmp_path, proc)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = _finish(proc)
    line = _assert_one_clean_line(proc, stdout, stderr, "terminated", chain_signals.EXIT_TERMINATED)[0]
    assert "finished: 02-first;" in line and "report (partial): " in line and "index.html" in line
    index = tmp_path / "res" / tiny_beir.name / "report" / "index.html"
    assert index.is_file() and line.split("report (partial): ")[1].startswith(str(index))


def test_sigterm_while_the_llm_server_starts_says_report_partial(tmp_path, tiny_beir):
    starting = tmp_path / "starting"
    with FakeLLM() as fake:
        proc = _start(tmp_path, tiny_beir, "08-questions", fake, TEST_START_MARKER=str(starting))
        _wait_for(starting, proc)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = _finish(proc)
    line = _assert_one_clean_line(proc, stdout, stderr, "terminated", chain_signals.EXIT_TERMINATED)[0]
    # the local server starts when the first LLM notebook comes (ddcb190, issue 36 item 1): after 02-first
    assert "finished: 02-first;" in line and "report (partial): " in line


def test_a_signal_raises_at_most_once_and_never_inside_a_deferred_section(monkeypatch):
    """The rules of :class:`Interrupt`, in this process (the third signal's exit is replaced by an exception)."""
    from rerankeval.apps.chain import signals as chain_signals

    class Quit(Exception):
        pass

    def quit_(line: str, status: int) -> None:
        raise Quit(line, status)

    monkeypatch.setattr(chain_signals, "_say_and_quit", quit_)
    it = chain_signals.Interrupt()
    reached = False
    with pytest.raises(chain_signals.Stopped):
        with it.deferred():
            it.handler(signal.SIGINT, None)  # recorded, not raised: an import here stays whole
            reached = True
    assert reached and it.hit and it.count == 1
    it.handler(signal.SIGINT, None)  # the second raises nothing
    with it.deferred(finishing=True):  # writing the index: even the third waits
        it.handler(signal.SIGINT, None)
    with pytest.raises(Quit) as quit_info:  # the fourth, after the index: at once
        it.handler(signal.SIGINT, None)
    line, status = quit_info.value.args
    assert status == chain_signals.EXIT_INTERRUPTED and line.startswith("[chain] interrupted (Ctrl-C, 4 times)")
