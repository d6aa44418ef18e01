"""Model cards: every model this package produces says how to encode queries/documents and what loading needs."""

from __future__ import annotations

import logging
import warnings

from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.model_card import SentenceTransformerModelCardData

from st_magnitude._warnings import NormBoundWarning
from st_magnitude.model._layout import Layout, read_layout
from st_magnitude.model._legacy_fit import has_top_router
from st_magnitude.model.info import training_similarity
from st_magnitude.similarity import name_of_gammas

logger = logging.getLogger(__name__)

__all__ = ["MagnitudeModelCardData", "update_model_card"]


_PACKAGE_URL = "https://pypi.org/project/st-magnitude/"
_CARD_TAG = "st-magnitude"


class MagnitudeModelCardData(SentenceTransformerModelCardData):
    """ST's model card data plus an st-magnitude usage section (served similarity, roles, package to install).

    Installed on a model by :func:`update_model_card` (the same object, its class switched), so trainer callbacks
    that hold ``model.model_card_data`` keep working. Only :meth:`generate_usage_snippet` is extended.
    """

    def run_usage_snippet(self) -> None:
        """ST's example encode at save time, without side effects on a store export: the card's example documents
        are not the corpus, so their norms say nothing about the bound M of a :class:`MIPSAugment` (its
        ``NormBoundWarning`` is silenced and its ``n_over_bound`` count left as it was)."""
        augments = read_layout(self.model).find("mips_augment") if self.model is not None else []
        counts = [m.n_over_bound for m in augments]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NormBoundWarning)
                super().run_usage_snippet()
        finally:
            for m, count in zip(augments, counts):
                m.n_over_bound = count

    def generate_usage_snippet(self) -> str:
        snippet = super().generate_usage_snippet()
        if self.model is None:
            return snippet
        if read_layout(self.model).has("role_normalize"):
            model_id = self.model_id or "sentence_transformers_model_id"
            snippet = snippet.replace(
                f'SentenceTransformer("{model_id}")', f'SentenceTransformer("{model_id}", trust_remote_code=True)'
            )
        return _card_note(self.model) + "\n\n" + snippet


def _served_name(layout: Layout) -> str | None:
    role = layout.find_anywhere("role_normalize")
    if role:
        m = role[0]
        return "learnable" if m.learnable else name_of_gammas(m.gamma_query, m.gamma_document) or "fractional"
    return None if layout.gammas is None else name_of_gammas(*layout.gammas)


def _card_note(model: SentenceTransformer) -> str:
    """Markdown paragraph for the card: how to encode queries / documents and which packages loading needs."""
    lines = ["", "### Similarity and roles (st-magnitude)", ""]
    layout = read_layout(model)
    trained = training_similarity(model)
    gammas = layout.gammas
    name = _served_name(layout)
    converted = layout.carries or (trained is None and name is not None)
    if converted and model.similarity_fn_name == "dot" and gammas is not None:
        lines.append(
            f"This model was converted with [st-magnitude]({_PACKAGE_URL}) to serve the **{name}** similarity "
            f"(γ_query = {gammas[0]:.4g}, γ_document = {gammas[1]:.4g}: "
            "s(q, d) = qᵀd / (‖q‖^γ_query ‖d‖^γ_document), paper 'Beyond the Unit Hypersphere', eqs. 3–7). "
            "The model applies each role's rescaling itself, so encode queries with `model.encode_query(...)`, "
            "documents with `model.encode_document(...)`, and score them with `model.similarity(...)` (a dot "
            "product). Do not L2-normalise the embeddings yourself."
        )
        if layout.asymmetric:
            router = next(iter(layout.find("router")), None)
            role = next(iter(layout.find_anywhere("role_normalize")), None)
            if router is not None and router.default_route is None:
                roleless = "raises (its Router has no default route)"
            elif role is not None and not role.allow_roleless:
                roleless = "raises (no default route is set)"
            else:
                roleless = "treats every input as a document"
            lines.append(
                f"The similarity is asymmetric: plain `model.encode(...)` {roleless}, and "
                "the model is not meant for symmetric tasks (STS, clustering, paraphrase mining)."
            )
        if has_top_router(model):
            lines.append(
                "To fine-tune it, use `SentenceTransformerTrainer` with `SentenceTransformerTrainingArguments("
                "router_mapping={'anchor': 'query', 'positive': 'document'})`: the legacy `model.fit` cannot pass "
                "the `router_mapping` its Router needs."
            )
    else:
        fn = model.similarity_fn_name or "cosine"
        lines.append(
            f"Encode queries with `model.encode_query(...)` and documents with `model.encode_document(...)`; "
            f"score them with `model.similarity(...)` ({fn})."
        )
    if trained is not None:
        recipe = f" ({trained['recipe']} recipe)" if trained.get("recipe") else ""
        lines.append(
            f"Trained{recipe} with the {trained['similarity']} similarity at temperature τ = "
            f"{trained['temperature']:g}; for contrastive entropy use scale = 1/τ = {1 / trained['temperature']:g}."
        )
    if layout.has("role_normalize"):
        lines += [
            "",
            "This model ends in st-magnitude's `RoleNormalize` module: install the package and load with "
            "`trust_remote_code=True`:",
            "",
            "```bash",
            "pip install -U sentence-transformers st-magnitude",
            "```",
        ]
    else:
        lines += [
            "",
            "It uses only built-in sentence-transformers modules: loading it needs `sentence-transformers` alone "
            "(st-magnitude is only needed to train or convert it further).",
        ]
    return "\n".join(lines)


def update_model_card(model: SentenceTransformer) -> SentenceTransformer:
    """Make the model's card describe what st-magnitude did to it (idempotent; called by every conversion).

    - marks the model as a retrieval model (``model_card_data.ir_model = True``), so the usage snippet shows
      ``encode_query`` / ``encode_document`` instead of the symmetric ``encode`` + ``similarity(e, e)``;
    - drops a README loaded with the base model (sentence-transformers would otherwise save it unchanged, with its
      now-wrong usage instructions) so a fresh card is generated;
    - switches the card data to :class:`MagnitudeModelCardData`, whose usage section names the served similarity,
      the role-specific encode calls and the packages loading needs; adds the ``st-magnitude`` tag.
    """
    if not isinstance(model, SentenceTransformer):
        return model
    card = model.model_card_data
    if not isinstance(card, MagnitudeModelCardData):
        if isinstance(card, SentenceTransformerModelCardData) and type(card) is SentenceTransformerModelCardData:
            card.__class__ = MagnitudeModelCardData
        else:
            logger.info("update_model_card: custom model card data %s left as is", type(card).__name__)
    card.ir_model = True
    if _CARD_TAG not in card.tags:
        card.add_tags(_CARD_TAG)
    model._model_card_text = None
    return model
