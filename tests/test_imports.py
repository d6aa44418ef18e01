"""Import hygiene: a cheap CLI, lazy package exports that all resolve."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "sentence_transformers", "transformers", "scipy", "numpy", "mteb", "beir", "sklearn", "matplotlib")

PACKAGES = (
    "st_magnitude",
    "st_magnitude.data",
    "st_magnitude.diagnostics",
    "st_magnitude.evaluation",
    "st_magnitude.experiments",
    "st_magnitude.integrations",
    "st_magnitude.losses",
    "st_magnitude.modules",
    "st_magnitude.replication",
    "st_magnitude.scaling",
)


def _heavy_modules_after(code: str) -> list[str]:
    """Run ``code`` in a fresh interpreter; the heavy top-level packages it left in ``sys.modules``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return [m for m in json.loads(out.splitlines()[-1]) if m in HEAVY]


def test_cli_parser_imports_nothing_heavy():
    """``st-magnitude --help`` / argument errors answer in well under a second: no torch / ST / numpy at parse."""
    code = (
        "import st_magnitude.cli as c\n"
        "c.build_parser()\n"
        "c.main(['evaluate', 'm', '--data', 'x', '--similarity', 'nope'])"  # a usage error from a similarity choice
    )
    assert _heavy_modules_after(code) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_package_import_is_lazy(package):
    assert _heavy_modules_after(f"import {package}") == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package):
    module = importlib.import_module(package)
    exported = set(module.__all__) - {"__version__"}
    lazily = set(module.__dict__.get("_lazy_targets", {}))  # a package whose names all moved has none
    assert exported == lazily, f"__all__ and the lazy export table differ: {sorted(exported ^ lazily)}"
    for name in module.__all__:
        value = getattr(module, name)
        assert value is not None
        target = module.__dict__.get("_lazy_targets", {}).get(name)
        if target is not None:  # the same object as in its home module
            assert value is getattr(importlib.import_module(target), name)
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        module.not_a_name  # noqa: B018


def test_export_wins_over_same_named_submodule():
    """``contrastive_entropy`` is a submodule of evaluation and the exported function; importing the submodule
    after the package must not replace the function (the eager ``__init__`` kept the function too)."""
    code = (
        "import importlib, st_magnitude.evaluation as ev\n"
        "importlib.import_module('st_magnitude.evaluation.contrastive_entropy')\n"
        "from st_magnitude.evaluation import contrastive_entropy\n"
        "print(callable(contrastive_entropy) and not isinstance(contrastive_entropy, type(ev)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-1] == "True"
