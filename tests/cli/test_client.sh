#!/usr/bin/env bash
# test_client.sh: `inflight client` against a real `inflight serve` on a free loopback port: the
# two-column demo (one round, both prompts streamed to the end), the closed-loop and open-loop
# benchmarks (every request answered, figures printed), and a clear failure when no server listens.
# usage: test_client.sh INFLIGHT VOCAB_DIR
set -euo pipefail
bin=$1
vocab=$2
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/server.err" ] && tail -20 "$tmp/server.err" >&2; exit 1; }

"$bin" make-model --out "$tmp/model" --seed 5 --vocab "$vocab" >/dev/null
# made before the server starts: the background job opens its redirections only once it runs,
# and the loop below may read them first
: >"$tmp/server.out"
: >"$tmp/server.err"
"$bin" serve --model "$tmp/model" --port 0 --db "$tmp/log.db" --history all \
  >"$tmp/server.out" 2>"$tmp/server.err" &
server_pid=$!
port=
for _ in $(seq 600); do # up to 60 s (a timeout: a sanitizer build on a busy machine starts slowly)
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/server.out")
  [ -n "$port" ] && grep -q "ready in" "$tmp/server.out" && break
  sleep 0.1
done
[ -n "$port" ] || fail "the server did not start"
grep -q "ready in" "$tmp/server.out" || fail "the server did not get ready"
url="ws://127.0.0.1:$port/ws"

# demo, one round: both prompts and their completions, 24 tokens each
"$bin" client --url "$url" --rounds 1 --max-tokens 24 --seed 3 >"$tmp/demo.out" 2>"$tmp/demo.err" \
  || fail "client demo exited $?: $(cat "$tmp/demo.err")"
cat "$tmp/demo.out"
grep -q "Programming in C++ is like" "$tmp/demo.out" || fail "demo: no C++ column"
grep -q "Programming in Assembly is like" "$tmp/demo.out" || fail "demo: no Assembly column"
[ "$(grep -o "length: 24 tokens" "$tmp/demo.out" | wc -l)" -eq 2 ] || fail "demo: not two 24-token completions"

# closed loop, both policies
"$bin" client --bench --url "$url" --concurrency 6 --max-tokens 16 >"$tmp/bench.out" 2>"$tmp/bench.err" \
  || fail "client --bench exited $?: $(cat "$tmp/bench.err")"
cat "$tmp/bench.out"
[ "$(grep -c "96 tokens in .* 6 requests)" "$tmp/bench.out")" -eq 2 ] || fail "bench: not 96 tokens per policy"
grep -q "iterative vs static" "$tmp/bench.out" || fail "bench: no comparison line"
grep -q "some failed" "$tmp/bench.out" && fail "bench: requests failed"

# open loop
"$bin" client --bench --url "$url" --model iterative --rate 50 --requests 12 --max-tokens 8 \
  >"$tmp/open.out" 2>"$tmp/open.err" || fail "open loop exited $?: $(cat "$tmp/open.err")"
cat "$tmp/open.out"
grep -q "96 tokens in .* 12 requests)" "$tmp/open.out" || fail "open loop: not 12 x 8 tokens"

# the server logged one line per request: 2 demo + 12 closed loop + 12 open loop
n=$(grep -c "inflight: request " "$tmp/server.err" || true)
[ "$n" -eq 26 ] || fail "server logged $n request lines, want 26"

# the history API (its own thread, read-only connection) sees the logged requests: the log is
# written every 200 ms, so poll (a timeout of 30 s, not a bound on the writer)
hist=
for _ in $(seq 300); do
  hist=$(curl -sf "http://127.0.0.1:$port/api/history?limit=3") || fail "GET /api/history failed"
  [ "$(echo "$hist" | grep -o '"client_id"' | wc -l)" -eq 3 ] && break
  sleep 0.1
done
echo "$hist" | head -c 300; echo
[ "$(echo "$hist" | grep -o '"client_id"' | wc -l)" -eq 3 ] || fail "history: not 3 requests after 30 s"

# no server: a clear error, exit 1
kill "$server_pid"; wait "$server_pid"; rc=$?; server_pid=
[ "$rc" -eq 0 ] || fail "the server exited $rc on SIGTERM"
grep -q "stopped" "$tmp/server.out" || fail "the server did not report a clean stop"
# the request log holds every request and every session (written before the exit)
"$bin" db status --db "$tmp/log.db" | tee "$tmp/status.out"
grep -q "requests        26 rows" "$tmp/status.out" || fail "the log does not hold 26 requests"
set +e
"$bin" client --url "$url" --rounds 1 >/dev/null 2>"$tmp/none.err"; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "client without a server exited $rc, want 1"
grep -q "cannot connect" "$tmp/none.err" || fail "client without a server: $(cat "$tmp/none.err")"
echo "test_client: ok (demo, closed and open loop, $n request log lines, clean stop, no-server error)"
