#!/usr/bin/env bash
# tests/docker/image.test.sh: the CPU image end to end. Starts dockerd when none runs (and stops it
# at the end only then), makes the base image (scripts/docker-base.sh: debootstrap, no registry),
# builds docker/Dockerfile as it is (docker build --network host -f docker/Dockerfile -t
# inflight:cpu ., the layer cache reused: each step's time and whether it came from the cache is
# printed), prints the image's size (goal: under 150 MB without a model) and its biggest layers,
# runs it with host networking on a free loopback port with named volumes for /models and /data
# (no model: the entry point makes the random demo one), waits for the HEALTHCHECK to say
# healthy, streams one /ws request and one OpenAI /v1/completions (stream:true) with exact token
# counts (tests/docker/client.js), then starts one of each again and runs docker stop while they
# stream: both must still finish with every token (the drain), the container's log must show the
# drain and the exit code 0. Then a second container on the same volumes (the demo model and the
# log reused) with one OpenAI stream alone in flight at its stop (no WebSocket open). Last, the
# database on the volume is read with the sqlite3 shell (integrity_check; every request's row with
# its tokens and its completion as streamed; every session closed). Prints how long each part
# took.
#
# Exit 0 pass, 1 fail, 77 skipped (docker cannot run here); under CI=true a skip is a failure.
# Needs: root (or a docker the user may use), Debian's docker.io, debootstrap (installed by
# docker-base.sh when missing), node with node_modules/ws, the sqlite3 shell.
# Environment: IMAGE (default inflight:cpu), BASE_IMAGE (debian:bookworm-slim), DOCKER (the CLI;
# default Debian's /usr/bin/docker), N_TOKENS (16: the two requests before the stop),
# DRAIN_TOKENS (96: those in flight at the stop), DRAIN_API (both | ws | openai: which APIs have a
# request in flight at the first stop), SECOND_RUN (1: run the image again on the same volumes,
# the model and the log reused, with an OpenAI stream alone in flight at its stop; 0: not),
# KEEP=1 (keep the container and volumes for a look).
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${IMAGE:-inflight:cpu}
BASE_IMAGE=${BASE_IMAGE:-debian:bookworm-slim}
N_TOKENS=${N_TOKENS:-16}
DRAIN_TOKENS=${DRAIN_TOKENS:-96}
DRAIN_API=${DRAIN_API:-both}
GRACE=60
in_ci=0
case ${CI:-} in 1 | true | TRUE | True | yes) in_ci=1 ;; esac
if [ -z "${DOCKER:-}" ]; then
  if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi
export DOCKER

t_start=$(date +%s.%N)
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "[$(since "$t_start")s] $*"; }
skip() {
  if [ "$in_ci" = 1 ]; then
    echo "FAIL image.test: CI=true: $* (under CI a test must not skip what it checks)"
    exit 1
  fi
  echo "SKIP image.test: $* (under CI=true this fails)"
  exit 77
}
fail() {
  echo "FAIL image.test: $*"
  exit 1
}

work=$(mktemp -d /tmp/ifl-docker-test.XXXXXX)
name=ifl-image-test-$$
vol_models=ifl-image-test-models-$$
vol_data=ifl-image-test-data-$$
started_dockerd=
dockerd_pid=
client_pid=
cleanup() {
  local rc=$?
  set +e
  [ -n "$client_pid" ] && kill "$client_pid" 2>/dev/null
  if [ "${KEEP:-0}" = 1 ]; then
    echo "KEEP=1: container $name, volumes $vol_models $vol_data, files $work kept"
  else
    "$DOCKER" rm -f "$name" >/dev/null 2>&1
    "$DOCKER" volume rm "$vol_models" "$vol_data" >/dev/null 2>&1
    rm -rf "$work"
  fi
  if [ -n "$started_dockerd" ] && [ -n "$dockerd_pid" ]; then
    say "stopping the dockerd this test started (pid $dockerd_pid)"
    kill -TERM "$dockerd_pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$dockerd_pid" 2>/dev/null && kill -KILL "$dockerd_pid" 2>/dev/null
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- docker: the CLI, the daemon -----------------------------------------------------------------
command -v "$DOCKER" >/dev/null 2>&1 || skip "no docker CLI ($DOCKER): apt-get install docker.io"
if ! "$DOCKER" info >/dev/null 2>&1; then
  dockerd_bin=$(command -v /usr/sbin/dockerd || command -v dockerd || true)
  [ -n "$dockerd_bin" ] || skip "docker's daemon does not answer and there is no dockerd to start"
  [ "$(id -u)" -eq 0 ] || skip "docker's daemon does not answer and starting dockerd needs root"
  if [ -S /var/run/docker.sock ] && command -v pgrep >/dev/null && pgrep -x dockerd >/dev/null; then
    skip "a dockerd runs but does not answer ($("$DOCKER" info 2>&1 | tail -1))"
  fi
  say "starting $dockerd_bin ($(dpkg-query -W -f='${Package} ${Version}' docker.io 2>/dev/null || echo 'not from docker.io'))"
  setsid "$dockerd_bin" >"$work/dockerd.log" 2>&1 </dev/null &
  dockerd_pid=$!
  started_dockerd=1
  for _ in $(seq 1 150); do
    "$DOCKER" info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.2
  done
  if ! "$DOCKER" info >/dev/null 2>&1; then
    tail -20 "$work/dockerd.log"
    skip "dockerd did not start (its log above)"
  fi
fi
server_version=$("$DOCKER" version -f '{{.Server.Version}}' 2>/dev/null || echo '?')
say "docker: CLI $DOCKER $("$DOCKER" version -f '{{.Client.Version}}' 2>/dev/null), daemon $server_version, $("$DOCKER" info -f '{{.Driver}}, cgroup v{{.CgroupVersion}}' 2>/dev/null)"
# a daemon that cannot run containers at all (no cgroups, no overlay, ...) is a skip too
command -v node >/dev/null 2>&1 || { [ "$in_ci" = 1 ] && fail "node is missing"; skip "node is missing (scripts/setup.sh)"; }
[ -f node_modules/ws/package.json ] || { [ "$in_ci" = 1 ] && fail "node_modules/ws is missing"; skip "node_modules/ws is missing (scripts/setup.sh)"; }
command -v sqlite3 >/dev/null 2>&1 || { [ "$in_ci" = 1 ] && fail "the sqlite3 shell is missing"; skip "the sqlite3 shell is missing (scripts/setup.sh --test)"; }

# ---- the base image ------------------------------------------------------------------------------
t0=$(now)
scripts/docker-base.sh "$BASE_IMAGE" || fail "scripts/docker-base.sh failed"
t_base=$(since "$t0")
say "base image $BASE_IMAGE: ${t_base} s"

# ---- the build -----------------------------------------------------------------------------------
old_id=$("$DOCKER" image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
# A network whose proxy re-signs HTTPS (the host trusts its CA from /usr/local/share/
# ca-certificates): npm in the vocab stage gets those CAs too (build arg CA_CERTS; that stage only)
build_args=()
extra_ca=$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true)
if [ -n "$extra_ca" ]; then
  build_args+=(--build-arg "CA_CERTS=$extra_ca")
  say "the host trusts CAs of its own (/usr/local/share/ca-certificates): passed to npm as CA_CERTS"
fi
t0=$(now)
say "docker build --network host --force-rm -f docker/Dockerfile -t $IMAGE . (legacy builder; log: $work/build.log)"
set +e
DOCKER_BUILDKIT=0 "$DOCKER" build --network host --force-rm ${build_args[@]+"${build_args[@]}"} \
  -f docker/Dockerfile -t "$IMAGE" . 2>&1 |
  tee "$work/build.log" |
  {
    step='' at='' cached=''
    while IFS= read -r line; do
      case $line in
        "Step "*)
          [ -n "$step" ] && printf '  %6.1f s  %-6s %s\n' "$(since "$at")" "$cached" "$step"
          step=${line:0:110} at=$(now) cached=run
          ;;
        *"Using cache"*) cached=cache ;;
        "Successfully built"* | "Successfully tagged"*)
          [ -n "$step" ] && printf '  %6.1f s  %-6s %s\n' "$(since "$at")" "$cached" "$step"
          step=
          ;;
      esac
    done
    [ -n "$step" ] && printf '  %6.1f s  %-6s %s\n' "$(since "$at")" "$cached" "$step"
  }
build_rc=${PIPESTATUS[0]}
set -e
t_build=$(since "$t0")
if [ "$build_rc" -ne 0 ]; then
  tail -60 "$work/build.log"
  fail "docker build failed (exit $build_rc; the log's end above)"
fi
say "build: ${t_build} s"
new_id=$("$DOCKER" image inspect -f '{{.Id}}' "$IMAGE")
# the image the previous run built, now untagged: this test's throwaway (its shared layers stay)
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ] &&
   [ -z "$("$DOCKER" image inspect -f '{{join .RepoTags ","}}' "$old_id" 2>/dev/null)" ]; then
  "$DOCKER" rmi "$old_id" >/dev/null 2>&1 && say "removed the previous build of $IMAGE (${old_id:7:12})" || true
fi
grep -E "build summary|baseline ISA|CPU kernels|BLAS|CUDA  |event loop|vocabulary dir" "$work/build.log" | sed 's/^/  /' || true

# ---- size ----------------------------------------------------------------------------------------
size=$("$DOCKER" image inspect -f '{{.Size}}' "$IMAGE")
base_size=$("$DOCKER" image inspect -f '{{.Size}}' "$BASE_IMAGE")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
say "image $IMAGE: $(mb "$size") ($(mb "$base_size") of it the base $BASE_IMAGE); goal: under 150 MB"
echo "  its layers (largest first):"
"$DOCKER" history --no-trunc --format '{{.Size}}\t{{.CreatedBy}}' "$IMAGE" |
  awk -F'\t' '$1 != "0B" { c = $2; gsub(/[ \t]+/, " ", c); printf "    %-9s %s\n", $1, substr(c, 1, 100) }' |
  sort -k1,1 -h -r | head -8
if [ "$size" -gt 150000000 ]; then
  echo "  NOTE: over 150 MB; the largest files:"
  "$DOCKER" run --rm --entrypoint /bin/bash "$IMAGE" -c \
    'du -ak /usr /var /etc 2>/dev/null | sort -rn | awk "\$1 > 2048" | head -20' | sed 's/^/    /'
fi

# ---- run -----------------------------------------------------------------------------------------
"$DOCKER" volume create "$vol_models" >/dev/null
"$DOCKER" volume create "$vol_data" >/dev/null
summaries=()

# start_container: a fresh container on a free loopback port over the two volumes; waits healthy
start_container() {
  "$DOCKER" rm -f "$name" >/dev/null 2>&1 || true
  port=$(node -e "const s=require('net').createServer();s.listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
  local t0
  t0=$(now)
  say "docker run --network host -e HOST=127.0.0.1 -e PORT=$port -e GRACE=$GRACE -v $vol_models:/models -v $vol_data:/data $IMAGE"
  "$DOCKER" run -d --name "$name" --network host -e HOST=127.0.0.1 -e PORT="$port" -e GRACE="$GRACE" \
    -v "$vol_models:/models" -v "$vol_data:/data" --stop-timeout $((GRACE + 20)) "$IMAGE" >/dev/null
  local health=
  for _ in $(seq 1 600); do
    health=$("$DOCKER" inspect -f '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' "$name")
    case $health in
      "running healthy") break ;;
      running*) sleep 0.5 ;;
      *) break ;;
    esac
  done
  t_healthy=$(since "$t0")
  if [ "$health" != "running healthy" ]; then
    "$DOCKER" logs "$name" 2>&1 | tail -40
    "$DOCKER" inspect -f '{{json .State}}' "$name"
    fail "the container is '$health', not running and healthy, after ${t_healthy} s"
  fi
  say "healthy after ${t_healthy} s; the healthcheck said: $("$DOCKER" inspect -f '{{with .State.Health}}{{range .Log}}{{.ExitCode}}:{{printf "%.60s" .Output}} | {{end}}{{end}}' "$name" | tr -d '\n')"
  local user pid1
  user=$("$DOCKER" exec "$name" id -un)
  [ "$user" = inflight ] || fail "the server runs as '$user', not the non-root user inflight"
  pid1=$("$DOCKER" exec "$name" cat /proc/1/comm)
  [ "$pid1" = inflight ] || fail "PID 1 is '$pid1', not inflight (SIGTERM must reach it)"
}

# drive DRAIN_API PHASES: tests/docker/client.js against the container, docker stop once the drain
# requests stream; checks the client's verdict, the drain in the log, the exit code
drive() {
  local api=$1 phases=$2 t0 t1 client_rc
  t0=$(now)
  : >"$work/client.log"
  node tests/docker/client.js "$port" "$N_TOKENS" "$DRAIN_TOKENS" "$api" "$phases" >"$work/client.log" 2>&1 &
  client_pid=$!
  for _ in $(seq 1 1200); do
    grep -q IN_FLIGHT "$work/client.log" && break
    kill -0 "$client_pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q IN_FLIGHT "$work/client.log" || { cat "$work/client.log"; fail "the drain requests never had their first tokens"; }
  t1=$(now)
  say "drain requests ($api) streaming after $(since "$t0") s: docker stop -t $((GRACE + 20)) (SIGTERM)"
  "$DOCKER" stop -t $((GRACE + 20)) "$name" >/dev/null
  t_stop=$(since "$t1")
  set +e
  wait "$client_pid"
  client_rc=$?
  set -e
  client_pid=
  sed 's/^/  client: /' "$work/client.log" | grep -v '^  client: {"requests"'
  "$DOCKER" logs "$name" >"$work/container.log" 2>&1
  echo "  the container's log, from the stop on:"
  grep -A20 "stopping: no new requests" "$work/container.log" | sed 's/^/    /' | head -24
  [ "$client_rc" -eq 0 ] || fail "the client failed (exit $client_rc): see above"
  t_requests=$(since "$t0")
  summaries+=("$(grep '^{"requests"' "$work/client.log")")
  local exit_code
  exit_code=$("$DOCKER" inspect -f '{{.State.ExitCode}}' "$name")
  grep -q "inflight serve: stopping: no new requests; [1-9][0-9]* in flight may finish within $GRACE.0 s" \
    "$work/container.log" || fail "the log does not show the drain starting with requests in flight"
  grep -q "inflight serve: all requests finished; closing" "$work/container.log" ||
    fail "the log does not show every request finishing before the close"
  grep -q "inflight serve: stopped" "$work/container.log" || fail "the log does not end with 'stopped'"
  if grep -q "second signal" "$work/container.log"; then fail "a second signal reached the server"; fi
  [ "$exit_code" = 0 ] || fail "the container exited with $exit_code (docker stop must not have to kill it)"
  say "stopped in ${t_stop} s, exit code $exit_code"
}

# 1: fresh volumes: the demo model is made; /ws and OpenAI to their ends; both in flight at the stop
say "run 1: fresh volumes (no model: the entry point makes the demo one)"
start_container
t_healthy1=$t_healthy
grep -q "MAKING A RANDOM GPT-2-124M-SHAPED DEMO MODEL" <("$DOCKER" logs "$name" 2>&1) ||
  fail "the log does not say loudly that it made the demo model"
drive "$DRAIN_API" all
t_requests1=$t_requests t_stop1=$t_stop

# 2: the same volumes again: the model and the log are reused; an OpenAI stream alone (no /ws open)
# in flight at the stop
t_healthy2=- t_requests2=- t_stop2=-
if [ "${SECOND_RUN:-1}" = 1 ]; then
  say "run 2: the same volumes (the demo model and the log are reused); an OpenAI stream alone in flight at the stop"
  start_container
  t_healthy2=$t_healthy
  if grep -q "MAKING A RANDOM" <("$DOCKER" logs "$name" 2>&1); then fail "run 2 made the demo model again"; fi
  "$DOCKER" logs "$name" 2>&1 | grep -E "^inflight: /data/inflight.db|^docker-entrypoint: inflight serve" | sed 's/^/  /' || true
  drive openai drain
  t_requests2=$t_requests t_stop2=$t_stop
fi

# ---- the database on the volume ------------------------------------------------------------------
t0=$(now)
mnt=$("$DOCKER" volume inspect -f '{{.Mountpoint}}' "$vol_data")
ls -la "$mnt" | sed 's/^/  /'
[ -f "$mnt/inflight.db" ] || fail "no inflight.db on the /data volume ($mnt)"
if [ -s "$mnt/inflight.db-wal" ]; then echo "  NOTE: a non-empty WAL was left"; fi
mkdir -p "$work/db"
cp -a "$mnt"/inflight.db* "$work/db/"
db=$work/db/inflight.db
q() { sqlite3 -separator '|' "$db" "$1"; }
ic=$(q 'PRAGMA integrity_check')
echo "  integrity_check: $ic"
[ "$ic" = ok ] || fail "PRAGMA integrity_check: $ic"
echo "  requests (api|completion_tokens|finish_reason|request_tokens.n_tokens|prompt_tokens|offsets bytes):"
all=$(printf '%s\n' "${summaries[@]}" | node -e '
  const lines = require("fs").readFileSync(0, "utf8").split("\n").filter(Boolean);
  for (const l of lines) for (const r of JSON.parse(l).requests)
    console.log([r.api, r.prompt, r.tokens, r.prompt_tokens,
                 Buffer.from(r.api + "\t" + r.prompt).toString("hex"),
                 Buffer.from(r.completion).toString("hex")].join("|"))')
n_rows=0
while IFS='|' read -r api prompt tokens prompt_tokens key text; do
  sql_prompt=$(printf %s "$prompt" | sed "s/'/''/g")
  got=$(q "SELECT r.api, r.completion_tokens, r.finish_reason, t.n_tokens, r.prompt_tokens,
                  length(t.offsets_us)
           FROM requests r LEFT JOIN request_tokens t ON t.request_id = r.id
           WHERE r.api = '$api' AND r.prompt = '$sql_prompt'")
  want="$api|$tokens|length|$tokens|$prompt_tokens|$((4 * tokens))"
  echo "    $got    ($prompt)"
  [ "$got" = "$want" ] || fail "the row of '$prompt' is '$got', not $want"
  logged=$(q "SELECT lower(hex(coalesce(completion, ''))) FROM requests
              WHERE lower(hex(api || char(9) || prompt)) = '$key'")
  [ "$logged" = "$text" ] || fail "the logged completion of '$prompt' differs from the streamed text"
  n_rows=$((n_rows + 1))
done <<<"$all"
want_rows=$((2 + $([ "$DRAIN_API" = both ] && echo 2 || echo 1) + $([ "${SECOND_RUN:-1}" = 1 ] && echo 1 || echo 0)))
[ "$n_rows" = "$want_rows" ] || fail "checked $n_rows requests' rows, not $want_rows"
total=$(q "SELECT count(*) FROM requests")
[ "$total" = "$want_rows" ] || fail "the log has $total requests, not $want_rows"
echo "    ($n_rows rows, each logged completion the streamed text)"
open_sessions=$(q "SELECT count(*) FROM sessions WHERE closed_at IS NULL")
[ "$open_sessions" = 0 ] || fail "$open_sessions session(s) without closed_at: the log was not flushed at the stop"
echo "  sessions: $(q "SELECT count(*) FROM sessions") logged, all closed"
t_db=$(since "$t0")
say "database: ${t_db} s"

echo
echo "times: base ${t_base} s, build ${t_build} s; run 1: healthy ${t_healthy1} s (demo model made)," \
     "requests ${t_requests1} s (stop ${t_stop1} s); run 2: healthy ${t_healthy2} s, requests" \
     "${t_requests2} s (stop ${t_stop2} s); db check ${t_db} s; total $(since "$t_start") s"
echo "image $IMAGE: $(mb "$size") (base $(mb "$base_size"))"
echo "PASS image.test"
