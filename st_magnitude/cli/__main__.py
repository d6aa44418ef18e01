"""``python -m st_magnitude.cli``: the ``st-magnitude`` command."""

from __future__ import annotations

import sys

from st_magnitude.cli import main

if __name__ == "__main__":  # importing this module (a model folder may name it) must not run the command
    sys.exit(main())
