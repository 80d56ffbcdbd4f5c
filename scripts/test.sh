#!/usr/bin/env bash
# test.sh: sets up a fresh Debian 12 machine (scripts/setup.sh), builds, and runs every test:
#   1. the Release build and the whole CTest suite;
#   2. an ASan/UBSan build and the suite again (except the benchmarks-sized tests);
#   3. ThreadSanitizer over the FIFO, the batcher, the thread pool, the work ranges, the kernels,
#      and the server under load (built without OpenBLAS, which is not instrumented; the kernel
#      tests' vector families, whose threading is the scalar one's);
#   4. valgrind memcheck over the model-loading, tokenizer and forward-pass tests (the scalar and
#      avx2 kernel families: valgrind cannot run AVX-512 code);
#   5. aarch64: the engine cross-compiled with Debian's gcc-aarch64-linux-gnu (scalar kernels) and
#      its C tests run under qemu-user-static (scripts/test-aarch64.sh, which says which and why);
#   6. libFuzzer (clang): the /ws message parser, the OpenAI and Triton request body parsers, the
#      wire guard's scanner of raw connection bytes, and sequences of HTTP requests on one
#      connection through the whole server in the fuzzer's process (fuzz_http_seq), each fuzzed
#      for INFLIGHT_FUZZ_SECONDS over its seed corpus (tests/fuzz), failing on any crash,
#      sanitizer report, leak, hang or timeout;
#   7. docker (Debian's docker.io; dockerd started if none runs): the CPU image built from
#      docker/Dockerfile on a base made offline with debootstrap, run, a /ws and an OpenAI request
#      streamed through it, stopped with docker stop mid-stream, its database checked
#      (tests/docker/image.test.sh); the compose files checked with docker-compose config.
# The kernel tests (test_matmul, test_golden, test_batched, test_sampler) run once per CPU kernel
# family (NAME_scalar, NAME_avx2, NAME_avx512); a family this CPU lacks is reported skipped.
# Stages 1 and 2 build the CUDA backend where nvcc is found (its GPU tests skip without a GPU);
# stages 3 to 6 build without it (INFLIGHT_CUDA=OFF), as a machine without nvcc would.
# The sanitizer stages and the emulated one run with IFL_TEST_QUICK=1 where a test has smaller
# sizes for slow builds (stages 3 to 5; in stage 2 the tests marked QUICK_UNDER_ASAN and
# integration_lockout, tests/CMakeLists.txt); no test's verdict depends on how fast the machine is.
#
# Environment:
#   INFLIGHT_NATIVE=ON   builds stages 1-3 with -march=native (the default is the portable build
#                        that picks its kernels at run time; the valgrind stage always builds so).
#   INFLIGHT_ISA=NAME    runs the tests that do not name a family with scalar, avx2 or avx512
#                        instead of the best the CPU has (e.g. avx2: the speed a machine without
#                        AVX-512 gets).
#   CI=true              a test that cannot make a check it was written to make (a missing tool, no
#                        root for its tmpfs mounts) fails instead of skipping it (GPU tests still
#                        skip without a GPU); so does stage 6 without clang and its libFuzzer.
#   INFLIGHT_FUZZ_SECONDS=N  how long stage 6 runs each fuzz target (default 60).
# Prints how long each stage took ("== stage N done in S s") and the total; ends with CTest's
# summary line of the last stage. Exit status: 0 only if every stage passed (a stage that finds no
# test to run fails too).
# Example, as a loaded 2-core machine without AVX-512: ( while :; do :; done ) & busy=$!;
#   INFLIGHT_ISA=avx2 scripts/test.sh; kill $busy
set -euo pipefail
cd "$(dirname "$0")/.."

native=()
case "${INFLIGHT_NATIVE:-}" in
  "") ;;
  ON | OFF | on | off | 1 | 0) native=(-DINFLIGHT_NATIVE="$INFLIGHT_NATIVE") ;;
  *) echo "test.sh: INFLIGHT_NATIVE must be ON or OFF, not '$INFLIGHT_NATIVE'" >&2; exit 2 ;;
esac

t_all=$SECONDS
stage=0
stage_name="setup"
t_stage=$SECONDS
begin() {
  stage=$((stage + 1))
  stage_name=$1
  t_stage=$SECONDS
  echo "== stage $stage: $stage_name"
}
end() {
  echo "== stage $stage done in $((SECONDS - t_stage)) s ($stage_name)"
}
on_exit() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "== stage $stage failed after $((SECONDS - t_stage)) s ($stage_name); total $((SECONDS - t_all)) s" >&2
  fi
}
trap on_exit EXIT

scripts/setup.sh --test
jobs=$(nproc)
[ ${#native[@]} -eq 0 ] || echo "test.sh: every stage built with ${native[*]}"

begin "release build and tests"
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release "${native[@]}"
# (-LE valgrind: a build without -march=native registers the valgrind variants; stage 4 runs them)
ctest --test-dir build --output-on-failure --no-tests=error -j "$jobs" -LE valgrind
end

begin "ASan/UBSan build and tests"
# (no CUDA: stage 1 compiles and links it; nothing runs it without a GPU, and nvcc's Debug builds
# of the kernels are time for nothing)
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DINFLIGHT_SANITIZE=ON -DINFLIGHT_CUDA=OFF \
  "${native[@]}"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --no-tests=error -j "$jobs" -LE slow
end

begin "ThreadSanitizer build and threaded tests"
scripts/build.sh build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINFLIGHT_TSAN=ON -DINFLIGHT_BLAS=OFF \
  -DINFLIGHT_CUDA=OFF "${native[@]}"
IFL_TEST_QUICK=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure --no-tests=error -j "$jobs" \
  -R 'test_fifo|test_kv|test_batcher|test_batched|test_prefix_cache|test_matmul|test_q8_avx|test_threadpool|test_work_ranges|test_client|integration_load|integration_cancel_close|integration_wire|integration_pipelining|integration_history_stream|integration_conversation|integration_logprobs|db_load|db_failures' \
  -E '_scalar$'
end

begin "valgrind memcheck"
scripts/build.sh build-valgrind -DCMAKE_BUILD_TYPE=Debug -DINFLIGHT_NATIVE=OFF -DINFLIGHT_CUDA=OFF
ctest --test-dir build-valgrind --output-on-failure --no-tests=error -j "$jobs" -L valgrind
end

begin "aarch64 cross build, C tests under qemu"
scripts/test-aarch64.sh build-aarch64
end

begin "libFuzzer: the /ws message and HTTP body parsers, the wire guard, HTTP request sequences"
# clang, and its libFuzzer runtime (Debian: libclang-rt-dev), which clang alone does not bring
fuzz_cc=$(command -v clang || true)
fuzz_missing=""
if [ -z "$fuzz_cc" ]; then
  fuzz_missing="clang"
else
  fuzz_probe=$(mktemp -d)
  printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return d && n ? 0 : 0; }' \
    >"$fuzz_probe/probe.c"
  "$fuzz_cc" -fsanitize=fuzzer "$fuzz_probe/probe.c" -o "$fuzz_probe/probe" >/dev/null 2>&1 ||
    fuzz_missing="clang's libFuzzer runtime (clang -fsanitize=fuzzer does not link)"
  rm -rf "$fuzz_probe"
fi
if [ -n "$fuzz_missing" ] && [ "${CI:-}" = true ]; then
  echo "test.sh: $fuzz_missing not found: the parsers cannot be fuzzed (scripts/setup.sh --test installs clang and libclang-rt-dev)" >&2
  exit 1
elif [ -n "$fuzz_missing" ]; then
  echo "== stage $stage skipped: $fuzz_missing not found, the parsers were not fuzzed (scripts/setup.sh --test installs clang and libclang-rt-dev; under CI=true this fails)"
else
  log=$(mktemp)
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER="$fuzz_cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DINFLIGHT_FUZZ=ON -DINFLIGHT_CUDA=OFF -DINFLIGHT_FUZZ_SECONDS="${INFLIGHT_FUZZ_SECONDS:-60}" \
    >"$log" 2>&1 || { cat "$log"; rm -f "$log"; exit 1; }
  rm -f "$log"
  ninja -C build-fuzz fuzz # the targets and what they link, not the rest of the clang build
  ctest --test-dir build-fuzz --output-on-failure --no-tests=error -j "$jobs" -L fuzz
  # each target's runs, coverage and corpus (tests/fuzz/run-fuzz.sh's last line)
  grep -h ': passed: ' build-fuzz/Testing/Temporary/LastTest.log || true
  end
fi

begin "docker: the CPU image built from docker/Dockerfile, run, drained"
# the base image made offline (scripts/docker-base.sh), the image built (its layer cache reused
# between runs), run with host networking on loopback, a /ws and an OpenAI stream through it, then
# docker stop and the database on its volume checked; each part's time is printed
set +e
tests/docker/image.test.sh # exit 77: docker cannot run here (under CI=true the test fails instead)
docker_rc=$?
set -e
if [ "$docker_rc" = 77 ]; then
  echo "== stage $stage skipped: docker cannot run on this machine (tests/docker/image.test.sh said why)"
elif [ "$docker_rc" != 0 ]; then
  exit "$docker_rc"
elif command -v docker-compose >/dev/null 2>&1; then
  # the compose file and its CUDA overlay parse, with every service, volume and port resolved
  docker-compose -f docker/compose.yaml config -q
  docker-compose -f docker/compose.yaml -f docker/compose.cuda.yaml config -q
  echo "test.sh: docker/compose.yaml and compose.cuda.yaml: docker-compose config ok"
fi
end

echo "== all $stage stages passed in $((SECONDS - t_all)) s"
