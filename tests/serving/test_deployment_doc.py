"""Every code block of docs/deployment.md runs, in order, with a tiny model as ``my-model`` and a toy corpus."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest
from conftest import REPO_ROOT, build_tiny_st
from helpers.deploy_kit import TOY_DOCS

from st_magnitude.cli import main
from st_magnitude.serving._stacks import STACK_REGISTRY

pytestmark = [
    pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning:torch.onnx.*"),
]

DOC = REPO_ROOT / "docs" / "deployment.md"
BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.S | re.M)
#: the stacks the snippets import; a snippet whose stack is missing is skipped (named at the end)
STACK_MODULES = (*(spec.imports.split(".")[0] for spec in STACK_REGISTRY.values()), "onnxruntime")


def blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def test_the_page_has_runnable_blocks():
    kinds = [k for k, _ in blocks()]
    assert kinds.count("bash") >= 2 and kinds.count("python") >= 8


def section(title: str) -> str:
    """The text of the ``## title`` section of the page."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_every_registered_stack_has_its_row_and_section():
    """The section "The stacks" has one table row per registered stack (``| Title (`package`) |``) and one
    ``### Title`` section, in registry order, and none for a stack without an adapter."""
    stacks = section("The stacks")
    rows = re.findall(r"^\| (\w+) \(`([\w.-]+)`\) \|", stacks, re.M)
    assert rows == [(spec.title, spec.package) for spec in STACK_REGISTRY.values()]
    headings = re.findall(r"^### (.+)$", stacks, re.M)
    assert [spec.title for spec in STACK_REGISTRY.values()] == headings


@pytest.mark.slow  # imports every stack and converts six models: ~30 s alone, minutes on a loaded machine
def test_every_block_runs(tiny_bert_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ANONYMIZED_TELEMETRY", "False")
    build_tiny_st(tiny_bert_dir, normalize=True).save("my-model")
    Path("corpus.jsonl").write_text(
        "".join(json.dumps({"_id": str(i), "title": "", "text": t}) + "\n" for i, t in enumerate(TOY_DOCS))
    )
    missing = []
    for n, (kind, code) in enumerate(blocks()):
        if kind == "bash":
            for line in code.strip().splitlines():
                argv = shlex.split(line)
                assert argv[0] == "st-magnitude", f"block {n}: only st-magnitude commands are run: {line}"
                assert main(argv[1:]) == 0, f"block {n}: {line}"
            continue
        needed = [m for m in STACK_MODULES if re.search(rf"^(import|from) {m}\b", code, re.M)]
        if "serving import" in code and "OnnxEncoder" in code:
            needed.append("onnxruntime")
        absent = [m for m in needed if importlib.util.find_spec(m) is None]
        if absent:
            missing.append((n, absent))
            continue
        exec(compile(code, f"{DOC.name} block {n}", "exec", dont_inherit=True), {"__name__": "deployment_doc"})
    out = capsys.readouterr().out
    assert "--store cosine" in out  # the refusal snippet printed its message
    if missing:
        pytest.skip(f"blocks whose stack is not installed (pip install 'st-magnitude[deploy]'): {missing}")
