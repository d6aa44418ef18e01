"""mteb integration: evaluate with the model's own roles and similarity, local BEIR folders as tasks, and a CLI shim.

* Roles and similarity: mteb's ``SentenceTransformerEncoderWrapper`` encodes queries with ``encode_query`` and the
  corpus with ``encode_document`` and scores retrieval with ``model.similarity``, so a model
  converted by :func:`st_magnitude.apply_similarity` (``similarity_fn_name="dot"``) is scored with what it was
  trained with. The meta's ``similarity_fn_name`` is set to ``None`` so pairwise tasks delegate to the model too.
* Cache collisions: every model gets a unique meta name and revision (a content hash of the
  saved folder, or of a live model's weights), so two local models never reuse each other's cached results.
* Local BEIR folders become ``AbsTaskRetrieval`` subclasses overriding ``load_data``, with the
  same NanoBEIR-style subsample as ``st-magnitude evaluate`` and ``ignore_identical_ids=True`` (BEIR's convention,
  as in our evaluator).
* :func:`mteb_cli` is the ``mteb run`` shim: registers the local model in ``MODEL_REGISTRY``
  (loaded by :func:`~st_magnitude.model.load.load_model`: no code outside sentence-transformers and
  st-magnitude unless ``trust_remote_code=True``) and the local tasks in mteb's task registry, then runs mteb's own
  CLI, which writes mteb's normal results files.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from st_magnitude.data.beir import BEIRData, load_beir, missing_folder, named_in_data_folder, subsample
from st_magnitude.evaluation._upstream import register_mteb_model, register_mteb_task

logger = logging.getLogger(__name__)

__all__ = [
    "MTEBOfflineError",
    "evaluate_mteb",
    "local_model_name",
    "local_task_name",
    "make_local_task",
    "mteb_cli",
    "mteb_wrapper",
    "model_revision",
    "register_local_model",
]

_OFFLINE_HINTS = ("offline", "couldn't reach", "connectionerror", "connection error", "max retries", "name resolution")


class MTEBOfflineError(ValueError):
    """A built-in mteb task (or model) needs the Hugging Face Hub, which cannot be reached."""


def _require_mteb():
    try:
        import mteb
    except ImportError as exc:  # pragma: no cover - mteb needs python >= 3.11
        raise ImportError("mteb is not installed (pip install 'mteb>=2,<3'; it needs Python >= 3.11)") from exc
    return mteb


def _is_offline() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes")
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _offline_message(tasks: Sequence[str]) -> str:
    names = ", ".join(tasks) or "?"
    return (
        f"mteb task {names} is downloaded from the Hugging Face Hub at run time, which cannot be reached here "
        f"(offline: HF_HUB_OFFLINE=1 or no network). {_local_hint(tasks)}"
    )


def _dataset_key(name: str) -> str:
    """A task or folder name compared without case and punctuation: ``SciFact``, ``scifact``, ``TREC-COVID``."""
    return re.sub(r"[^0-9a-z]", "", name.lower())


def _local_hint(tasks: Sequence[str]) -> str:
    """What to pass instead of the mteb task(s) ``tasks``: a BEIR folder of the data folder that exists and holds the
    dataset, or, when there is none, which data folder was looked at, what it holds and how to get the dataset."""
    from st_magnitude.data.home import DATA_ENV, resolve_data_dir

    try:
        beir = resolve_data_dir() / "beir"
    except FileNotFoundError as exc:  # $ST_MAGNITUDE_DATA names a missing folder
        return f"Pass a local BEIR folder with -t instead; {exc} (${DATA_ENV} is the folder holding beir/<name>/)."
    held = sorted(p.name for p in beir.iterdir() if (p / "corpus.jsonl").is_file()) if beir.is_dir() else []
    found = [str(beir / name) for task in tasks for name in held if _dataset_key(name) == _dataset_key(task)]
    if found and len(found) >= len(tasks):
        return f"Pass the local BEIR folder instead: -t {' '.join(found)}"
    holds = f"holds {', '.join(held)}" if held else ("holds no BEIR dataset" if beir.is_dir() else "does not exist")
    example = _dataset_key(tasks[0]) if tasks else "scifact"
    return (
        f"No local BEIR folder found: {beir} (the data folder's beir/, set by ${DATA_ENV}) {holds}. Get the dataset "
        f'once with a network (python -c "from st_magnitude.data.home import resolve_dataset; '
        f"resolve_dataset('{example}')\" downloads BEIR's {example!r} there; BEIR names: "
        "https://github.com/beir-cellar/beir) and pass its folder: -t "
        f"{beir / example}, or point ${DATA_ENV} at a data folder that holds it."
    )


# ----------------------------------------------------------------------------------------------------------------
# local tasks
# ----------------------------------------------------------------------------------------------------------------
def local_task_name(
    folder: str | os.PathLike,
    split: str = "test",
    max_corpus: int | None = None,
    max_queries: int | None = None,
    seed: int = 42,
) -> str:
    """``Local<Name>Retrieval`` (+ ``_<split>`` for non-test splits, + ``_c<N>q<M>s<seed>`` when subsampled)."""
    stem = re.sub(r"[^0-9A-Za-z]+", " ", Path(folder).resolve().name).title().replace(" ", "")
    name = f"Local{stem}Retrieval"
    if split != "test":
        name += f"_{split}"
    if max_corpus is not None or max_queries is not None:
        name += f"_c{max_corpus or 'all'}q{max_queries or 'all'}s{seed}"
    return name


def _data_revision(folder: Path, split: str) -> str:
    h = hashlib.sha256()
    for rel in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        p = folder / rel
        st = p.stat()
        h.update(f"{rel}:{st.st_size}:{int(st.st_mtime)}".encode())
    return "local-" + h.hexdigest()[:12]


def make_local_task(
    folder: str | os.PathLike,
    split: str = "test",
    *,
    max_corpus: int | None = None,
    max_queries: int | None = None,
    seed: int = 42,
    name: str | None = None,
    on_missing: str = "raise",
    on_loaded: Callable[[BEIRData], None] | None = None,
):
    """An mteb ``AbsTaskRetrieval`` subclass (a class, not an instance) that reads a local BEIR folder.

    The data go through :func:`load_beir` (BEIR's format, every line checked) and the same seeded
    :func:`subsample` as ``st-magnitude evaluate``, so all paths see the same queries and corpus. They are read
    when the class is made, so a malformed folder fails before mteb loads any model; ``on_loaded(data)`` is then
    called with what the task will hold (the CLI prints the kept counts). The class's ``local_data`` holds the folder
    name, the counts and the subsampling note.
    """
    mteb = _require_mteb()
    from mteb.abstasks import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    path = Path(folder)
    if not path.is_dir():
        raise missing_folder(path)
    for label, v in (("max_corpus", max_corpus), ("max_queries", max_queries)):
        if v is not None and (not isinstance(v, int) or v <= 0):
            raise ValueError(f"{label} must be a positive integer or None, got {v!r}")
    task_name = name or local_task_name(path, split, max_corpus, max_queries, seed)
    revision = _data_revision(path, split)
    sub = (
        f" Subsampled NanoBEIR-style: max_corpus={max_corpus}, max_queries={max_queries}, seed={seed}."
        if (max_corpus is not None or max_queries is not None)
        else ""
    )
    metadata = TaskMetadata(
        name=task_name,
        dataset={"path": f"local/{path.name}", "revision": revision},
        description=f"Local BEIR folder {path.resolve()} (split {split}).{sub}",
        reference=None,
        type="Retrieval",
        category="t2t",
        modalities=["text"],
        eval_splits=[split],
        eval_langs=["eng-Latn"],
        main_score="ndcg_at_10",
        date=None,
        domains=None,
        task_subtypes=None,
        license=None,
        annotations_creators=None,
        dialect=None,
        sample_creation=None,
        bibtex_citation=None,
    )

    # read (and check) the folder now, so a malformed file fails before mteb loads the model
    data = load_beir(path, split, on_missing=on_missing)
    if max_corpus is not None or max_queries is not None:
        data = subsample(data, max_corpus=max_corpus, max_queries=max_queries, seed=seed)
        logger.info("%s: %s", task_name, data.note)
    if on_loaded is not None:
        on_loaded(data)

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        if self.data_loaded:
            return
        from datasets import Dataset

        self.dataset = {"default": {split: _split_data(data, Dataset)}}
        self.data_loaded = True

    cls = type(
        task_name,
        (AbsTaskRetrieval,),
        {
            "metadata": metadata,
            "load_data": load_data,
            "ignore_identical_ids": True,
            "__module__": __name__,
            "local_data": {"dataset": path.name, "queries": len(data.qrels), "corpus": len(data.corpus)}
            | {"note": data.note},
        },
    )
    del mteb
    return cls


def _split_data(data: BEIRData, dataset_cls) -> dict[str, Any]:
    corpus = dataset_cls.from_list(
        [{"id": cid, "title": d.get("title") or "", "text": d.get("text") or ""} for cid, d in data.corpus.items()]
    )
    queries = dataset_cls.from_list([{"id": qid, "text": t} for qid, t in data.queries.items()])
    return {"corpus": corpus, "queries": queries, "relevant_docs": data.qrels, "top_ranked": None}


# ----------------------------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------------------------
def model_revision(model_or_path) -> str:
    """A content hash of a saved model folder (file names, sizes, mtimes), or of a live model's weights."""
    if isinstance(model_or_path, (str, os.PathLike)) and Path(model_or_path).is_dir():
        h = hashlib.sha256()
        for p in sorted(Path(model_or_path).rglob("*")):
            if p.is_file():
                st = p.stat()
                h.update(f"{p.relative_to(model_or_path)}:{st.st_size}:{int(st.st_mtime)}".encode())
        return "local-" + h.hexdigest()[:12]
    import torch

    h = hashlib.sha256(repr(model_or_path).encode())
    if isinstance(model_or_path, torch.nn.Module):  # weights fingerprint: a changed model gets a new revision
        with torch.no_grad():
            for name, p in model_or_path.state_dict().items():
                if torch.is_floating_point(p):
                    x = p.detach().double()
                    h.update(f"{name}:{x.sum().item():.12e}:{x.square().sum().item():.12e}".encode())
    return "in-memory-" + h.hexdigest()[:12]


def _meta_name(model, name: str | None) -> str:
    if name:
        return name
    card = getattr(getattr(model, "model_card_data", None), "model_name", None)
    if card:
        return card if "/" in card else f"local/{card}"
    path = getattr(model, "_model_name_or_path", None) or getattr(model, "model_name_or_path", None)
    return f"local/{Path(str(path)).name}" if path else "local/st-magnitude-model"


def mteb_wrapper(model, *, name: str | None = None, revision: str | None = None):
    """Wrap a SentenceTransformer for ``mteb.evaluate`` with a unique meta name/revision (no cache collisions).

    The wrapper encodes with ``encode_query`` / ``encode_document`` and scores with ``model.similarity``; the meta's
    ``similarity_fn_name`` is ``None`` so pairwise scores delegate to the model as well.
    """
    mteb = _require_mteb()
    wrapper = mteb.SentenceTransformerEncoderWrapper(model)
    meta = wrapper.mteb_model_meta.model_copy(
        update={
            "similarity_fn_name": None,
            "name": _meta_name(model, name),
            "revision": revision or model_revision(model),
        }
    )
    wrapper.mteb_model_meta = meta
    return wrapper


def register_local_model(path: str | os.PathLike, *, name: str | None = None, trust_remote_code: bool = False) -> str:
    """Register a local model folder in mteb's ``MODEL_REGISTRY`` so ``mteb run -m <name>`` can load it.

    The folder is loaded by :func:`~st_magnitude.model.load.load_model`; without ``trust_remote_code`` a
    model naming code outside sentence-transformers and st-magnitude is refused here, before mteb starts.
    """
    mteb = _require_mteb()
    from mteb.models.model_meta import ModelMeta

    folder = Path(path)
    if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
        raise FileNotFoundError(f"model folder {str(folder)!r} does not exist or is not a SentenceTransformer folder.")
    if not trust_remote_code:
        from st_magnitude.model.load import check_model_code

        check_model_code(str(folder))
    key = name or local_model_name(folder)
    meta = ModelMeta.create_empty(
        overwrites=dict(
            name=key,
            revision=model_revision(folder),
            loader=_LocalLoader(str(folder.resolve())),
            loader_kwargs={"trust_remote_code": trust_remote_code},
            similarity_fn_name=None,
            framework=["Sentence Transformers"],
        )
    )
    register_mteb_model(key, meta)
    del mteb
    return key


def local_model_name(folder: str | os.PathLike) -> str:
    """The mteb name of a local model folder: ``local/<folder name>`` (``local/<parent>-model`` for a folder named
    ``model``, as compare writes them), so mteb's results folder is ``local__<name>/<revision>`` rather than the
    mangled absolute path. Two folders of the same name stay apart by the revision (a hash of the weights)."""
    folder = Path(folder).resolve()
    base = f"{folder.parent.name}-{folder.name}" if folder.name == "model" and folder.parent.name else folder.name
    return f"local/{base}"


class _LocalLoader:
    """mteb loader: ``loader(name, revision=..., **loader_kwargs)`` → the wrapper over the local folder."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.__name__ = "SentenceTransformerEncoderWrapper"  # mteb serialises the loader by its __name__

    def __call__(self, name: str, revision: str | None = None, **kwargs: Any):
        import mteb

        from st_magnitude.model.load import load_model

        device = kwargs.pop("device", None)
        if device is not None and not isinstance(device, str):
            device = f"cuda:{device}"
        trust = bool(kwargs.pop("trust_remote_code", False))
        model = load_model(self.folder, device=device, trust_remote_code=trust)  # device None: ST picks
        return mteb.SentenceTransformerEncoderWrapper(model, **kwargs)

    def __repr__(self) -> str:  # mteb stores loaders in metas that get printed
        return f"LocalLoader({self.folder!r})"


# ----------------------------------------------------------------------------------------------------------------
# evaluation
# ----------------------------------------------------------------------------------------------------------------
def _check_registered_model_trust(mteb, name: str) -> None:
    """Refuse an mteb-registered model whose loader runs remote code, unless the caller trusted it."""
    try:
        meta = mteb.get_model_meta(name)
    except Exception:  # noqa: BLE001 - not registered: mteb loads it with sentence-transformers' defaults
        return
    if (getattr(meta, "loader_kwargs", None) or {}).get("trust_remote_code"):
        from st_magnitude.model.load import RemoteCodeError

        raise RemoteCodeError(
            f"mteb model {name!r} is loaded with trust_remote_code=True by mteb's registry (it runs the "
            "repository's own code); pass --trust-remote-code (Python: trust_remote_code=True) to allow it."
        )


def _resolve_tasks(tasks: Sequence[Any], split: str, max_corpus, max_queries, seed) -> list[Any]:
    mteb = _require_mteb()
    out = []
    for t in tasks:
        if not isinstance(t, (str, os.PathLike)):
            out.append(t)  # an mteb task instance
            continue
        if Path(t).is_dir():
            out.append(make_local_task(t, split, max_corpus=max_corpus, max_queries=max_queries, seed=seed)())
        elif os.sep in str(t) or str(t).startswith("."):
            raise FileNotFoundError(f"BEIR dataset folder {str(t)!r} does not exist.")
        else:
            try:
                out.append(mteb.get_task(str(t)))
            except KeyError as exc:
                raise ValueError(f"{exc.args[0] if exc.args else exc} (and {str(t)!r} is not a local folder)") from exc
    return out


def _is_builtin(task) -> bool:
    path = (getattr(task.metadata, "dataset", None) or {}).get("path", "")
    return not str(path).startswith("local/")


def evaluate_mteb(
    model,
    tasks: Sequence[Any],
    *,
    split: str = "test",
    max_corpus: int | None = None,
    max_queries: int | None = None,
    seed: int = 42,
    name: str | None = None,
    revision: str | None = None,
    output_folder: str | os.PathLike | None = None,
    overwrite: bool = False,
    batch_size: int = 32,
) -> dict[str, dict[str, float]]:
    """Run ``mteb.evaluate`` on built-in task names (online) and/or local BEIR folders (offline).

    Returns ``{task_name: scores}`` of the first subset of the evaluated split (mteb's score keys, e.g.
    ``ndcg_at_10``). ``output_folder=None`` disables mteb's result cache (no collisions possible); otherwise results
    go to ``<output_folder>/results/<name>/<revision>/<Task>.json``.

    Raises:
        MTEBOfflineError: a built-in task needs the Hub and the Hub cannot be reached.
    """
    mteb = _require_mteb()
    from mteb.cache import ResultCache

    task_objs = _resolve_tasks(tasks, split, max_corpus, max_queries, seed)
    if _is_offline():
        for t in task_objs:
            if _is_builtin(t):
                raise MTEBOfflineError(_offline_message([t.metadata.name]))
    wrapper = model if hasattr(model, "mteb_model_meta") and not hasattr(model, "encode_query") else None
    if wrapper is None:
        wrapper = mteb_wrapper(model, name=name, revision=revision)
    cache = ResultCache(str(output_folder)) if output_folder is not None else None
    try:
        result = mteb.evaluate(
            wrapper,
            task_objs,
            cache=cache,
            overwrite_strategy="always" if overwrite else "only-missing",
            encode_kwargs={"batch_size": batch_size},
            show_progress_bar=False,
        )
    except Exception as exc:  # noqa: BLE001 - turn hub/network failures into a clear message
        text = f"{type(exc).__name__}: {exc}".lower()
        if any(h in text for h in _OFFLINE_HINTS):
            names = [t.metadata.name for t in task_objs if _is_builtin(t)]
            raise MTEBOfflineError(_offline_message(names)) from exc
        raise
    out: dict[str, dict[str, float]] = {}
    for tr in result.task_results:
        scores = tr.scores.get(split) or next(iter(tr.scores.values()))
        out[tr.task_name] = {k: v for k, v in scores[0].items() if isinstance(v, (int, float))}
    return out


def mteb_cli(
    argv: Sequence[str],
    *,
    split: str = "test",
    max_corpus: int | None = None,
    max_queries: int | None = None,
    seed: int = 42,
    on_missing: str = "raise",
    trust_remote_code: bool = False,
    on_loaded: Callable[[BEIRData], None] | None = None,
) -> list[dict[str, Any]]:
    """``mteb`` CLI with local models and local BEIR folders (a shim); returns the scores it wrote as the rows of
    :func:`~st_magnitude.evaluation.runner.format_table`.

    ``argv`` are mteb CLI arguments (``["run", "-m", PATH, "-t", TASK_OR_FOLDER, ...]``). A ``-m`` that is a local
    folder is registered in ``MODEL_REGISTRY`` (name = the absolute path, revision = content hash, loaded with
    :func:`~st_magnitude.model.load.load_model` and ``trust_remote_code``); a registered mteb model whose
    loader trusts remote code is refused unless ``trust_remote_code=True``; each ``-t`` that is a folder becomes a
    registered local task (its name replaces
    the folder in ``argv``). Then mteb's own ``build_cli()`` parses and runs, so mteb's normal results files are
    written (``--output-folder``, default ``results``). ``on_loaded``: see :func:`make_local_task`.
    """
    mteb = _require_mteb()
    from mteb.cli.build_cli import build_cli

    argv = list(argv)
    out: list[str] = []
    i = 0
    in_tasks = False
    builtin: list[str] = []
    ran: dict[str, dict[str, Any]] = {}  # task name -> what the table says about its data
    model_name = None
    while i < len(argv):
        a = argv[i]
        if a in ("-m", "--model") and i + 1 < len(argv):
            m = argv[i + 1]
            if Path(m).exists():
                m = register_local_model(Path(m).resolve(), trust_remote_code=trust_remote_code)
            elif os.sep in m and (m.startswith((".", os.sep)) or m.count("/") > 1):
                raise FileNotFoundError(f"model folder {m!r} does not exist.")
            elif not trust_remote_code:
                _check_registered_model_trust(mteb, m)
            model_name = m
            out += [a, m]
            i += 2
            in_tasks = False
            continue
        if a in ("-t", "--tasks"):
            out.append(a)
            in_tasks = True
            i += 1
            continue
        if a.startswith("-"):
            in_tasks = False
        elif in_tasks:
            if Path(a).is_dir():
                cls = make_local_task(
                    a,
                    split,
                    max_corpus=max_corpus,
                    max_queries=max_queries,
                    seed=seed,
                    on_missing=on_missing,
                    on_loaded=on_loaded,
                )
                register_mteb_task(cls)
                a = cls.metadata.name
                ran[a] = cls.local_data
                logger.info("registered local mteb task %s for %s", a, argv[i])
            elif os.sep in a:
                raise FileNotFoundError(f"BEIR dataset folder {a!r} does not exist.")
            else:
                try:
                    mteb.get_task(a)
                except KeyError as exc:
                    msg = exc.args[0] if exc.args else str(exc)
                    local = named_in_data_folder(a)
                    where = "" if local is None else f"; the data folder holds a BEIR folder of that name: -t {local}"
                    why = f"{a!r} is neither an mteb task name nor a local BEIR folder{where}"
                    raise ValueError(f"{msg} ({why})") from exc
                builtin.append(a)
                ran[a] = {"dataset": a}
        out.append(a)
        i += 1
    if builtin and _is_offline():
        raise MTEBOfflineError(_offline_message(builtin))
    parser = build_cli()
    args = parser.parse_args(out)
    try:
        args.func(args)
    except Exception as exc:  # noqa: BLE001
        text = f"{type(exc).__name__}: {exc}".lower()
        if any(h in text for h in _OFFLINE_HINTS):
            raise MTEBOfflineError(_offline_message(builtin)) from exc
        raise
    del mteb
    output = out[out.index("--output-folder") + 1] if "--output-folder" in out else "results"
    return _result_rows(output, model_name, ran) if model_name is not None else []


#: mteb's score keys -> the columns of :func:`~st_magnitude.evaluation.runner.format_table`.
_MTEB_COLUMNS = {"ndcg_at_10": "ndcg@10", "recall_at_100": "recall@100", "mrr_at_10": "mrr@10"}
#: How mteb scored (the table's ``scored with`` line).
_MTEB_SCORED_WITH = "the model's own similarity and roles, through mteb (encode_query / encode_document)"


def _result_rows(
    output_folder: str | os.PathLike, model_name: str, tasks: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The scores mteb wrote under ``output_folder`` for ``model_name`` on ``tasks`` (task name -> ``dataset``
    label, and for a local folder its ``queries``, ``corpus`` and ``note``), read back through the trust boundary,
    as rows of :func:`~st_magnitude.evaluation.runner.format_table`: one per task, split and subset. A task without
    a results file (mteb skipped it) has no row."""
    mteb = _require_mteb()
    from mteb.cache import ResultCache

    from st_magnitude._trust import Fields, read_json

    cache = ResultCache(str(output_folder))
    meta = mteb.get_model_meta(model_name)
    rows: list[dict[str, Any]] = []
    for task, info in tasks.items():
        path = cache.get_task_result_path(task, meta)
        if not path.is_file():
            logger.warning("mteb wrote no results file for %s (%s)", task, path)
            continue
        scores = Fields(read_json(path, nan_as_null=True), path, what="an mteb results file").sub("scores")
        for split in scores.keys():
            for entry in scores.get(split, list):
                entry = Fields(entry, path, what=f"an entry of scores.{split}", prefix=f"scores.{split}.")
                subset = entry.get("hf_subset", str, "default")
                row = {
                    "dataset": info["dataset"] + ("" if subset == "default" else f"/{subset}"),
                    "split": split,
                    "queries": info.get("queries", "-"),
                    "corpus": info.get("corpus", "-"),
                }
                values = {col: entry.get(key, (float, type(None)), None) for key, col in _MTEB_COLUMNS.items()}
                row |= {col: value for col, value in values.items() if value is not None}  # undefined: "-"
                rows.append(row | {"scored_with": _MTEB_SCORED_WITH, "note": info.get("note", "")})
    return rows
