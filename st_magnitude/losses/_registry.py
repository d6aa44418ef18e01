"""The loss registry, torch-free: the one place that says which losses exist, where they live and how ``compare``
builds them.

:mod:`st_magnitude.losses` derives its ``__all__`` and its lazy export table from it, ``st-magnitude compare`` its
``--loss`` choices (:data:`~st_magnitude.lab.compare.config.LOSSES`) and its loss construction
(:func:`~st_magnitude.lab.compare.training.build_loss`), the tests their list of losses. Adding a loss is one new
module under ``st_magnitude/losses/`` (the loss and its cached twin, if any) and one :class:`LossSpec` line below
(docs/losses.md, "Adding a loss").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LossSpec:
    """One public loss.

    Attributes:
        name: the class name (exported by :mod:`st_magnitude.losses`).
        module: its module under ``st_magnitude.losses`` (``"mw"`` for ``st_magnitude/losses/mw.py``).
        cached: the class name of its GradCache twin in the same module, or ``None``.
        compare: its ``st-magnitude compare --loss`` name, or ``None`` when ``compare`` does not train it.
        compare_kwargs: ``(constructor keyword, CompareConfig field)`` pairs: what ``compare`` passes besides the
            model (a field named here is part of the run fingerprint).
        takes_similarity: ``compare`` passes the run's similarity variant as ``similarity=``.
        gathers: it takes ``gather_across_devices`` (``compare`` sets it under ``torchrun``).
    """

    name: str
    module: str
    cached: str | None = None
    compare: str | None = None
    compare_kwargs: tuple[tuple[str, str], ...] = ()
    takes_similarity: bool = False
    gathers: bool = False

    @property
    def classes(self) -> tuple[str, ...]:
        """The class names this entry exports: the loss and its cached twin."""
        return (self.name,) if self.cached is None else (self.name, self.cached)


#: Every public loss, in display order (``compare``'s ``--loss`` choices keep this order).
LOSS_REGISTRY: tuple[LossSpec, ...] = (
    LossSpec(
        "PartialNormInfoNCELoss",
        "partial_norm_infonce",
        cached="CachedPartialNormInfoNCELoss",
        compare="infonce",
        compare_kwargs=(("scale", "scale"),),
        takes_similarity=True,
        gathers=True,
    ),
    LossSpec(
        "MWLoss",
        "mw",
        cached="CachedMWLoss",
        compare="mw",
        compare_kwargs=(("temperature", "mw_temperature"),),
        takes_similarity=True,
        gathers=True,
    ),
    LossSpec("InfoTNLoss", "info_tn", cached="CachedInfoTNLoss"),
    LossSpec("L2DirLoss", "l2dir", cached="CachedL2DirLoss", compare="l2dir", gathers=True),
    LossSpec("MarginContrastiveLoss", "margin_contrastive"),
    LossSpec("BertRecipeLoss", "bert_recipe"),
    LossSpec("EttinRecipeLoss", "ettin_recipe"),
    LossSpec("MagnitudeMatryoshkaLoss", "magnitude_matryoshka"),
    LossSpec("RevelaLoss", "revela"),
)


def loss_class_names() -> tuple[str, ...]:
    """Every exported loss class (plain and cached), sorted: the ``__all__`` of :mod:`st_magnitude.losses`."""
    return tuple(sorted(name for spec in LOSS_REGISTRY for name in spec.classes))


def lazy_export_table() -> dict[str, tuple[str, ...]]:
    """``{".module": (class names, ...)}`` for :func:`st_magnitude._lazy.lazy_exports`."""
    return {f".{spec.module}": spec.classes for spec in LOSS_REGISTRY}


def compare_loss_names() -> tuple[str, ...]:
    """The ``compare --loss`` names, in registry order."""
    return tuple(spec.compare for spec in LOSS_REGISTRY if spec.compare is not None)


def compare_spec(name: str) -> LossSpec:
    """The entry ``compare`` trains as ``name``; unknown names raise ``ValueError`` listing the valid ones."""
    for spec in LOSS_REGISTRY:
        if spec.compare is not None and spec.compare == name:
            return spec
    raise ValueError(f"unknown loss {name!r}; valid losses: {', '.join(compare_loss_names())}")


def compare_config_fields() -> tuple[str, ...]:
    """The CompareConfig fields some ``compare`` loss is built from (each is part of the run fingerprint)."""
    return tuple(dict.fromkeys(field for spec in LOSS_REGISTRY for _, field in spec.compare_kwargs))
