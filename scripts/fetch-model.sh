#!/usr/bin/env bash
#
# fetch-model.sh -- download a GPT-2 checkpoint from the Hugging Face hub for inflight.
#
#   scripts/fetch-model.sh [--revision REV] NAME [DEST]
#
# NAME is one of gpt2, gpt2-medium, gpt2-large, gpt2-xl (or the full
# "openai-community/NAME" form). Files are written to models/NAME/ under the
# repository root, or to DEST if given:
#
#   config.json              model hyper-parameters            (required)
#   model.safetensors        weights, safetensors format       (required)
#   vocab.json               GPT-2 BPE vocabulary              (required)
#   merges.txt               GPT-2 BPE merge rules             (required)
#   generation_config.json   default generation settings       (if the repo has it)
#   tokenizer.json           fast-tokenizer description        (if the repo has it)
#
# This script NEEDS INTERNET ACCESS to huggingface.co (or $HF_ENDPOINT). It cannot
# run on the offline build/test machines; fetch the model on a connected machine
# and copy the directory over if needed.
#
# How it works:
#   * The file list, sizes and sha256 hashes come from the hub API
#     $HF_ENDPOINT/api/models/<repo>/tree/<revision> (parsed with python3).
#   * Each file is downloaded from $HF_ENDPOINT/<repo>/resolve/<revision>/<file>
#     into FILE.part (resumable: rerun after an interruption to continue), then
#     verified and only then renamed to FILE.
#   * Verification: size for every file, sha256 for LFS files (the weights),
#     and the git blob id (sha1) for small non-LFS files.
#   * Rerunning after success downloads nothing; it only re-verifies.
#
# Environment:
#   HF_ENDPOINT  hub base URL (default https://huggingface.co), as in huggingface_hub
#   HF_TOKEN     if set, sent as "Authorization: Bearer $HF_TOKEN"
#
# Requires: curl (preferred) or wget, sha256sum (or shasum), python3, df.
# Exit status: 0 success, 1 failure (network, verification, disk space, ...),
#              2 usage error.

set -euo pipefail

readonly VALID_NAMES=(gpt2 gpt2-medium gpt2-large gpt2-xl)
readonly HUB_ORG="openai-community"
readonly REQUIRED_FILES=(config.json model.safetensors vocab.json merges.txt)
readonly OPTIONAL_FILES=(generation_config.json tokenizer.json)

PROG=$(basename "$0")
SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)
REPO_ROOT=$(dirname "$SCRIPT_DIR")

usage() {
    cat <<EOF
Usage: $PROG [--revision REV] NAME [DEST]

Download a GPT-2 checkpoint from the Hugging Face hub (needs internet access).

  NAME            one of: ${VALID_NAMES[*]}
                  (or openai-community/NAME)
  DEST            output directory (default: models/NAME in the repository root)

Options:
  -r, --revision REV   branch, tag or commit to download (default: main)
  -h, --help           show this help and exit

Files: ${REQUIRED_FILES[*]}
       plus ${OPTIONAL_FILES[*]} when the repository has them.

Downloads go to FILE.part and are verified (size, sha256 / git blob id) before
being renamed into place. Interrupted downloads resume when you rerun the same
command; rerunning after success only re-verifies the files.

Environment:
  HF_ENDPOINT   hub base URL (default: https://huggingface.co)
  HF_TOKEN      access token, sent as "Authorization: Bearer ..." if set

Example:
  $PROG gpt2
  build/inflight generate --model models/gpt2 --prompt "Hello"
EOF
}

die()   { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
udie()  { printf '%s: error: %s\n' "$PROG" "$*" >&2; printf "Run '%s --help' for usage.\n" "$PROG" >&2; exit 2; }
info()  { printf '%s\n' "$*"; }
warn()  { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }

human() {  # bytes -> human-readable
    awk -v b="$1" 'BEGIN {
        split("B KiB MiB GiB TiB", u, " "); i = 1
        while (b >= 1024 && i < 5) { b /= 1024; i++ }
        if (i == 1) printf "%d %s", b, u[i]; else printf "%.1f %s", b, u[i] }'
}

# ---------------------------------------------------------------- arguments
REVISION=main
POSITIONAL=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -r|--revision)
            [[ $# -ge 2 && -n "$2" ]] || udie "$1 needs a value"
            REVISION=$2; shift 2 ;;
        --revision=*)
            REVISION=${1#--revision=}
            [[ -n "$REVISION" ]] || udie "--revision needs a value"
            shift ;;
        --) shift; POSITIONAL+=("$@"); break ;;
        -*) udie "unknown option: $1" ;;
        *) POSITIONAL+=("$1"); shift ;;
    esac
done

[[ ${#POSITIONAL[@]} -ge 1 ]] || udie "missing model NAME (one of: ${VALID_NAMES[*]})"
[[ ${#POSITIONAL[@]} -le 2 ]] || udie "too many arguments: ${POSITIONAL[*]}"

NAME=${POSITIONAL[0]}
NAME=${NAME#"$HUB_ORG"/}
valid=0
for n in "${VALID_NAMES[@]}"; do [[ "$NAME" == "$n" ]] && valid=1; done
if [[ $valid -ne 1 ]]; then
    udie "unknown model name '${POSITIONAL[0]}'; valid names: ${VALID_NAMES[*]} (optionally prefixed with $HUB_ORG/)"
fi
REPO="$HUB_ORG/$NAME"

if [[ ${#POSITIONAL[@]} -eq 2 ]]; then
    DEST=${POSITIONAL[1]}
    DISPLAY_DEST=$DEST
else
    DEST="$REPO_ROOT/models/$NAME"
    DISPLAY_DEST="models/$NAME"
fi

ENDPOINT=${HF_ENDPOINT:-https://huggingface.co}
ENDPOINT=${ENDPOINT%/}

# ------------------------------------------------------------ prerequisites
DOWNLOADER=
if command -v curl >/dev/null 2>&1; then
    DOWNLOADER=curl
elif command -v wget >/dev/null 2>&1; then
    DOWNLOADER=wget
else
    die "neither curl nor wget is installed; install one of them (e.g. 'apt-get install curl')"
fi

if command -v sha256sum >/dev/null 2>&1; then
    sha256_of() { sha256sum -- "$1" | awk '{print $1}'; }
elif command -v shasum >/dev/null 2>&1; then
    sha256_of() { shasum -a 256 -- "$1" | awk '{print $1}'; }
else
    die "sha256sum is not installed (needed to verify the weights); install coreutils"
fi

command -v python3 >/dev/null 2>&1 \
    || die "python3 is not installed; it is needed to parse the hub's JSON file list (standard library only)"
command -v df >/dev/null 2>&1 || die "df is not installed (needed to check free disk space)"

# ------------------------------------------------------------------ temp dir
TMP=$(mktemp -d "${TMPDIR:-/tmp}/fetch-model.XXXXXX")
cleanup() { rm -rf -- "$TMP"; }
trap cleanup EXIT
trap 'printf "\n%s: interrupted; rerun the same command to resume.\n" "$PROG" >&2; exit 130' INT
trap 'printf "\n%s: terminated; rerun the same command to resume.\n" "$PROG" >&2; exit 143' TERM

urlquote() {  # urlquote STRING SAFE_CHARS
    python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=sys.argv[2]))' "$1" "$2"
}
REV_Q=$(urlquote "$REVISION" "")

# Common curl/wget options. The token goes into a header file so that it does
# not show up in the process list. curl drops the Authorization header when a
# redirect goes to another host (the hub redirects weights to its CDN).
# CURL_OPTS has no --fail so that the API's error body can be shown; downloads add it.
# --speed-limit/--speed-time abort a stalled transfer (resumable on rerun).
CURL_OPTS=(--location --connect-timeout 15 --retry 3 --retry-delay 2 --retry-max-time 120
           --speed-limit 1024 --speed-time 60)
WGET_OPTS=(--tries=3 --timeout=30 --waitretry=2)
if [[ -n "${HF_TOKEN:-}" ]]; then
    (umask 077; printf 'Authorization: Bearer %s\n' "$HF_TOKEN" >"$TMP/auth-header")
    CURL_OPTS+=(--header "@$TMP/auth-header")
fi

# --------------------------------------------------------- fetch file list
# The (non-recursive) tree listing only paginates for repositories with
# thousands of top-level entries; the GPT-2 repositories have a few dozen, so
# one request is enough. Files are looked up by name in it.
TREE_URL="$ENDPOINT/api/models/$REPO/tree/$REV_Q"
info "Fetching $REPO (revision $REVISION) from $ENDPOINT"
info "  file list: $TREE_URL"

fetch_tree() {
    local out=$TMP/tree.json code rc=0
    if [[ $DOWNLOADER == curl ]]; then
        code=$(curl "${CURL_OPTS[@]}" --silent --show-error \
                    --output "$out" --write-out '%{http_code}' "$TREE_URL") || rc=$?
        if [[ $rc -ne 0 ]]; then
            die "could not reach $TREE_URL (curl exit code $rc); check the network connection and rerun"
        fi
    else
        local wopts=("${WGET_OPTS[@]}")
        [[ -n "${HF_TOKEN:-}" ]] && wopts+=(--header "Authorization: Bearer $HF_TOKEN")
        wget "${wopts[@]}" --quiet --content-on-error --output-document="$out" "$TREE_URL" || rc=$?
        if [[ $rc -eq 8 ]]; then
            code="error (wget exit code 8)"   # server answered with an HTTP error
        elif [[ $rc -ne 0 ]]; then
            die "could not reach $TREE_URL (wget exit code $rc); check the network connection and rerun"
        else
            code=200
        fi
    fi
    if [[ "$code" != 200 ]]; then
        local body
        body=$(head -c 200 "$out" 2>/dev/null | tr '\n' ' ' || true)
        case "$code" in
            401|403) die "access denied for $TREE_URL (HTTP $code); set HF_TOKEN if the repository needs it. Server said: $body" ;;
            404) die "repository or revision not found: $TREE_URL (HTTP 404). Check NAME and --revision. Server said: $body" ;;
            *) die "the hub answered HTTP $code for $TREE_URL; rerun later if this is a server problem. Server said: $body" ;;
        esac
    fi
}
fetch_tree

# Produce a manifest: one line per file, tab-separated: path size sha256 blob_sha1
# ("-" for a hash that is not available). Missing required files are an error;
# missing optional files are skipped with a note.
python3 - "$TMP/tree.json" "$TMP/manifest.tsv" "${REQUIRED_FILES[*]}" "${OPTIONAL_FILES[*]}" <<'PY' || exit 1
import json, re, sys

tree_path, out_path, required, optional = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
prog = "fetch-model.sh"
HEX64 = re.compile(r"^[0-9a-f]{64}$")
HEX40 = re.compile(r"^[0-9a-f]{40}$")

try:
    with open(tree_path, "rb") as f:
        data = json.loads(f.read().decode("utf-8"))
except (ValueError, UnicodeDecodeError) as e:
    with open(tree_path, "rb") as f:
        head = f.read(300).decode("utf-8", "replace")
    sys.exit(f"{prog}: error: the hub's file list is not valid JSON ({e}); it starts with: {head!r}")
if not isinstance(data, list):
    sys.exit(f"{prog}: error: unexpected file list from the hub (expected a JSON array, got {type(data).__name__}): {str(data)[:300]}")

entries = {}
for e in data:
    if isinstance(e, dict) and e.get("type", "file") == "file" and isinstance(e.get("path"), str):
        entries[e["path"]] = e

def describe(name):
    e = entries[name]
    size, sha256, blob = e.get("size"), "", ""
    lfs = e.get("lfs")
    if isinstance(lfs, dict):
        size = lfs.get("size", size)
        oid = str(lfs.get("oid", "")).lower()
        if oid.startswith("sha256:"):
            oid = oid[len("sha256:"):]
        if HEX64.match(oid):
            sha256 = oid
    else:
        oid = str(e.get("oid", "")).lower()
        if HEX40.match(oid):
            blob = oid
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        sys.exit(f"{prog}: error: the hub's file list has no valid size for {name}: {e!r}")
    # "-" marks a missing hash: bash's read collapses consecutive tabs.
    return f"{name}\t{size}\t{sha256 or '-'}\t{blob or '-'}\n"

missing = [n for n in required if n not in entries]
if missing:
    sys.exit(f"{prog}: error: required file(s) not in the repository listing: {', '.join(missing)}")
lines = [describe(n) for n in required]
for n in optional:
    if n in entries:
        lines.append(describe(n))
    else:
        print(f"  note: optional file {n} is not in the repository; skipping")
with open(out_path, "w") as f:
    f.writelines(lines)
PY

# -------------------------------------------------------------- verification
file_size() { wc -c <"$1" | tr -d ' '; }

git_blob_sha1() {
    python3 - "$1" <<'PY'
import hashlib, os, sys
p = sys.argv[1]
h = hashlib.sha1(b"blob %d\0" % os.path.getsize(p))
with open(p, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())
PY
}

# verify FILE NAME SIZE SHA256 BLOB -> 0 if OK; otherwise sets VERIFY_ERR
VERIFY_ERR=
verify() {
    local file=$1 name=$2 size=$3 sha=$4 blob=$5 got
    VERIFY_ERR=
    got=$(file_size "$file")
    if [[ "$got" != "$size" ]]; then
        VERIFY_ERR="$name: size mismatch: expected $size bytes, got $got bytes"
        return 1
    fi
    if [[ -n "$sha" ]]; then
        got=$(sha256_of "$file")
        if [[ "$got" != "$sha" ]]; then
            VERIFY_ERR="$name: sha256 mismatch: expected $sha, got $got"
            return 1
        fi
    elif [[ -n "$blob" ]]; then
        got=$(git_blob_sha1 "$file")
        if [[ "$got" != "$blob" ]]; then
            VERIFY_ERR="$name: git blob id (sha1) mismatch: expected $blob, got $got"
            return 1
        fi
    fi
    return 0
}

# ------------------------------------------------------- disk space check
mkdir -p -- "$DEST" || die "cannot create destination directory $DEST"
DEST=$(cd "$DEST" && pwd)

NEEDED=0
TOTAL=0
while IFS=$'\t' read -r name size _sha _blob; do
    TOTAL=$((TOTAL + size))
    final="$DEST/$name"; part="$final.part"
    if [[ -f "$final" && "$(file_size "$final")" == "$size" ]]; then
        continue   # probably complete; verified below
    fi
    have=0
    [[ -f "$part" ]] && have=$(file_size "$part")
    (( have > size )) && have=0
    NEEDED=$((NEEDED + size - have))
done <"$TMP/manifest.tsv"

AVAIL_KB=$(df -Pk -- "$DEST" | awk 'NR == 2 {print $4}')
if [[ "$AVAIL_KB" =~ ^[0-9]+$ ]]; then
    AVAIL=$((AVAIL_KB * 1024))
    MARGIN=$((64 * 1024 * 1024))
    if (( NEEDED > 0 && NEEDED + MARGIN > AVAIL )); then
        die "not enough free disk space in $DEST: need $(human "$NEEDED") (+64 MiB margin), have $(human "$AVAIL") available"
    fi
else
    warn "could not determine free disk space for $DEST (df said '$AVAIL_KB'); continuing"
fi

info "  destination: $DEST"
info "  total size: $(human "$TOTAL"), still to download: $(human "$NEEDED")"
if [[ $DOWNLOADER == wget && -n "${HF_TOKEN:-}" ]]; then
    warn "using wget: HF_TOKEN is only sent to the hub API, not with file downloads (wget would forward it to CDN redirect targets); install curl to send it with downloads"
fi

# ---------------------------------------------------------------- download
# download_failed URL PART WHY HTTP_CODE: explain a failed download
download_failed() {
    local url=$1 part=$2 why=$3 code=${4:-} have=0
    [[ -f "$part" ]] && have=$(file_size "$part")
    [[ -f "$part" && $have -eq 0 ]] && rm -f -- "$part"
    case "$code" in
        ''|000) printf '%s: error: could not download %s (%s): network failure or server unreachable\n' "$PROG" "$url" "$why" >&2 ;;
        401|403) printf '%s: error: access denied for %s (HTTP %s); set HF_TOKEN if the repository needs it\n' "$PROG" "$url" "$code" >&2 ;;
        *) printf '%s: error: download failed: %s (%s, HTTP %s)\n' "$PROG" "$url" "$why" "$code" >&2 ;;
    esac
    if (( have > 0 )); then
        printf '%s: %s of partial data is kept in %s; rerun the same command to resume.\n' "$PROG" "$(human "$have")" "$part" >&2
    else
        printf '%s: rerun the same command to retry.\n' "$PROG" >&2
    fi
}

# download URL PART SIZE -> 0 on success (PART then has SIZE bytes or more)
download() {
    local url=$1 part=$2 size=$3 rc=0 out code eff='' why='' have
    have=0
    [[ -f "$part" ]] && have=$(file_size "$part")
    if (( have > size )); then
        warn "$part is larger than expected ($have > $size bytes); starting over"
        rm -f -- "$part"; have=0
    fi
    if (( have == size )) && [[ -f "$part" ]]; then
        info "  $part is already complete; verifying"
        return 0
    fi
    (( have > 0 )) && info "  resuming from $(human "$have") of $(human "$size")"

    if [[ $DOWNLOADER == curl ]]; then
        out=$(curl "${CURL_OPTS[@]}" --fail --progress-bar --continue-at - \
                    --output "$part" --write-out '%{http_code} %{url_effective}' "$url") || rc=$?
        code=${out%% *}; eff=${out#* }
        if [[ $rc -ne 0 ]]; then
            have=0; [[ -f "$part" ]] && have=$(file_size "$part")
            if [[ "$code" == 416 ]] && (( have == size )); then
                return 0       # server says nothing left to send: already complete
            fi
            if [[ "$code" == 416 || $rc -eq 33 ]]; then
                # Range not satisfiable / not supported: start over once.
                warn "server could not resume $url (HTTP $code, curl exit $rc); restarting the download from scratch"
                rm -f -- "$part"; rc=0
                out=$(curl "${CURL_OPTS[@]}" --fail --progress-bar \
                            --output "$part" --write-out '%{http_code} %{url_effective}' "$url") || rc=$?
                code=${out%% *}; eff=${out#* }
                [[ $rc -eq 0 ]] && return 0
            fi
            # curl exit 22 = the server answered with an HTTP error; anything else
            # is a transport failure (DNS, refused, timeout, dropped connection...).
            [[ $rc -eq 22 ]] || code=000
            if [[ -n "$eff" && "$eff" != "$url" ]]; then why="redirected to $eff, "; fi
            download_failed "$url" "$part" "${why}curl exit code $rc" "$code"
            return 1
        fi
    else
        wget "${WGET_OPTS[@]}" --continue --quiet --show-progress --progress=bar:force \
             --output-document="$part" "$url" || rc=$?
        if [[ $rc -ne 0 ]]; then
            download_failed "$url" "$part" "wget exit code $rc" ""
            return 1
        fi
    fi
    [[ -f "$part" ]] || : >"$part"   # curl writes no file for an empty body
    return 0
}

N_FILES=$(wc -l <"$TMP/manifest.tsv" | tr -d ' ')
i=0
while IFS=$'\t' read -r name size sha blob <&3; do
    i=$((i + 1))
    [[ "$sha" == - ]] && sha=
    [[ "$blob" == - ]] && blob=
    final="$DEST/$name"; part="$final.part"
    url="$ENDPOINT/$REPO/resolve/$REV_Q/$(urlquote "$name" "/")"

    if [[ -f "$final" ]]; then
        if verify "$final" "$name" "$size" "$sha" "$blob"; then
            info "[$i/$N_FILES] $name: already present and verified ($(human "$size"))"
            rm -f -- "$part"
            continue
        fi
        info "[$i/$N_FILES] existing $name does not match the hub ($VERIFY_ERR); downloading it again"
    fi

    info "[$i/$N_FILES] Fetching $name ($(human "$size")) from $url"
    info "        -> $final"
    download "$url" "$part" "$size" || exit 1

    if ! verify "$part" "$name" "$size" "$sha" "$blob"; then
        rm -f -- "$part"
        die "verification failed for $VERIFY_ERR. The bad download was deleted; rerun to fetch it again."
    fi
    mv -f -- "$part" "$final"
    if [[ -n "$sha" ]]; then
        info "        verified size and sha256"
    elif [[ -n "$blob" ]]; then
        info "        verified size and git blob id"
    else
        info "        verified size"
    fi
done 3<"$TMP/manifest.tsv"

info ""
info "Done: $REPO ($REVISION) is in $DEST"
if [[ ${#POSITIONAL[@]} -eq 2 ]]; then
    info "Try:  build/inflight generate --model $DISPLAY_DEST --prompt \"Hello\""
else
    info "Try (from $REPO_ROOT):  build/inflight generate --model $DISPLAY_DEST --prompt \"Hello\""
fi
