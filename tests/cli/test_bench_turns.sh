#!/usr/bin/env bash
# test_bench_turns.sh: `inflight bench --turns` (the multi-turn prefix-cache profile) on a tiny
# model: it exits 0, its greedy replies are identical with the cache on and off, and what the
# batcher decided shows in its table: with the cache on, every request from turn 2 on found its
# whole earlier conversation (in whole blocks) and less was computed than with it off, where
# nothing is cached; with a KV pool of one context (--max-batch 1) blocks are evicted and the
# replies are still identical. No wall-clock figure is asserted.
# usage: test_bench_turns.sh INFLIGHT_BINARY VOCAB_DIR
set -u
# shellcheck source=tests/cli/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"

m="$tmp/model"
tiny_model "$m"

# rows OUT MODE: the rows of mode MODE's table in OUT as "turn requests prompt computed cached
# found" (found: n/m, or - with the cache off)
rows() { awk -v mode="$2" '/^prefix cache (on|off):$/ { in_t = ($3 == mode ":") ; next }
  /^[a-z]/ { in_t = 0 } in_t && $1 ~ /^[0-9]+$/ { print $1, $2, $3, $4, $5, $6 }' "$1"; }
# total OUT MODE LABEL: the first number after "LABEL :" in mode MODE's section
total() { awk -v mode="$2" -v label="$3" '/^prefix cache (on|off):$/ { in_t = ($3 == mode ":"); next }
  /^[a-z]/ { in_t = 0 } in_t && index($0, label) { sub(".*" label " *: *", ""); print $1; exit }' "$1"; }

small=(--model "$m" --users 3 --turns=3 --opening 48 --added 16 --reply 8 --threads 2)
"$bin" bench "${small[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
cat "$tmp/out"
check "bench --turns exits 0 (got $rc: $(tail -n 1 "$tmp/err"))" test "$rc" -eq 0
check "the identical-tokens check passed" grep -q "^  identical tokens  : passed" "$tmp/out"
check "the goal line is printed" \
  grep -qE "^  from turn 2 on, TTFT p90 <= 0.3x of cache-off: (met|missed) \(worst turn [23]: " "$tmp/out"
check "each run has 3 turns of 3 requests" \
  test "$(rows "$tmp/out" on | awk '$2 == 3' | wc -l)$(rows "$tmp/out" off | awk '$2 == 3' | wc -l)" = 33
on=$(total "$tmp/out" on "prefill computed")
off=$(total "$tmp/out" off "prefill computed")
check "cache on computed fewer prefill tokens ($on) than off ($off)" test "${on:-0}" -gt 0 -a "${on:-0}" -lt "${off:-0}"
# prompts: turn k of a user is 48 + (k - 1) x (16 + 8) + 16 tokens: 64, 88, 112
check "cache off computed every prompt token (3 x (64 + 88 + 112))" test "${off:-0}" -eq 792
check "the prefill accounting is consistent (step records, stats, events)" \
  test "$(grep -c 'prefill computed  : .*: consistent)' "$tmp/out")" -eq 2
# turn 2 of a user finds turn 1's 64 + 8 - 1 written positions in whole 16-token blocks (64),
# turn 3 turn 2's 88 + 7 (80): so, with nothing evicted, cached = 3 x 64 and 3 x 80
check "cache on: from turn 2 on every request found its whole earlier conversation" \
  test "$(rows "$tmp/out" on | awk '$1 >= 2 && $6 == "3/3" && $5 == ($1 == 2 ? 192 : 240)' | wc -l)" -eq 2
check "cache off: nothing cached in any turn" \
  test "$(rows "$tmp/out" off | awk '$5 == 0' | wc -l)" -eq 3
check "cache on: 9 lookups, 0 evictions" grep -qE "^  prefix cache      : 9 lookups, [0-9]+ hits, [0-9]+ hit tokens, 0 evictions" "$tmp/out"
check "cache off: no lookups" grep -qE "^  prefix cache      : 0 lookups, 0 hits, 0 hit tokens, 0 evictions" "$tmp/out"

# a pool of one context (128 tokens: 8 blocks): the users' conversations evict each other's blocks
"$bin" bench "${small[@]}" --max-batch 1 --interval-ms 2 >"$tmp/evict" 2>"$tmp/err"
rc=$?
check "--max-batch 1 exits 0 (got $rc: $(tail -n 1 "$tmp/err"))" test "$rc" -eq 0
check "--max-batch 1: replies identical with evictions" grep -q "^  identical tokens  : passed" "$tmp/evict"
check "--max-batch 1: blocks were evicted" \
  grep -qE "^  prefix cache      : 9 lookups, [0-9]+ hits, [0-9]+ hit tokens, [1-9][0-9]* evictions" "$tmp/evict"

# one mode, and the usage errors
"$bin" bench "${small[@]}" --prefix-cache off >"$tmp/one" 2>&1
check "--prefix-cache off runs one batcher" test "$(grep -c '^prefix cache' "$tmp/one")" -eq 1
check "--prefix-cache off: nothing to compare" grep -q "identical tokens  : not checked" "$tmp/one"
expect_exit 2 "must be on, off or both" "$bin" bench --turns --model "$m" --prefix-cache sometimes
expect_exit 2 "the number of turns is --turns=T" "$bin" bench --turns 3 --model "$m"
expect_exit 2 "unknown option" "$bin" bench --turns --model "$m" --concurrency 3
expect_exit 1 "more than the model's context of 128 tokens" "$bin" bench --turns --model "$m" --opening 100
check "bench --turns --help" sh -c "'$bin' bench --turns --help | grep -q -- '--prefix-cache'"
check "bench --help names --turns" sh -c "'$bin' bench --help | grep -q -- '--turns'"

finish test_bench_turns
