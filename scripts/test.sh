#!/usr/bin/env bash
# test.sh: sets up a fresh Debian 12 machine (scripts/setup.sh), builds, and runs every test:
#   1. the Release build and the whole CTest suite;
#   2. an ASan/UBSan build and the suite again (except the benchmarks-sized tests);
#   3. ThreadSanitizer over the batcher, the thread pool and kernels, and the server under load
#      (built without OpenBLAS, which is not instrumented);
#   4. valgrind memcheck over the model-loading, tokenizer and forward-pass tests.
# Stages 1 and 2 build the CUDA backend where nvcc is found (its GPU tests skip without a GPU);
# stages 3 and 4 build without it (INFLIGHT_CUDA=OFF), as a machine without nvcc would.
# Ends with CTest's summary line of the last stage. Exit status: 0 only if every stage passed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
jobs=$(nproc)

echo "== release build and tests"
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== ASan/UBSan build and tests"
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DINFLIGHT_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE slow

echo "== ThreadSanitizer build and threaded tests"
scripts/build.sh build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINFLIGHT_TSAN=ON -DINFLIGHT_BLAS=OFF \
  -DINFLIGHT_CUDA=OFF
IFL_TEST_QUICK=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" -R 'test_batcher|test_batched|test_matmul|test_threadpool|test_client|integration_load|integration_cancel_close|db_load|db_failures'

echo "== valgrind memcheck"
scripts/build.sh build-valgrind -DCMAKE_BUILD_TYPE=Debug -DINFLIGHT_NATIVE=OFF -DINFLIGHT_CUDA=OFF
ctest --test-dir build-valgrind --output-on-failure -j "$jobs" -L valgrind
