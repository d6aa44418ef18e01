"""Every ``st_magnitude`` import that README.md and docs/**.md show works, without a warning from st-magnitude.

Extracted: ``from st_magnitude... import ...`` / ``import st_magnitude...`` statements inside fenced code blocks
(parenthesised multi-line imports included), the same statements in inline code spans, and the ``::: module``
directives of the API reference. Each runs in one fresh interpreter (``exec`` of the statement as written) and
fails on an ImportError / AttributeError, or on a ``DeprecationWarning`` from st-magnitude. A failure names the
``file:line`` of the statement.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
STATEMENT = re.compile(r"^\s*(?:>>> |\.\.\. )?((?:from|import) st_magnitude\b.*)$")
INLINE = re.compile(r"`((?:from|import) st_magnitude\b[^`]*)`")
DIRECTIVE = re.compile(r"^:::\s*(st_magnitude[\w.]*)\s*$")


def _complete(lines: list[str], start: int, first: str) -> str:
    """``first`` plus its continuation lines (open parenthesis or trailing backslash), comments dropped."""
    text = first.split("#", 1)[0].rstrip()
    i = start
    while (text.count("(") > text.count(")") or text.endswith("\\")) and i + 1 < len(lines):
        i += 1
        text = text.rstrip("\\") + " " + lines[i].split("#", 1)[0].strip()
    return text


def doc_imports() -> list[tuple[str, str]]:
    """``[(file:line, statement)]`` for every st_magnitude import the docs show."""
    found = []
    for path in DOC_FILES:
        lines = path.read_text(encoding="utf-8").splitlines()
        in_code = False
        for i, line in enumerate(lines):
            where = f"{path.relative_to(REPO)}:{i + 1}"
            if line.lstrip().startswith("```"):
                in_code = not in_code
                continue
            match = STATEMENT.match(line) if in_code else DIRECTIVE.match(line)
            if match and in_code:
                found.append((where, _complete(lines, i, match.group(1))))
            elif match:
                found.append((where, f"import {match.group(1)}"))
            if not in_code:
                found.extend((where, span.strip()) for span in INLINE.findall(line))
    return found


CHILD = r"""
import json, sys, traceback, warnings
results = []
for where, statement in json.loads(sys.stdin.read()):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(statement, {})
            error = None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    moved = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    moved = sorted({m for m in moved if "st_magnitude" in m})
    results.append({"error": error, "deprecations": moved})
print("RESULTS " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def import_results() -> list[dict]:
    """One result per statement of :func:`doc_imports`, in order: ``{"error", "deprecations"}``."""
    statements = doc_imports()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(statements),
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert lines, f"the import process failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULTS ") :])


def test_docs_show_imports():
    statements = doc_imports()
    assert len(statements) >= 30  # README + method pages: a broken extractor must not pass by finding nothing
    for where, statement in statements:
        ast.parse(statement)  # a statement the extractor cut wrongly fails here, with its file:line
        assert "st_magnitude" in statement, where


def test_every_import_the_docs_show_works_without_deprecation(import_results):
    shown = list(zip(doc_imports(), import_results, strict=True))
    # a serving adapter whose stack is not installed names the extra that installs it: not a broken doc import
    absent = "pip install 'st-magnitude[deploy]'"
    broken = [
        f"{where}: {stmt!r} -> {result['error']}"
        for (where, stmt), result in shown
        if result["error"] and not (result["error"].startswith("ImportError") and absent in result["error"])
    ]
    moved = [f"{where}: {stmt!r} -> {msg}" for (where, stmt), result in shown for msg in result["deprecations"]]
    assert not broken, "imports shown in the docs fail:\n" + "\n".join(broken)
    assert not moved, "the docs show old (deprecated) paths; show the new ones:\n" + "\n".join(moved)
