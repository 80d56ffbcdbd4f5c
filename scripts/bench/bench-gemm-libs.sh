#!/usr/bin/env bash
# bench-gemm-libs.sh: compares inflight's matrix-product kernels with the libraries Debian ships for
# this (OpenBLAS, BLIS, oneDNN, libxsmm) on GPT-2-124M's products, and prints a markdown table of
# GFLOP/s with the winner per case. A standalone benchmark, not part of the build: the project does
# not depend on these libraries. It installs the missing -dev packages (as root, Debian 12), builds
# one binary per library from scripts/bench/gemm-libs/ (gcc -O3, no -march=native) against the engine's
# static library in BUILD_DIR, runs them one after another and prints the table.
#
# usage: scripts/bench/bench-gemm-libs.sh [--isa avx2|avx512|scalar] [--libs ours,openblas,blis,onednn,libxsmm]
#          [--out DIR] [--no-install] [program options: --threads 1,2 --m 1,8,64,512
#          --shapes qkv,attn_proj,fc,mlp_proj,lm_head --dtypes f32,bf16,f16 --reps 10 --warmup 2
#          --rotate-mb 1024 --gemv-rows N (ours: streaming kernels up to N rows; default: the
#          engine's)] [BUILD_DIR (default: build)]
#
# --isa avx2 (the default) makes every library run its AVX2 code on an AVX-512 machine:
# OPENBLAS_CORETYPE=Haswell, BLIS_ARCH_TYPE=<BLIS_ARCH_HASWELL>, ONEDNN_MAX_CPU_ISA=AVX2 (and
# DNNL_MAX_CPU_ISA), LIBXSMM_TARGET=hsw, and ours with --isa avx2. --isa avx512 forces the AVX-512
# kernels where a library's own cpuid check does not know the CPU (OpenBLAS 0.3.21 and BLIS 0.9
# know nothing after Cooper Lake and fall back to Prescott / haswell kernels):
# OPENBLAS_CORETYPE=SkylakeX, BLIS_ARCH_TYPE=<BLIS_ARCH_SKX>; oneDNN and libxsmm pick their best.
# Each program checks the kernels it got and fails if they are not the ones asked for. --isa
# scalar applies to ours only (the libraries run their defaults).
# Timing figures need a quiet machine: run this where nothing else is running.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SRC_DIR="$ROOT/scripts/bench/gemm-libs"
ISA=avx2
LIBS=ours,openblas,blis,onednn,libxsmm
OUT=${TMPDIR:-/tmp}/bench-gemm-libs
INSTALL=1
BUILD_DIR=
PROG_ARGS=()

while [ $# -gt 0 ]; do
    case "$1" in
    --isa) ISA=$2; shift 2 ;;
    --libs) LIBS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --threads | --m | --shapes | --dtypes | --reps | --warmup | --rotate-mb | --gemv-rows)
        PROG_ARGS+=("$1" "$2"); shift 2 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "bench-gemm-libs: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) BUILD_DIR=$1; shift ;;
    esac
done
case "$ISA" in avx2 | avx512 | scalar) ;; *) echo "bench-gemm-libs: --isa $ISA: want avx2, avx512 or scalar" >&2; exit 2 ;; esac
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
BUILD_DIR=$(cd "$BUILD_DIR" && pwd) || { echo "bench-gemm-libs: no build directory $BUILD_DIR" >&2; exit 2; }
ENGINE_LIB="$BUILD_DIR/libinflight_engine.a"
[ -f "$ENGINE_LIB" ] || { echo "bench-gemm-libs: $ENGINE_LIB not found: build inflight first (scripts/build.sh)" >&2; exit 2; }
# the engine's headers come from the source tree that build was configured from
ENGINE_SRC=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
ENGINE_SRC=${ENGINE_SRC:-$ROOT}
for h in cpu_kernels.h cpu_isa.h threadpool.h tensor.h; do
    [ -f "$ENGINE_SRC/engine/$h" ] || { echo "bench-gemm-libs: $ENGINE_SRC/engine/$h not found (source of $BUILD_DIR)" >&2; exit 2; }
done
MA=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

# ---- packages -------------------------------------------------------------------------------------
pkgs_of() {
    case "$1" in
    ours) echo "" ;;
    openblas) echo "libopenblas-dev" ;;
    blis) echo "libblis-dev libblis-pthread-dev" ;; # the pthreads build, explicitly
    onednn) echo "libdnnl-dev" ;;
    libxsmm) echo "libxsmm-dev" ;;
    *) echo "bench-gemm-libs: --libs: unknown library $1 (ours, openblas, blis, onednn, libxsmm)" >&2; exit 2 ;;
    esac
}
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }

IFS=, read -r -a WANT <<<"$LIBS"
for lib in "${WANT[@]}"; do pkgs_of "$lib" >/dev/null || exit 2; done
missing=()
for lib in "${WANT[@]}"; do
    for p in $(pkgs_of "$lib"); do installed "$p" || missing+=("$p"); done
done
# the engine's own link needs OpenBLAS when the build has it (INFLIGHT_BLAS=ON)
ENGINE_BLAS=0
if nm "$ENGINE_LIB" 2>/dev/null | grep -c ' U cblas_sgemm$' >/dev/null; then # not grep -q: pipefail
    ENGINE_BLAS=1
    installed libopenblas-dev || missing+=(libopenblas-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$INSTALL" = 1 ] && [ "$(id -u)" = 0 ]; then
        apt-get update -q >/dev/null || echo "note: apt-get update failed; trying the lists there are"
        avail=()
        for p in "${missing[@]}"; do
            c=$(candidate "$p")
            if [ -z "$c" ] || [ "$c" = "(none)" ]; then
                echo "note: package $p is not in this system's Debian archive: skipping what needs it"
            else
                avail+=("$p")
            fi
        done
        if [ ${#avail[@]} -gt 0 ]; then
            echo "installing: ${avail[*]}"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${avail[@]}" >/dev/null
        fi
    else
        echo "note: missing packages: ${missing[*]} (as root: apt-get install --no-install-recommends ${missing[*]}); skipping what needs them"
    fi
fi

# ---- build ----------------------------------------------------------------------------------------
mkdir -p "$OUT/bin"
CFLAGS=(-std=c11 -O3 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -I "$ENGINE_SRC/engine" -I "$SRC_DIR")
OPENBLAS_CFLAGS=$(pkg-config --cflags openblas 2>/dev/null | sed 's/-I/-isystem /g' || true)
OPENBLAS_LIBS=$(pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
ENGINE_LIBS=("$ENGINE_LIB")
if [ "$ENGINE_BLAS" = 1 ]; then
    read -r -a _ol <<<"$OPENBLAS_LIBS"
    ENGINE_LIBS+=("${_ol[@]}")
fi
BLIS_INC=/usr/include/$MA/blis-pthread BLIS_LIB=/usr/lib/$MA/blis-pthread
# the engine's API: per-family kernels (ifl_cpu_kernels_get) or the single set before them
printf '#include "cpu_kernels.h"\nint probe(void);\nint probe(void) { return (int)ifl_matmul_default_gemv_rows(ifl_cpu_kernels_get(IFL_ISA_SCALAR), IFL_DTYPE_F32); }\n' >"$OUT/bin/api_probe.c"
if gcc -std=c11 -fsyntax-only -I "$ENGINE_SRC/engine" "$OUT/bin/api_probe.c" 2>/dev/null; then
    CFLAGS+=(-DBENCH_IFL_FAMILIES=1)
fi

build_one() { # lib -> $OUT/bin/bench-gemm-<lib>; 2: skipped (noted), 1: the compiler failed
    local lib=$1 extra_c=() extra_l=()
    for p in $(pkgs_of "$lib"); do installed "$p" || { echo "note: $lib skipped: $p is not installed"; return 2; }; done
    case "$lib" in
    openblas) read -r -a extra_c <<<"$OPENBLAS_CFLAGS"; read -r -a extra_l <<<"$OPENBLAS_LIBS" ;;
    blis) extra_c=(-isystem "$BLIS_INC"); extra_l=(-L"$BLIS_LIB" -lblis "-Wl,-rpath,$BLIS_LIB") ;;
    onednn) extra_c=(-fopenmp); extra_l=(-ldnnl -fopenmp) ;;
    libxsmm) extra_l=(-lxsmm -lxsmmnoblas -lrt -ldl) ;; # noblas: no silent fall-back to a BLAS
    esac
    # the library before the engine's OpenBLAS, so its own symbols come first
    gcc "${CFLAGS[@]}" "${extra_c[@]}" "$SRC_DIR/bench_gemm_libs.c" "$SRC_DIR/lib_$lib.c" \
        "${extra_l[@]}" "${ENGINE_LIBS[@]}" -lpthread -lm -o "$OUT/bin/bench-gemm-$lib"
}

built=()
fail=0
for lib in "${WANT[@]}"; do
    rc=0
    build_one "$lib" || rc=$?
    case $rc in
    0) built+=("$lib") ;;
    2) ;;
    *) echo "note: building bench-gemm-$lib failed (the compiler's messages are above)"; fail=1 ;;
    esac
done
[ ${#built[@]} -gt 0 ] || { echo "bench-gemm-libs: nothing to run" >&2; exit 1; }

# ---- the environment that picks each library's kernels ---------------------------------------------
# BLIS_ARCH_TYPE is a number, BLIS_ARCH_HASWELL / BLIS_ARCH_SKX in BLIS's arch_t (3 and 0 in 0.9):
# asked of the installed header
blis_id() {
    local id=$2
    if [ -f "$BLIS_INC/blis.h" ]; then
        printf '#include <stdio.h>\n#include <blis.h>\nint main(void){printf("%%d\\n",(int)%s);return 0;}\n' "$1" >"$OUT/bin/blis_id.c"
        gcc -w -isystem "$BLIS_INC" "$OUT/bin/blis_id.c" -o "$OUT/bin/blis_id" 2>/dev/null && id=$("$OUT/bin/blis_id")
    fi
    echo "$id"
}
ENV_ISA=()
case "$ISA" in
avx2) ENV_ISA=(OPENBLAS_CORETYPE=Haswell BLIS_ARCH_TYPE="$(blis_id BLIS_ARCH_HASWELL 3)"
    ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 LIBXSMM_TARGET=hsw) ;;
avx512) ENV_ISA=(OPENBLAS_CORETYPE=SkylakeX BLIS_ARCH_TYPE="$(blis_id BLIS_ARCH_SKX 0)") ;;
esac

# ---- run ------------------------------------------------------------------------------------------
RESULTS="$OUT/results.tsv"
: >"$RESULTS"
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(uname -m), $(nproc) CPUs: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "# engine: $ENGINE_LIB (source $ENGINE_SRC, $(git -C "$ENGINE_SRC" rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "# packages: $(dpkg-query -W -f='${Package} ${Version}, ' libopenblas-dev libblis-dev libblis-pthread-dev libdnnl-dev libxsmm-dev 2>/dev/null | sed 's/, $//')"
if [ ${#ENV_ISA[@]} -gt 0 ]; then echo "# --isa $ISA environment: ${ENV_ISA[*]}"; fi
for lib in "${built[@]}"; do
    # OpenBLAS is in every binary when the engine links it; only its own binary should use threads
    env_lib=(env -u OPENBLAS_CORETYPE -u BLIS_ARCH_TYPE -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA -u LIBXSMM_TARGET
        "${ENV_ISA[@]}")
    [ "$lib" = openblas ] || env_lib+=(OPENBLAS_NUM_THREADS=1)
    if ! "${env_lib[@]}" "$OUT/bin/bench-gemm-$lib" --isa "$ISA" "${PROG_ARGS[@]}" >"$OUT/$lib.log" 2>&1; then
        echo "note: bench-gemm-$lib failed: $(tail -1 "$OUT/$lib.log")"
        fail=1
    fi
    grep '^# ' "$OUT/$lib.log" | grep -v '^# cpu:' || true
    grep '^RESULT' "$OUT/$lib.log" >>"$RESULTS" || true
done
grep -h '^# cpu:' "$OUT/${built[0]}.log" || true

# ---- table: per thread count, rows shape x M, columns the libraries' GFLOP/s, the f32 winner -----
awk -F'\t' -v libs="${built[*]}" '
BEGIN { n = split(libs, L, " ") }
$1 == "RESULT" {
    col = $2 == "ours" ? "ours " $3 : $2
    has[col] = 1
    row = $4 "\t" $5
    if (!(row in seen)) { seen[row] = 1; R[++nr] = row }
    if (!(($6) in T)) { T[$6] = 1; TH[++nt] = $6 }
    V[$6, row, col] = $7
}
END {
    nc = 0 # the columns that have results, ours first
    for (i = 1; i <= n; i++) {
        if (L[i] != "ours") { if (L[i] in has) C[++nc] = L[i]; continue }
        if ("ours f32" in has) C[++nc] = "ours f32"
        if ("ours bf16" in has) C[++nc] = "ours bf16"
        if ("ours f16" in has) C[++nc] = "ours f16"
    }
    for (t = 1; t <= nt; t++) {
        printf "\n### %s thread%s: GFLOP/s (2MNK / best time)\n\n| shape | M |", TH[t], TH[t] == 1 ? "" : "s"
        for (c = 1; c <= nc; c++) printf " %s |", C[c]
        printf " winner (f32) |\n|---|---:|"
        for (c = 1; c <= nc; c++) printf "---:|"
        printf "---|\n"
        for (r = 1; r <= nr; r++) {
            split(R[r], k, "\t"); best = -1; who = "-"
            printf "| %s | %s |", k[1], k[2]
            for (c = 1; c <= nc; c++) {
                v = ((TH[t], R[r], C[c]) in V) ? V[TH[t], R[r], C[c]] : "-"
                printf " %s |", v
                if (v != "-" && v != "n/a" && C[c] !~ /^ours (bf16|f16)$/ && v + 0 > best) { best = v + 0; who = C[c] }
            }
            printf " %s |\n", who
        }
    }
    printf "\nThe libraries take f32 weights only; ours also runs bf16 and f16 weights (not in the winner column).\n"
}' "$RESULTS" | tee "$OUT/table.md"
echo "results: $RESULTS, logs: $OUT/<lib>.log, table: $OUT/table.md"
exit $fail
