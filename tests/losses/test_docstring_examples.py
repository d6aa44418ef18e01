"""Every ``Example:`` in the loss docstrings runs as written on the installed sentence-transformers.

The examples name ``all-MiniLM-L6-v2``; here that name is pointed at a tiny random model of the same shape
(BERT, hidden 384, mean pooling, Normalize) saved to a temporary folder, so the examples run offline and fast. No
other change is made to the example's text. (The Revela example is tested with the Revela loss.)
"""

from __future__ import annotations

import importlib
import inspect
import re
import textwrap
import warnings

import pytest

from st_magnitude.losses._registry import LOSS_REGISTRY

#: registered losses whose example needs more than a MiniLM-shaped model (Revela: a causal LM; its own tests run it)
TESTED_ELSEWHERE = ("revela",)
#: the module of every registered loss: every example in it runs
MODULES = tuple(f"st_magnitude.losses.{spec.module}" for spec in LOSS_REGISTRY if spec.module not in TESTED_ELSEWHERE)
MODEL_NAME = re.compile(r"""(["'])(?:sentence-transformers/)?all-MiniLM-L6-v2\1""")


def _examples(doc: str) -> list[str]:
    """The indented ``::`` block after each ``Example:`` heading of a docstring."""
    out = []
    lines = textwrap.dedent(doc).splitlines()
    for i, line in enumerate(lines):
        if line.strip() not in ("Example:", "Examples:"):
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() in ("", "::"):
            j += 1
        indent = len(lines[j]) - len(lines[j].lstrip())
        block = []
        while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) >= indent):
            block.append(lines[j])
            j += 1
        out.append(textwrap.dedent("\n".join(block)).strip() + "\n")
    return out


def _collect() -> list[tuple[str, str]]:
    found = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            is_code = inspect.isclass(obj) or inspect.isfunction(obj)
            if not is_code or getattr(obj, "__module__", None) != module_name:
                continue
            docs = [obj.__doc__ or ""]
            if inspect.isclass(obj) and "__init__" in vars(obj):
                docs.append(obj.__init__.__doc__ or "")
            for doc in docs:
                for k, code in enumerate(_examples(doc)):
                    found.append((f"{module_name.rsplit('.', 1)[-1]}.{name}[{k}]", code))
    return found


EXAMPLES = _collect()


def test_every_loss_with_a_docstring_has_its_example_collected():
    names = {key.split("[")[0] for key, _ in EXAMPLES}
    expected = {
        f"{module.rsplit('.', 1)[-1]}.{name}"
        for spec in LOSS_REGISTRY
        for name in spec.classes
        for module in MODULES
        if module.endswith(f".{spec.module}")
    }
    assert expected <= names, sorted(expected - names)


@pytest.fixture(scope="module")
def minilm_shaped_model(tmp_path_factory):
    """A tiny random model with all-MiniLM-L6-v2's layout and width (384), saved as a SentenceTransformer folder."""
    from conftest import build_tiny_bert_dir, build_tiny_st

    root = tmp_path_factory.mktemp("minilm_shaped")
    model = build_tiny_st(build_tiny_bert_dir(root / "hf", hidden=384, layers=1), normalize=True)
    model.save(str(root / "st"))
    return str(root / "st")


@pytest.mark.parametrize("key,code", EXAMPLES, ids=[k for k, _ in EXAMPLES])
def test_docstring_example_runs(key, code, minilm_shaped_model, tmp_path, monkeypatch):
    assert MODEL_NAME.search(code), f"{key}: example does not load the documented model"
    code = MODEL_NAME.sub(repr(minilm_shaped_model), code)
    monkeypatch.chdir(tmp_path)  # trainer output folders land here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, f"<docstring example {key}>", "exec"), {"__name__": "__docstring_example__"})
