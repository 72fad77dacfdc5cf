"""The report's notebook pages: an executed notebook rendered to one self-contained, offline HTML file, this
machine's absolute paths made relative (:func:`relative_paths`, also used by the index), and the banner every
page carries when the evaluated questions were generated (:func:`questions_note`).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rerankeval.core.ioutil import atomic_write_text
from rerankeval.core.paths import DatasetPaths
from rerankeval.corpus.contract import load_stats
from rerankeval.report import fragments

# Every page is static: no script may run (not even one that slipped into an output unescaped) and nothing
# is fetched from the network; images and fonts are embedded as data: URLs.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:"
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
TEMPLATES = Path(__file__).parent / "templates"
OFFLINE_TEMPLATE = "notebook_offline.html.j2"  # nbconvert's lab template without scripts from CDNs


def _path_rules(extra: Sequence[tuple[str | Path, str]] = ()) -> list[tuple[str, str]]:
    """(absolute prefix, replacement) pairs, longest prefix first, each in its written and resolved form."""
    from rerankeval.core import paths

    inside = (paths.ROOT.resolve(), Path.home().resolve())
    rules = [(p, r) for p, r in extra if not any(Path(p).resolve().is_relative_to(i) for i in inside)]
    rules += [(paths.results_dir(), "results"), (paths.SHARED_DATA_DIR, "../shared/data"),
              (paths.cache_dir(), "$RERANKEVAL_CACHE"), (paths.qdrant_dir(), "$RERANKEVAL_QDRANT_PATH")]
    rules = [(p, r) for p, r in rules if not any(Path(p).resolve().is_relative_to(i) for i in inside)]
    rules += [(paths.ROOT, "."), (Path.home(), "~")]
    out = {str(q).rstrip("/"): r for p, r in rules for q in (Path(p), Path(p).resolve()) if str(q) not in ("", "/")}
    return sorted(out.items(), key=lambda kv: -len(kv[0]))


def relative_paths(text: str, extra: Sequence[tuple[str | Path, str]] = ()) -> str:
    """``text`` with this machine's absolute paths made relative: the project root (``data/x``), the results,
    cache and Qdrant roots, the shared data folder and the home directory (``~``); ``extra`` adds pairs
    (e.g. a dataset folder outside the project -> its name). ``data:`` URLs are left alone."""
    rules = _path_rules(extra)
    rx = re.compile(r"(data:[^\s\"'<>)]+)|(?<![\w.+-])(" + "|".join(re.escape(p) for p, _ in rules)
                    + r")(?:(/)|(?![\w.-]))")
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
_REMOTE_IMPORT = re.compile(r"<script\b[^>]*>(?:(?!</script).)*?import\(\s*[\"'](?:https?:)?//(?:(?!</script).)*"
                            r"</script\s*>", re.I | re.S)


def strip_remote_resources(html_text: str) -> str:
    """Remove ``<script src=http…>``, ``<link href=http…>`` and scripts importing remote modules."""
    for rx in (_REMOTE_SCRIPT, _REMOTE_LINK, _REMOTE_IMPORT):
        html_text = rx.sub("", html_text)
    return html_text


_MISSING_CELL = re.compile(r"<(td|th)((?:\s[^>]*)?)>\s*(NaN|nan|None|NaT|&lt;NA&gt;|&lt;NaN&gt;)\s*</\1>")
_PLAIN_TH = re.compile(r"<th((?:\s[^>]*)?)>([^<]*_[^<]*)</th>")  # a header cell of text only, with an underscore
_BOOL_CELL = re.compile(r"<(td|th)((?:\s[^>]*)?)>\s*(True|False)\s*</\1>")


def clean_tables(html_text: str) -> str:
    """Table cells of pandas' HTML made readable: a missing value (``NaN``, ``None``, ``NaT``, ``<NA>``) shows
    "\u2013", a Python bool yes/no (the tables a notebook shows without :func:`rerankeval.evaluate.views.tidy`),
    a header may wrap after an underscore (``hybrid_<wbr>reformulate``), and every table sits in a ``div.scroll``
    that scrolls sideways on a narrow screen instead of the page."""
    html_text = _MISSING_CELL.sub(lambda m: f"<{m.group(1)}{m.group(2)}>\u2013</{m.group(1)}>", html_text)
    html_text = _BOOL_CELL.sub(
        lambda m: f"<{m.group(1)}{m.group(2)}>{'yes' if m.group(3) == 'True' else 'no'}</{m.group(1)}>", html_text)
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
    head = ("The questions are generated and not yet reviewed." if unreviewed else
            "The questions are generated (reviewed).")
    return {"head": head, "body": f"{n} questions drafted by {models} from single pages of the corpus "
                                  f"({unreviewed} not reviewed, {int(gen.get('accepted') or 0)} accepted); each has "
                                  "one known answer page. They test retrieval less strictly than your own questions "
                                  "would: see 08-questions, and add a queries.jsonl of your own to replace them."}


@functools.lru_cache(maxsize=1)
def _exporter(template: str) -> Any:
    """nbconvert's HTML exporter for the pages, built once per process for ``template``: its Jinja2 templates are
    compiled on first use (half a second), then kept for every later page, and across runs in Jinja2's bytecode
    cache under ``paths.cache_dir()/jinja``."""
    from jinja2 import DictLoader, FileSystemBytecodeCache
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor
    from traitlets.config import Config

    c = Config()
    c.TagRemovePreprocessor.enabled = True
    c.TagRemovePreprocessor.remove_input_tags = {"hide-input", "remove-input"}
    c.TagRemovePreprocessor.remove_cell_tags = {"remove-cell"}
    exporter = HTMLExporter(config=c, template_name="lab", embed_images=True,
                            extra_loaders=[DictLoader({"rerankeval_offline.html.j2": template})])
    exporter.template_file = "rerankeval_offline.html.j2"
    exporter.register_preprocessor(TagRemovePreprocessor(config=c), enabled=True)
    from rerankeval.core.paths import cache_dir

    with contextlib.suppress(OSError):  # Jinja2's cache of compiled templates (checked against their source)
        folder = cache_dir() / "jinja"
        folder.mkdir(parents=True, exist_ok=True)
        exporter.environment.bytecode_cache = FileSystemBytecodeCache(str(folder))
    return exporter


def render_notebook_html(executed_ipynb_path: str | Path, out_html_path: str | Path,
                         note: Mapping[str, str] | None = None) -> Path:
    """Render an executed notebook to a self-contained, offline HTML page.

    nbconvert's lab template with images embedded, without require.js/MathJax/mermaid/widget scripts from
    CDNs, and with the inputs of cells tagged ``hide-input`` (or ``remove-input``) removed; cells tagged
    ``remove-cell`` are dropped. The papermill ``injected-parameters`` cell keeps its input. A
    Content-Security-Policy (:data:`CSP`) forbids every script and network fetch, so even an output that
    forgot to escape data cannot run code in the report. Absolute paths are made relative (:func:`relative_paths`).
    ``note`` (:func:`questions_note`) is shown at the top of the page. Tables scroll sideways and show no
    NaN or True/False (:func:`clean_tables`).
    """
    import nbformat

    nb = nbformat.read(str(executed_ipynb_path), as_version=4)
    body, _ = _exporter((TEMPLATES / OFFLINE_TEMPLATE).read_text()).from_notebook_node(
        nb, resources={"metadata": {"name": Path(executed_ipynb_path).stem}})
    body = clean_tables(relative_paths(strip_remote_resources(body), _notebook_dataset(nb)))
    body = re.sub(r"<head>", lambda m: m.group(0) + "\n" + CSP_META, body, count=1, flags=re.I)
    if note:  # the generated-questions banner, at the top of the page
        body = re.sub(r"<body[^>]*>", lambda m: m.group(0) + fragments.banner_html(note), body, count=1, flags=re.I)
    return atomic_write_text(out_html_path, body)
