"""``MagnitudeLlamaIndexEmbedding(metric="dot")`` warns that LlamaIndex's default store scores with cosine.

The embedding cannot see the store it feeds. With ``metric="dot"`` a qnorm model goes, by default, into LlamaIndex's
``SimpleVectorStore``, which ranks by cosine: its top-10 then differs from the trained ranking (measured here against
the package's exact search), so the constructor warns and names the fix. A model that ranks as trained under cosine
(dnorm), or ``metric="cosine"``, gives no warning.
"""

from __future__ import annotations

import warnings

import pytest
from conftest import build_tiny_st
from helpers.deploy_kit import TOY_DOCS, TOY_QUERIES
from helpers.extras import need_extra

from st_magnitude import apply_similarity
from st_magnitude.serving.agreement import reference_ranking, top_k_agreement

need_extra("llama_index.core")
pytestmark = pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning")


def _default_store_ranking(emb, k=10):
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import TextNode

    nodes = [TextNode(text=t, id_=str(i)) for i, t in enumerate(TOY_DOCS)]
    retriever = VectorStoreIndex(nodes, embed_model=emb).as_retriever(similarity_top_k=k)
    return [[int(n.node.node_id) for n in retriever.retrieve(q)] for q in TOY_QUERIES]


def test_dot_for_a_magnitude_model_warns_and_the_default_store_would_lose_the_ranking(tiny_bert_dir):
    from st_magnitude.serving.llamaindex import MagnitudeLlamaIndexEmbedding
    from st_magnitude.serving.metric import StoreMetricWarning

    model = apply_similarity(build_tiny_st(tiny_bert_dir), "qnorm")
    with pytest.warns(StoreMetricWarning, match="SimpleVectorStore .* scores with cosine") as rec:
        emb = MagnitudeLlamaIndexEmbedding(model, metric="dot")
    assert "--store cosine" in str(rec[0].message)
    # what the warning is about: the default store's top-10 is not the trained one
    overlap, exact = top_k_agreement(reference_ranking(model, TOY_QUERIES, TOY_DOCS), _default_store_ranking(emb))
    assert exact < 1.0, (overlap, exact)


def test_no_warning_where_the_default_store_keeps_the_ranking(tiny_bert_dir):
    from st_magnitude.serving.llamaindex import MagnitudeLlamaIndexEmbedding
    from st_magnitude.serving.metric import StoreMetricWarning

    dnorm = apply_similarity(build_tiny_st(tiny_bert_dir), "dnorm")
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreMetricWarning)
        MagnitudeLlamaIndexEmbedding(dnorm, metric="dot")
        MagnitudeLlamaIndexEmbedding(dnorm)
