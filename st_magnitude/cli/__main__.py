"""``python -m st_magnitude.cli``: the ``st-magnitude`` command."""

from __future__ import annotations

import sys

from st_magnitude.cli import main

sys.exit(main())
