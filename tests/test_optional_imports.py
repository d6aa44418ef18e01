"""The README's test command passes without the optional extras: every test that imports an optional package (or a
serving adapter that imports one) is guarded by a skip that names the extra installing it.

Read from the tests' source (no optional package needed): an import of one of ``helpers.extras.OPTIONAL`` (or of a
module of ``OPTIONAL_AT_IMPORT``) must follow, in its function or at module level, a ``need_extra(...)`` call, a
stack check (``need``), or sit under a skip mark; ``pytest.importorskip`` of an optional package goes through
``need_extra``, whose reason says ``pip install 'st-magnitude[EXTRA]'``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from helpers.extras import INSTALL_HINT, OPTIONAL, OPTIONAL_AT_IMPORT, skip_reason

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
#: calls and marks that skip a test before its optional import runs
GUARDS = {"need_extra", "need", "importorskip", "skip", "skipif", "ONNX_MARKS"}


def _optional(module: str | None) -> bool:
    if not module:
        return False
    return module.split(".")[0] in OPTIONAL or any(
        module == m or module.startswith(m + ".") for m in OPTIONAL_AT_IMPORT
    )


def _names(node: ast.AST) -> set[str]:
    return {
        n.attr if isinstance(n, ast.Attribute) else n.id
        for n in ast.walk(node)
        if isinstance(n, (ast.Attribute, ast.Name))
    }


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0:
        return [node.module or ""]
    return []


def unguarded_imports(source: str, where: str) -> list[str]:
    """``file:line: module`` for each optional import in ``source`` that no guard precedes."""
    tree = ast.parse(source)
    module_guards = [s for s in tree.body if _names(s) & GUARDS]
    found: list[str] = []

    def visit(node: ast.AST, scopes: list[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            optional = [m for m in _imported(child) if _optional(m)]
            if optional and not _guarded(child, scopes):
                found.append(f"{where}:{child.lineno}: {', '.join(optional)}")
            visit(child, [*scopes, child] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scopes)

    def _guarded(imp: ast.AST, scopes: list[ast.AST]) -> bool:
        if not scopes:  # module level: only a call before it (a mark does not stop a module-level import)
            return any(
                s.lineno < imp.lineno and _names(s) & (GUARDS - {"skipif", "ONNX_MARKS"}) for s in module_guards
            )
        if module_guards:  # pytestmark / a module-level skip covers every test of the module
            return True
        for scope in scopes:
            if any(_names(d) & GUARDS for d in scope.decorator_list):
                return True
            if any(s.lineno < imp.lineno and _names(s) & GUARDS for s in scope.body):
                return True
        return False

    visit(tree, [])
    return found


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if p.name != "extras.py")


def test_every_optional_import_in_the_tests_is_guarded_by_a_skip():
    found = [
        hit
        for p in _test_files()
        for hit in unguarded_imports(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
    ]
    assert found == [], "guard these with helpers.extras.need_extra(MODULE) before the import:\n" + "\n".join(found)


def test_importorskip_of_an_optional_package_names_its_extra():
    """``pytest.importorskip("peft")`` skips with "could not import 'peft'": the user is not told the extra."""
    offenders = []
    for p in _test_files():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and "importorskip" in _names(node.func):
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Constant) and _optional(first.value):
                    offenders.append(f"{p.relative_to(ROOT)}:{node.lineno}: importorskip({first.value!r})")
    assert offenders == [], "use helpers.extras.need_extra instead:\n" + "\n".join(offenders)


def test_the_scan_finds_an_unguarded_import_and_accepts_the_guards():
    bare = "def test_x():\n    from st_magnitude.serving.chroma import chroma_collection\n"
    assert unguarded_imports(bare, "t.py") == ["t.py:2: st_magnitude.serving.chroma"]
    assert unguarded_imports("import onnx\n", "t.py") == ["t.py:1: onnx"]
    guarded = "def test_x():\n    need_extra('chromadb')\n    import chromadb\n"
    assert unguarded_imports(guarded, "t.py") == []
    marked = "@pytest.mark.skipif(True, reason='r')\ndef test_x():\n    import onnx\n"
    assert unguarded_imports(marked, "t.py") == []
    assert unguarded_imports("pytestmark = ONNX_MARKS\nimport onnx\n", "t.py") == ["t.py:2: onnx"]
    assert unguarded_imports("import numpy\nimport st_magnitude.serving.metric\n", "t.py") == []


def test_the_skip_reason_names_the_extra():
    assert skip_reason("llama_index.core") == "llama-index-core is not installed (pip install 'st-magnitude[deploy]')"
    assert INSTALL_HINT in skip_reason("peft")


def test_the_extras_table_agrees_with_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for module, (distribution, extra) in OPTIONAL.items():
        names = [re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0] for req in extras[extra]]
        assert distribution in names, f"{module}: {distribution} is not in the extra {extra!r} of pyproject.toml"


def test_every_serving_adapter_that_imports_its_stack_is_listed():
    """A serving module importing its stack at import time (``import_stack`` at module level) is in
    ``OPTIONAL_AT_IMPORT``, so the scan sees the tests that import it (the table also holds modules that import
    theirs when used)."""
    serving = ROOT / "st_magnitude" / "serving"
    importing = set()
    for p in serving.glob("*.py"):
        for stmt in ast.parse(p.read_text(encoding="utf-8")).body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)) and "import_stack" in _names(stmt):
                importing.add(f"st_magnitude.serving.{p.stem}")
    assert importing <= set(OPTIONAL_AT_IMPORT), sorted(importing - set(OPTIONAL_AT_IMPORT))
