"""The chain skips a notebook whose inputs are unchanged since its last success (its fingerprint: the notebook,
its parameters, the code, the settings, every file it read and folder it listed, traced in its kernel).

A tiny chain of three stand-in notebooks over a tiny dataset: 01 reads the dataset's queries and writes a.txt,
03 reads a.txt and writes b.txt, 05 reads b.txt and the explorer's judgments file (when there is one) and writes
c.txt. No timing assumption: what ran is read from the chain's own lines and the files' contents.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from rerankeval.apps.chain import runner as chain
from rerankeval.core import paths
from rerankeval.core.settings import load_settings

READ = (
    "from rerankeval.core import paths\nfrom rerankeval.core.settings import load_settings\n"
    "dp = paths.resolve_dataset(dataset, load_settings())\n"
)
NOTEBOOKS = {
    "01-extract-corpus": (
        "size: int = 1  # a stand-in parameter",
        READ + "text = (dp.source / 'queries.jsonl').read_text()\n"
        "(dp.root / 'a.txt').write_text(f'{size}:{len(text)}')",
    ),
    "03-retrieve": (
        "k: int = 1  # a stand-in parameter",
        READ + "(dp.root / 'b.txt').write_text((dp.root / 'a.txt').read_text() + f'|{k}')",
    ),
    "05-analyse": (
        "ks: list = [1]  # a stand-in parameter",
        READ + "j = dp.source / 'qrels' / 'judgments-test.tsv'\n"
        "try:\n    extra = open(j).read()\nexcept FileNotFoundError:\n    extra = ''\n"
        "(dp.root / 'c.txt').write_text((dp.root / 'b.txt').read_text() + '|' + extra)",
    ),
}


def _notebook(params: str, body: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("dataset: str = ''  # the dataset\n" + params)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture
def tiny_chain(tmp_path, tiny_pdf, monkeypatch):
    nbdir = tmp_path / "notebooks"
    nbdir.mkdir()
    for stem, (params, body) in NOTEBOOKS.items():
        nbformat.write(_notebook(params, body), nbdir / f"{stem}.ipynb")
    monkeypatch.setattr(paths, "NOTEBOOKS_DIR", nbdir)
    monkeypatch.setattr(chain, "code_version", lambda: "code-1")  # not the live tree's (others may edit it)
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(tmp_path / "res"))
    out = tmp_path / "res" / tiny_pdf.name
    return tiny_pdf, out


def _run(
    capsys, dataset: Path, *overrides: str, force: bool = False, only: list[str] | None = None
) -> tuple[set[str], set[str]]:
    """(the notebooks that ran, those skipped)"""
    settings = load_settings()  # the environment as each test sets it
    assert chain.run_chain(str(dataset), settings, list(overrides), only=only, kernel="python3", force=force) == 0
    lines = capsys.readouterr().out.splitlines()
    ran = {ln.split()[1][:2] for ln in lines if ln.startswith("[chain] ") and ln.endswith(" ...")}
    skipped = {ln.split()[1][:2] for ln in lines if ln.endswith("up to date (skipped)")}
    return ran, skipped


def test_a_second_run_skips_every_notebook_and_a_changed_input_reruns_what_it_reaches(tiny_chain, capsys):
    dataset, out = tiny_chain
    assert _run(capsys, dataset) == ({"01", "03", "05"}, set())
    first = {f: (out / f).stat().st_mtime_ns for f in ("a.txt", "b.txt", "c.txt")}
    assert _run(capsys, dataset) == (set(), {"01", "03", "05"})
    assert {f: (out / f).stat().st_mtime_ns for f in first} == first  # nothing was rewritten
    assert (out / "report" / "03-retrieve.html").is_file()

    # 03's parameter: 03 runs, b.txt changes so 05 runs; 01 is untouched
    assert _run(capsys, dataset, "k=2") == ({"03", "05"}, {"01"})
    assert (out / "c.txt").read_text().startswith("1:") and "|2|" in (out / "c.txt").read_text()

    # a judgment recorded in the explorer: only 05 reads it
    (dataset / "qrels" / "judgments-test.tsv").write_text("q1\tx#p1\t2\n")
    assert _run(capsys, dataset, "k=2") == ({"05"}, {"01", "03"})
    assert (out / "c.txt").read_text().endswith("x#p1\t2\n")

    # the dataset's own file changed: everything downstream of 01 that reads what changed
    with (dataset / "queries.jsonl").open("a") as fh:
        fh.write("\n")
    assert _run(capsys, dataset, "k=2") == ({"01", "03", "05"}, set())


def test_a_corrupted_or_missing_fingerprint_reruns_and_force_or_new_code_runs_everything(
    tiny_chain, capsys, monkeypatch
):
    dataset, out = tiny_chain
    _run(capsys, dataset)
    (out / "executed" / "03-retrieve.fingerprint.json").write_text("{not json")
    ran, skipped = _run(capsys, dataset)
    assert ran == {"03"} and skipped == {"01", "05"}  # 03 rewrote b.txt with the same bytes: 05 stays up to date
    record = json.loads((out / "executed" / "03-retrieve.fingerprint.json").read_text())
    assert str(out / "a.txt") in record["files"] and str(out / "b.txt") not in record["files"]  # its own output
    (out / "executed" / "05-analyse.fingerprint.json").unlink()
    assert _run(capsys, dataset) == ({"05"}, {"01", "03"})
    assert _run(capsys, dataset, force=True) == ({"01", "03", "05"}, set())
    monkeypatch.setattr(chain, "code_version", lambda: "code-2")  # another version of the package
    assert _run(capsys, dataset) == ({"01", "03", "05"}, set())


def test_the_endpoint_counts_by_its_identity_not_its_port(tiny_chain, capsys, monkeypatch):
    """A local server that comes up on another port with the same model (RERANK_ENDPOINT_ID) changes nothing; another
    identity, or another URL when no identity is set, runs everything again."""
    dataset, _ = tiny_chain
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    monkeypatch.setenv("RERANK_ENDPOINT_ID", "llama-server/model-a")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1111/v1")
    assert _run(capsys, dataset) == ({"01", "03", "05"}, set())
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:2222/v1")
    assert _run(capsys, dataset) == (set(), {"01", "03", "05"})
    monkeypatch.setenv("RERANK_ENDPOINT_ID", "llama-server/model-b")
    assert _run(capsys, dataset) == ({"01", "03", "05"}, set())
    monkeypatch.delenv("RERANK_ENDPOINT_ID")
    assert _run(capsys, dataset)[0] == {"01", "03", "05"}
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1111/v1")
    assert _run(capsys, dataset)[0] == {"01", "03", "05"}


def test_a_failed_notebook_leaves_no_fingerprint(tiny_chain, capsys):
    dataset, out = tiny_chain
    _run(capsys, dataset)
    (out / "a.txt").unlink()  # 03 reads it: a changed input, and 03 now fails
    (out / "a.txt").mkdir()
    assert chain.run_chain(str(dataset), load_settings(), [], kernel="python3") == chain.EXIT_FAILED
    assert not (out / "executed" / "03-retrieve.fingerprint.json").exists()


RERANK_STANDIN = (
    "pool_k: int = 10  # a stand-in parameter",
    READ + "import os\nstatus = os.environ.get('STANDIN_STATUS', 'ok')\n"
    "dp.ledger.write_text(f'qid,pass,status,error\\nq1,main,ok,\\nq2,main,{status},\\n')",
)
REWRITE_STANDIN = (
    "variants: list = ['hybrid_reformulate']  # a stand-in parameter",
    READ + "import os\nstatus = os.environ.get('STANDIN_STATUS', 'kept')\n"
    "(dp.root / 'retrieve').mkdir(exist_ok=True)\n"
    "(dp.root / 'retrieve' / 'hybrid_reformulate_ledger.csv').write_text("
    "f'qid,status,error,cache_hit\\nq1,kept,,False\\nq2,{status},APIConnectionError,False\\n"
    "q3,llm_failed,NoNewQuery,False\\n')",
)  # read_ledger's columns (cache_hit since cc46263)


@pytest.mark.parametrize(
    "stem, standin, partial",
    [("04-rerank", RERANK_STANDIN, "partial_fallback"), ("03-retrieve", REWRITE_STANDIN, "llm_failed")],
    ids=["rerank-ledger", "rewrite-ledger"],
)
def test_a_run_where_some_llm_calls_fell_back_is_not_recorded_as_up_to_date(
    tiny_chain, capsys, monkeypatch, stem, standin, partial
):
    """Fixing the endpoint must not leave a partly fallen-back notebook skipped: it runs until a run of it has
    every LLM call answered (a NoNewQuery rewrite is an answered call), then it is skipped."""
    from fakellm import FakeLLM

    dataset, out = tiny_chain
    nbformat.write(_notebook(*standin), paths.NOTEBOOKS_DIR / f"{stem}.ipynb")
    fingerprint = out / "executed" / f"{stem}.fingerprint.json"
    with FakeLLM() as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
        monkeypatch.setenv("STANDIN_STATUS", partial)  # one query's calls fell back (the endpoint went away)
        ran, _ = _run(capsys, dataset, only=[stem[:2]])
        assert ran == {stem[:2]} and not fingerprint.exists()
        ran, _ = _run(capsys, dataset, only=[stem[:2]])
        assert ran == {stem[:2]} and not fingerprint.exists()  # run again, not skipped: its inputs did not change
        monkeypatch.setenv("STANDIN_STATUS", "ok" if stem.startswith("04") else "kept")  # the endpoint is back
        assert _run(capsys, dataset, only=[stem[:2]])[0] == {stem[:2]} and fingerprint.exists()
        assert _run(capsys, dataset, only=[stem[:2]]) == (set(), {stem[:2]})


def test_the_fingerprint_holds_no_url_password(tmp_path, monkeypatch):
    """Issue 32, defect 9: a password in OPENAI_BASE_URL (or JUDGE_BASE_URL, QDRANT_URL) was written into every
    ``executed/*.fingerprint.json`` (the endpoint's identity was the raw URL)."""
    from rerankeval.apps.chain.files import notebook_key
    from rerankeval.core import settings

    monkeypatch.setattr(settings, "ENV_FILE", tmp_path / "no.env")
    monkeypatch.delenv("RERANK_ENDPOINT_ID", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://u:secretpw@127.0.0.1:9/v1")
    monkeypatch.setenv("JUDGE_BASE_URL", "http://judge:judgepw@127.0.0.1:9/v1")
    monkeypatch.setenv("QDRANT_URL", "http://q:qdrantpw@127.0.0.1:6333")
    nb = tmp_path / "05-analyse.ipynb"
    nbformat.write(_notebook("ks: list = [1]", "print(1)"), nb)
    key = json.dumps(notebook_key(nb, {"ks": [1]}, "code-1", {}, settings.load_settings()))
    for secret in ("secretpw", "judgepw", "qdrantpw"):
        assert secret not in key, key
    assert "127.0.0.1:9/v1" in key  # the endpoint still counts (another endpoint runs the notebooks again)
