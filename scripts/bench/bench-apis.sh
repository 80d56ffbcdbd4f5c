#!/usr/bin/env bash
# bench-apis.sh: the server's three APIs against the in-process batcher, same weights, same
# workload: `inflight bench` (in-process) beside `inflight client --bench --api ws|openai|triton`
# against `inflight serve` on a free loopback port, and a markdown table of the response
# throughputs with each API's share of the in-process figure.
#
# Usage: scripts/bench/bench-apis.sh [options]
#   --model DIR        model (default models/bench-gpt2-124m-f32, made by `inflight bench`)
#   --threads N        engine threads, in-process and in the server (default: one per core)
#   --runs N           alternations of the whole set (default 3); the table shows each run's
#                      figure and their median
#   --profiles LIST    seed (10 requests 50 ms apart, 32 tokens each, both policies: the seed's
#                      profile) and/or engine (64 at once, 64 tokens each, iterative: bound by
#                      the engine); default seed,engine
#   --out FILE         also write the report there
# Environment: INFLIGHT=path of our binary (default build/inflight). Every run's whole output is
# kept under $TMPDIR/bench-apis.* (printed at the end).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${INFLIGHT:-$repo/build/inflight}
die() { echo "bench-apis.sh: $*" >&2; exit 1; }
say() { echo "== $*" >&2; }
usage() { sed -n '7,17p' "$0" | sed 's/^# \{0,1\}//'; }

model="$repo/models/bench-gpt2-124m-f32" threads="" runs=3 profiles=seed,engine out_file=""
while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help) usage; exit 0 ;;
    --model) model=${2:?--model needs a value}; shift ;;
    --threads) threads=${2:?--threads needs a value}; shift ;;
    --runs) runs=${2:?--runs needs a value}; shift ;;
    --profiles) profiles=${2:?--profiles needs a value}; shift ;;
    --out) out_file=${2:?--out needs a value}; shift ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
done
[ -x "$bin" ] || die "no binary at $bin (build first, or set INFLIGHT)"
case "$runs" in '' | *[!0-9]* | 0) die "--runs must be a positive integer, got '$runs'" ;; esac
for p in ${profiles//,/ }; do
    case "$p" in seed | engine) ;; *) die "--profiles: '$p' is not seed or engine" ;; esac
done
thr=()
[ -n "$threads" ] && thr=(--threads "$threads")

logs=$(mktemp -d "${TMPDIR:-/tmp}/bench-apis.XXXXXX")
server_pid=
stop_server() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=
    fi
}
trap stop_server EXIT

# the workload's options, shared by `bench` and `client --bench`
profile_args() {
    case "$1" in
    seed) echo "--policy both --concurrency 10 --interval-ms 50 --max-tokens 32" ;;
    engine) echo "--policy iterative --concurrency 64 --interval-ms 0 --max-tokens 64" ;;
    esac
}

# "policy throughput" lines from a profiler's output
throughputs() {
    awk '/^(iterative|static):$/ { p = substr($1, 1, length($1) - 1) }
         /response throughput/ { print p, $4 }' "$1"
}

start_server() {
    : >"$logs/server.out"
    "$bin" serve --model "$model" --port 0 "${thr[@]}" --db "$logs/log.db" \
        >"$logs/server.out" 2>>"$logs/server.err" &
    server_pid=$!
    for _ in $(seq 600); do
        grep -q "ready in" "$logs/server.out" && break
        kill -0 "$server_pid" 2>/dev/null || die "the server exited: $(tail -3 "$logs/server.err")"
        sleep 0.1
    done
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$logs/server.out")
    [ -n "$port" ] || die "the server did not start: $(tail -3 "$logs/server.err")"
}

# results: lines "profile policy way run throughput" in $logs/results
: >"$logs/results"
record() { # profile run way file
    throughputs "$4" | while read -r pol tp; do echo "$1 $pol $3 $2 $tp" >>"$logs/results"; done
}

# `inflight bench` makes its default model on first use, when not given --model
margs=(--model "$model")
if [ "$model" = "$repo/models/bench-gpt2-124m-f32" ]; then
    margs=()
    [ -d "$model" ] || say "inflight bench makes $model (GPT-2 124M's shape, random weights)"
fi
[ -d "$model" ] || [ ${#margs[@]} -eq 0 ] || die "no model at $model"
ways=(in-process ws openai triton)
for run in $(seq "$runs"); do
    for prof in ${profiles//,/ }; do
        read -r -a args <<<"$(profile_args "$prof")"
        # the in-process figure first on odd runs, last on even ones: drift hits both sides
        order=("${ways[@]}")
        [ $((run % 2)) -eq 0 ] && order=(ws openai triton in-process)
        for way in "${order[@]}"; do
            f="$logs/$prof.$way.$run.out"
            say "run $run, $prof profile, $way"
            if [ "$way" = in-process ]; then
                stop_server
                (cd "$repo" && "$bin" bench "${margs[@]}" "${thr[@]}" "${args[@]}") >"$f" 2>&1 \
                    || die "inflight bench failed: $(tail -3 "$f")"
            else
                [ -n "$server_pid" ] || start_server
                url="http://127.0.0.1:$port"
                [ "$way" = ws ] && url="ws://127.0.0.1:$port/ws"
                cargs=() # the client names the policy --model
                for a in "${args[@]}"; do [ "$a" = --policy ] && a=--model; cargs+=("$a"); done
                "$bin" client --bench --api "$way" --url "$url" "${cargs[@]}" >"$f" 2>&1 \
                    || die "client --api $way failed: $(tail -3 "$f")"
            fi
            record "$prof" "$run" "$way" "$f"
        done
    done
    stop_server
done

report() {
    local cpu
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
    echo "bench-apis.sh, $(date -u +%Y-%m-%dT%H:%MZ), $cpu, $(nproc) cores, $runs run(s);"
    echo "model $model, commit $(git -C "$repo" describe --always --dirty 2>/dev/null || echo "?"), ${threads:-default} threads"
    echo
    echo "| profile | policy | in-process tok/s | ws | openai | triton |"
    echo "|---|---|---|---|---|---|"
    awk -v runs="$runs" '
        function median(s,   a, n, i, j, t) {
            n = split(s, a, " ")
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        { key = $1 " " $2; v[key, $3] = v[key, $3] " " $5; if (!(key in seen)) { seen[key] = 1; keys[++nk] = key } }
        END {
            for (k = 1; k <= nk; k++) {
                split(keys[k], kp, " ")
                base = median(v[keys[k], "in-process"])
                line = sprintf("| %s | %s | %.1f (%s) |", kp[1], kp[2], base, substr(v[keys[k], "in-process"], 2))
                for (w = 1; w <= 3; w++) {
                    way = w == 1 ? "ws" : w == 2 ? "openai" : "triton"
                    m = median(v[keys[k], way])
                    line = line sprintf(" %.1f, %.0f%% (%s) |", m, base > 0 ? 100 * m / base : 0, substr(v[keys[k], way], 2))
                }
                print line
            }
        }' "$logs/results"
    echo
    echo "Each cell: the median tokens/s, its share of the in-process median, and every run's figure."
    echo "Logs: $logs"
}
report | tee ${out_file:+"$out_file"}
