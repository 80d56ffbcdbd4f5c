#!/usr/bin/env bash
# test_sizes.sh: the four GPT-2 sizes (gpt2, gpt2-medium, gpt2-large, gpt2-xl) by their shapes:
# make-model writes each with random bf16 weights in the Hugging Face layout, the config is checked,
# and `inflight generate` loads it and produces tokens. Needs ~6 GB of temporary disk, ~2 minutes.
# usage: test_sizes.sh INFLIGHT_BINARY VOCAB_DIR
set -u
# shellcheck source=tests/cli/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
#          preset       layers heads width
for spec in "gpt2 12 12 768" "gpt2-medium 24 16 1024" "gpt2-large 36 20 1280" "gpt2-xl 48 25 1600"; do
  set -- $spec
  name=$1 L=$2 H=$3 C=$4
  d="$tmp/$name"
  if ! "$bin" make-model --preset "$name" --dtype bf16 --scale 0.02 --seed 3 --vocab "$vocab" --out "$d" 2>"$tmp/log"; then
    echo "FAIL $name: make-model: $(cat "$tmp/log")" >&2; fails=$((fails + 1)); continue
  fi
  for kv in "n_layer $L" "n_head $H" "n_embd $C" "n_positions 1024" "vocab_size 50257"; do
    set -- $kv
    grep -qE "\"$1\":[[:space:]]*$2([^0-9]|$)" "$d/config.json" || { echo "FAIL $name: config.json lacks $1 = $2" >&2; fails=$((fails + 1)); }
  done
  out=$("$bin" generate --model "$d" --prompt "The four sizes of GPT-2" -n 4 --temperature 0 --ids 2>"$tmp/log")
  if [ "$(echo "$out" | wc -w)" -ne 4 ]; then
    echo "FAIL $name: generate: '$out' $(cat "$tmp/log")" >&2; fails=$((fails + 1))
  else
    echo "ok   $name ($L layers, $H heads, $C wide, $(du -m "$d/model.safetensors" | cut -f1) MB bf16): ids $out; $(grep -o 'generated.*tok/s)' "$tmp/log" | head -1)"
  fi
  rm -rf "$d"
done
finish test_sizes
