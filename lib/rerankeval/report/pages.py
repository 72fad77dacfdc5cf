"""The report's notebook pages: an executed notebook rendered to one self-contained, offline HTML file, this
machine's absolute paths made relative (:func:`relative_paths`, also used by the index), and the banner every
page carries when the evaluated questions were generated (:func:`questions_note`).

Each page reads like a report, not raw pandas: a link back to the index at the top, a string a cell returned
without its quotes and every figure with its caption as alt text (:func:`tidy_outputs`), tables with readable
headers, whole counts as integers and no class names (:func:`clean_tables`), output text wrapped between words.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import itertools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rerankeval.core.ioutil import atomic_write_text
from rerankeval.core.paths import DatasetPaths, Roots
from rerankeval.corpus.contract import load_stats
from rerankeval.report import fragments

# Every page is static: no script may run (not even one that slipped into an output unescaped) and nothing
# is fetched from the network; images and fonts are embedded as data: URLs.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:"
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
TEMPLATES = Path(__file__).parent / "templates"
OFFLINE_TEMPLATE = "notebook_offline.html.j2"  # nbconvert's lab template without scripts from CDNs


def _path_rules(roots: Roots, extra: Sequence[tuple[str | Path, str]] = ()) -> list[tuple[str, str]]:
    """(absolute prefix, replacement) pairs, longest prefix first, each in its written and resolved form."""
    from rerankeval.core import paths

    inside = (paths.ROOT.resolve(), Path.home().resolve())
    rules = [(p, r) for p, r in extra if not any(Path(p).resolve().is_relative_to(i) for i in inside)]
    rules += [
        (roots.results, "results"),
        (paths.SHARED_DATA_DIR, "../shared/data"),
        (roots.cache, "$RERANKEVAL_CACHE"),
        (roots.qdrant, "$RERANKEVAL_QDRANT_PATH"),
    ]
    rules = [(p, r) for p, r in rules if not any(Path(p).resolve().is_relative_to(i) for i in inside)]
    rules += [(paths.ROOT, "."), (Path.home(), "~")]
    out = {str(q).rstrip("/"): r for p, r in rules for q in (Path(p), Path(p).resolve()) if str(q) not in ("", "/")}
    return sorted(out.items(), key=lambda kv: -len(kv[0]))


def relative_paths(text: str, roots: Roots, extra: Sequence[tuple[str | Path, str]] = ()) -> str:
    """``text`` with this machine's absolute paths made relative: the project root (``data/x``), the results,
    cache and Qdrant ``roots`` (``dp.roots``), the shared data folder and the home directory (``~``); ``extra`` adds
    pairs (e.g. a dataset folder outside the project -> its name). ``data:`` URLs are left alone."""
    rules = _path_rules(roots, extra)
    rx = re.compile(
        r"(data:[^\s\"'<>)]+)|(?<![\w.+-])(" + "|".join(re.escape(p) for p, _ in rules) + r")(?:(/)|(?![\w.-]))"
    )
    repl = dict(rules)

    def sub(m: re.Match) -> str:
        if m.group(1):
            return m.group(1)
        rep, slash = repl[m.group(2)], m.group(3)
        return ("" if rep == "." else rep + "/") if slash else rep

    return rx.sub(sub, text)


def _notebook_dataset(nb: Any) -> list[tuple[str, str]]:
    """The papermill ``dataset`` parameter of an executed notebook as a (path, name) pair, when it is a path."""
    ds = str(nb.metadata.get("papermill", {}).get("parameters", {}).get("dataset", ""))
    return [(ds, Path(ds).name)] if Path(ds).is_absolute() else []


_REMOTE_SCRIPT = re.compile(r"<script\b[^>]*\bsrc\s*=\s*[\"']?\s*(?:https?:)?//[^>]*>\s*</script\s*>", re.I | re.S)
_REMOTE_LINK = re.compile(r"<link\b[^>]*\bhref\s*=\s*[\"']?\s*(?:https?:)?//[^>]*>", re.I | re.S)
_REMOTE_IMPORT = re.compile(
    r"<script\b[^>]*>(?:(?!</script).)*?import\(\s*[\"'](?:https?:)?//(?:(?!</script).)*"
    r"</script\s*>",
    re.I | re.S,
)


def strip_remote_resources(html_text: str) -> str:
    """Remove ``<script src=http…>``, ``<link href=http…>`` and scripts importing remote modules."""
    for rx in (_REMOTE_SCRIPT, _REMOTE_LINK, _REMOTE_IMPORT):
        html_text = rx.sub("", html_text)
    return html_text


_MISSING_CELL = re.compile(r"<(td|th)((?:\s[^>]*)?)>\s*(NaN|nan|None|NaT|&lt;NA&gt;|&lt;NaN&gt;)\s*</\1>")
_PLAIN_TH = re.compile(r"<th((?:\s[^>]*)?)>([^<]*_[^<]*)</th>")  # a header cell of text only, with an underscore
_BOOL_CELL = re.compile(r"<(td|th)((?:\s[^>]*)?)>\s*(True|False)\s*</\1>")


_CELL = re.compile(r"<(td|th)((?:\s[^>]*)?)>([^<]*)</\1>")
_WHOLE_FLOAT = re.compile(r"\s*(-?\d+)\.0+\s*")
_CLASS_NAME = re.compile(r"\s*([A-Z][a-z]+(?:[A-Z][a-z]+){2,})\s*")  # NoNewQuery; not PyStemmer


def _counts_as_integers(table: str) -> str:
    """``table`` (one ``<table>``) with every column whose numbers are all whole (``38.0000``) and not all 0 or 1
    (a rate column of 1.0000 stays a rate) printed as integers."""
    rows = re.findall(r"<tr\b.*?</tr>", table, flags=re.S)
    columns: dict[int, list[str]] = {}
    for row in rows:
        for i, m in enumerate(_CELL.finditer(row)):
            if m.group(1) == "td":  # values, not the header or the index
                columns.setdefault(i, []).append(m.group(3))
    whole = {
        i
        for i, vals in columns.items()
        if (nums := [v for v in vals if v.strip() not in ("", "\u2013")])
        and all(_WHOLE_FLOAT.fullmatch(v) for v in nums)
        and any(abs(float(v)) > 1 for v in nums)
    }
    if not whole:
        return table

    def row_sub(row: re.Match) -> str:
        position = itertools.count()

        def cell(m: re.Match) -> str:
            w = _WHOLE_FLOAT.fullmatch(m.group(3))
            return (
                f"<{m.group(1)}{m.group(2)}>{w.group(1)}</{m.group(1)}>"
                if next(position) in whole and w
                else m.group(0)
            )

        return _CELL.sub(cell, row.group(0))

    return re.sub(r"<tr\b.*?</tr>", row_sub, table, flags=re.S)


_SNAKE = re.compile(r"<th((?:\s[^>]*)?)>\s*([a-z][a-z0-9@.]*(?:_[a-z0-9@.]+)+)\s*</th>")


def _readable_header(name: str) -> str:
    """A snake_case column name as words, a variant's name kept whole: ``rank_hybrid_rerank`` -> "rank
    hybrid_rerank" (the table's own names, e.g. ``n_queries`` -> "n queries")."""
    from rerankeval.core.names import names

    variants = sorted(names(), key=len, reverse=True)
    parts = re.split("(" + "|".join(re.escape(v) for v in variants) + ")", name)
    return "".join(p if p in variants else p.replace("_", " ") for p in parts).strip()


def _readable_headers(html_text: str) -> str:
    """Every ``<thead>`` of ``html_text`` with snake_case header cells read as words (:func:`_readable_header`)."""
    return re.sub(
        r"<thead\b.*?</thead\s*>",
        lambda t: _SNAKE.sub(lambda m: f"<th{m.group(1)}>{_readable_header(m.group(2))}</th>", t.group(0)),
        html_text,
        flags=re.S,
    )


def _words(name: str) -> str:
    """A class name as words: ``NoNewQuery`` -> "no new query"."""
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()


def clean_tables(html_text: str) -> str:
    """Table cells of pandas' HTML made readable: a missing value (``NaN``, ``None``, ``NaT``, ``<NA>``) shows
    "\u2013", a Python bool yes/no (the tables a notebook shows without :func:`rerankeval.evaluate.views.tidy`),
    a snake_case column header reads as words (a variant's name kept, :func:`_readable_header`) and may wrap
    after an underscore (``hybrid_<wbr>reformulate``), a cell holding only a class name reads as
    words (``NoNewQuery``: "no new query"), a column of whole numbers printed as floats (``38.0000``) shows
    integers, and every table sits in a ``div.scroll`` that scrolls sideways on a narrow screen instead of the page."""
    html_text = _MISSING_CELL.sub(lambda m: f"<{m.group(1)}{m.group(2)}>\u2013</{m.group(1)}>", html_text)
    html_text = _BOOL_CELL.sub(
        lambda m: f"<{m.group(1)}{m.group(2)}>{'yes' if m.group(3) == 'True' else 'no'}</{m.group(1)}>", html_text
    )
    html_text = _CELL.sub(
        lambda m: (
            f"<{m.group(1)}{m.group(2)}>{_words(m.group(3).strip())}</{m.group(1)}>"
            if _CLASS_NAME.fullmatch(m.group(3))
            else m.group(0)
        ),
        html_text,
    )
    html_text = re.sub(r"<table\b.*?</table\s*>", lambda m: _counts_as_integers(m.group(0)), html_text, flags=re.S)
    html_text = _readable_headers(html_text)
    html_text = _PLAIN_TH.sub(lambda m: f"<th{m.group(1)}>{m.group(2).replace('_', '_<wbr>')}</th>", html_text)
    html_text = re.sub(r"<table\b", '<div class="scroll"><table', html_text)
    return re.sub(r"</table\s*>", "</table></div>", html_text)


def questions_note(dp: DatasetPaths) -> dict[str, str] | None:
    """What every page says at its top when the evaluated questions were generated (stage 01's record), else None."""
    try:
        stats = load_stats(dp)
    except (OSError, ValueError):  # StageMissing is an OSError: no stage 01 yet
        return None
    if stats.get("queries_source") != "generated":
        return None
    gen = stats.get("generated") or {}
    n, unreviewed = int(stats.get("queries") or 0), int(gen.get("draft") or 0)
    models = ", ".join(gen.get("models") or []) or "an LLM"
    head = (
        "The questions are generated and not yet reviewed." if unreviewed else "The questions are generated (reviewed)."
    )
    return {
        "head": head,
        "body": f"{n} questions drafted by {models} from single pages of the corpus "
        f"({unreviewed} not reviewed, {int(gen.get('accepted') or 0)} accepted); each has "
        "one known answer page. They test retrieval less strictly than your own questions "
        "would: see 08-questions, and add a queries.jsonl of your own to replace them.",
    }


BACK_LINK = '<nav class="back"><a href="index.html">\u2190 Report index</a></nav>'


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def _string_literal(text: str) -> str | None:
    """The string a ``text/plain`` repr stands for (``'No file was skipped.'`` -> No file was skipped.), else None."""
    s = text.strip()
    if len(s) < 2 or s[0] not in "'\"" or s[-1] != s[0]:
        return None
    try:
        value = ast.literal_eval(s)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _alt(outputs: Sequence[Any], i: int, heading: str) -> str:
    """A figure's alt text: the caption displayed right after it (:func:`rerankeval.report.plots.display_png`),
    else the heading of its section."""
    nxt = outputs[i + 1] if i + 1 < len(outputs) else None
    caption = _text((nxt.get("data") or {}).get("text/markdown", "")) if nxt is not None else ""
    caption = re.sub(r"\\(.)", r"\1", caption.strip().strip("*")).strip()
    return caption or heading


def tidy_outputs(nb: Any) -> Any:
    """``nb`` with what its outputs show made to read like a report: a string a cell returned shows without its
    quotes, and every image has alt text (its caption, else its section's heading) for the page's ``<img alt>``."""
    heading = str(nb.metadata.get("papermill", {}).get("input_path") or "figure")
    heading = f"Figure of {Path(heading).stem}"
    for c in nb.cells:
        if c.cell_type == "markdown":
            first = next((ln.lstrip("# ").strip() for ln in _text(c.source).splitlines() if ln.strip()), "")
            heading = first[:200] or heading
            continue
        outputs = c.get("outputs", [])
        for i, out in enumerate(outputs):
            data = out.get("data") or {}
            if out.get("output_type") == "execute_result" and set(data) == {"text/plain"}:
                s = _string_literal(_text(data["text/plain"]))
                data["text/plain"] = _text(data["text/plain"]) if s is None else s
            if "image/png" in data:
                out.setdefault("metadata", {})["alt"] = _alt(outputs, i, heading)
    return nb


@functools.lru_cache(maxsize=1)
def _exporter(template: str, cache: Path) -> Any:
    """nbconvert's HTML exporter for the pages, built once per process for ``template``: its Jinja2 templates are
    compiled on first use (half a second), then kept for every later page, and across runs in Jinja2's bytecode
    cache under ``<cache>/jinja`` (``cache``: the cache folder, ``dp.roots.cache``)."""
    from jinja2 import DictLoader, FileSystemBytecodeCache
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor
    from traitlets.config import Config

    c = Config()
    c.TagRemovePreprocessor.enabled = True
    c.TagRemovePreprocessor.remove_input_tags = {"hide-input", "remove-input"}
    c.TagRemovePreprocessor.remove_cell_tags = {"remove-cell"}
    exporter = HTMLExporter(
        config=c,
        template_name="lab",
        embed_images=True,
        extra_loaders=[DictLoader({"rerankeval_offline.html.j2": template})],
    )
    exporter.template_file = "rerankeval_offline.html.j2"
    exporter.register_preprocessor(TagRemovePreprocessor(config=c), enabled=True)
    with contextlib.suppress(OSError):  # Jinja2's cache of compiled templates (checked against their source)
        folder = cache / "jinja"
        folder.mkdir(parents=True, exist_ok=True)
        exporter.environment.bytecode_cache = FileSystemBytecodeCache(str(folder))
    return exporter


def render_notebook_html(
    executed_ipynb_path: str | Path, out_html_path: str | Path, note: Mapping[str, str] | None = None, *, roots: Roots
) -> Path:
    """Render an executed notebook to a self-contained, offline HTML page.

    nbconvert's lab template with images embedded, without require.js/MathJax/mermaid/widget scripts from
    CDNs, and with the inputs of cells tagged ``hide-input`` (or ``remove-input``) removed; cells tagged
    ``remove-cell`` are dropped. The papermill ``injected-parameters`` cell keeps its input. A
    Content-Security-Policy (:data:`CSP`) forbids every script and network fetch, so even an output that
    forgot to escape data cannot run code in the report. Absolute paths are made relative (:func:`relative_paths`,
    ``roots``: the program's, ``dp.roots``; its cache keeps the compiled templates).
    ``note`` (:func:`questions_note`) is shown at the top of the page, under a link back to the index. Tables
    scroll sideways and show no NaN or True/False (:func:`clean_tables`); outputs are tidied (:func:`tidy_outputs`).
    """
    import nbformat

    nb = tidy_outputs(nbformat.read(str(executed_ipynb_path), as_version=4))
    body, _ = _exporter((TEMPLATES / OFFLINE_TEMPLATE).read_text(), roots.cache).from_notebook_node(
        nb, resources={"metadata": {"name": Path(executed_ipynb_path).stem}}
    )
    body = clean_tables(relative_paths(strip_remote_resources(body), roots, _notebook_dataset(nb)))
    body = re.sub(r"<head>", lambda m: m.group(0) + "\n" + CSP_META, body, count=1, flags=re.I)
    top = BACK_LINK + (fragments.banner_html(note) if note else "")  # and the generated-questions banner
    body = re.sub(r"<body[^>]*>", lambda m: m.group(0) + top, body, count=1, flags=re.I)
    return atomic_write_text(out_html_path, body)
