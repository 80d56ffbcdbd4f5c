#!/usr/bin/env bash
# build.sh: configures and builds one build tree. Usage: scripts/build.sh [BUILD_DIR [CMAKE_ARGS...]]
# Default BUILD_DIR is build/ (Release). Uses Ninja and all cores.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cmake -S . -B "$dir" -G Ninja "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
grep -A9 "build summary" "$log" | sed 's/^-- //' || true
ninja -C "$dir"
