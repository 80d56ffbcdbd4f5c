#!/usr/bin/env bash
# scripts/bench/gpu-profile.sh: where the CUDA backend's step time goes, on a GPU machine. For decode at
# the given batch sizes and for one prefill, it runs `inflight bench --engine` three ways: as is
# (the step times), with decode graphs off (IFL_CUDA_GRAPHS=0: what launching from the host costs),
# and under Nsight Compute collecting only each kernel's duration (gpu__time_duration.sum, clocks
# and caches left alone), then prints, per run, the kernel time of the timed forward passes by
# kernel (scripts/bench/ncu_summary.py). Step time minus kernel time is the GPU waiting between kernels.
#
# usage: scripts/bench/gpu-profile.sh INFLIGHT MODEL_DIR [BATCHES (default 1,64,256)] [PREFILL (512)]
# Writes ncu's CSVs to $OUT (or /tmp/ifl-gpu-profile) as ncu-b<B>.csv and ncu-prefill.csv (ncu's
# stderr to /tmp/ncu-*.err).
set -uo pipefail
INF=${1:?usage: gpu-profile.sh INFLIGHT MODEL_DIR [BATCHES] [PREFILL]}
MODEL=${2:?usage: gpu-profile.sh INFLIGHT MODEL_DIR [BATCHES] [PREFILL]}
BATCHES=${3:-1,64,256}
PREFILL=${4:-512}
DIR=${OUT:-/tmp/ifl-gpu-profile}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DIR"
NCU=$(command -v ncu 2>/dev/null || true)
for c in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
  [ -z "$NCU" ] && [ -x "$c" ] && NCU=$c
done
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }

stamp "step times, decode graphs on (the default)"
timeout 120 "$INF" bench --engine --device cuda --model "$MODEL" --batches "$BATCHES" \
  --prefill "$PREFILL" --steps 64 --repeat 3 2>&1 | grep -E 'decode|prefill|cuda:'
stamp "step times, decode graphs off"
IFL_CUDA_GRAPHS=0 timeout 120 "$INF" bench --engine --device cuda --model "$MODEL" \
  --batches "$BATCHES" --prefill 0 --steps 64 --repeat 3 2>&1 | grep -E 'decode|graphs'

if [ -z "$NCU" ]; then
  echo "gpu-profile: ncu not found: no kernel times"
  exit 1
fi
stamp "ncu: $NCU ($("$NCU" --version | tail -n 1))"
NCU_ARGS=(--metrics gpu__time_duration.sum --clock-control none --cache-control none
  --graph-profiling node --csv --page raw --print-units base --launch-count 1500)
rc=0
IFS=, read -r -a BS <<<"$BATCHES"
for b in "${BS[@]}"; do
  csv=$DIR/ncu-b$b.csv err=/tmp/ncu-b$b.err
  stamp "ncu: decode at batch $b (prefill of the bench's 8-token prompts, 2 warm-up steps, 3 timed)"
  timeout 75 "$NCU" "${NCU_ARGS[@]}" "$INF" bench --engine --device cuda \
    --model "$MODEL" --batches "$b" --prefill 0 --steps 3 --repeat 1 >"$csv" 2>"$err" || rc=1
  python3 "$HERE/ncu_summary.py" "$csv" --passes last || rc=1
done
if [ "$PREFILL" -gt 0 ]; then
  csv=$DIR/ncu-prefill.csv err=/tmp/ncu-prefill.err
  stamp "ncu: a $PREFILL-token prefill"
  timeout 75 "$NCU" "${NCU_ARGS[@]}" "$INF" bench --engine --device cuda \
    --model "$MODEL" --batches 1 --prefill "$PREFILL" --steps 1 --repeat 1 >"$csv" 2>"$err" || rc=1
  python3 "$HERE/ncu_summary.py" "$csv" --passes largest || rc=1
fi
stamp "done (exit $rc)"
exit "$rc"
