#!/usr/bin/env bash
# test_bench_turns_long.sh: `inflight bench --turns --long` (long conversations, the trimming rule
# of server/chat_trim.h) on a tiny model (a context of 128 tokens, so that 20 turns of 16 tokens
# outgrow it): with trimming on every turn is answered, the cut moves (trims happen), the prompts
# stay within the room and the cached share after each user's first trim meets its goal; without
# trimming the batcher refuses the turns that no longer fit; a larger --trim-keep trims more often;
# a share below the goal and the usage errors give their exit statuses. No wall-clock figure is
# asserted.
# usage: test_bench_turns_long.sh INFLIGHT_BINARY VOCAB_DIR
set -u
# shellcheck source=tests/cli/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"

m="$tmp/model"
tiny_model "$m"

# rows OUT MODE: the rows of the table of trimming MODE (on|off) in OUT as "turn answered failed
# prompt trimmed trims share"
rows() { awk -v mode="$2" '/^trimming (on|off)/ { in_t = ($2 == mode || $2 == mode ":"); next }
  /^[a-z]/ { in_t = 0 } in_t && $1 ~ /^[0-9]+$/ { print $1, $2, $3, $4, $5, $6, $7 }' "$1"; }

# 3 users x 20 turns of 8 + 8 tokens after an opening of 16: 336 tokens, the room is 120
small=(--model "$m" --turns=20 --users 3 --opening 16 --added 8 --reply 8 --threads 2)
"$bin" bench --long "${small[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
cat "$tmp/out"
check "bench --turns --long exits 0 (got $rc: $(tail -n 1 "$tmp/err"))" test "$rc" -eq 0
check "each run has 20 turns" \
  test "$(rows "$tmp/out" on | wc -l)$(rows "$tmp/out" off | wc -l)" = 2020
check "trimming on: every turn answered" \
  grep -q "^  turns answered on : 60 of 60 (0 failed)" "$tmp/out"
check "trimming on: trims happened (the cut moved)" \
  grep -qE "^  trims             : [1-9][0-9]* \(the cut moved" "$tmp/out"
check "trimming on: rows where the cut moved and messages were left out" \
  test "$(rows "$tmp/out" on | awk '$6 > 0 && $5 > 0' | wc -l)" -ge 2
check "trimming on: every prompt within the room (120)" \
  test "$(rows "$tmp/out" on | awk '$4 > 120' | wc -l)" -eq 0
check "the share after the first trim meets its goal" \
  grep -qE "^  cached share after each user's first trim: 0\.[0-9]+ \(goal >= 0\.60: met\)" \
  "$tmp/out"
check "trimming off: turns refused as too long" \
  grep -qE "^  turns answered    : [0-9]+ of 60 \([1-9][0-9]* failed: [1-9][0-9]* refused as too" \
  "$tmp/out"
check "trimming off: nothing trimmed" \
  test "$(rows "$tmp/out" off | awk '$6 != 0 || ($5 != "-" && $5 != 0)' | wc -l)" -eq 0

# trims: how many times the cut moved with trim-keep F
trims() {
  "$bin" bench --long "${small[@]}" --trim on --trim-keep "$1" 2>/dev/null |
    awk '/^  trims             :/ { print $3 }'
}
lo=$(trims 0.25)
hi=$(trims 0.75)
check "--trim-keep 0.75 trims more often ($hi) than 0.25 ($lo)" \
  test "${lo:-0}" -gt 0 -a "${hi:-0}" -gt "${lo:-0}"

# a trim that keeps only the newest message: the share misses the goal, exit status 1
"$bin" bench --long --model "$m" --turns=8 --users 2 --opening 0 --added 40 --reply 8 \
  --trim-keep 0.3 --trim on --threads 2 >"$tmp/miss" 2>&1
rc=$?
check "a share below the goal exits 1 (got $rc)" test "$rc" -eq 1
check "... and says it missed" grep -q "(goal >= 0.60: MISSED)" "$tmp/miss"

expect_exit 2 "is not a number in \(0, 1\)" "$bin" bench --turns --long --model "$m" --trim-keep 1
expect_exit 2 "is not a number in \(0, 1\)" "$bin" bench --turns --long --model "$m" --trim-keep 0
expect_exit 2 "must be on, off or both" "$bin" bench --turns --long --model "$m" --trim sometimes
expect_exit 1 "do not fit the model's context of 128 tokens" \
  "$bin" bench --turns --long --model "$m" --opening 100
check "bench --turns --long --help" \
  sh -c "'$bin' bench --turns --long --help | grep -q -- '--trim-keep'"
check "bench --turns --help names --long" sh -c "'$bin' bench --turns --help | grep -q -- '--long'"

finish test_bench_turns_long
