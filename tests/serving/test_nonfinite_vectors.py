"""No adapter hands a vector store a NaN or inf vector: the shared encoder refuses it, naming the text's index (and
its id where the stack has one).

A model that encodes one text to NaN (a diverged model, a ``--max-norm`` too large) used to pass the vector on:
Haystack's in-memory store then ranked the NaN document first. The model here is a tiny real one whose
``encode_document`` / ``encode_query`` put NaN or inf into the vector of the text ``"poison"``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import build_tiny_st
from helpers.extras import need_extra

from st_magnitude import apply_similarity

pytestmark = pytest.mark.filterwarnings("ignore::st_magnitude.MagnitudeCollapseWarning")

POISON = "poison"


@pytest.fixture(params=[float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
def poisoned(request, tiny_bert_dir):
    model = apply_similarity(build_tiny_st(tiny_bert_dir), "dnorm")  # ranks as trained under every store metric
    for role in ("query", "document"):
        original = getattr(model, f"encode_{role}")

        def encode(texts, _orig=original, **kw):
            out = np.array(_orig(texts, **kw), dtype=np.float32)
            for i, text in enumerate(texts):
                if text == POISON:
                    out[i, 1] = request.param
            return out

        setattr(model, f"encode_{role}", encode)
    return model


def test_shared_check_names_index_and_id():
    from st_magnitude.serving._encode import check_finite

    ok = np.ones((3, 4), dtype=np.float32)
    assert check_finite(ok, "document") is ok
    bad = ok.copy()
    bad[2, 0] = np.nan
    bad[1, 3] = np.inf
    with pytest.raises(ValueError, match=r"document at index 1 \(id 'b'\) .* \(2 of 3 documents do\)"):
        check_finite(bad, "document", ids=["a", "b", "c"])
    assert check_finite(np.zeros((0, 4), dtype=np.float32), "query").shape == (0, 4)


def test_langchain_refuses(poisoned):
    need_extra("langchain_core")
    from st_magnitude.serving.langchain import MagnitudeLangChainEmbeddings

    emb = MagnitudeLangChainEmbeddings(poisoned)
    assert len(emb.embed_documents(["vitamin d", "heart risk"])) == 2
    with pytest.raises(ValueError, match="document at index 1 encodes to a vector with NaN or inf"):
        emb.embed_documents(["vitamin d", POISON, "heart risk"])
    with pytest.raises(ValueError, match="query at index 0 encodes to a vector with NaN or inf"):
        emb.embed_query(POISON)


def test_llamaindex_refuses(poisoned):
    need_extra("llama_index.core")
    from st_magnitude.serving.llamaindex import MagnitudeLlamaIndexEmbedding

    emb = MagnitudeLlamaIndexEmbedding(poisoned)
    with pytest.raises(ValueError, match="document at index 2 encodes to a vector with NaN or inf"):
        emb.get_text_embedding_batch(["vitamin d", "heart risk", POISON])
    with pytest.raises(ValueError, match="query at index 0"):
        emb.get_query_embedding(POISON)


def test_haystack_refuses_instead_of_ranking_the_bad_document_first(poisoned):
    need_extra("haystack")
    from haystack import Document

    from st_magnitude.serving.haystack import MagnitudeHaystackDocumentEmbedder, MagnitudeHaystackTextEmbedder

    docs = [Document(id="d-ok", content="vitamin d"), Document(id="d-bad", content=POISON)]
    with pytest.raises(ValueError, match=r"document at index 1 \(id 'd-bad'\)"):
        MagnitudeHaystackDocumentEmbedder(poisoned).run(docs)
    with pytest.raises(ValueError, match="query at index 0"):
        MagnitudeHaystackTextEmbedder(poisoned).run(POISON)


def test_lancedb_refuses_at_once(poisoned, tmp_path):
    lancedb = need_extra("lancedb")
    from lancedb.pydantic import LanceModel, Vector

    from st_magnitude.serving.lancedb import lancedb_embedding_function

    func = lancedb_embedding_function(poisoned)

    class Doc(LanceModel):
        text: str = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    table = lancedb.connect(tmp_path).create_table("docs", schema=Doc)
    started = time.monotonic()
    # LanceDB's writer reports the function's error inside its own RuntimeError
    with pytest.raises((ValueError, RuntimeError), match="document at index 1 encodes to a vector with NaN or inf"):
        table.add([{"text": "vitamin d"}, {"text": POISON}])
    assert time.monotonic() - started < 30, "a refusal is not transient: LanceDB must not retry it"
    assert table.count_rows() == 0
