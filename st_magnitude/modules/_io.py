"""Saving and loading ST modules that keep their config in config.json and their parameters in model.safetensors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sentence_transformers.base.modules import Module

try:
    from typing import Self
except ImportError:  # pragma: no cover - Python 3.10
    from typing_extensions import Self


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


class ConfigWeightsModule(Module):
    """An ST module saved as ``config.json`` (its ``config_keys``) plus ``model.safetensors`` when it has parameters.

    ``save`` / ``load`` for :class:`~st_magnitude.modules.RoleNormalize` and :class:`~st_magnitude.modules.NAPHead`;
    a subclass may override :meth:`_prepare_config` to rewrite the saved config before construction.
    """

    @classmethod
    def _prepare_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        return config

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
        if any(True for _ in self.parameters()):
            self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        **kwargs,
    ) -> Self:
        return load_module(
            cls,
            model_name_or_path,
            subfolder=subfolder,
            token=token,
            cache_folder=cache_folder,
            revision=revision,
            local_files_only=local_files_only,
            prepare=cls._prepare_config,
        )
