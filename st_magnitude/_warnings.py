"""Warning classes shared across the package (no imports, so any layer may use them)."""

from __future__ import annotations


class MagnitudeCollapseWarning(UserWarning):
    """Magnitude collapse risk or evidence (paper 000 App. F / N.3).

    Raised directly when ``Normalize`` is stripped from a cosine-pretrained model; its subclass
    ``MagnitudeCollapseDetected`` when an evaluation observes the collapse. One ``warnings`` filter on this class
    catches both.
    """


class AsymmetricSimilarityWarning(UserWarning):
    """An asymmetric similarity (qnorm, dnorm, learnable γq≠γd) is used where inputs have no roles."""


class ZeroRetrieverGradientWarning(UserWarning):
    """A training signal that cannot reach the retriever (e.g. Revela's Sim is exactly one-hot in every row)."""


class NormBoundWarning(UserWarning):
    """A document's norm exceeds the bound M of a nearest-neighbour export, so its cosine / L2 rank is not exact."""


class StoreMetricWarning(UserWarning):
    """An adapter is told a store metric that the stack's default store does not score with (LlamaIndex's
    ``SimpleVectorStore`` scores with cosine only), so the ranking is exact only in a store configured for it."""


class UninformativeCalibrationWarning(UserWarning):
    """A calibration report whose numbers say nothing: constant scores (the map is one probability, ECE is 0 by
    construction) or evaluation queries that are the fitting queries (an in-sample ECE)."""
