#!/usr/bin/env bash
# The GPU benchmark in one command, on a GPU machine without network (from the repository root):
#
#   bash benchmarks/gpu/run.sh                 # needs benchmarks/gpu/.carry (prepare.sh); ≤ 8 minutes on one H100
#   bash benchmarks/gpu/run.sh --dry-run       # CPU, tiny sizes: the same code path, here and in the tests
#
# Installs the carried wheels offline into /tmp/gpu-bench-site (ahead of the image's own packages on PYTHONPATH: a
# venv made from the image's interpreter, itself a venv, would not see its torch), unpacks the data, runs
# bench.py and renders its docs section. Results: $OUT/gpu_bench.json and $OUT/benchmarks_section.md ($OUT defaults
# to benchmarks/gpu/results; the device tool's $OUT comes back). Commit the JSON as benchmarks/gpu/results/<card>.json
# and run `python benchmarks/gpu/render.py benchmarks/gpu/results/<card>.json` to update docs/benchmarks.md.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CARRY=${CARRY:-$REPO/benchmarks/gpu/.carry}
OUT=${OUT:-$REPO/benchmarks/gpu/results}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
if [[ " $* " == *" --dry-run "* ]]; then
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
    exec "$PYTHON" "$REPO/benchmarks/gpu/bench.py" --out "$OUT/gpu_bench.json" "$@"
fi
if ! "$PYTHON" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "no CUDA device here: run this on a GPU machine, or 'bash benchmarks/gpu/run.sh --dry-run' on the CPU" >&2
    exit 2
fi
[ -d "$CARRY/wheels" ] || { echo "$CARRY/wheels missing: run benchmarks/gpu/prepare.sh where pip works" >&2; exit 2; }
SITE=/tmp/gpu-bench-site
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$CARRY"/wheels/*.whl
mkdir -p /tmp/gpu-bench-data
tar xJf "$CARRY/data.tar.xz" -C /tmp/gpu-bench-data
export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}" ST_MAGNITUDE_DATA=/tmp/gpu-bench-data-root
mkdir -p "$ST_MAGNITUDE_DATA" && ln -sfn /tmp/gpu-bench-data "$ST_MAGNITUDE_DATA/beir"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
rc=0
timeout --signal=TERM --kill-after=20 470 "$PYTHON" "$REPO/benchmarks/gpu/bench.py" --data /tmp/gpu-bench-data \
    --carry "$CARRY" --out "$OUT/gpu_bench.json" "$@" || rc=$?
[ -f "$OUT/gpu_bench.json" ] && "$PYTHON" "$REPO/benchmarks/gpu/render.py" "$OUT/gpu_bench.json" --print \
    > "$OUT/benchmarks_section.md"
exit $rc
