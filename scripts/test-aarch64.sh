#!/usr/bin/env bash
# test-aarch64.sh: the engine on 64-bit Arm. Cross-compiles the engine, the `inflight` binary and the
# C tests with Debian's gcc-aarch64-linux-gnu (cmake/aarch64-linux-gnu.cmake: the scalar kernels,
# no OpenBLAS, no server, no CUDA, no -march=native) and runs the C tests under qemu-user-static
# (CTest runs them through the toolchain's CMAKE_CROSSCOMPILING_EMULATOR), with IFL_TEST_QUICK=1.
# usage: scripts/test-aarch64.sh [BUILD_DIR]   (default build-aarch64; needs scripts/setup.sh --test)
# Run: the unit tests, the forward pass against the golden fixtures and the batched forward pass
# (labels unit, model), the tokenizer tests (the parity test's JavaScript reference runs in the
# host's node). Not run:
#   test_cli, test_sizes, test_gpt2_reference  host scripts (bash, python) that run the Arm
#                                              `inflight` binary themselves, which needs qemu
#                                              registered with binfmt_misc (not in a container);
#   valgrind_*                                 the host's valgrind cannot run Arm code;
#   test_batcher                               the scheduler's decisions, the same code on every
#                                              CPU; under qemu it alone takes ~4 minutes.
# Prints how long the build and the tests took; ends with CTest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-aarch64}

for tool in aarch64-linux-gnu-gcc qemu-aarch64-static; do
  command -v "$tool" >/dev/null 2>&1 \
    || { echo "test-aarch64: $tool not found: run scripts/setup.sh --test" >&2; exit 1; }
done
if [ ! -f /usr/lib/aarch64-linux-gnu/pkgconfig/libcjson.pc ]; then
  echo "test-aarch64: cJSON for arm64 not found (libcjson-dev:arm64): run scripts/setup.sh --test" >&2
  exit 1
fi
# A build tree configured for the host keeps its compiler whatever the toolchain file says.
if [ -f "$dir/CMakeCache.txt" ] && ! grep -q '^CMAKE_C_COMPILER:.*aarch64-linux-gnu-gcc' "$dir/CMakeCache.txt"; then
  echo "test-aarch64: $dir was configured for another compiler: remove it or name another directory" >&2
  exit 1
fi

t0=$SECONDS
scripts/build.sh "$dir" -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DINFLIGHT_NATIVE=OFF -DINFLIGHT_BLAS=OFF -DINFLIGHT_SERVER=OFF \
  -DINFLIGHT_CUDA=OFF
t_build=$((SECONDS - t0))

# The binaries are Arm's (ELF e_machine 183, EM_AARCH64), so the tests below ran under qemu.
machine=$(od -An -t u2 -j 18 -N 2 "$dir/tests/test_tensor" | tr -d ' ')
if [ "$machine" != 183 ]; then
  echo "test-aarch64: $dir/tests/test_tensor is not an aarch64 binary (ELF machine $machine)" >&2
  exit 1
fi

t1=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT
IFL_TEST_QUICK=1 ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$(nproc)" \
  -LE 'valgrind|cli|batcher' -E '^test_gpt2_reference$' 2>&1 | tee "$log" \
  || { echo "test-aarch64: tests failed after $((SECONDS - t1)) s under qemu" >&2; exit 1; }
echo "test-aarch64: cross build $t_build s, tests $((SECONDS - t1)) s under qemu-aarch64 (total $((SECONDS - t0)) s)"
grep -E '^[0-9]+% tests passed' "$log" | tail -1
