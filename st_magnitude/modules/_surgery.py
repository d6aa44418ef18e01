"""Low-level model surgery shared by `st_magnitude.model.convert` and `st_magnitude.modules` (no plugin imports)."""

from __future__ import annotations

from torch import nn


def replace_modules(model: nn.Module, new_modules: list[nn.Module]) -> None:
    """Re-register ``new_modules`` as the model's children "0".."n-1", keeping each kept module's forward kwargs.

    ``SentenceTransformer`` is an ``nn.Sequential``; ST reads the children in order, and ``module_kwargs`` (from
    modules.json) is keyed by child name, so it is re-keyed for modules that stay.
    """
    old_kwargs = getattr(model, "module_kwargs", None) or {}
    old_names = {id(m): name for name, m in model.named_children()}
    for name in list(model._modules):
        del model._modules[name]
    new_kwargs: dict[str, list[str]] = {}
    for idx, module in enumerate(new_modules):
        model.add_module(str(idx), module)
        old = old_names.get(id(module))
        if old is not None and old in old_kwargs:
            new_kwargs[str(idx)] = old_kwargs[old]
    if hasattr(model, "module_kwargs"):
        model.module_kwargs = new_kwargs or None
