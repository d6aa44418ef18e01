"""Where st-magnitude reads data from and downloads BEIR datasets to: one setting for every command.

The *data folder* holds one sub-folder per kind of data::

    <data>/beir/<name>/   BEIR datasets: corpus.jsonl, queries.jsonl, qrels/<split>.tsv (compare, replicate)
    <data>/sts/           STS files (replicate)

It is, first match wins (documented once, in docs/getting_started.md, section "Data"):

1. the commands' ``--data-root`` flag (``compare``, ``replicate``) or the ``data_dir`` argument;
2. ``$ST_MAGNITUDE_DATA``;
3. the user cache ``$XDG_CACHE_HOME/st_magnitude/data`` (``~/.cache/st_magnitude/data``), which need not exist.

A folder named by 1 or 2 must exist; nothing else is looked at. A BEIR dataset that is not in ``<data>/beir`` is
downloaded there (:func:`download_beir`, needs a network).

This module imports nothing heavy (BEIR only to download).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["DATA_ENV", "default_data_dir", "download_beir", "resolve_data_dir", "resolve_dataset"]

#: The data folder (holding ``beir/`` and ``sts/``).
DATA_ENV = "ST_MAGNITUDE_DATA"
#: Where BEIR publishes its datasets (one zip per name).
BEIR_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/{name}.zip"
#: How a user sets the data folder (ends every message about missing data).
SET_DATA = f"pass the data folder (holding beir/ and sts/) with --data-root or set ${DATA_ENV} (docs: Data)"


def default_data_dir() -> Path:
    """The user cache data folder: ``$XDG_CACHE_HOME/st_magnitude/data`` (``~/.cache/st_magnitude/data``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "st_magnitude" / "data"


def _existing(folder: str | os.PathLike, source: str) -> Path:
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"data folder {str(folder)!r} ({source}) does not exist or is not a folder")
    return path


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data folder: ``data_dir`` (the commands' ``--data-root``), else ``$ST_MAGNITUDE_DATA``, else the user cache.

    Raises ``FileNotFoundError`` when the flag or a variable names a folder that does not exist; the user cache
    (:func:`default_data_dir`) is returned whether or not it exists yet (a download creates it).
    """
    if data_dir:
        return _existing(data_dir, "--data-root")
    if os.environ.get(DATA_ENV):
        return _existing(os.environ[DATA_ENV], f"${DATA_ENV}")
    return default_data_dir()


def resolve_dataset(
    name: str | os.PathLike, data_dir: str | os.PathLike | None = None, split: str | None = "test"
) -> Path:
    """A BEIR dataset folder: ``name`` when it is a folder, else ``<data>/beir/<name>``, else a download there.

    ``data_dir`` is the data folder (default: :func:`resolve_data_dir`). With ``split``, the folder must hold
    ``qrels/<split>.tsv`` (the error lists the splits it has).
    """
    data = Path(data_dir) if data_dir is not None else resolve_data_dir()
    path, key = Path(name), str(name)
    if path.is_dir():
        folder = path
    elif (data / "beir" / key).is_dir():
        folder = data / "beir" / key
    else:
        folder = download_beir(key, data / "beir")
    if split is not None and not (folder / "qrels" / f"{split}.tsv").is_file():
        splits = sorted(f.stem for f in (folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        raise FileNotFoundError(f"dataset {key!r} ({folder}) has no {split!r} split; available: {splits}")
    return folder


def download_beir(name: str, beir_dir: str | os.PathLike) -> Path:
    """Download the BEIR dataset ``name`` into ``<beir_dir>/<name>`` (once: an existing folder is returned as is).

    The zip is unpacked in a temporary folder inside ``beir_dir`` and moved into place when complete, so an
    interrupted download leaves no partial dataset. Any failure (no network, an unknown name, a folder that cannot be
    written) raises one ``FileNotFoundError`` naming the local datasets and how to set the data folder.
    """
    beir = Path(beir_dir)
    if "/" in name or os.sep in name:
        raise FileNotFoundError(f"dataset folder {name!r} does not exist")
    if (beir / name).is_dir():
        return beir / name
    available = (
        sorted(d.name for d in beir.iterdir() if d.is_dir() and not d.name.startswith(".")) if beir.is_dir() else []
    )
    hint = f" Local datasets: {', '.join(available)}." if available else ""
    created = [p for p in (beir, *beir.parents) if not p.exists()]  # deepest first; removed again on failure
    try:
        from beir import util

        beir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=beir))
        try:
            unpacked = Path(util.download_and_unzip(BEIR_URL.format(name=name), str(work)))
            os.replace(unpacked, beir / name)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    except Exception as exc:  # noqa: BLE001 - any network or file failure becomes one clear message
        for folder in created:  # a failed download leaves the data folder as it was
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise FileNotFoundError(
            f"dataset {name!r} is not in the data folder ({beir}) and could not be downloaded "
            f"({type(exc).__name__}: {exc}).{hint} To use local data, {SET_DATA}."
        ) from None
    logger.info("downloaded BEIR %s into %s", name, beir / name)
    return beir / name
