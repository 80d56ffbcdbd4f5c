#!/usr/bin/env bash
# serve.sh: sets up a fresh Debian 12 machine (scripts/setup.sh), builds inflight, and serves the
# chat page and WebSocket API (`inflight serve`) on http://127.0.0.1:8080 (HOST / PORT override).
# The model: the directory given as the first argument, else models/gpt2 (scripts/fetch-model.sh
# fetches it where there is internet), else a random GPT-2-124M-shaped demo model made on first
# use (random weights: the text is gibberish, the machinery is real). Sessions, requests and
# their timings are logged to data/inflight.db (DB=path overrides; the history page reads it).
# usage: scripts/serve.sh [MODEL_DIR] [extra `inflight serve` options...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release >/dev/null

model=${1:-}
[ $# -gt 0 ] && shift
if [ -z "$model" ]; then
  if [ -f models/gpt2/model.safetensors ]; then
    model=models/gpt2
  else
    model=models/demo-random
    if [ ! -f "$model/model.safetensors" ]; then
      echo "serve: no models/gpt2 (fetch it with scripts/fetch-model.sh gpt2 where there is internet);"
      echo "serve: making a random GPT-2-124M-shaped demo model in $model"
      build/inflight make-model --out "$model" --preset gpt2 --scale 0.02 --seed 1 --dtype bf16
    fi
  fi
fi
db=${DB:-data/inflight.db}
mkdir -p "$(dirname "$db")"
exec build/inflight serve --model "$model" --host "${HOST:-127.0.0.1}" --port "${PORT:-8080}" \
  --db "$db" "$@"
