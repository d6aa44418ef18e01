"""Saving and loading ST modules that keep their config in config.json and their parameters in model.safetensors."""

from __future__ import annotations

from typing import Any

from sentence_transformers.base.modules import Module

try:
    from typing import Self
except ImportError:  # pragma: no cover - Python 3.10
    from typing_extensions import Self


class ConfigWeightsModule(Module):
    """An ST module saved as ``config.json`` (its ``config_keys``) plus ``model.safetensors`` when it has parameters.

    ``save`` / ``load`` for :class:`~st_magnitude.modules.RoleNormalize` and :class:`~st_magnitude.modules.NAPHead`;
    a subclass may override :meth:`_prepare_config` to rewrite the saved config before construction (e.g. an init
    value that the weights overwrite anyway).
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
        """``cls(**saved config)`` (only ``cls.config_keys``), then its safetensors weights loaded strictly when the
        constructed module has parameters."""
        hub = {
            "subfolder": subfolder,
            "token": token,
            "cache_folder": cache_folder,
            "revision": revision,
            "local_files_only": local_files_only,
        }
        config = {k: v for k, v in cls.load_config(model_name_or_path, **hub).items() if k in cls.config_keys}
        module = cls(**cls._prepare_config(config))
        if any(True for _ in module.parameters()):
            cls.load_torch_weights(model_name_or_path, model=module, **hub)
        return module
