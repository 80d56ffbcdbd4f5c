#!/usr/bin/env bash
# tests/docker/cuda_image.test.sh: the CUDA image, built offline. Makes the CUDA base images from
# this machine's toolkit (scripts/docker-cuda-base.sh: Debian 12 with nvcc, cudart and cuBLAS
# copied in, no NVIDIA registry), builds docker/Dockerfile.cuda unchanged against them (the CPU
# image, inflight:cpu, must exist: tests/docker/image.test.sh builds it), prints its size, runs it
# with host networking on a free loopback port, checks that its first line names the device (on
# a machine without a GPU: "device: cpu (auto: no usable CUDA device: ...)") and that it serves
# (a /ws and an OpenAI request streamed with exact token counts through tests/docker/client.js,
# then one of each in flight at docker stop, which must still finish). Run by hand (it copies ~1.4 GB of the toolkit into images; CI's docker
# stage runs the CPU image's test): CI=true makes a skip a failure, as everywhere.
# Exit 0 pass, 1 fail, 77 skipped (no nvcc, or no docker daemon answering).
# Environment: DOCKER (default Debian's /usr/bin/docker), IMAGE (default inflight:cuda),
# CUDA_ARCHS (default 90), KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${IMAGE:-inflight:cuda}
in_ci=0
case ${CI:-} in 1 | true | TRUE | True | yes) in_ci=1 ;; esac
if [ -z "${DOCKER:-}" ]; then
  if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi
export DOCKER
t_start=$SECONDS
say() { echo "[$((SECONDS - t_start))s] $*"; }
skip() {
  [ "$in_ci" = 1 ] && { echo "FAIL cuda_image.test: CI=true: $*"; exit 1; }
  echo "SKIP cuda_image.test: $* (under CI=true this fails)"
  exit 77
}
fail() { echo "FAIL cuda_image.test: $*"; exit 1; }

command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || skip "no nvcc: no CUDA toolkit to build the bases from"
"$DOCKER" info >/dev/null 2>&1 || skip "no docker daemon answers (tests/docker/image.test.sh starts one for its run)"
"$DOCKER" image inspect inflight:cpu >/dev/null 2>&1 || skip "no inflight:cpu image: run tests/docker/image.test.sh first"

name=ifl-cuda-test-$$
work=$(mktemp -d /tmp/ifl-cuda-test.XXXXXX)
cleanup() {
  local rc=$?
  set +e
  if [ "${KEEP:-0}" != 1 ]; then
    "$DOCKER" rm -f "$name" >/dev/null 2>&1
    "$DOCKER" volume rm "$name-models" "$name-data" >/dev/null 2>&1
    rm -rf "$work"
  fi
  exit $rc
}
trap cleanup EXIT

say "scripts/docker-cuda-base.sh (the toolkit of this machine)"
args=$(scripts/docker-cuda-base.sh | tail -1) || fail "scripts/docker-cuda-base.sh failed"
say "bases: $args"
t0=$SECONDS
# shellcheck disable=SC2086 # $args is the --build-arg list the script printed
DOCKER_BUILDKIT=0 "$DOCKER" build --network host --force-rm $args \
  --build-arg CUDA_ARCHS="${CUDA_ARCHS:-90}" -f docker/Dockerfile.cuda -t "$IMAGE" . >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; fail "docker build -f docker/Dockerfile.cuda failed"; }
{ grep -A12 "^runtime packages:" "$work/build.log" || echo "(runtime packages: from the layer cache)"; } |
  grep -v "^ --->" | sed 's/^/  /' | head -14
size=$("$DOCKER" image inspect -f '{{.Size}}' "$IMAGE")
say "build: $((SECONDS - t0)) s; image $IMAGE: $(awk -v b="$size" 'BEGIN { printf "%.0f MB", b / 1e6 }') (cudart, cuBLAS and cuBLASLt are most of it)"

port=$(node -e "const s=require('net').createServer();s.listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
"$DOCKER" run -d --name "$name" --network host -e HOST=127.0.0.1 -e PORT="$port" \
  -v "$name-models:/models" -v "$name-data:/data" --stop-timeout 30 "$IMAGE" >/dev/null
for _ in $(seq 1 600); do
  st=$("$DOCKER" inspect -f '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' "$name")
  case $st in "running healthy") break ;; running*) sleep 0.5 ;; *) break ;; esac
done
"$DOCKER" logs "$name" >"$work/run.log" 2>&1
[ "$st" = "running healthy" ] || { tail -30 "$work/run.log"; fail "the container is '$st', not running and healthy"; }
first=$(head -1 "$work/run.log")
say "first line: $first"
case $first in
  "docker-entrypoint: device: cuda ("*) say "a GPU is visible: serving on it" ;;
  "docker-entrypoint: device: cpu (auto: "*) say "no usable GPU: said on the first line, serving on the CPU" ;;
  *) fail "the first line does not name the device: $first" ;;
esac
grep -m1 "inflight serve: device" "$work/run.log" | sed 's/^/  /'
# a /ws and an OpenAI request, then one of each in flight at docker stop (the drain)
node tests/docker/client.js "$port" 8 32 both >"$work/client.log" 2>&1 &
client=$!
for _ in $(seq 1 600); do
  grep -q IN_FLIGHT "$work/client.log" && break
  kill -0 "$client" 2>/dev/null || break
  sleep 0.1
done
grep -q IN_FLIGHT "$work/client.log" || { cat "$work/client.log"; fail "the drain's requests did not start"; }
"$DOCKER" stop -t 30 "$name" >/dev/null
wait "$client" || { cat "$work/client.log"; fail "the client failed"; }
grep -v '^{' "$work/client.log" | sed 's/^/  client: /' | head -8
code=$("$DOCKER" inspect -f '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || fail "exit code $code after docker stop"
say "stopped, exit code 0"
echo "PASS cuda_image.test"
