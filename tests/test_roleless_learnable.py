"""A role-less ``encode()`` of a learnable (asymmetric) model is refused, as a qnorm / dnorm model's Router refuses
it: the vector stacks' own sentence-transformers integrations call ``model.encode()`` for queries and documents
alike, and a warning let them rank silently wrong. The refusal names ``encode_query`` / ``encode_document`` and the
export that serves role-less stacks (``--store dot --default-route document``), which does rank exactly."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import build_tiny_st
from helpers.deploy_kit import TOY_DOCS, TOY_QUERIES

from st_magnitude import apply_similarity, convert_for_store
from st_magnitude.serving.agreement import reference_ranking

pytestmark = pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning")

TRAINED = (0.3, 0.8)  # an asymmetric γ, as training leaves it


@pytest.fixture
def learnable(tiny_bert_dir):
    return apply_similarity(build_tiny_st(tiny_bert_dir), "learnable", init_gamma=TRAINED)


def test_a_roleless_encode_of_a_learnable_model_is_refused(learnable):
    with pytest.raises(ValueError, match=r"encode_query / encode_document.*--store dot --default-route document"):
        learnable.encode(TOY_QUERIES)
    learnable.encode_query(TOY_QUERIES)  # roles given: fine
    learnable.encode_document(TOY_DOCS)


def test_the_refusal_holds_where_the_stacks_load_the_model(learnable, tmp_path):
    """The stacks load the folder with ``trust_remote_code=True`` and call ``encode()``."""
    from sentence_transformers import SentenceTransformer

    learnable.save(str(tmp_path / "m"))
    assert "plain `model.encode(...)` raises (no default route is set)" in (tmp_path / "m" / "README.md").read_text()
    loaded = SentenceTransformer(str(tmp_path / "m"), trust_remote_code=True, device="cpu")
    with pytest.raises(ValueError, match="encode_query / encode_document"):
        loaded.encode(["a query as a stack sends it"])


def test_a_symmetric_learnable_model_still_encodes_without_a_role(tiny_bert_dir):
    model = apply_similarity(build_tiny_st(tiny_bert_dir), "learnable")  # γq = γd at init: roles change nothing
    assert np.allclose(model.encode(TOY_QUERIES), model.encode_document(TOY_QUERIES))


def test_the_export_the_refusal_names_ranks_exactly_for_roleless_stacks(learnable, tiny_bert_dir, tmp_path):
    from st_magnitude.model.load import load_model

    export = convert_for_store(learnable, "learnable", "dot", documents=TOY_DOCS, default_route="document")
    export.save(str(tmp_path / "export"))
    card = (tmp_path / "export" / "README.md").read_text()
    assert "plain `model.encode(...)` treats every input as a document" in card
    served = load_model(str(tmp_path / "export"))
    q, d = served.encode(TOY_QUERIES), served.encode(TOY_DOCS)  # what a role-less stack does
    scores = q.astype(np.float64) @ d.astype(np.float64).T
    got = [list(np.lexsort((np.arange(len(row)), -row))[:10]) for row in scores]
    trained = apply_similarity(build_tiny_st(tiny_bert_dir), "learnable", init_gamma=TRAINED)
    assert got == reference_ranking(trained, TOY_QUERIES, TOY_DOCS)
