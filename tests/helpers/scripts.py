"""Load a repository script (a benchmark, the docs' figure maker, an example) as a module, by its path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(relative: str, *, register: bool = False) -> ModuleType:
    """The module of ``REPO / relative`` (named after its path). ``register`` puts it in ``sys.modules`` first, for
    scripts whose dataclasses look their module up there."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location("script_" + "_".join(Path(relative).with_suffix("").parts), path)
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
