"""A model's module list, read once: each module in order with its kind, the routes of a leading ``Router``, and the
(γq, γd) the list carries.

Every surgery of this room (:mod:`.convert`, :mod:`.stores`, :mod:`.truncation`) reads a :class:`Layout` once with
:func:`read_layout`, builds the layout it wants from it, and writes that once with :func:`write_layout`; what a model
serves (:mod:`.info`, :mod:`.card`) is read off the same description. A saved folder's ``modules.json`` is read into
the same shape, through the trust boundary, by :func:`read_folder_layout` (file-level ``strip``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from sentence_transformers.base.modules import InputModule, Normalize, Router
from sentence_transformers.sentence_transformer.modules import Pooling
from torch import nn

from st_magnitude._trust import Fields, InputFileError, read_json
from st_magnitude.modules._surgery import replace_modules
from st_magnitude.modules.mips_augment import MIPSAugment
from st_magnitude.modules.role_normalize import RoleNormalize
from st_magnitude.similarity import PowerNormSimilarity, Similarity

__all__ = ["KINDS", "ROUTE_DOCUMENT", "ROUTE_QUERY", "Layout", "kind_of", "read_folder_layout", "read_layout"]

#: what a module does in the stack (its "role" there; not to be confused with a query / document role)
KINDS = ("router", "transformer", "pooling", "projection", "normalize", "role_normalize", "mips_augment")
#: the routes of ST's query/document ``Router``
ROUTE_QUERY, ROUTE_DOCUMENT = "query", "document"
#: a normalisation, trailing ones of which a conversion removes
NORMALISATIONS = ("normalize", "role_normalize")

_KIND_OF_CLASS = {"RoleNormalize": "role_normalize", "MIPSAugment": "mips_augment", "Pooling": "pooling"}


def kind_of(module: nn.Module) -> str:
    """The kind (of :data:`KINDS`) of a loaded module; anything unnamed there (``Dense``, ``LayerNorm``, …) is a
    ``projection``."""
    if isinstance(module, Router):
        return "router"
    if isinstance(module, Normalize):
        return "normalize"
    if isinstance(module, RoleNormalize):
        return "role_normalize"
    if isinstance(module, MIPSAugment):
        return "mips_augment"
    if isinstance(module, Pooling):
        return "pooling"
    if isinstance(module, InputModule):
        return "transformer"
    return "projection"


def kind_of_type(type_str: str) -> str:
    """The kind of a ``modules.json`` / Router ``types`` class path. Only ST's own ``Normalize``
    (``sentence_transformers.….Normalize``) is a ``normalize``; any ``….Router`` is a ``router``."""
    name = type_str.rsplit(".", 1)[-1]
    if name == "Normalize" and type_str.startswith("sentence_transformers."):
        return "normalize"
    if type_str.endswith(".Router"):
        return "router"
    return _KIND_OF_CLASS.get(name, "transformer" if name == "Transformer" else "projection")


@dataclass(frozen=True)
class Layout:
    """A model's module list: ``modules`` in order (loaded modules, or a folder's ``modules.json`` entries), the
    ``kinds`` of each, and ``routes`` (route name → its modules) of a leading ``Router``.

    What the list serves is derived from it once: :attr:`gammas`, :attr:`carries`, :meth:`similarity`.
    """

    modules: tuple[Any, ...]
    kinds: tuple[str, ...]
    routes: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, modules: Iterable[nn.Module], routes: Mapping[str, Iterable[nn.Module]] | None = None) -> Layout:
        """The layout of ``modules``; a leading Router's routes are read from it unless ``routes`` are given."""
        modules = tuple(modules)
        kinds = tuple(kind_of(m) for m in modules)
        if routes is None:
            routes = modules[0].sub_modules if kinds[:1] == ("router",) else {}
        return cls(modules, kinds, {name: tuple(seq) for name, seq in routes.items()})

    # -- the list -------------------------------------------------------------------------------------------------
    @property
    def router(self) -> Router | None:
        """The leading ``Router``, or ``None``."""
        return self.modules[0] if self.kinds[:1] == ("router",) else None

    def find(self, *kinds: str) -> list[Any]:
        """The top-level modules of these kinds, in order."""
        return [m for m, k in zip(self.modules, self.kinds) if k in kinds]

    def find_anywhere(self, *kinds: str) -> list[Any]:
        """The modules of these kinds on the Router's routes, then at the top level."""
        on_routes = [m for seq in self.routes.values() for m in seq if kind_of(m) in kinds]
        return on_routes + self.find(*kinds)

    def has(self, *kinds: str) -> bool:
        """True when a top-level module, or one on a route, is of one of these kinds."""
        return bool(self.find_anywhere(*kinds))

    def without(self, *kinds: str) -> Layout:
        """This layout without its top-level modules of these kinds."""
        keep = [i for i, k in enumerate(self.kinds) if k not in kinds]
        if len(keep) == len(self.kinds):
            return self
        return Layout(tuple(self.modules[i] for i in keep), tuple(self.kinds[i] for i in keep), self.routes)

    def plus(self, *modules: nn.Module) -> Layout:
        """This layout with ``modules`` appended."""
        return Layout(self.modules + modules, self.kinds + tuple(kind_of(m) for m in modules), self.routes)

    @property
    def dimension(self) -> int | None:
        """The output dimension, as ``SentenceTransformer.get_embedding_dimension`` reads it off these modules (the
        last one that reports it), before any ``truncate_dim``."""
        getters = ("get_embedding_dimension", "get_sentence_embedding_dimension", "get_word_embedding_dimension")
        for module in reversed(self.modules):
            method = next((getattr(module, g) for g in getters if callable(getattr(module, g, None))), None)
            dim = method() if method is not None else None
            if dim is not None:
                return dim
        return None

    # -- what it serves -------------------------------------------------------------------------------------------
    @cached_property
    def router_gammas(self) -> tuple[float, float] | None:
        """(γq, γd) of a leading query/document Router whose routes share one backbone and differ only by
        ``Normalize``; ``None`` for any other Router, or none."""
        if self.router is None or set(self.routes) != {ROUTE_QUERY, ROUTE_DOCUMENT}:
            return None
        q, d = self.routes[ROUTE_QUERY], self.routes[ROUTE_DOCUMENT]
        if [id(m) for m in q if not isinstance(m, Normalize)] != [id(m) for m in d if not isinstance(m, Normalize)]:
            return None
        return (1.0 if q and isinstance(q[-1], Normalize) else 0.0, 1.0 if d and isinstance(d[-1], Normalize) else 0.0)

    @cached_property
    def gammas(self) -> tuple[float, float] | None:
        """The (γq, γd) the list applies at inference, or ``None`` when its structure is not one we recognise.

        Recognised: a trailing ``Normalize`` (cosine, (1, 1)), no normalisation at all (dot, (0, 0)), a
        query/document ``Router`` sharing its backbone with ``Normalize`` on one or both routes, and a
        :class:`RoleNormalize` (the last one).
        """
        if self.router is not None:
            if self.router_gammas is None:
                return None
            if "normalize" in self.kinds[1:]:
                return (1.0, 1.0)
            role = self.find("role_normalize")
            return (role[-1].gamma_query, role[-1].gamma_document) if role else self.router_gammas
        role = self.find("role_normalize")
        if role:
            return role[-1].gamma_query, role[-1].gamma_document
        if self.kinds and self.kinds[-1] == "normalize":
            return (1.0, 1.0)
        if "normalize" in self.kinds:
            return None  # Normalize in the middle, e.g. followed by a Dense: not a family member
        return (0.0, 0.0)

    @property
    def carries(self) -> bool:
        """True when the list applies a role-specific rescaling itself: a :class:`RoleNormalize`, or a
        query/document Router that shares its backbone (a model converted by ``apply_similarity``)."""
        return "role_normalize" in self.kinds or self.router_gammas is not None

    @property
    def asymmetric(self) -> bool:
        """True when query and document roles must differ (an unrecognised Router is a two-tower model)."""
        if self.gammas is not None:
            return self.gammas[0] != self.gammas[1]
        return self.router is not None

    def similarity(self) -> Similarity | None:
        """The family member served on *raw* embeddings (learnable: shares its ``RoleNormalize``'s γ̂), or ``None``."""
        role = self.find("role_normalize")
        if role:
            return role[0].similarity()
        return None if self.gammas is None else PowerNormSimilarity(*self.gammas)


def read_layout(model: nn.Module) -> Layout:
    """The layout of a loaded model (a ``SentenceTransformer``: its children in order). A path, ``None`` or another
    value that is no model is a ``TypeError`` naming it (a path's characters would be read as modules)."""
    if model is None or isinstance(model, (str, bytes, os.PathLike)) or not hasattr(model, "__iter__"):
        what = f"the path {os.fspath(model)!r}" if isinstance(model, (str, os.PathLike)) else repr(model)
        raise TypeError(
            f"expected a loaded SentenceTransformer (or a Similarity where one is accepted), got {what}; load a model "
            "folder first with st_magnitude.model.load_model(path)"
        )
    return Layout.of(model)


def write_layout(model: nn.Module, layout: Layout) -> None:
    """Make ``model`` hold ``layout``: its leading Router gets the layout's routes (where they differ), and the model
    the layout's modules, in one :func:`replace_modules`."""
    router = layout.router
    if router is not None:
        for name, seq in layout.routes.items():
            current = router.sub_modules[name] if name in router.sub_modules else ()
            if [id(m) for m in current] != [id(m) for m in seq]:
                router.sub_modules[name] = nn.Sequential(*seq)
    replace_modules(model, list(layout.modules))


def read_folder_layout(root: Path) -> tuple[Path, Layout]:
    """``(modules.json, layout)`` of a saved model folder, read through the trust boundary: the modules are the
    entries (:class:`~st_magnitude._trust.Fields`, each with a string ``type`` and ``path``), their kinds read from
    ``type``. A Router's routes live in its own config file and are not read here."""
    file = Path(root) / "modules.json"
    entries = read_json(file)
    if not isinstance(entries, list):
        raise InputFileError(file, f"must hold a list of module entries, got {type(entries).__name__}")
    fields = [Fields(e, file, f"entry {i}", what=f"entry {i}") for i, e in enumerate(entries)]
    for f in fields:
        f.get("type", str)
        f.get("path", str, "")
    return file, Layout(tuple(fields), tuple(kind_of_type(f.get("type", str)) for f in fields))
