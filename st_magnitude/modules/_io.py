"""Loading ST modules that keep their config in config.json and their parameters in model.safetensors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def load_module(
    cls: Any,
    model_name_or_path: str,
    *,
    subfolder: str = "",
    token: bool | str | None = None,
    cache_folder: str | None = None,
    revision: str | None = None,
    local_files_only: bool = False,
    with_weights: bool | None = None,
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Any:
    """``cls(**saved config)`` (only ``cls.config_keys``), then its safetensors weights loaded strictly.

    ``with_weights=None`` loads weights when the constructed module has parameters; ``prepare`` may rewrite the
    saved config before construction (e.g. an init value that the weights overwrite anyway).
    """
    hub = {
        "subfolder": subfolder,
        "token": token,
        "cache_folder": cache_folder,
        "revision": revision,
        "local_files_only": local_files_only,
    }
    config = {k: v for k, v in cls.load_config(model_name_or_path, **hub).items() if k in cls.config_keys}
    if prepare is not None:
        config = prepare(config)
    module = cls(**config)
    if with_weights if with_weights is not None else any(True for _ in module.parameters()):
        cls.load_torch_weights(model_name_or_path, model=module, **hub)
    return module
