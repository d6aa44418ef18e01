#!/usr/bin/env bash
# Re-resolve requirements/lock.txt (the tested versions of every dependency and extra) from pyproject.toml and
# requirements/tested.in with uv's pip-compatible resolver. Used as pip constraints: `pip install -c requirements/lock.txt`.
set -euo pipefail
cd "$(dirname "$0")/.."
uvx_or_uv() { if command -v uv >/dev/null; then uv "$@"; else python3 -m uv "$@"; fi; }
uvx_or_uv pip compile pyproject.toml --all-extras -c requirements/tested.in \
  --python-version 3.11 --python-platform x86_64-unknown-linux-gnu --no-emit-package st-magnitude \
  --custom-compile-command "bash requirements/compile.sh" -o requirements/lock.txt
