"""Text read from a result file, made safe to put into the generated Markdown page: every character Markdown,
its table syntax or HTML gives a meaning to is escaped, and line breaks of any kind become spaces, so a string
taken from a summary shows as itself and cannot open a link, an image, an HTML tag, an attribute list, a snippet
include, a code span or a new table cell or line."""

from __future__ import annotations

__all__ = ["md_code", "md_text"]

#: characters Markdown (emphasis, code, links, images, attribute lists) or its table syntax gives a meaning to
_BACKSLASHED = "\\`*_[]{}|!"
#: characters HTML gives a meaning to
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _one_line(value: object) -> str:
    """``value`` as text on one line: every run of white space (line breaks of any kind included) one space."""
    return " ".join(str(value).split())


def md_text(value: object) -> str:
    """``value`` as Markdown text that shows as itself: one line, each significant character escaped."""
    out = []
    for ch in _one_line(value):
        out.append(_ENTITIES.get(ch) or (f"\\{ch}" if ch in _BACKSLASHED else ch))
    return "".join(out)


def md_code(value: object) -> str:
    """``value`` as one inline code span (shown verbatim, for a list item, not a table cell): fenced by more backticks
    than any run inside it, on one line."""
    text = _one_line(value)
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
