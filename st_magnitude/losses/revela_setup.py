"""Paper 004's setup: the official LoRA targets and prompts, and a decoder LM turned into a retriever."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["REVELA_LORA_TARGETS", "REVELA_PROMPTS", "build_decoder_retriever", "revela_lora_config"]


#: LoRA target modules of the official code, on both the retriever and the LM.
REVELA_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

#: Prefixes of the official code's retriever inputs, per dataset column (``query``, ``passage``);
#: ``document`` is the name ``SentenceTransformer.encode_document`` looks up first.
REVELA_PROMPTS = {"query": "query: ", "passage": "passage: ", "document": "passage: "}


def revela_lora_config(
    task_type: str = "CAUSAL_LM", r: int = 256, lora_alpha: int = 64, lora_dropout: float = 0.1, **kwargs: Any
):
    """A ``peft.LoraConfig`` with the official code's settings: rank 256, α 64,
    dropout 0.1 on q, k, v, o, gate, up and down projections.

    Use ``task_type="CAUSAL_LM"`` for the LM (``peft.get_peft_model(lm, revela_lora_config())``) and
    ``"FEATURE_EXTRACTION"`` for a decoder retriever (``retriever.add_adapter(revela_lora_config(
    "FEATURE_EXTRACTION"))``). Extra keyword arguments go to ``LoraConfig``.
    """
    from st_magnitude._peft import require_peft

    LoraConfig = require_peft().LoraConfig
    allowed = ("CAUSAL_LM", "FEATURE_EXTRACTION")
    if task_type not in allowed:
        raise ValueError(f"task_type must be one of {allowed}; got {task_type!r}")
    kwargs.setdefault("target_modules", list(REVELA_LORA_TARGETS))
    return LoraConfig(task_type=task_type, r=r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, **kwargs)


def _append_eos(tokenizer) -> None:
    """Make a fast tokenizer end every text with EOS (the official retriever input), truncation included."""
    from tokenizers import processors

    if tokenizer.eos_token is None:
        raise ValueError("a decoder retriever needs a tokenizer with an EOS token (pooled at the last position)")
    probe = tokenizer("a b")["input_ids"]
    if probe and probe[-1] == tokenizer.eos_token_id:
        return
    backend = tokenizer.backend_tokenizer
    eos = processors.TemplateProcessing(
        single=f"$A {tokenizer.eos_token}",
        pair=f"$A $B {tokenizer.eos_token}",
        special_tokens=[(tokenizer.eos_token, tokenizer.eos_token_id)],
    )
    backend.post_processor = (
        eos if backend.post_processor is None else processors.Sequence([backend.post_processor, eos])
    )
    probe = tokenizer("a b")["input_ids"]
    if probe[-1] != tokenizer.eos_token_id:
        raise ValueError(f"could not make the tokenizer append EOS ({tokenizer.eos_token!r}); got ids {probe}")


def build_decoder_retriever(
    model_name_or_path: str,
    max_seq_length: int = 157,
    lora: Any = None,
    prompts: dict[str, str] | None = None,
    model_kwargs: dict[str, Any] | None = None,
    device: str | None = None,
):
    """A raw decoder as a Revela retriever, as in the paper (§3.3): the text (with a
    ``"query: "``/``"passage: "`` prompt), EOS appended, the last hidden state at EOS, L2-normalized.

    Builds ``SentenceTransformer([Transformer, Pooling("lasttoken"), Normalize])`` from a decoder checkpoint
    (e.g. SmolLM2-135M). The tokenizer pads on the right with EOS when it has no pad token and appends EOS to every
    text; truncation keeps the EOS, so ``max_seq_length = 157`` is the official 156 tokens + EOS. ``model.prompts``
    is set to ``prompts`` (default :data:`REVELA_PROMPTS`); pass the same dict as ``prompts=`` to the training
    arguments and :class:`~st_magnitude.data.revela.RevelaDataCollator` (columns ``query``/``passage``) and use
    ``encode_query`` / ``encode_document`` (or ``query_prompt_name="query"``, ``corpus_prompt_name="passage"``)
    when evaluating.

    Args:
        model_name_or_path: a decoder checkpoint (``AutoModel`` loads its backbone, without the LM head).
        max_seq_length: retriever tokens including EOS (official 157).
        lora: ``None`` (train all weights) or a ``peft`` config, e.g. ``revela_lora_config("FEATURE_EXTRACTION")``
            (paper: LoRA r = 256); only the adapters are trained and saved.
        prompts: the prompts per column; ``{}`` for none.
        model_kwargs: passed to ``AutoModel.from_pretrained`` (e.g. ``{"torch_dtype": torch.bfloat16}``).
        device: the model's device (default: ST's choice).
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    transformer = Transformer(model_name_or_path, max_seq_length=max_seq_length, model_kwargs=model_kwargs)
    tokenizer = transformer.tokenizer
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    _append_eos(tokenizer)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="lasttoken")
    model = SentenceTransformer(
        modules=[transformer, pooling, Normalize()],
        prompts=dict(REVELA_PROMPTS if prompts is None else prompts),
        device=device,
    )
    if lora is not None:
        from st_magnitude._peft import require_peft

        require_peft()
        model.add_adapter(lora)
    return model
