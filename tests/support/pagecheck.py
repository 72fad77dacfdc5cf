"""What is wrong with a rendered page, in words (issue 23 item 5): the checker of the report's pages, shared by the
tests of the pages (report) and of the chain's own pages."""

from __future__ import annotations

import re
from html.parser import HTMLParser

BAD_CELLS = {"NaN", "nan", "None", "NaT", "<NA>", "True", "False"}
LONG_FLOAT = re.compile(r"(?<![\w.])\d+\.\d{10,}")
REPR = re.compile(r"[{\[]'[^']{0,60}'\s*[:,]")


class _Page(HTMLParser):
    """The visible text (code inputs and styles left out), the text of every table cell, the header cells'
    markup, and whether each table sits in a ``div.scroll``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.cells: list[str] = []
        self.headers: list[str] = []
        self.column_names: list[str] = []  # the text of the header cells inside a <thead>
        self.unwrapped = 0
        self._stack: list[tuple[str, bool, bool]] = []  # tag, hidden (code/style), a div.scroll
        self._cell: list[str] | None = None
        self._th: list[str] | None = None

    def _hidden(self) -> bool:
        return any(h for _, h, _ in self._stack)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        cls = dict(attrs).get("class") or ""
        hidden = tag in ("style", "script") or "highlight" in cls.split() or "jp-InputArea" in cls
        if tag == "table" and not any(scroll for _, _, scroll in self._stack):  # inside a scrolling box
            self.unwrapped += 1
        if tag in ("td", "th"):
            self._cell = []
            self._th = [] if tag == "th" else None
        elif self._th is not None:
            self._th.append(f"<{tag}>")
        if tag not in ("br", "wbr", "img", "meta", "link", "input", "hr"):
            self._stack.append((tag, hidden, tag == "div" and "scroll" in cls.split()))

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            if self._stack.pop()[0] == tag:
                break
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell).strip())
            if self._th is not None:
                self.headers.append("".join(self._th))
                if any(t == "thead" for t, _, _ in self._stack):
                    self.column_names.append("".join(self._cell).strip())
            self._cell = self._th = None

    def handle_data(self, data: str) -> None:
        if self._hidden():
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._th is not None:
            self._th.append(data)


FLOAT_COUNT = re.compile(r"(\d+)\.0{2,}")  # a whole number printed as a float: "38.0000"
QUOTED_MESSAGE = re.compile(r"(?<!\w)'[A-Z][^'\n]{3,}[.!?]'")  # a sentence shown as a Python string: 'No file ...'
CLASS_NAME = re.compile(r"[A-Z][a-z]+(?:[A-Z][a-z]+){2,}")  # a cell that is only a class name: NoNewQuery
NO_ALT = re.compile(r"<img\b(?![^>]*\balt=\"(?!No description has been provided)[^\"]+\")[^>]*>", re.I)
SNAKE = re.compile(r"[a-z][a-z0-9@.]*(?:_[a-z0-9@.]+)+")


def _variant_names() -> re.Pattern:
    from rerankeval.core.names import names

    return re.compile("|".join(re.escape(n) for n in sorted(names(), key=len, reverse=True)))


VARIANT = _variant_names()
BACK = re.compile(r"<a\b[^>]*href=\"index\.html\"")


def _layout_defects(html_text: str, name: str) -> list[str]:
    """Images without alt text, a notebook page without a link back to the index, ``<pre>`` text that breaks
    inside words (JupyterLab's ``word-break: break-all`` not undone)."""
    out = [f"image without alt text {m.group(0)[:120]!r}" for m in NO_ALT.finditer(html_text)]
    out += ["no link back to the index"] if name != "index.html" and not BACK.search(html_text) else []
    styles = " ".join(re.findall(r"<style\b[^>]*>(.*?)</style>", html_text, flags=re.S))
    if "break-all" in styles and not re.search(r"pre\s*\{[^}]*word-break:\s*normal", styles):
        out.append("<pre> text breaks mid-word (word-break: break-all)")
    if re.search(r"(?:^|[}\s])pre\s*\{[^}]*overflow-wrap:\s*anywhere", styles):  # a table squeezes it mid-word
        out.append("<pre> text breaks mid-word (overflow-wrap: anywhere)")
    return out


def defects(html_text: str, name: str = "index.html") -> list[str]:
    """What is wrong with one page (its file ``name``), in words (empty: clean)."""
    out = _layout_defects(re.sub(r"data:[^\"')\s]+", "", html_text), name)
    page = _Page()
    page.feed(re.sub(r"data:[^\"')\s]+", "", html_text))
    text = " ".join(page.text)
    out += [f"cell {c!r}" for c in page.cells if c in BAD_CELLS]
    out += [f"count as a float {c!r}" for c in page.cells if (m := FLOAT_COUNT.fullmatch(c)) and int(m.group(1)) > 1]
    out += [f"class name {c!r}" for c in page.cells if CLASS_NAME.fullmatch(c)]
    out += [f"quoted message {m!r}" for m in QUOTED_MESSAGE.findall(text)]
    out += [f"snake_case header {h!r}" for h in page.column_names if SNAKE.fullmatch(h) and "_" in VARIANT.sub("", h)]
    out += [f"repr {m!r}" for m in REPR.findall(text)]
    out += [f"long float {m}" for m in LONG_FLOAT.findall(text)]
    out += ["capitalised 'DOES NOT'"] * text.count("DOES NOT")
    out += [
        f"header {h!r} cannot wrap"
        for h in page.headers
        if any(len(w) > 14 and "_" in w for w in re.sub(r"<[^>]+>", " ", h).split()) and "<wbr>" not in h
    ]
    out += [f"{page.unwrapped} table(s) without a scroll box"] if page.unwrapped else []
    return out
