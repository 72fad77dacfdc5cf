"""Issue 14: ``--only`` keeps the index whole, and Ctrl-C (or SIGTERM, issue 19) stops a run cleanly and resumably.

The interrupt is a real SIGINT or SIGTERM sent to a real ``python -m rerankeval.apps.chain`` on the tiny PDF dataset,
with the fake LLM as the configured endpoint (so no llama-server starts), once notebook 01 has been rendered,
or once 02 is inside its cells (a test hook blocks its ``index.run`` call, whatever the machine's speed).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakellm import FakeLLM
from rerankeval.apps.chain import params as chain_params
from rerankeval.apps.chain import runner as chain
from rerankeval.apps.chain import signals as chain_signals
from rerankeval.core.settings import load_settings

SMALL = ["leg_k=10", "pool_k=5", "final_k=5", "ks=[1,3,5]"]


def chain_cmd(dataset: Path, *args: str) -> list[str]:
    cmd = [sys.executable, "-m", "rerankeval.apps.chain", "--dataset", str(dataset), "--kernel", "python3"]
    for s in SMALL:
        cmd += ["--set", s]
    return cmd + list(args)


def chain_env(results: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "RERANKEVAL_RESULTS": str(results),
            "RERANKEVAL_QDRANT_PATH": str(results / "qdrant"),
            "PYTHONHASHSEED": "0",
            **extra,
        }
    )
    return env


def index_rows(index: Path) -> dict[str, str]:
    """Notebook link target -> the row's text (link text and status), from the index's notebook table."""
    html = index.read_text(encoding="utf-8")
    return {
        m.group(1): re.sub(r"<[^>]+>", " ", m.group(0))
        for m in re.finditer(r'<tr><td><a href="([0-9]{2}-[^"]+\.html)">.*?</tr>', html, re.S)
    }


def test_only_keeps_every_rendered_page_in_the_index(tmp_path, tiny_pdf):
    results = tmp_path / "res"
    out = results / "tiny-pdf"
    (out / "report").mkdir(parents=True)
    (out / "executed").mkdir()
    for nb in chain_params.notebooks()[1:]:  # pages an earlier run rendered (03 failed then)
        (out / "report" / f"{nb.stem}.html").write_text("<html>earlier</html>", encoding="utf-8")
    (out / "executed" / "pages.json").write_text(
        json.dumps(
            {
                "03-retrieve": {
                    "name": "03-retrieve",
                    "href": "03-retrieve.html",
                    "status": "failed",
                    "seconds": 4.0,
                    "error": "03-retrieve.ipynb failed in cell 3",
                    "finished": "2026-11-30T20:00:00+00:00",
                }
            }
        ),
        encoding="utf-8",
    )
    r = subprocess.run(
        chain_cmd(tiny_pdf, "--only", "01"), env=chain_env(results), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]  # this run's notebook worked; the earlier failure only shows
    rows = index_rows(out / "report" / "index.html")
    assert sorted(rows) == sorted(f"{nb.stem}.html" for nb in chain_params.notebooks())
    assert "earlier run" not in rows["01-extract-corpus.html"] and " ok " in rows["01-extract-corpus.html"]
    for nb in chain_params.notebooks()[1:]:
        assert "earlier run" in rows[f"{nb.stem}.html"], rows
    assert "2026-11-30 20:00" in rows["03-retrieve.html"] and "failed" in rows["03-retrieve.html"]


def test_the_final_line_says_where_the_report_is(tmp_path, tiny_pdf):
    r = subprocess.run(
        chain_cmd(tiny_pdf, "--only", "01"),
        env=chain_env(tmp_path / "res"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("[chain] done: 1 notebook(s) in ") and "(01 " in last
    assert last.endswith(str(tmp_path / "res" / "tiny-pdf" / "report" / "index.html"))
    assert re.search(r"\[chain\] 01-extract-corpus.ipynb ok in [0-9.]+ s", r.stdout)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    t_end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the chain ended (rc {proc.returncode}) before {path.name} appeared:\n{out}\n{err[-3000:]}")
        if time.monotonic() > t_end:
            proc.kill()
            pytest.fail(f"{path.name} did not appear within {timeout:.0f} s")
        time.sleep(0.1)


def test_a_ctrl_c_between_two_notebooks_keeps_what_finished(tmp_path, tiny_pdf, monkeypatch, capsys):
    """The Ctrl-C that lands after 01 is done and before 02's kernel runs raises KeyboardInterrupt in the
    chain itself (no notebook to stop); 01 must still be reported finished and ok in the index."""
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "res"))
    monkeypatch.setenv("RERANKEVAL_QDRANT_PATH", str(tmp_path / "res" / "qdrant"))
    calls: list[str] = []

    def fake_run_notebook(nb, dp, params, kernel, env, interrupt, exec_lines=()):  # noqa: ARG001
        calls.append(nb.stem)
        if len(calls) == 2:  # as the real one starts 02: not yet inside a notebook
            interrupt.handler(signal.SIGINT, None)
        (dp.report_dir / f"{nb.stem}.html").write_text("<html>page</html>", encoding="utf-8")
        return {
            "name": nb.stem,
            "href": f"{nb.stem}.html",
            "status": "ok",
            "seconds": 1.0,
            "error": None,
            "rerun": True,
            "finished": "2026-12-01T06:00:00+00:00",
        }

    monkeypatch.setattr(chain, "run_notebook", fake_run_notebook)
    rc = chain.run_chain(str(tiny_pdf), load_settings(), SMALL, only=["01", "02"])
    assert rc == chain_signals.EXIT_INTERRUPTED and calls == ["01-extract-corpus", "02-build-indexes"]
    msg = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[chain] interrupted")]
    assert len(msg) == 1 and "finished: 01-extract-corpus;" in msg[0], msg
    rows = index_rows(tmp_path / "res" / "tiny-pdf" / "report" / "index.html")
    assert list(rows) == ["01-extract-corpus.html"] and " ok " in rows["01-extract-corpus.html"]


# Put first on the kernels' PYTHONPATH, this makes 02's index.run announce itself (a marker file) and block
# until the kernel is stopped: a signal sent once the marker exists lands inside 02's cells, on any machine.
BLOCK_02 = """\
import os
if os.environ.get("RERANKEVAL_STAGE") == "02-build-indexes" and os.environ.get("TEST_BLOCK_MARKER"):
    import pathlib
    import time

    import rerankeval.index.build

    def _blocked(*args, **kwargs):
        pathlib.Path(os.environ["TEST_BLOCK_MARKER"]).touch()
        while True:
            time.sleep(0.2)

    rerankeval.index.build.run = _blocked  # notebook 02 calls index.run: the face looks it up here at each call
"""


@pytest.mark.parametrize(
    "where, sig",
    [("while-02-starts", signal.SIGINT), ("inside-02", signal.SIGINT), ("inside-02", signal.SIGTERM)],
    ids=["ctrl-c-while-02-starts", "ctrl-c-inside-02", "sigterm-inside-02"],
)
def test_a_signal_stops_the_run_cleanly_updates_the_index_and_a_rerun_resumes(tmp_path, tiny_pdf, where, sig):
    """Ctrl-C exits 130, SIGTERM 143; either way one line names what finished and the index shows it."""
    results = tmp_path / "res"
    out = results / "tiny-pdf"
    verb, _, status = chain_signals.SIGNALS[sig]
    hook, marker = tmp_path / "hook", tmp_path / "inside-02"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BLOCK_02, encoding="utf-8")
    with FakeLLM() as fake:
        env = chain_env(results, OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-fake")
        blocking = {
            **env,
            "TEST_BLOCK_MARKER": str(marker),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")])),
        }
        proc = subprocess.Popen(
            chain_cmd(tiny_pdf), env=blocking, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        _wait_for(out / "report" / "01-extract-corpus.html", proc, timeout=600)
        chunks_mtime = (out / "corpus" / "chunks.jsonl").stat().st_mtime_ns
        if where == "inside-02":
            _wait_for(marker, proc, timeout=300)
        proc.send_signal(sig)
        try:
            stdout, stderr = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"the chain did not stop within 180 s of {sig.name}")
        sent = [body for _, path, body in fake.requests if path.endswith("/chat/completions")]
        assert all(b["max_tokens"] == 1 for b in sent)  # 02 never finished: only the preflight's probes were sent
    assert proc.returncode == status, f"{stdout}\n{stderr[-3000:]}"
    own = str(Path(chain.__file__).parent)  # the chain's own modules: apps/chain/*.py
    assert "KeyboardInterrupt" not in stderr and own not in stderr, stderr[-3000:]
    if where == "inside-02":  # a kernel terminated while it starts may log a zmq traceback of its own (harmless)
        assert "Traceback" not in stderr, stderr[-3000:]
    msg = [ln for ln in stderr.splitlines() if ln.startswith(f"[chain] {verb} (")]
    assert len(msg) == 1 and "index.html" in msg[0], stderr[-3000:]
    assert msg[0].split("finished: ")[1].split(";")[0] == "01-extract-corpus", msg[0]
    rows = index_rows(out / "report" / "index.html")
    assert " ok " in rows["01-extract-corpus.html"] and "earlier run" not in rows["01-extract-corpus.html"]
    assert {name for name, row in rows.items() if " ok " in row} == {"01-extract-corpus.html"}
    if where == "inside-02":  # the cells done so far are kept and rendered, marked as interrupted
        assert "interrupted" in rows["02-build-indexes.html"] and verb in rows["02-build-indexes.html"]

    again = subprocess.run(
        chain_cmd(tiny_pdf, "--only", "01", "--only", "02"), env=env, capture_output=True, text=True, timeout=900
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert (out / "corpus" / "chunks.jsonl").stat().st_mtime_ns == chunks_mtime  # 01 was cached, not redone
    rows = index_rows(out / "report" / "index.html")
    assert " ok " in rows["02-build-indexes.html"] and "earlier run" not in rows["02-build-indexes.html"]
