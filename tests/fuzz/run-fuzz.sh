#!/usr/bin/env bash
# run-fuzz.sh: runs one libFuzzer target of tests/fuzz for a bounded time over a copy of its seed
# corpus (the tree is not modified), then prints what it did: runs, runs per second, coverage
# (libFuzzer's cov: edges, ft: features) and the corpus it grew. Exit status: 0 when the time ran
# out without a finding; 1 on any crash, sanitizer report, leak, timeout (-timeout, seconds per
# input) or memory over -rss_limit_mb, with libFuzzer's report and the input kept under ARTIFACTS.
# usage: run-fuzz.sh FUZZER SEED_DIR SECONDS MAX_LEN ARTIFACTS [DICT]
# Registered by tests/fuzz/CMakeLists.txt as the CTest tests fuzz_NAME (label fuzz).
set -euo pipefail
if [ $# -lt 5 ]; then
  echo "usage: $0 FUZZER SEED_DIR SECONDS MAX_LEN ARTIFACTS [DICT]" >&2
  exit 2
fi
fuzzer=$1 seeds=$2 secs=$3 max_len=$4 artifacts=$5 dict=${6:-}
name=$(basename "$fuzzer")
work=$(mktemp -d "${TMPDIR:-/tmp}/ifl-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$artifacts"
cp "$seeds"/* "$work/corpus/"
n_seeds=$(find "$work/corpus" -type f | wc -l)

args=(-max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048
      -print_final_stats=1 -artifact_prefix="$artifacts/")
[ -z "$dict" ] || args+=(-dict="$dict")
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "$name: $secs s over $n_seeds seeds ($seeds), -max_len=$max_len"
set +e
"$fuzzer" "${args[@]}" "$work/corpus" >"$work/log" 2>&1
rc=$?
set -e

n_corpus=$(find "$work/corpus" -type f | wc -l)
done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/log" | tail -1 || true)
final_stat() { sed -n "s/^stat::$1:[[:space:]]*//p" "$work/log" | tail -1; }
runs=$(final_stat number_of_executed_units)
if [ "$rc" -ne 0 ] || [ -z "$runs" ]; then
  # libFuzzer's report without its progress lines (#N NEW cov: ...): the error and its stacks
  grep -v -E '^#[0-9]+[[:space:]]' "$work/log" | tail -150
  echo "$name: FAILED (libFuzzer exit status $rc); the input that failed is under $artifacts/" >&2
  echo "  rerun it: $fuzzer $artifacts/<crash-|leak-|timeout-|oom-...>" >&2
  exit 1
fi
cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
echo "$name: passed: $runs runs in $secs s ($(final_stat average_exec_per_sec)/s), cov $cov edges," \
     "ft $ft features, corpus $n_seeds -> $n_corpus inputs, peak RSS $(final_stat peak_rss_mb) MB"
