"""The one error class of the trust boundary."""

from __future__ import annotations

import os


class InputFileError(ValueError):
    """A file the package read is not what it must be. The message names the file, where in it (a line, a key) and
    what is wrong, on one line; ``file``, ``where`` and ``problem`` hold the parts."""

    def __init__(self, file: str | os.PathLike, problem: str, where: str | None = None):
        self.file = os.fspath(file)
        self.where = where
        self.problem = " ".join(str(problem).split())
        super().__init__(f"{self.file}{f':{where}' if where else ''}: {self.problem}")
