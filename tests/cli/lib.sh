# lib.sh: what the tests/cli scripts that count their failures share (test_cli.sh, test_sizes.sh,
# test_bench_turns.sh, test_bench_turns_long.sh), sourced after their `set -u` with their command
# line, INFLIGHT_BINARY VOCAB_DIR: $bin and $vocab, a temporary folder $tmp removed on exit, the
# checks that count failures in $fails (pass, fail, check, expect_exit), the tiny model the bench
# profiles run on, and the closing summary.
# shellcheck shell=bash
bin=$1
vocab=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1" >&2; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }

# expect_exit CODE PATTERN CMD...: exit status CODE and stderr matching PATTERN (the command's
# output is left in $tmp/out and $tmp/err)
expect_exit() {
  local code=$1 pat=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -eq "$code" ] && grep -qE -- "$pat" "$tmp/err"; then
    pass "exit $code: ${*:2} -> $(tail -n 1 "$tmp/err")"
  else
    fail "expected exit $code and /$pat/ from: ${*:2} (got $rc: $(tail -n 2 "$tmp/err"))"
  fi
}

# tiny_model DIR: a random model of 2 layers, 4 heads, 64 wide and a context of 128 tokens (seed
# 7) in DIR; the script ends (exit status 1) when it cannot be made
tiny_model() {
  "$bin" make-model --out "$1" --seed 7 --n-layer 2 --n-head 4 --n-embd 64 --n-ctx 128 \
    --vocab "$vocab" >/dev/null 2>&1 || { echo "FAIL make-model" >&2; exit 1; }
}

# finish NAME: the summary line; exit status 1 when a check failed
finish() {
  if [ "$fails" -ne 0 ]; then echo "$1: $fails check(s) failed" >&2; exit 1; fi
  echo "$1: all checks passed"
}
