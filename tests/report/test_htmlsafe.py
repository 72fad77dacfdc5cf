"""HTML through the templates (issue 20): the notebook fragments render from report/templates with autoescape, each
carrying only its own rules of the one stylesheet; no CSS or hand-built markup in the library's Python."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from rerankeval.report import fragments, htmlsafe

LIB = Path(__file__).resolve().parents[2] / "lib" / "rerankeval"
SCOPES = ("rre-x", "rre-ask", "rre-diff", "rre-verdict", "rre-status", "rre-banner")


@pytest.mark.parametrize("scope", SCOPES)
def test_a_fragment_carries_its_own_rules_of_report_css_and_no_other(scope):
    css = str(fragments.scoped_css(scope))
    selectors = [s.strip() for rule in css.splitlines() for s in rule.split("{", 1)[0].split(",")]
    assert selectors and all(re.match(rf"\.{scope}(?![\w-])", s) for s in selectors), selectors
    text = fragments.STYLESHEET.read_text(encoding="utf-8")
    for rule in css.splitlines():  # every rule is one of the stylesheet's, with its declarations
        declarations = rule.split("{", 1)[1].rstrip("}")
        assert declarations.split(";")[0] in text


def test_the_scoped_rules_are_the_stylesheets_known_answer():
    css = str(fragments.scoped_css("rre-verdict"))
    assert css == ".rre-verdict{border-left:5px solid #4c72b0;padding:6px 12px;background:#f5f9ff}"
    assert "rre-x-" not in str(fragments.scoped_css("rre-x")) and "body{" not in str(fragments.scoped_css("rre-x"))
    with pytest.raises(ValueError, match=r"no rule for \.rre-nothing"):
        fragments.scoped_css("rre-nothing")


def test_the_verdict_and_the_status_escape_what_they_show():
    html = fragments.verdict_html(["hybrid wins <script>alert(1)</script>", "a & b"])
    assert html.count("<p>") == 2 and "<script>alert" not in html and "&lt;script&gt;" in html and "a &amp; b" in html
    assert html.startswith("<style>.rre-verdict{") and '<div class="rre-verdict">' in html
    err = fragments.status_html(ValueError("refused: <b>q1</b>"), error=True)
    assert '<span class="rre-status err">refused: &lt;b&gt;q1&lt;/b&gt;</span>' in err
    assert '<span class="rre-status">ok</span>' in fragments.status_html("ok")
    banner = fragments.banner_html({"head": "Generated <questions>", "body": "by a & b"})
    assert banner.endswith('<p class="rre-banner"><b>Generated &lt;questions&gt;</b> by a &amp; b</p>')


def test_esc_escapes_quotes_and_drops_missing_values():
    assert htmlsafe.esc('<a href="x">\'') == "&lt;a href=&quot;x&quot;&gt;&#x27;"
    assert htmlsafe.esc(None) == "" and htmlsafe.esc(float("nan")) == "" and htmlsafe.esc(3) == "3"


# report.pages post-processes the HTML pandas and nbconvert wrote (a table wrapped in div.scroll, empty cells): it
# rewrites markup it was given rather than building a view
REWRITERS = {LIB / "report" / "pages.py"}


def _markup_in_python() -> list[str]:
    """String literals in lib/ that hold a <style> block or build a tag of the fragments (<table, <div, <tr, <td)."""
    found = []
    for p in sorted(set(LIB.rglob("*.py")) - REWRITERS):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and not _is_docstring(node, p):
                if re.search(r"<style|<table|<div|<tr[ >]|<td[ >]", node.value):
                    found.append(f"{p.relative_to(LIB)}:{node.lineno}")
    return found


def _is_docstring(node: ast.Constant, path: Path) -> bool:
    return "``" in node.value or node.value.lstrip().startswith(("The ", "A ", "An "))


def test_no_python_module_builds_a_style_block_or_a_table():
    """CSS lives in report.css and markup in the templates; the library's Python holds neither."""
    assert not _markup_in_python(), _markup_in_python()


def test_every_style_block_of_the_templates_is_the_stylesheet():
    """A template's <style> holds report.css (whole for the index page, a fragment's own rules) and nothing written
    inline; nbconvert's notebook template is the one exception (its .scroll rule, a change for the lead)."""
    literal = []
    for p in sorted((LIB / "report" / "templates").glob("*.j2")):
        for m in re.finditer(r"<style>(.*?)</style>", p.read_text(encoding="utf-8"), re.S):
            if not re.fullmatch(r'\{\{ scoped_css\("[\w-]+"\) \}\}|\{% include "report.css" %\}', m.group(1)):
                literal.append(p.name)
    assert literal in ([], ["notebook_offline.html.j2"]), literal
