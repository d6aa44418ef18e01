"""The serving-stack registry, torch-free: the one place that says which vector stores have an adapter.

Each stack has an adapter module ``st_magnitude.serving.<name>`` (docs/deployment.md, "The stacks", has a row and a
section per stack). The module routes the roles, checks the store metric with
:func:`~st_magnitude.serving.metric.store_metric`, and defines the path the agreement check takes through the stack
(:func:`~st_magnitude.serving.agreement.stack_ranking`)::

    def index_and_search(model, queries: list[str], documents: list[str], k: int, metric: str | None)
        -> list[list[int]]  # per query, the indices of its top-k documents as the stack returns them

``metric`` there is ``None`` (the adapter's default) or a stack-neutral name (``dot`` / ``cosine`` / ``l2``).

Adding a stack: its adapter module, one line in :data:`STACK_REGISTRY`, its pip package in the ``deploy`` extra of
pyproject.toml, and its row and section in docs/deployment.md. The tests, the store-metric spellings
(:data:`METRIC_ALIASES`) and benchmarks/bench_deploy.py read the registry.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the store metrics every adapter maps a stack's spelling to, in the order adapters prefer them by default
METRIC_NAMES: tuple[str, ...] = ("dot", "cosine", "l2")

#: spellings of the store metrics that no registered stack uses as its own (other stores, common names)
_OTHER_SPELLINGS = {
    "inner_product": "dot",
    "dotproduct": "dot",
    "cos": "cosine",
    "euclidean": "l2",
}


@dataclass(frozen=True)
class StackSpec:
    """One registered serving stack.

    Attributes:
        name: the registry key and the adapter's module name (``st_magnitude.serving.<name>``).
        title: how docs/deployment.md names it (the table row and the ``### <title>`` section).
        package: the pip distribution the adapter needs (in the ``deploy`` extra).
        imports: the module whose presence means the stack is installed (what the adapter imports).
        metrics: the store metrics the agreement check drives, stack-neutral name → the stack's own spelling, in the
            adapter's order of preference (the first that keeps a model's ranking is its default).
        fixed_store: the stack's store when it scores with its one metric only (LangChain's and LlamaIndex's
            in-memory stores): a model that keeps document magnitude needs a ``--store`` export for it.
    """

    name: str
    title: str
    package: str
    imports: str
    metrics: dict[str, str]
    fixed_store: str | None = None

    @property
    def module(self) -> str:
        """The adapter module."""
        return f"st_magnitude.serving.{self.name}"

    def metric_label(self, metric: str) -> str:
        """The stack's name for a stack-neutral ``metric`` (``dot`` → Chroma's ``ip``), with its store if fixed."""
        own = self.metrics[metric]
        return f"{self.fixed_store} ({own})" if self.fixed_store else own


#: Every serving stack, in display order. Read it through :func:`stack_spec` and :data:`STACK_NAMES`.
STACK_REGISTRY: dict[str, StackSpec] = {
    spec.name: spec
    for spec in (
        StackSpec("langchain", "LangChain", package="langchain-core", imports="langchain_core",
                  metrics={"cosine": "cosine"}, fixed_store="InMemoryVectorStore"),
        StackSpec("llamaindex", "LlamaIndex", package="llama-index-core", imports="llama_index.core",
                  metrics={"cosine": "cosine"}, fixed_store="SimpleVectorStore"),
        StackSpec("haystack", "Haystack", package="haystack-ai", imports="haystack",
                  metrics={"dot": "dot_product", "cosine": "cosine"}),
        StackSpec("chroma", "Chroma", package="chromadb", imports="chromadb",
                  metrics={"dot": "ip", "cosine": "cosine", "l2": "l2"}),
        StackSpec("lancedb", "LanceDB", package="lancedb", imports="lancedb",
                  metrics={"dot": "dot", "cosine": "cosine", "l2": "l2"}),
        StackSpec("qdrant", "Qdrant", package="qdrant-client", imports="qdrant_client",
                  metrics={"dot": "DOT", "cosine": "COSINE", "l2": "EUCLID"}),
    )
}  # fmt: skip

#: the registered stack names, in display order
STACK_NAMES: tuple[str, ...] = tuple(STACK_REGISTRY)


def stack_spec(name: str) -> StackSpec:
    """The :class:`StackSpec` of a registered stack; any other name raises a ``ValueError`` listing them."""
    spec = STACK_REGISTRY.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"stack must be one of {STACK_NAMES}, got {name!r}")
    return spec


def _metric_aliases() -> dict[str, str]:
    aliases = {m: m for m in METRIC_NAMES} | _OTHER_SPELLINGS
    for spec in STACK_REGISTRY.values():
        for metric, own in spec.metrics.items():
            if metric not in METRIC_NAMES:
                raise ValueError(f"{spec.name}: metrics are keyed by {METRIC_NAMES}, not {metric!r}")
            if aliases.setdefault(own.lower(), metric) != metric:
                raise ValueError(f"{spec.name} spells {metric} {own!r}, which already means {aliases[own.lower()]}")
    return aliases


#: every known spelling of a store metric (lower case) → ``dot`` / ``cosine`` / ``l2``
METRIC_ALIASES: dict[str, str] = _metric_aliases()
