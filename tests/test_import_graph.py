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

#: The application: the command line (``cli``) and the lab (``lab``: the compare and replicate machinery and the one
#: engine they share). Nothing in the library imports them.
APPLICATION = ("st_magnitude.cli", "st_magnitude.lab")

#: The rooms of the package from the bottom up (docs/architecture.md): a module may import its own room and the rooms
#: below it, never one above. The package root (the lazy public façade) is left out: it imports nothing eagerly.
LAYERS = (
    ("st_magnitude._lazy", "st_magnitude._warnings", "st_magnitude._similarity_names", "st_magnitude._trust",
     "st_magnitude._peft", "st_magnitude._cpu_shortcuts"),
    ("st_magnitude.similarity", "st_magnitude._exact_sq_dist"),
    ("st_magnitude.modules",),
    ("st_magnitude.model",),
    ("st_magnitude.data",),
    ("st_magnitude.losses", "st_magnitude.callbacks"),
    ("st_magnitude.evaluation",),
    ("st_magnitude.diagnostics", "st_magnitude.scaling", "st_magnitude.serving"),
    ("st_magnitude.lab.engine",),
    ("st_magnitude.lab.compare", "st_magnitude.lab.replication"),
    ("st_magnitude.cli",),
)  # fmt: skip


def layer_of(module: str) -> int | None:
    """The index of ``module``'s room in :data:`LAYERS` (None for the package root and package markers)."""
    for i, rooms in enumerate(LAYERS):
        if any(module == r or module.startswith(r + ".") for r in rooms):
            return i
    return None


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
    assert "st_magnitude.model.stores" in graph["st_magnitude.cli.convert"]  # imported inside a command function
    assert "st_magnitude.model.guard" in graph["st_magnitude"] or "st_magnitude._lazy" in graph["st_magnitude"]


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


def upward_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import from a room to a room above it in :data:`LAYERS`."""
    return sorted(
        (mod, dep)
        for mod, deps in graph.items()
        for dep in deps
        if layer_of(mod) is not None and layer_of(dep) is not None and layer_of(dep) > layer_of(mod)
    )


def test_every_module_has_a_room():
    """A new top-level module or package is placed in :data:`LAYERS` (and in docs/architecture.md)."""
    unplaced = sorted(
        m for m in import_graph() if m not in ("st_magnitude", "st_magnitude.lab") and layer_of(m) is None
    )
    assert unplaced == [], f"modules in no layer: {unplaced}"


def test_no_arrow_points_up():
    """The count docs/architecture.md reports: imports from a room to a room above it (0)."""
    arrows = upward_arrows(import_graph())
    assert arrows == [], "imports that point up (see docs/architecture.md): " + "; ".join(
        f"{a} -> {b}" for a, b in arrows
    )


def test_upward_arrows_are_found():
    graph = {
        "st_magnitude.similarity": {"st_magnitude.losses.mw"},
        "st_magnitude.losses.mw": {"st_magnitude.similarity"},
    }
    assert upward_arrows(graph) == [("st_magnitude.similarity", "st_magnitude.losses.mw")]


def test_within_evaluation_the_math_sits_below_its_users():
    graph = import_graph()
    bad = [
        d
        for d in graph["st_magnitude.evaluation._retrieval"]
        if d in ("st_magnitude.evaluation.ir", "st_magnitude.evaluation.auc")
    ]
    assert bad == []


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


def test_data_package_imports_only_itself_and_the_foundations():
    """``st_magnitude.data`` (BEIR folders, the title + text join, BM25, Revela chunk groups) reads files through the
    trust boundary and depends on no other st_magnitude room."""
    graph = import_graph()
    deps = {d for m, ds in graph.items() if m.startswith("st_magnitude.data") for d in ds}
    outside = {d for d in deps if not d.startswith("st_magnitude.data")}
    assert all(d == "st_magnitude._lazy" or d.startswith("st_magnitude._trust") for d in outside), sorted(outside)
