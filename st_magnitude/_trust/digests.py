"""A folder whose every file is recorded by its sha256 in a manifest (an ONNX export's ``st_magnitude_onnx.json``).

:func:`read_recorded_files` reads such a folder only when it holds exactly the recorded files, each a file inside the
folder (a link may point only to another file inside it) whose sha256 is the recorded one. A file changed, swapped
(another export's graph with its stamp copied over), added (a tokenizer file the loader would also read), missing or
linked outside the folder is one :class:`InputFileError` naming it. The digests detect a file that changed after the
manifest was written; they are no signature (whoever rewrites the manifest can record other digests). Standard
library only.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from st_magnitude._trust.errors import InputFileError
from st_magnitude._trust.json_files import NAME_PATTERN
from st_magnitude._trust.text import _read_bytes

__all__ = ["file_digests", "is_sha256", "read_recorded_files"]

_HEX64 = frozenset("0123456789abcdef")
#: the largest file read back (a graph of a large model; the export writes no external data files)
MAX_FILE = 1 << 36


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX64


def file_digests(folder: str | os.PathLike, *, skip: str) -> dict[str, str]:
    """The sha256 (hex) of every file in ``folder`` but ``skip`` (the manifest itself), by name."""
    folder = Path(folder)
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.name != skip}


def _inside(folder: Path, path: Path) -> None:
    try:
        target = path.resolve(strict=False)
        base = folder.resolve()
    except (RuntimeError, OSError) as exc:  # a symlink loop
        raise InputFileError(path, f"is a symlink loop ({exc}); remove that link and re-export") from None
    if target.parent != base:
        raise InputFileError(
            path,
            f"is a link to {target}, outside the export folder; every file of an export lies in its folder: "
            "re-export the model into a new folder",
        )


def read_recorded_files(folder: str | os.PathLike, recorded: dict[str, str], manifest: str) -> dict[str, bytes]:
    """The bytes of each file ``recorded`` maps to its sha256, by name, after the checks of the module docstring;
    ``manifest`` is the name of the file in ``folder`` that holds the record (it is not itself recorded)."""
    folder = Path(folder)
    for name, digest in recorded.items():  # the caller checked them; a second look costs nothing
        if not (NAME_PATTERN.fullmatch(name) and name != manifest and is_sha256(digest)):
            raise InputFileError(folder / manifest, f"records {name!r}: {digest!r}, not a file name and a sha256")
    try:
        present = sorted(os.listdir(folder))
    except OSError as exc:
        raise InputFileError(folder, f"cannot be listed ({exc.strerror or exc})") from None
    for name in present:
        if name != manifest and name not in recorded:
            raise InputFileError(
                folder / name,
                f"is not a file the export wrote ({manifest} does not record it); remove it, or re-export the model "
                "into a new folder",
            )
    blobs = {}
    for name, expected in sorted(recorded.items()):
        path = folder / name
        if not (path.exists() or path.is_symlink()):
            raise InputFileError(path, f"is missing ({manifest} records it); re-export the model into a new folder")
        if path.is_symlink():
            _inside(folder, path)
        raw = _read_bytes(path, MAX_FILE)
        found = hashlib.sha256(raw).hexdigest()
        if found != expected:
            raise InputFileError(
                path,
                f"has sha256 {found[:12]}…, not the {expected[:12]}… that {manifest} records: the file was changed or "
                "replaced after the export. Re-export the model into a new folder",
            )
        blobs[name] = raw
    return blobs
