"""The package's import graph: no cycles, and the layers of docs/architecture.md hold.

The graph is read with ``ast`` from every ``st_magnitude/**.py``, function-level imports included (a lazy import
inside a function still ties the two modules together). ``from pkg import name`` counts as an import of the
submodule that defines ``name``: ``pkg.name`` when that is a module, else the target in the package's lazy export
table (:mod:`st_magnitude._lazy`).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "st_magnitude"

#: Top layer: command-line and workflow modules. Nothing below may import them. ``cli`` is every command
#: (``cli/<command>.py``), ``experiments`` the compare job, ``replication.runner`` the claim runner behind
#: ``st-magnitude replicate`` and ``replication.merge`` its merge of runs made in parts (the claims themselves are
#: library code they drive).
APPLICATION = (
    "st_magnitude.cli",
    "st_magnitude.experiments",
    "st_magnitude.replication.runner",
    "st_magnitude.replication.merge",
)


def _module_name(path: Path) -> str:
    parts = ["st_magnitude", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(modules: dict[str, Path], package: str, name: str) -> str:
    if f"{package}.{name}" in modules:
        return f"{package}.{name}"
    pkg = modules.get(package)
    if pkg is not None and pkg.name == "__init__.py":
        targets = importlib.import_module(package).__dict__.get("_lazy_targets", {})
        if name in targets:
            return targets[name]
    return package


def import_graph() -> dict[str, set[str]]:
    """module -> the st_magnitude modules it imports (anywhere in its body)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod if is_pkg else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    package = f"{base}.{node.module}" if node.module else base
                else:
                    package = node.module or ""
                if not package.startswith("st_magnitude"):
                    continue
                targets = [_resolve(modules, package, a.name) for a in node.names]
            else:
                continue
            for t in targets:
                while t not in modules and "." in t:  # `import st_magnitude.x.y` of a non-module attribute
                    t = t.rpartition(".")[0]
                if t in modules and t != mod and t.startswith("st_magnitude"):
                    graph[mod].add(t)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_graph_sees_function_level_and_lazy_imports():
    graph = import_graph()
    assert "st_magnitude.stores" in graph["st_magnitude.cli.convert"]  # imported inside a command function
    assert "st_magnitude.guard" in graph["st_magnitude"] or "st_magnitude._lazy" in graph["st_magnitude"]


def test_find_cycles_reports_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert cycles == [], "import cycles (see docs/architecture.md for the layers): " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


@pytest.mark.parametrize("application", APPLICATION)
def test_library_does_not_import_the_application_layer(application):
    graph = import_graph()
    offenders = sorted(
        mod
        for mod, deps in graph.items()
        if not mod.startswith(APPLICATION)
        for dep in deps
        if dep == application or dep.startswith(application + ".")
    )
    assert offenders == [], f"library modules import the application layer {application}: {offenders}"


def test_core_modules_stay_below_their_users():
    """similarity -> modules -> convert -> losses / evaluation -> integrations -> diagnostics: never upward."""
    graph = import_graph()
    below = {
        "st_magnitude.similarity": ("st_magnitude.convert", "st_magnitude.modules", "st_magnitude.losses"),
        **{
            f"st_magnitude.{m}": ("st_magnitude.guard", "st_magnitude.losses", "st_magnitude.evaluation")
            for m in ("convert", "model_info", "model_card", "truncation")
        },
        "st_magnitude.evaluation._retrieval": ("st_magnitude.evaluation.ir", "st_magnitude.evaluation.auc"),
        # training data (layer 4): below the losses that consume it, the evaluators and scaling that reuse it
        "st_magnitude.data": ("st_magnitude.losses", "st_magnitude.evaluation", "st_magnitude.scaling"),
        # the Revela attention function is a module (layer 2): no loss, no data code
        "st_magnitude.modules.revela_attention": ("st_magnitude.losses", "st_magnitude.data"),
    }
    for low, uppers in below.items():
        lows = [m for m in graph if m == low or m.startswith(low + ".")]  # a package: each of its modules
        bad = sorted(d for m in lows for d in graph[m] for up in uppers if d == up or d.startswith(up + "."))
        assert bad == [], f"{low} imports upward: {bad}"


def test_losses_stay_below_callbacks():
    """``callbacks/`` reads a loss's state through ``losses/_loss_state``: never the reverse."""
    graph = import_graph()
    bad = sorted(
        (mod, dep)
        for mod, deps in graph.items()
        if mod.startswith("st_magnitude.losses")
        for dep in deps
        if dep.startswith("st_magnitude.callbacks")
    )
    assert bad == [], f"losses import callbacks: {bad}"


def test_data_package_imports_only_itself_and_lazy():
    """``st_magnitude.data`` (title + text join, BM25, Revela chunk groups) depends on no other st_magnitude layer."""
    graph = import_graph()
    deps = {d for m, ds in graph.items() if m.startswith("st_magnitude.data") for d in ds}
    assert {d for d in deps if not d.startswith("st_magnitude.data")} <= {"st_magnitude._lazy"}, sorted(deps)
