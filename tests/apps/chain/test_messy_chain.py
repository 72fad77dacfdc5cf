"""Issue 19, the chain runner, settings and the Makefile: the red team's messy inputs, kept as fixtures.

A disk that fills up while the chain saves a notebook, a notebook cell hitting a full disk, a ``.env`` that
Make and Python must read alike (inline comment, quotes, ``export``, CRLF), a parameter of the wrong type
(``P="rrf_k=abc"``), ``RERANK_TIMEOUT=0`` and a read-only results folder. The chain runs in this process on
a stand-in notebook (a few cells, no model), so each test takes seconds.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from rerankeval.apps import chain
from rerankeval.apps.chain import params as chain_params
from rerankeval.core import paths
from rerankeval.core.settings import ENV_KEYS, load_settings

ENOSPC = os.strerror(errno.ENOSPC)  # "No space left on device"


def stand_in_notebooks(folder: Path, name: str = "05-analyse", cells: list[str] | None = None) -> Path:
    """A notebooks folder holding one small notebook called ``name`` (typed parameters cell, printing cells)."""
    folder.mkdir(parents=True, exist_ok=True)
    params = new_code_cell('dataset: str = ""  # the chain passes the folder\nrrf_k: int = 60  # a typed parameter')
    params.metadata["tags"] = ["parameters"]
    body = cells or [f"print('cell {i}: ' + 'x' * 400)" for i in range(6)]
    nb = new_notebook(
        cells=[params, *map(new_code_cell, body)],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


@pytest.fixture
def stand_in(tmp_path, monkeypatch, tiny_beir):
    """``(dataset folder, results folder)`` with the chain's notebooks replaced by :func:`stand_in_notebooks`."""
    monkeypatch.setattr(paths, "NOTEBOOKS_DIR", stand_in_notebooks(tmp_path / "notebooks"))
    results = tmp_path / "results"
    monkeypatch.setenv("RERANKEVAL_RESULTS", str(results))
    for key in ("OPENAI_BASE_URL", "RERANK_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    return tiny_beir, results


def run_main(dataset: Path, *args: str) -> int:
    return chain.main(["--dataset", str(dataset), "--kernel", "python3", *args])


# --------------------------------------------------------------------------- a full disk (bug 9)
class _Quota:
    """A file object that writes until the fake disk is full, then raises ENOSPC after a partial write."""

    def __init__(self, fh, disk: DiskFull) -> None:
        self._fh, self._disk = fh, disk
        disk.files.append(0)
        self._n = len(disk.files) - 1

    def write(self, data):
        self._disk.files[self._n] += len(data)
        room = self._disk.room
        if len(data) > room:
            self._fh.write(data[:room])
            self._disk.room = 0
            self._fh.flush()
            raise OSError(errno.ENOSPC, ENOSPC)
        self._disk.room -= len(data)
        return self._fh.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()

    def __getattr__(self, name):
        return getattr(self._fh, name)


class DiskFull:
    """Every file opened for writing under ``folder`` (by ``open``, ``io.open`` or ``os.fdopen``) shares
    ``room`` bytes; the write that does not fit writes what fits and raises OSError(ENOSPC), as a full disk."""

    def __init__(self, monkeypatch, folder: Path, room: int) -> None:
        self.folder, self.room = str(folder), room
        self.files: list[int] = []  # bytes written to each file opened, in order
        real_open, real_fdopen = builtins.open, os.fdopen

        def writing(mode: str) -> bool:
            return any(c in mode for c in "wax+")

        def fake_open(file, mode="r", *a, **kw):
            fh = real_open(file, mode, *a, **kw)
            inside = isinstance(file, (str, os.PathLike)) and os.path.abspath(file).startswith(self.folder)
            return _Quota(fh, self) if inside and writing(mode) else fh

        def fake_fdopen(fd, mode="r", *a, **kw):
            inside = os.readlink(f"/proc/self/fd/{fd}").startswith(self.folder)
            fh = real_fdopen(fd, mode, *a, **kw)
            return _Quota(fh, self) if inside and writing(mode) else fh

        monkeypatch.setattr(builtins, "open", fake_open)
        monkeypatch.setattr(io, "open", fake_open)
        monkeypatch.setattr(os, "fdopen", fake_fdopen)


def chain_errors(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("[chain] ERROR")]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="the fake disk finds file names in /proc/self/fd")
@pytest.mark.parametrize("saves", [0.5, 1.5], ids=["first-save", "a-later-save"])
def test_a_full_disk_while_saving_a_notebook_is_one_error_line_and_leaves_nothing_truncated(
    stand_in, monkeypatch, capsys, tmp_path, saves
):
    """``saves``: how many of the executed notebook's saves fit on the disk (measured on a run with room)."""
    dataset, results = stand_in
    with monkeypatch.context() as m:
        m.setenv("RERANKEVAL_RESULTS", str(tmp_path / "measure"))
        disk = DiskFull(m, tmp_path / "measure", room=10**9)
        assert run_main(dataset) == 0
    first, second = [n for n in disk.files if n][:2]  # papermill's first saves (then more, and the pages)
    capsys.readouterr()
    out = results / dataset.name
    (out / "executed").mkdir(parents=True)
    DiskFull(monkeypatch, out, room=int(first * min(saves, 1) + second * max(saves - 1, 0)))
    rc = run_main(dataset)
    err = capsys.readouterr().err
    assert rc == chain.EXIT_FAILED, err[-3000:]
    errors = chain_errors(err)
    assert len(errors) == 1, err[-3000:]
    assert ENOSPC in errors[0] and str(out / "executed") in errors[0] and "RERANKEVAL_RESULTS=" in errors[0]
    assert "Traceback" not in err and "NotJSONError" not in err
    for nb in out.rglob("*.ipynb"):  # a notebook left behind is a complete one (the last save that fitted)
        nbformat.read(nb, as_version=4)
    kept = (out / "executed" / "05-analyse.ipynb").exists()
    assert kept == (saves > 1) and ("executed copy kept at" in err) == kept and ("no executed copy" in err) != kept
    assert not [p.name for p in out.rglob("*") if p.name.endswith(".tmp")], "temporary files left behind"
    for page in out.rglob("*.html"):
        assert page.read_text(encoding="utf-8").rstrip().endswith("</html>"), f"{page.name} is truncated"


def test_a_cell_that_hits_a_full_disk_says_so_and_how_to_fix_it(tmp_path, monkeypatch, capsys, tiny_beir):
    cell = "raise OSError(28, 'No space left on device', '/data/results/tiny-beir/metrics.csv')"
    monkeypatch.setattr(paths, "NOTEBOOKS_DIR", stand_in_notebooks(tmp_path / "nbs", cells=["x = 1", cell]))
    rc = run_main(tiny_beir)
    errors = chain_errors(capsys.readouterr().err)
    assert rc == chain.EXIT_FAILED and len(errors) == 1, errors
    assert "05-analyse.ipynb failed in cell" in errors[0] and "metrics.csv" in errors[0]
    assert "the disk is full" in errors[0] and "RERANKEVAL_RESULTS=" in errors[0]


# --------------------------------------------------------------------------- checks before the run
def test_a_parameter_of_the_wrong_type_is_refused_before_the_run(stand_in, capsys):
    dataset, results = stand_in
    rc = run_main(dataset, "--set", "rrf_k=abc")
    err = capsys.readouterr().err
    assert rc == chain.EXIT_PREFLIGHT, err[-2000:]
    line = next(ln for ln in err.splitlines() if "rrf_k" in ln)
    assert "rrf_k = 'abc'" in line and "expected int" in line and 'P="rrf_k=60"' in line and "05-analyse" in line
    assert not list((results / dataset.name / "executed").glob("*.ipynb"))


def test_values_yaml_reads_otherwise_become_the_declared_type():
    nbs = chain_params.notebooks()
    overrides = ["query=42", "embedding_model=", "reformulate_threshold=1e-3", "rrf_k=30"]
    loaded = chain_params.load_params("x", overrides)
    got = chain_params.typed_parameters(nbs, loaded, chain_params.override_texts(overrides))
    want = {"query": "42", "embedding_model": "", "reformulate_threshold": 0.001, "rrf_k": 30}
    assert {k: got[k] for k in want} == want
    for bad, words in (
        ("force_rebuild=1", "expected bool"),
        ("ks=5", "expected list"),
        ("rrf_k=60.5", "expected int"),
        ("alpha=fast", "expected float"),
    ):
        with pytest.raises(chain_params.PreflightError, match=words):
            chain_params.typed_parameters(nbs, chain_params.load_params("x", [bad]), chain_params.override_texts([bad]))


def test_p_keeps_list_values_with_spaces_whole():
    """README: make report P="variants=[vector, bm25, hybrid, hybrid_dbsf]" (make split P on every space)."""
    assert chain_params.split_params(" pool_k=30  variants=[vector, bm25, hybrid] mode=yesno ") == [
        "pool_k=30",
        "variants=[vector, bm25, hybrid]",
        "mode=yesno",
    ]
    items = chain_params.split_params("variants=[vector, bm25]")
    assert chain_params.load_params("x", items)["variants"] == ["vector", "bm25"]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_passes_p_to_the_chain_whole(tmp_path):
    for name in ("Makefile", "requirements.txt", "pyproject.toml", "lib"):
        (tmp_path / name).symlink_to(paths.ROOT / name)
    p = "pool_k=30 variants=[vector, bm25] query='it''s' note=\"a b\""
    r = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", "_show: ; @printf '%s|' $(P_ARG)", "_show", f"P={p}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"--params|{p}|"


@pytest.mark.parametrize("item, words", [("ks=[1, 3", "not valid YAML"), ("bm25,", "expected key=value")])
def test_a_malformed_set_item_is_one_error_line(stand_in, capsys, item, words):
    dataset, _ = stand_in
    rc = run_main(dataset, "--set", item)
    errors = chain_errors(capsys.readouterr().err)
    assert rc == chain.EXIT_PREFLIGHT and len(errors) == 1 and words in errors[0] and repr(item) in errors[0]


def test_a_zero_timeout_is_refused_before_the_run(stand_in, monkeypatch, capsys):
    dataset, results = stand_in
    monkeypatch.setenv("RERANK_TIMEOUT", "0")
    rc = run_main(dataset)
    err = capsys.readouterr().err
    assert rc == chain.EXIT_PREFLIGHT, err[-2000:]
    assert chain_errors(err) and "RERANK_TIMEOUT='0' (in the environment)" in err and "> 0" in err
    assert not (results / dataset.name / "executed").exists()


def test_a_read_only_results_folder_is_refused_before_the_run(stand_in, monkeypatch, capsys):
    """A read-only folder as a non-root user sees it (root ignores permissions: the refusal is simulated)."""
    dataset, results = stand_in
    results.mkdir()
    real_mkdir, real_os_open = os.mkdir, os.open

    def refused(path) -> bool:
        return os.path.abspath(path).startswith(str(results))

    def mkdir(path, *a, **kw):
        if refused(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_mkdir(path, *a, **kw)

    def os_open(path, flags, *a, **kw):
        if refused(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_os_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", os_open)
    rc = run_main(dataset)
    err = capsys.readouterr().err
    assert rc == chain.EXIT_PREFLIGHT, err[-2000:]
    errors = chain_errors(err)
    assert len(errors) == 1 and "is not writable" in errors[0] and str(results / dataset.name) in errors[0]
    assert "RERANKEVAL_RESULTS=" in errors[0] and "Traceback" not in err


# --------------------------------------------------------------------------- one .env reader (bug 10)
MESSY_ENV = (
    b"RERANKEVAL_CACHE=/x   # note\r\n"
    b'export OPENAI_BASE_URL="http://llm.test:8080/v1"  # the gateway\r\n'
    b"RERANK_MODEL='gpt # not a comment'\r\n"
    b"RERANKEVAL_RESULTS=${RERANKEVAL_CACHE}/results\r\n"
)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_and_python_read_the_same_env_file(tmp_path):
    for name in ("Makefile", "requirements.txt", "pyproject.toml", "lib"):
        (tmp_path / name).symlink_to(paths.ROOT / name)
    (tmp_path / ".env").write_bytes(MESSY_ENV)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (*ENV_KEYS, "CACHE", "VENV", "PYTHON", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")
    }
    show = '_show: ; @printf "%s\\n%s\\n" "$(CACHE)" "$(call setting,OPENAI_BASE_URL)"'
    r = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", show, "_show"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    s = load_settings(environ={}, env_file=tmp_path / ".env")
    assert (str(s.cache), s.base_url, s.model, str(s.results)) == (
        "/x",
        "http://llm.test:8080/v1",
        "gpt # not a comment",
        "/x/results",
    )
    assert r.stdout.splitlines() == [str(s.cache), s.base_url]


def test_the_env_reader_runs_on_a_bare_python(tmp_path):
    """The Makefile calls it with the system python3, before the venv exists: standard library only."""
    (tmp_path / ".env").write_bytes(MESSY_ENV)
    script = paths.ROOT / "lib" / "rerankeval" / "core" / "envfile.py"
    for var, want in (("RERANKEVAL_CACHE", "/x"), ("RERANK_MODEL", "gpt # not a comment"), ("QDRANT_URL", "")):
        r = subprocess.run(
            [sys.executable, "-I", "-S", str(script), str(tmp_path / ".env"), var],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert (r.returncode, r.stdout, r.stderr) == (0, want, "")
    (tmp_path / "bad.env").write_text("A=1\nthis is not an assignment\nB=2\n", encoding="utf-8")
    r = subprocess.run(
        [sys.executable, "-I", "-S", str(script), str(tmp_path / "bad.env"), "B"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.stdout == "2" and "bad.env, line 2" in r.stderr


def test_the_stand_in_notebook_runs_end_to_end(stand_in, capsys):
    """The stand-in run works end to end (what the failure tests above compare with)."""
    dataset, results = stand_in
    assert run_main(dataset) == 0, capsys.readouterr().err[-2000:]
    out = results / dataset.name
    assert json.loads((out / "executed" / "pages.json").read_text())["05-analyse"]["status"] == "ok"
    assert (out / "report" / "05-analyse.html").is_file() and (out / "report" / "index.html").is_file()
