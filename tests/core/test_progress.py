"""Progress on the user's terminal: plain lines in logs, a bar on a terminal, and from inside a kernel the
chain runs, the line reaches the chain's stderr and not the executed notebook (issue 12)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import nbformat
import pytest

from rerankeval.core import progress
from rerankeval.core.progress import Progress, track
from rerankeval.core.settings import Settings, load_settings


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_mode_prints_a_line_per_tenth_with_rate_and_counters():
    out = io.StringIO()
    with Progress(100, desc="rerank", unit="query", file=out, quiet_s=0) as bar:
        for i in range(100):
            bar.update(1, calls=i + 1, cache_hits=i // 2)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10, lines
    assert lines[0].startswith("rerank: 10/100 query (10%)")
    assert lines[-1].startswith("rerank: 100/100 query (100%)")
    assert "query/s" in lines[-1] and "calls=100, cache_hits=49" in lines[-1]


def test_plain_mode_small_total_and_unknown_total():
    out = io.StringIO()
    assert list(track(["a", "b", "c"], desc="embedding", unit="text", file=out, quiet_s=0)) == ["a", "b", "c"]
    assert [ln.split(" [")[0] for ln in out.getvalue().splitlines()] == [
        "embedding: 1/3 text (33%)",
        "embedding: 2/3 text (67%)",
        "embedding: 3/3 text (100%)",
    ]
    out = io.StringIO()
    list(track(iter(range(20)), desc="pages", unit="page", file=out, quiet_s=0))  # no len(): 1, 2, 4, 8, 16, end
    assert [ln.split(" [")[0] for ln in out.getvalue().splitlines()] == [
        f"pages: {n} page" for n in (1, 2, 4, 8, 16, 20)
    ]


def test_a_stage_done_in_a_moment_prints_nothing_and_a_slow_one_starts_after_the_quiet_seconds():
    """A warm stage (all 60 queries from the cache, no time passing) says nothing; ten lines were printed before."""
    out = io.StringIO()
    with Progress(60, desc="rerank", unit="query", file=out, clock=lambda: 0.0) as bar:
        for _ in range(60):
            bar.update(1)
    assert out.getvalue() == ""
    out = Tty()
    list(track(range(60), desc="rerank", file=out, mode="bar"))  # tqdm's own clock: done well within 2 s
    assert out.getvalue() == ""
    out = io.StringIO()
    now = [0.0]
    with Progress(10, desc="pages", unit="page", file=out, clock=lambda: now[0]) as bar:
        for i in range(10):
            now[0] = (i + 1) * 0.5  # a page every half second
            bar.update(1)
    lines = [ln.split(" [")[0] for ln in out.getvalue().splitlines()]
    assert lines == [f"pages: {n}/10 page ({n}0%)" for n in range(4, 11)], lines  # from 2 s on, each tenth


def test_a_slow_stage_says_a_line_at_least_every_minute():
    """120 units at 111 s each (the drafting stage on a loaded machine): a tenth is 12 units, 22 minutes of silence;
    now a line comes with the first unit done after each minute."""
    out = io.StringIO()
    now = [0.0]
    with Progress(120, desc="drafting questions", unit="unit", file=out, clock=lambda: now[0]) as bar:
        for i in range(13):
            now[0] = (i + 1) * 111.0
            bar.update(1)
    lines = [ln.split(" [")[0] for ln in out.getvalue().splitlines()]
    assert lines == [f"drafting questions: {n}/120 unit ({round(100 * n / 120)}%)" for n in range(1, 14)], lines


def test_mode_follows_the_stream_unless_configured(monkeypatch):
    monkeypatch.setenv(progress.MODE_ENV, "off")  # the environment alone changes nothing: only configure() does
    assert progress.default_mode(Tty()) == "bar"
    assert progress.default_mode(io.StringIO()) == "plain"
    assert progress.default_mode(None) == "off"
    progress.configure(load_settings())  # what an entry point does with its settings: RERANKEVAL_PROGRESS=off
    out = io.StringIO()
    list(track(range(5), desc="x", file=out))
    assert out.getvalue() == "" and progress.default_mode(Tty()) == "off"
    assert progress.default_mode(Tty(), Settings(progress="bar")) == "bar"  # settings given win
    progress.configure()
    assert progress.default_mode(Tty()) == "bar"
    with pytest.raises(ValueError, match="RERANKEVAL_PROGRESS"):
        progress.configure(mode="sideways")
    monkeypatch.setenv(progress.MODE_ENV, "sideways")
    with pytest.raises(ValueError, match="RERANKEVAL_PROGRESS"):
        load_settings()


def test_bar_mode_draws_a_tqdm_bar_with_counters():
    progress.configure(stage="04-rerank")  # as a chain kernel starts (progress.configure_line)
    out = Tty()
    with Progress(4, desc="rerank", unit="query", file=out, mode="bar", quiet_s=0) as bar:
        for _ in range(4):
            bar.update(1, calls=3)
    text = out.getvalue()
    assert "\r" in text and "[04-rerank] rerank: 100%" in text and "4/4" in text and "calls=3" in text


def test_the_kernel_start_up_line_configures_the_kernel():
    exec(progress.configure_line("plain", "05-analyse"), {})
    assert (progress.DISPLAY.mode, progress.DISPLAY.stage) == ("plain", "05-analyse")
    exec(progress.configure_line(None, "05-analyse"), {})
    assert (progress.DISPLAY.mode, progress.DISPLAY.stage) == (None, "05-analyse")


CHILD = """
import json, os, sys
from pathlib import Path
from rerankeval.apps.chain import runner as chain
from rerankeval.apps.chain import signals as chain_signals
from rerankeval.core import paths
from rerankeval.core.settings import load_settings
nb, dataset = Path(sys.argv[1]), Path(sys.argv[2])
dp = paths.resolve_dataset(str(dataset), load_settings())
dp.executed_dir.mkdir(parents=True, exist_ok=True)
dp.report_dir.mkdir(parents=True, exist_ok=True)
page = chain.run_notebook(nb, dp, {}, "python3", {"RERANKEVAL_TEST_MARK": "from-the-chain"}, chain_signals.Interrupt())
print(json.dumps({"page": page, "mark_in_parent": "RERANKEVAL_TEST_MARK" in os.environ}))
"""

CELL = """\
import os
from rerankeval.core.progress import track
print("mark:", os.environ.get("RERANKEVAL_TEST_MARK"))
for _ in track(range(30), desc="encoding", unit="text", quiet_s=0):
    pass
"""


def test_a_kernel_run_by_the_chain_shows_progress_on_the_chain_stderr(tmp_path):
    """The real path: chain -> papermill -> kernel; the kernel also gets the chain's settings as its env."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("dataset: str = ''  # dataset", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(CELL),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "09-probe.ipynb")
    (tmp_path / "ds").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", progress.MODE_ENV)}
    env["RERANKEVAL_RESULTS"] = str(tmp_path / "results")
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(tmp_path / "09-probe.ipynb"), str(tmp_path / "ds")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.splitlines()[-1])
    assert result["page"]["status"] == "ok" and not result["mark_in_parent"], result["page"]["error"]
    lines = [ln for ln in r.stderr.splitlines() if "encoding:" in ln]
    assert lines and lines[-1].startswith("[09-probe] encoding: 30/30 text (100%)"), r.stderr[-3000:]
    executed = nbformat.read(tmp_path / "results" / "ds" / "executed" / "09-probe.ipynb", as_version=4)
    outputs = json.dumps([c.get("outputs", []) for c in executed.cells])
    assert "mark: from-the-chain" in outputs, outputs
    assert "encoding:" not in outputs, "the progress line went into the notebook"
