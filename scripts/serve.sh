#!/usr/bin/env bash
# serve.sh: sets up a fresh Debian 12 machine (scripts/setup.sh), builds inflight, and runs it.
# Until the WebSocket server lands this runs `inflight generate` on a model: the one given as the
# first argument, else models/gpt2 (see scripts/fetch-model.sh), else a small random demo model
# made on first use (random weights: the text is gibberish, the machinery is real).
# usage: scripts/serve.sh [MODEL_DIR] [extra `inflight generate` options...]
# The prompt comes from $PROMPT (default "Hello, my name is").
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
exec build/inflight generate --model "$model" --prompt "${PROMPT:-Hello, my name is}" -n 64 "$@"
