"""The options the ``st-magnitude`` commands share, declared once, and the helpers every command uses.

:data:`OPTIONS` declares each shared option (``-o/--output``, ``--data``, ``--data-root``, ``--split``,
``--max-corpus``, ``--max-queries``, ``--seed``, ``--on-missing``, ``--max-seq-length``, ``--batch-size``,
``--threads``, ``--device``, ``--trust-remote-code``) once; a command adds them with :func:`add_options` /
:func:`add_option` (overriding a keyword such as a narrower help) and passes them on with :func:`values`.

One vocabulary: ``-o/--output`` is where a command writes its main output (a folder); ``--data`` is one or more
BEIR dataset folders; ``--data-root`` is the data folder holding ``beir/`` and ``sts/``
(:mod:`st_magnitude.data.home`). Files a command writes besides its main output have their own names
(``--json FILE``, ``--plot FILE``, ``replicate --results DIR`` / ``--report PAGE``).

The similarity names a command accepts come from :func:`similarity_names` (one registry,
:mod:`st_magnitude._similarity_names`).
Argument types and up-front checks: every command validates its arguments and its outputs before any work (loading a
model, reading data): numbers through the ``argparse`` types below (a bad value is a one-line usage error, exit 2),
output paths through :func:`check_output_file` / :func:`check_output_dir`, which *probe* writability by creating and
removing a file (``os.access`` says yes to root on a read-only file system), and :func:`removed_on_failure` (the one
cleanup rule, :mod:`st_magnitude._trust.outputs`, which :func:`st_magnitude.cli.main` applies to every output a
command declares in its ``OUTPUTS``) takes back the output folders a failed run created. Nothing heavy is imported
at module level.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from st_magnitude._trust.outputs import (  # noqa: F401 - the commands' one import
    check_output_dir,
    check_output_file,
    removed_on_failure,
)

__all__ = [
    "MAX_THREADS",
    "OPTIONS",
    "SHORT_FLAGS",
    "SUBSAMPLE",
    "TRUST_HELP",
    "add_option",
    "add_options",
    "check_data_folder",
    "check_device",
    "check_model_path",
    "check_mteb_model",
    "check_output_dir",
    "check_output_file",
    "check_splits",
    "check_task_or_folder",
    "int_range",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "refuse_foreign_code",
    "removed_on_failure",
    "set_threads",
    "similarity_arg",
    "similarity_names",
    "values",
]


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """``argparse`` type: an integer >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """``argparse`` type: an integer >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def int_range(low: int, high: int):
    """An ``argparse`` type: an integer from ``low`` to ``high``, else a usage error naming the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected an integer from {low} to {high}, got {text!r}")
        return value

    parse.__name__ = f"integer from {low} to {high}"
    return parse


#: ``--threads``: torch makes every thread it is told to (100,000 of them per matrix product, 2**40 overflows).
MAX_THREADS = 1024


def positive_float(text: str) -> float:
    """``argparse`` type: a finite float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def check_device(device: str | None) -> str | None:
    """Validate a torch device string (``cpu``, ``cuda``, ``cuda:1``, ``mps``) and that it exists here."""
    if device is None:
        return None
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(f"unknown device {device!r}; expected cpu, cuda, cuda:N or mps.") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but CUDA is not available here; use --device cpu.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here.")
    elif dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"device {device!r} requested but MPS is not available here; use --device cpu.")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"unsupported device {device!r}; expected cpu, cuda, cuda:N or mps.")
    return device


def check_model_path(model: str) -> None:
    """The same up-front tests as the loader, reading nothing: a missing local-looking path is a one-line error, not
    a hub lookup; an existing path must be a folder with ``modules.json`` or ``config.json``; an empty path is not the
    current folder."""
    _refuse_empty(model)
    path = Path(model)
    if not path.exists() and (path.is_absolute() or model.startswith(".") or model.count("/") != 1):
        raise FileNotFoundError(f"model folder {model!r} does not exist (a hub id has the form 'organisation/name').")
    if path.exists() and not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
        raise FileNotFoundError(f"{model} is not a SentenceTransformer folder (no modules.json/config.json).")


def check_data_folder(folder: str) -> None:
    """``--data``: a BEIR dataset folder holding ``corpus.jsonl`` and ``queries.jsonl`` (nothing read)."""
    from st_magnitude.data.beir import check_beir_folder  # imports nothing heavy

    check_beir_folder(folder)


def check_splits(folders, *splits: str) -> None:
    """Each BEIR folder of ``folders`` has the qrels of each split (the message lists those it has); reads nothing,
    so a command runs it before it imports the model stack."""
    from st_magnitude.data.beir import check_beir_folder

    for folder in folders:
        for split in splits:
            check_beir_folder(folder, split)


def check_mteb_model(model: str) -> None:
    """``mteb run -m``: a local model folder, or a name mteb knows (anything that does not look like a path)."""
    path = Path(model)
    if path.exists():
        if not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
            raise FileNotFoundError(f"model folder {model!r} does not exist or is not a SentenceTransformer folder.")
    elif os.sep in model and (model.startswith((".", os.sep)) or model.count("/") > 1):
        raise FileNotFoundError(f"model folder {model!r} does not exist.")


def check_task_or_folder(task: str) -> None:
    """``mteb run -t``: an mteb task name, or a local BEIR folder (anything with a path separator)."""
    if Path(task).is_dir() or os.sep in task:
        check_data_folder(task)


def _refuse_empty(model: str) -> None:
    if not model.strip():  # Path("") is the current folder
        raise ValueError("the model path is empty: name a SentenceTransformer folder or a hub id")


def refuse_foreign_code(args: argparse.Namespace) -> None:
    """Without ``--trust-remote-code``, refuse a local model that names code outside ST / st-magnitude, before any
    work (reading data, loading the model); an empty model path is refused first."""
    _refuse_empty(args.model)
    if not args.trust_remote_code and Path(args.model).is_dir():
        from st_magnitude.model.load import check_model_code

        check_model_code(args.model)


def set_threads(args: argparse.Namespace) -> None:
    """``--threads N``: torch CPU threads (imports torch, so only from a command's run function)."""
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


TRUST_HELP = (
    "allow the model to run code outside sentence-transformers and st-magnitude (classes named in modules.json, "
    "a config auto_map); off by default, st-magnitude's own modules are always allowed"
)

#: What each use of a similarity name needs, and why the others are refused there.
_PURPOSES = {
    "carry": "a model must carry it (a per-role rescaling: apply_similarity, convert, compare --variants)",
    "rescore": "the raw embeddings are rescored with a fixed per-role rescaling (evaluate --similarity)",
    "any": "any similarity of the package (losses)",
}


def similarity_names(purpose: str = "carry") -> tuple[str, ...]:
    """The similarity names a command accepts — the one place the CLI takes them from.

    All three are queries of the one similarity registry (:func:`st_magnitude.similarity.similarity_names`).
    ``"carry"``: what a model can carry;
    ``"rescore"``: those with fixed γ (``evaluate --similarity``: learnable has no γ of its own);
    ``"any"``: every registered name (``tn`` included).
    """
    from st_magnitude import _similarity_names as registry  # torch-free (re-exported by st_magnitude.similarity)

    if purpose == "carry":
        return registry.similarity_names(carriable=True)
    if purpose == "rescore":
        return registry.similarity_names(fixed_gammas=True)
    if purpose == "any":
        return registry.similarity_names()
    raise ValueError(f"unknown purpose {purpose!r}; expected one of {sorted(_PURPOSES)}")


def similarity_arg(purpose: str = "carry"):
    """An ``argparse`` type: a canonical similarity name valid for ``purpose``, else a one-line usage error."""
    names = similarity_names(purpose)

    def parse(text: str) -> str:
        from st_magnitude._similarity_names import validate_similarity_name

        try:
            name = validate_similarity_name(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"unknown similarity {text!r}. Valid names: {', '.join(names)}") from None
        if name not in names:
            why = {
                "tn": "sim_TN is not a per-role rescaling: no model can carry it and raw embeddings cannot be "
                "rescored with it (use it as a loss similarity)",
                "learnable": "learnable has no fixed γ; evaluate the learnable model itself, without --similarity",
            }.get(name, f"here {_PURPOSES[purpose]}")
            raise argparse.ArgumentTypeError(f"{name!r} cannot be used here: {why}. Valid names: {', '.join(names)}")
        return name

    parse.__name__ = "similarity"
    return parse


#: The options several commands share, declared once: flag -> ``add_argument`` keywords. A command adds them with
#: :func:`add_options` (as declared) or :func:`add_option` (overriding a keyword, e.g. a narrower help).
OPTIONS: dict[str, dict[str, Any]] = {
    "--output": {"default": None, "metavar": "DIR", "help": "the folder this command writes its output to"},
    "--data": {"nargs": "+", "required": True, "metavar": "BEIR_DIR", "help": "local BEIR dataset folder(s)"},
    "--data-root": {
        "default": None,
        "metavar": "DIR",
        "help": "the data folder holding beir/ and sts/ (default: $ST_MAGNITUDE_DATA, else "
        "~/.cache/st_magnitude/data)",
    },
    "--split": {"default": "test", "help": "qrels split (default: test)"},
    "--max-corpus": {
        "type": positive_int,
        "default": None,
        "metavar": "N",
        "help": "NanoBEIR-style subsample: all judged docs of the kept queries + seeded distractors up to N",
    },
    "--max-queries": {
        "type": positive_int,
        "default": None,
        "metavar": "N",
        "help": "seeded subsample of the queries",
    },
    "--seed": {"type": int, "default": 42, "help": "subsampling seed (default 42)"},
    "--on-missing": {
        "choices": ["raise", "drop"],
        "default": "raise",
        "help": "judged ids missing from the corpus/queries: fail (default) or drop them",
    },
    "--max-seq-length": {"type": positive_int, "default": None, "help": "cap the tokens per input"},
    "--batch-size": {"type": positive_int, "default": None, "help": "encoding batch size (default: %(default)s)"},
    "--threads": {
        "type": int_range(1, MAX_THREADS),
        "default": None,
        "metavar": "N",
        "help": f"torch CPU threads (1 to {MAX_THREADS})",
    },
    "--device": {"default": None, "help": "cpu, cuda or cuda:N (default: cuda when available)"},
    "--trust-remote-code": {"action": "store_true", "help": TRUST_HELP},
}

#: The short spelling of a shared option, added beside its long one.
SHORT_FLAGS = {"--output": "-o"}

#: The ``dest`` of the BEIR subsampling options (``--split --max-corpus --max-queries --seed``), for :func:`values`.
SUBSAMPLE = ("split", "max_corpus", "max_queries", "seed")


def add_option(parser: argparse.ArgumentParser, flag: str, **override: Any) -> argparse.Action:
    """Add the shared option ``flag`` (a key of :data:`OPTIONS`), with ``override`` replacing declared keywords."""
    flags = (SHORT_FLAGS[flag], flag) if flag in SHORT_FLAGS else (flag,)
    return parser.add_argument(*flags, **{**OPTIONS[flag], **override})


def add_options(parser: argparse.ArgumentParser, *flags: str) -> None:
    """Add the shared options ``flags`` as declared in :data:`OPTIONS`, in that order."""
    for flag in flags:
        add_option(parser, flag)


def values(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """``{name: args.name}`` for ``names``: the keyword arguments a command passes on unchanged."""
    return {name: getattr(args, name) for name in names}
