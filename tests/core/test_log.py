"""logging instead of print in the library (issue 20): a stage's lines reach the notebook's reader once, INFO on
stdout (where print put them), warnings on stderr, also inside a real Jupyter kernel."""

from __future__ import annotations

import logging

import nbformat
import pytest

from fakellm import FakeLLM, make_inputs
from rerank_data import stage03
from rerankeval import rerank
from rerankeval.core import log as log_mod
from rerankeval.core.settings import Settings

NO_ARM = "No expansion arm (expand_compare is false or expand_n is 0)."


def test_info_goes_to_stdout_and_a_warning_to_stderr_once(capsys):
    log = log_mod.get_logger("rerankeval.probe")
    log_mod.get_logger("rerankeval.probe")  # a second call adds no second handler
    log.info("wrote run: /x.trec")
    log.warning("the cache shard is corrupt")
    log.debug("not shown")
    out, err = capsys.readouterr()
    assert (out, err) == ("wrote run: /x.trec\n", "the cache shard is corrupt\n")
    package = logging.getLogger("rerankeval")
    assert sum(isinstance(h, log_mod._CurrentStream) for h in package.handlers) == 2


def test_a_stage_line_is_logged_where_a_test_or_a_user_can_catch_it(capsys, caplog, tmp_path, monkeypatch):
    caplog.set_level(logging.INFO, logger="rerankeval.rerank.stage")
    monkeypatch.setenv("RERANKEVAL_CACHE", str(tmp_path))
    dp = stage03(tmp_path / "ds", *make_inputs(n_queries=1, n_docs=2))
    with FakeLLM() as f:
        rerank.run(
            dp,
            rerank.Params(pool_k=2, expand_n=0),
            Settings(base_url=f.base_url, api_key="k", model="m"),
            progress=False,
        )  # the arm is off
    assert capsys.readouterr().out.splitlines().count(NO_ARM) == 1
    assert [r.getMessage() for r in caplog.records].count(NO_ARM) == 1


CELL = """\
from rerankeval.core.log import get_logger
get_logger("rerankeval.rerank.stage").info("No expansion arm (expand_compare is false or expand_n is 0).")
get_logger("rerankeval.index.build").warning("a warning of stage 02")
"""


@pytest.mark.slow
def test_in_a_kernel_the_line_shows_once_in_the_cell_output(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CELL)]
    NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    streams = {o["name"]: o["text"] for o in nb.cells[0].outputs if o["output_type"] == "stream"}
    assert streams == {
        "stdout": "No expansion arm (expand_compare is false or expand_n is 0).\n",
        "stderr": "a warning of stage 02\n",
    }, nb.cells[0].outputs
