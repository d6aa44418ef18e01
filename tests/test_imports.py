"""Import hygiene: a cheap CLI, lazy package exports that all resolve."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import st_magnitude

HEAVY = ("torch", "sentence_transformers", "transformers", "scipy", "numpy", "mteb", "beir", "sklearn", "matplotlib")

PACKAGES = (
    "st_magnitude",
    "st_magnitude.data",
    "st_magnitude.diagnostics",
    "st_magnitude.evaluation",
    "st_magnitude.lab.compare",
    "st_magnitude.model",
    "st_magnitude.losses",
    "st_magnitude.modules",
    "st_magnitude.lab.replication",
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


def test_serving_and_its_stack_registry_import_nothing_heavy():
    """Tests and benchmarks parametrise over the stack registry: reading it loads no stack, torch or numpy."""
    assert _heavy_modules_after("import st_magnitude.serving, st_magnitude.serving._stacks") == []


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


def _module_of(init: Path, root: Path) -> str:
    return ".".join(("st_magnitude", *init.parent.relative_to(root).parts))


def test_no_export_shares_its_name_with_a_submodule():
    """Importing submodule ``pkg.x`` binds ``pkg.x`` to the module: an exported name ``x`` must not be a submodule,
    or ``from pkg import x`` would return the module or the export depending on what was imported first."""
    root = Path(st_magnitude.__file__).parent
    clashes = sorted(
        f"{init.parent.relative_to(root.parent)}.{name}"
        for init in root.rglob("__init__.py")
        for name in importlib.import_module(_module_of(init, root)).__dict__.get("__all__", [])
        if (init.parent / f"{name}.py").exists() or (init.parent / name / "__init__.py").exists()
    )
    assert clashes == []
