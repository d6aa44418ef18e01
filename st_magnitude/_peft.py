"""One up-front check that the installed peft works with the installed transformers (the LoRA paths need both).

transformers declares the oldest peft it accepts (``transformers.integrations.peft.MIN_PEFT_VERSION``) and raises
deep inside ``add_adapter`` when peft is older; a new transformers can need a peft the registry does not have yet.
This check runs before any model is touched and names both versions and the fix.
"""

from __future__ import annotations

import importlib.metadata
from types import ModuleType

from packaging.version import Version

LORA_FIX = (
    "install the tested pair (pip install -c requirements/lock.txt -e '.[lora]' from a checkout), or a transformers "
    "release that accepts this peft (pip install 'transformers<5.24' for peft 0.21), or a newer peft"
)


def require_peft() -> ModuleType:
    """Import peft after checking that transformers accepts its version; raise ImportError naming both otherwise."""
    try:
        peft_version = importlib.metadata.version("peft")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError("LoRA needs peft, which is not installed: pip install 'st-magnitude[lora]'") from None
    transformers_version = importlib.metadata.version("transformers")
    minimum = _transformers_min_peft()
    if minimum is not None and Version(peft_version) < Version(minimum):
        raise ImportError(
            f"transformers {transformers_version} needs peft >= {minimum}, but peft {peft_version} is installed; "
            f"fix: {LORA_FIX}"
        )
    import peft

    return peft


def _transformers_min_peft() -> str | None:
    """The oldest peft the installed transformers accepts, or None when it does not say."""
    try:
        from transformers.integrations import peft as hf_peft
    except ImportError:
        return None
    return getattr(hf_peft, "MIN_PEFT_VERSION", None)
