"""The one title + text join for BEIR-style documents (evaluation, BEIR/mteb integrations and Revela chunking)."""

from __future__ import annotations

from collections.abc import Mapping


def doc_text(doc: Mapping[str, str | None] | str, sep: str = " ") -> str:
    """A document's text: ``(title + sep + text).strip()``, or ``text.strip()`` when the title is empty.

    This is how mteb builds a BEIR document (``sep=" "``); Revela chunking passes ``sep=". "`` so the title ends a
    sentence of its own. A bare string is returned as is; a missing or ``None`` title/text counts as empty.
    """
    if isinstance(doc, str):
        return doc
    title = doc.get("title") or ""
    text = doc.get("text") or ""
    return (title + sep + text).strip() if title else text.strip()
