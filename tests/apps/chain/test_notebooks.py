"""The notebooks are stored clean, stay thin and follow the house rules for parameters cells; a stage's parameters
cell declares exactly its params dataclass (same names, order and defaults)."""

import ast
import dataclasses
import json

import pytest

from rerankeval import corpus, index, retrieve
from rerankeval.apps import ask
from rerankeval.apps.chain import params as chain_params
from rerankeval.core import paths
from rerankeval.evaluate.analysis_records import AnalysisParams
from rerankeval.experiments.sweep import SweepParams
from rerankeval.questions.assess import AssessParams
from rerankeval.questions.draft import QuestionsParams
from rerankeval.rerank.config import Params as RerankParams

NOTEBOOKS = sorted(paths.NOTEBOOKS_DIR.glob("*.ipynb"))
MAX_CODE_LINES = 70  # issue 20: a notebook is a parameters cell, calls into the package, tables and plots
# notebook -> the dataclass whose defaults are the only defaults
STAGE_PARAMS = {
    "01-extract-corpus": corpus.Params,
    "02-build-indexes": index.Params,
    "03-retrieve": retrieve.Params,
    "04-rerank": RerankParams,
    "05-analyse": AnalysisParams,
    "06-sweep": SweepParams,
    "07-ask": ask.Params,
    "08-questions": QuestionsParams,
    "09-assess": AssessParams,
}


def test_the_chain_has_its_numbered_notebooks():
    names = [p.stem for p in chain_params.notebooks()]
    assert names[:2] == ["01-extract-corpus", "02-build-indexes"], names
    assert {"03-retrieve", "04-rerank", "05-analyse"} <= set(names)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_without_outputs(nb):
    cells = json.loads(nb.read_text())["cells"]
    dirty = [
        i for i, c in enumerate(cells) if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))
    ]
    assert not dirty, f"{nb.name}: cells {dirty} carry outputs; clear them before committing"


def code_lines(nb) -> int:
    """Non-blank, non-comment lines of the notebook's code cells (the parameters cell included)."""
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    lines = ["".join(c["source"]).splitlines() for c in cells if c["cell_type"] == "code"]
    return sum(1 for cell in lines for line in cell if line.strip() and not line.lstrip().startswith("#"))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_stay_thin(nb):
    n = code_lines(nb)
    assert n <= MAX_CODE_LINES, f"{nb.name}: {n} code lines (at most {MAX_CODE_LINES}): move the logic into the package"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_is_a_typed_commented_parameters_cell(nb):
    cells = json.loads(nb.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    first = code[0]
    assert "parameters" in first["metadata"].get("tags", []), f"{nb.name}: first code cell is not tagged parameters"
    assert sum("parameters" in c["metadata"].get("tags", []) for c in code) == 1
    src = "".join(first["source"])
    tree = ast.parse(src)
    for node in tree.body:
        assert isinstance(node, ast.AnnAssign), f"{nb.name}: parameters must be typed assignments: {ast.unparse(node)}"
        assert isinstance(node.value, ast.Constant | ast.List | ast.Dict | ast.UnaryOp), (
            f"{nb.name}: nothing derived in the parameters cell: {ast.unparse(node)}"
        )
    for line in src.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            assert "  # " in line, f"{nb.name}: parameter without a comment: {line!r}"
    assert "dataset" in {n.target.id for n in tree.body}


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_no_path_literals_in_notebooks(nb):
    cells = json.loads(nb.read_text())["cells"]
    for c in cells:
        if c["cell_type"] != "code":
            continue
        lines = "".join(c["source"]).splitlines()
        src = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
        nodes = ast.walk(ast.parse(src))
        strings = [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for s in strings:
            assert not any(bad in s for bad in ("results/", "/root/", "/work/", "data/", "../")), (
                f"{nb.name}: path literal {s!r}; locate files through rerankeval.core.paths"
            )


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_papermill_reads_every_parameter(nb):
    """papermill's own parser skips lines it cannot read (e.g. a comment containing '='), silently."""
    import papermill

    assert set(papermill.inspect_notebook(str(nb))) == chain_params.declared_parameters(nb)


def _parameters(nb) -> dict:
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    src = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    return {n.target.id: ast.literal_eval(n.value) for n in ast.parse(src).body}


@pytest.mark.parametrize("name", sorted(STAGE_PARAMS))
def test_parameters_cell_is_the_stage_dataclass(name):
    declared, cls = _parameters(paths.NOTEBOOKS_DIR / f"{name}.ipynb"), STAGE_PARAMS[name]
    assert list(declared) == [f.name for f in dataclasses.fields(cls)], f"{name}: names or order differ from {cls}"
    defaults = cls()
    for key, value in declared.items():
        got = getattr(defaults, key)
        assert (list(got) if isinstance(value, list) else got) == value, f"{name}: {key} = {value!r}, {cls}: {got!r}"
