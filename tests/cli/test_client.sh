#!/usr/bin/env bash
# test_client.sh: `inflight client` against a real `inflight serve` on a free loopback port: the
# two-column demo (one round, both prompts streamed to the end) over /ws and, with the same seed,
# the same text over --api openai and --api triton; the closed-loop benchmark over all three APIs
# and the open-loop one (every request answered, figures printed); the API each request came
# through in the SQLite log; --api-key over each API against a server that wants one; and clear
# failures: refused requests (exit 1), bad options (exit 2), no server listening (exit 1).
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

http="http://127.0.0.1:$port"
# the same demo over the HTTP APIs: the same seeds give the same two columns (the timing line
# under them is measured, so it differs)
for api in openai triton; do
  "$bin" client --api "$api" --url "$http" --rounds 1 --max-tokens 24 --seed 3 \
    >"$tmp/demo.$api.out" 2>"$tmp/demo.$api.err" \
    || fail "client --api $api demo exited $?: $(cat "$tmp/demo.$api.err")"
  diff <(grep -v "tokens, ttft" "$tmp/demo.out") <(grep -v "tokens, ttft" "$tmp/demo.$api.out") \
    || fail "demo over $api differs from the demo over /ws"
  [ "$(grep -o "length: 24 tokens" "$tmp/demo.$api.out" | wc -l)" -eq 2 ] \
    || fail "demo over $api: not two 24-token completions"
done

# closed loop, both policies, over each API
for api in ws openai triton; do
  u=$http; [ "$api" = ws ] && u=$url
  "$bin" client --bench --api "$api" --url "$u" --concurrency 6 --max-tokens 16 \
    >"$tmp/bench.$api.out" 2>"$tmp/bench.$api.err" \
    || fail "client --bench --api $api exited $?: $(cat "$tmp/bench.$api.err")"
  cat "$tmp/bench.$api.out"
  [ "$(grep -c "96 tokens in .* 6 requests)" "$tmp/bench.$api.out")" -eq 2 ] \
    || fail "bench over $api: not 96 tokens per policy"
  grep -q "iterative vs static" "$tmp/bench.$api.out" || fail "bench over $api: no comparison line"
  grep -q "some failed" "$tmp/bench.$api.out" && fail "bench over $api: requests failed"
done

# a refused request (max_tokens past the model's context) is reported, and the exit is 1
for api in ws openai triton; do
  u=$http; [ "$api" = ws ] && u=$url
  set +e
  "$bin" client --bench --api "$api" --url "$u" --model iterative --concurrency 1 \
    --max-tokens 100000 >"$tmp/refused.out" 2>"$tmp/refused.err"; rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "a refused request over $api: exit $rc, want 1"
  grep -q "refused: .*max_tokens" "$tmp/refused.err" || fail "refusal over $api: $(cat "$tmp/refused.err")"
done

# open loop
"$bin" client --bench --url "$url" --model iterative --rate 50 --requests 12 --max-tokens 8 \
  >"$tmp/open.out" 2>"$tmp/open.err" || fail "open loop exited $?: $(cat "$tmp/open.err")"
cat "$tmp/open.out"
grep -q "96 tokens in .* 12 requests)" "$tmp/open.out" || fail "open loop: not 12 x 8 tokens"

# the server logged one line per request: 3 x 2 demo + 3 x 12 closed loop + 12 open loop (the
# refused ones never became requests)
n=$(grep -c "inflight: request " "$tmp/server.err" || true)
[ "$n" -eq 54 ] || fail "server logged $n request lines, want 54"

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
grep -q "requests        54 rows" "$tmp/status.out" || fail "the log does not hold 54 requests"
apis=$(sqlite3 "$tmp/log.db" "SELECT api || '=' || count(*) FROM requests GROUP BY api ORDER BY api" | tr '\n' ' ')
[ "$apis" = "openai=14 triton=14 ws=26 " ] || fail "requests by API in the log: '$apis'"
set +e
"$bin" client --url "$url" --rounds 1 >/dev/null 2>"$tmp/none.err"; rc=$?
set -e
[ "$rc" -eq 1 ] || fail "client without a server exited $rc, want 1"
grep -q "cannot connect" "$tmp/none.err" || fail "client without a server: $(cat "$tmp/none.err")"
for api in openai triton; do
  set +e
  "$bin" client --bench --api "$api" --url "$http" --concurrency 1 >/dev/null 2>"$tmp/none.err"; rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "client --api $api without a server exited $rc, want 1"
  grep -q "cannot connect" "$tmp/none.err" || fail "--api $api without a server: $(cat "$tmp/none.err")"
done

# bad options: exit 2 with the option named
bad() { # expected-text args...
  local want=$1; shift
  set +e; "$bin" client "$@" >/dev/null 2>"$tmp/bad.err"; local rc=$?; set -e
  [ "$rc" -eq 2 ] || fail "client $*: exit $rc, want 2"
  grep -q -- "$want" "$tmp/bad.err" || fail "client $*: $(cat "$tmp/bad.err")"
}
bad "--api must be" --api grpc
bad "http://HOST:PORT" --api openai --url "$url"
bad "ws://HOST:PORT/ws" --url "$http"
bad "--connections is for --api ws" --bench --api triton --connections 4
bad "--api-key must be" --api-key "two words"

# a server that wants a key: each API with it streams, without it is refused (exit 1)
key='k3y&with+odd%chars'
: >"$tmp/keyed.out"
"$bin" serve --model "$tmp/model" --port 0 --api-key "$key" >"$tmp/keyed.out" 2>"$tmp/keyed.err" &
server_pid=$!
kport=
for _ in $(seq 600); do
  kport=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/keyed.out")
  [ -n "$kport" ] && grep -q "ready in" "$tmp/keyed.out" && break
  sleep 0.1
done
grep -q "ready in" "$tmp/keyed.out" || fail "the keyed server did not get ready"
for api in ws openai triton; do
  u="http://127.0.0.1:$kport"; [ "$api" = ws ] && u="ws://127.0.0.1:$kport/ws"
  "$bin" client --bench --api "$api" --url "$u" --model iterative --concurrency 2 --max-tokens 4 \
    --api-key "$key" >"$tmp/key.out" 2>"$tmp/key.err" \
    || fail "--api $api with the key exited $?: $(cat "$tmp/key.err")"
  grep -q "8 tokens in .* 2 requests)" "$tmp/key.out" || fail "--api $api with the key: $(cat "$tmp/key.out")"
  set +e
  "$bin" client --bench --api "$api" --url "$u" --model iterative --concurrency 2 --max-tokens 4 \
    --api-key wrong-key-1 >/dev/null 2>"$tmp/key.err"; rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "--api $api with a wrong key: exit $rc, want 1"
  grep -qi "API key" "$tmp/key.err" || fail "--api $api with a wrong key: $(cat "$tmp/key.err")"
done
kill "$server_pid"; wait "$server_pid" || true; server_pid=

echo "test_client: ok (demo over 3 APIs, closed loop over 3 APIs, open loop, $n request log lines, API column, api keys, clean stop, errors)"
