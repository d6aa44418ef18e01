"""How many tokens a backbone can take: the one rule behind every ``max_seq_length`` check.

A ``max_seq_length`` beyond the backbone's position embeddings is accepted by sentence-transformers and fails later:
a ``RuntimeError`` (an index out of range in the position embedding) at the first text longer than the backbone
allows, during an evaluation or in every call of an ONNX export. :func:`position_limit` reads the limit from a
transformers ``config.json`` (as a dict): ``max_position_embeddings``, minus the positions RoBERTa-style models
reserve (their position ids start after the padding index: ``pad_token_id + 1``, so XLM-R's 514 positions take 512
tokens). :func:`check_max_seq_length` compares a value with it; the flag (``load_model``), a
``sentence_bert_config.json`` (``check_model_files``) and ``export_onnx`` all use it. Standard library only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PADDING_OFFSET_TYPES", "check_max_seq_length", "position_limit"]

#: ``model_type`` of the backbones whose position ids start at ``pad_token_id + 1`` (transformers'
#: ``create_position_ids_from_input_ids``)
PADDING_OFFSET_TYPES = frozenset(
    {
        "camembert",
        "data2vec-text",
        "esm",
        "ibert",
        "layoutlmv3",
        "lilt",
        "longformer",
        "luke",
        "markuplm",
        "mpnet",
        "roberta",
        "roberta-prelayernorm",
        "xlm-roberta",
        "xlm-roberta-xl",
        "xmod",
    }
)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def position_limit(config: Any) -> tuple[int, str] | None:
    """``(tokens, why)``: the most tokens the backbone whose ``config.json`` is ``config`` can take and how that
    follows from the config; ``None`` when the config states no position limit."""
    if not isinstance(config, dict):
        return None
    positions = _int(config.get("max_position_embeddings"))
    if positions is None or positions < 1:
        return None
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in PADDING_OFFSET_TYPES:
        pad = _int(config.get("pad_token_id"))
        offset = (pad if pad is not None and pad >= 0 else 1) + 1
        if positions - offset >= 1:
            why = f"max_position_embeddings {positions} minus the {offset} positions a {model_type} model reserves"
            return positions - offset, why
    return positions, f"max_position_embeddings {positions}"


def check_max_seq_length(value: Any, limit: tuple[int, str] | None) -> str | None:
    """The problem with ``max_seq_length = value`` for a backbone of ``limit`` (:func:`position_limit`), or
    ``None``."""
    if limit is None or value is None or _int(value) is None:
        return None
    tokens, why = limit
    if value > tokens:
        return f"is {value}, more than the {tokens} tokens the backbone can take ({why}); allowed: 1 to {tokens}"
    return None
