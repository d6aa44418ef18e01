"""Run by ``test_compare_ddp.py`` under ``torchrun``: ``st-magnitude compare`` (the CLI, unchanged), with a trace of
every file this process writes, replaces or removes under the output folder.

``argv[1]`` is the trace file prefix (``<prefix>-rank<R>.json`` is written at exit); the rest is the compare
command line. Only Python-level writes are seen (``open`` for writing, ``os.replace``, ``os.remove`` / ``unlink``,
``shutil.rmtree``); the Rust writers of safetensors and tokenizers are not, which the test accounts for.
"""

from __future__ import annotations

import atexit
import builtins
import io
import json
import os
import shutil
import sys

from st_magnitude.cli import main

TRACE, ARGV = sys.argv[1], sys.argv[2:]
OUT = os.path.realpath(ARGV[ARGV.index("--output") + 1])
RANK = int(os.environ.get("RANK", "0"))
events: list[list[str]] = []


def _note(kind: str, path) -> None:
    try:
        real = os.path.realpath(os.fspath(path))
    except TypeError:  # a file descriptor
        return
    if real == OUT or real.startswith(OUT + os.sep):
        events.append([kind, os.path.relpath(real, OUT)])


def _wrap(kind: str, fn, writes=lambda *a, **k: True):
    def wrapper(path, *args, **kwargs):
        if writes(path, *args, **kwargs):
            _note(kind, path)
        return fn(path, *args, **kwargs)

    return wrapper


def _opens_for_writing(path, mode="r", *args, **kwargs) -> bool:
    if not isinstance(path, int) and os.path.isdir(path):  # tempfile's O_TMPFILE probe: a nameless file, left nowhere
        return False
    return any(c in mode for c in "wax+")


_real_replace = os.replace


def _replace(src, dst, *args, **kwargs):
    _note("replace", dst)  # where it lands
    return _real_replace(src, dst, *args, **kwargs)


builtins.open = io.open = _wrap("write", builtins.open, _opens_for_writing)
os.replace = _replace
os.remove = os.unlink = _wrap("remove", os.remove)
shutil.rmtree = _wrap("rmtree", shutil.rmtree)


@atexit.register
def _dump() -> None:
    with io.FileIO(f"{TRACE}-rank{RANK}.json", "w") as fh:
        fh.write(json.dumps(events).encode())


if __name__ == "__main__":
    sys.exit(main(ARGV))
