"""``RoleNormalize``: the per-role rescaling φ_γ carried by the model (paper 000 eqs. 3–7 factorised).

A model ending in ``RoleNormalize`` emits φ_γq(q) for queries and φ_γd(d) for documents, so that a plain dot
product of its query and document embeddings equals the training similarity. The role comes from the ``task``
forward kwarg (``encode_query`` / ``encode_document``) or, in training, from ``features["task"]`` stamped by the
data collator when ``SentenceTransformerTrainingArguments(router_mapping=...)`` is set.

Fixed corner variants (γ ∈ {0, 1}) are exported with ST's built-in ``Router``/``Normalize`` instead (see
:func:`st_magnitude.apply_similarity`), so only learnable/fractional γ needs this class — and then loading the saved
model needs ``trust_remote_code=True``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor, nn

from st_magnitude.modules._io import ConfigWeightsModule
from st_magnitude.similarity import DEFAULT_EPS, LearnableSimilarity, PowerNormSimilarity, Similarity, _logit, phi

logger = logging.getLogger(__name__)

ROLES = ("query", "document")
_ROLE_ALIASES = {
    "query": "query",
    "document": "document",
    "passage": "document",
    "corpus": "document",
    "doc": "document",
}


def resolve_role(owner: str, task: Any, default_role: str, hint: str) -> str:
    """The role (``"query"`` / ``"document"``) a ``task`` names, ``default_role`` for none; a clear error otherwise."""
    if task is None:
        return default_role
    role = _ROLE_ALIASES.get(str(task).lower())
    if role is None:
        raise ValueError(
            f"{owner} got task {task!r}; valid roles are 'query' and 'document' (aliases: {sorted(_ROLE_ALIASES)}). "
            + hint
        )
    return role


class RoleNormalize(ConfigWeightsModule):
    """Rescale ``sentence_embedding`` by ``1 / ‖v‖^γ`` with a γ that depends on the input's role.

    Args:
        gamma_query: γq for queries, in [0, 1] (1 = L2-normalise, 0 = keep magnitude). With ``learnable=True``
            this is the *initial* value and must lie in (0, 1).
        gamma_document: γd for documents, same rules.
        learnable: if True, γ = sigmoid(γ̂) with trainable scalars ``gamma_query_logit`` / ``gamma_document_logit``
            (paper 000 eq. 7). They are saved in ``model.safetensors`` with the model, and can get their own
            learning rate through ``learning_rate_mapping={r"gamma_.*_logit": 1e-2}``.
        default_role: role used when no task is given (plain ``model.encode``) and ``allow_roleless`` is set (or
            γq = γd). ``"document"`` matches ``Router.for_query_document``'s default route.
        allow_roleless: let a role-less ``encode()`` of an asymmetric module (γq ≠ γd) use ``default_role``; off by
            default, so such an input is refused as a qnorm / dnorm model's Router refuses it (set by
            ``set_default_route`` / ``convert --default-route``).
        eps: norm floor; zero vectors map to zero vectors with finite gradients.
    """

    config_keys: list[str] = ["gamma_query", "gamma_document", "learnable", "default_role", "eps", "allow_roleless"]

    forward_kwargs: set[str] = {"task"}

    @classmethod
    def _prepare_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        # A learnable module is built at γ = 0.5 (the saved γ may sit on the sigmoid's boundary after training,
        # outside the open interval the constructor accepts); its weights file then restores the exact logits.
        return {**config, "gamma_query": 0.5, "gamma_document": 0.5} if config.get("learnable") else config

    def __init__(
        self,
        gamma_query: float = 0.5,
        gamma_document: float = 0.5,
        learnable: bool = False,
        default_role: str = "document",
        eps: float = DEFAULT_EPS,
        allow_roleless: bool = False,
    ) -> None:
        super().__init__()
        if default_role not in ROLES:
            raise ValueError(f"default_role must be one of {ROLES}, got {default_role!r}")
        self.learnable = bool(learnable)
        self.default_role = default_role
        if not isinstance(allow_roleless, bool):
            raise ValueError(f"allow_roleless must be true or false, got {allow_roleless!r}")
        self.allow_roleless = allow_roleless
        self.eps = float(eps)
        for label, g in (("gamma_query", gamma_query), ("gamma_document", gamma_document)):
            lo_ok = 0.0 < float(g) < 1.0 if self.learnable else 0.0 <= float(g) <= 1.0
            if not lo_ok:
                rng = "the open interval (0, 1)" if self.learnable else "[0, 1]"
                raise ValueError(f"{label} must lie in {rng}, got {g!r}")
        if self.learnable:
            self.gamma_query_logit = nn.Parameter(torch.tensor(_logit(float(gamma_query))))
            self.gamma_document_logit = nn.Parameter(torch.tensor(_logit(float(gamma_document))))
        else:
            self._fixed = (float(gamma_query), float(gamma_document))
        self._warned_no_role = False

    # config values are read from the live parameters, so a saved config holds the trained γ
    @property
    def gamma_query(self) -> float:
        return float(torch.sigmoid(self.gamma_query_logit.detach())) if self.learnable else self._fixed[0]

    @property
    def gamma_document(self) -> float:
        return float(torch.sigmoid(self.gamma_document_logit.detach())) if self.learnable else self._fixed[1]

    def gamma_for(self, role: str) -> float | Tensor:
        if self.learnable:
            return torch.sigmoid(self.gamma_query_logit if role == "query" else self.gamma_document_logit)
        return self._fixed[0] if role == "query" else self._fixed[1]

    @property
    def symmetric(self) -> bool:
        return self.gamma_query == self.gamma_document

    def similarity(self) -> Similarity:
        """The similarity this module implements on *raw* (un-rescaled) embeddings; shares γ̂ when learnable."""
        if self.learnable:
            return LearnableSimilarity(eps=self.eps, source=self)
        return PowerNormSimilarity(*self._fixed, eps=self.eps)

    def resolve_role(self, task: Any) -> str:
        hint = "Set router_mapping / encode_query / encode_document accordingly."
        return resolve_role("RoleNormalize", task, self.default_role, hint)

    def forward(self, features: dict[str, Tensor], task: str | None = None, **kwargs) -> dict[str, Tensor]:
        if task is None:
            task = features.get("task")
        if task is None and self.training:
            # Training without roles (legacy ``model.fit`` cannot pass ``router_mapping``): leave the embedding raw
            # so the loss's similarity (e.g. ``st_magnitude.model_similarity(model)``) applies the variant itself.
            if not self._warned_no_role:
                logger.warning(
                    "RoleNormalize: training batch without a query/document role; embeddings pass through unchanged, "
                    "so the loss's similarity must apply the variant (use similarity_fct=st_magnitude."
                    "model_similarity(model), or set router_mapping and score with dot)."
                )
                self._warned_no_role = True
            return features
        if task is None and not self.symmetric and not self.allow_roleless:
            # this module is where a role-less encode of an asymmetric model arrives (a vector stack's own
            # sentence-transformers integration calls encode() for queries and documents alike): refused, as a
            # qnorm / dnorm model's Router refuses it, since a warning let such a stack rank silently wrong
            raise ValueError(
                f"RoleNormalize: encode() without a query/document role, but this model's similarity is asymmetric "
                f"(gamma_query={self.gamma_query:.3f}, gamma_document={self.gamma_document:.3f}): one vector cannot "
                "serve as both, and asymmetric similarities are not valid for symmetric tasks such as STS or "
                "clustering (paper 000 Prop. 2.1). Use encode_query / encode_document; a stack that cannot pass a "
                "role needs the export that serves role-less stacks: st-magnitude convert MODEL learnable --store "
                "dot --default-route document (an inner-product store)."
            )
        role = self.resolve_role(task)
        emb = features["sentence_embedding"]
        features["sentence_embedding"] = phi(emb, self.gamma_for(role), self.eps)
        return features

    def __repr__(self) -> str:
        kind = "learnable" if self.learnable else "fixed"
        return f"RoleNormalize({kind}, gamma_query={self.gamma_query:.4f}, gamma_document={self.gamma_document:.4f})"
