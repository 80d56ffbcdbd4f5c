#!/usr/bin/env bash
# docker-base.sh: makes the base image docker/Dockerfile builds on (debian:bookworm-slim) without
# a container registry: debootstrap --variant=minbase from Debian's apt mirror, trimmed the way the
# official slim images are (no apt lists, docs, man pages, info, locales; dpkg told to leave them
# out of later installs too), apt sources for bookworm, bookworm-updates and bookworm-security,
# then `tar | docker import`. Does nothing when the image is already there (docker image inspect).
# Installs debootstrap with apt-get when it is missing. Needs root (debootstrap, chroot).
#
# usage: scripts/docker-base.sh [IMAGE]        (default debian:bookworm-slim)
# environment: MIRROR (default http://deb.debian.org/debian), SECURITY_MIRROR (default
#   http://deb.debian.org/debian-security), SUITE (default bookworm), DOCKER (the docker CLI;
#   default Debian's /usr/bin/docker when installed, else `docker` from PATH),
#   FORCE=1 (rebuild even when the image exists), KEEP_ROOTFS=DIR (build the tree there, keep it)
set -euo pipefail

image=${1:-debian:bookworm-slim}
suite=${SUITE:-bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}
security=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
if [ -z "${DOCKER:-}" ]; then
  if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi

if [ "${FORCE:-0}" != 1 ] && "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
  echo "docker-base: $image is there ($("$DOCKER" image inspect -f '{{.Id}}' "$image" | cut -c1-19)); nothing to do (FORCE=1 remakes it)"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "docker-base: debootstrap needs root: run as root (or with sudo)" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "docker-base: installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
fi

t0=$(date +%s)
if [ -n "${KEEP_ROOTFS:-}" ]; then
  root=$KEEP_ROOTFS
  rm -rf "$root"
  mkdir -p "$root"
else
  root=$(mktemp -d /var/tmp/docker-base.XXXXXX)
  trap 'rm -rf "$root"' EXIT
fi

echo "docker-base: debootstrap --variant=minbase $suite $root $mirror"
log=$(mktemp)
if ! debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$log" 2>&1; then
  tail -40 "$log" >&2
  [ -f "$root/debootstrap/debootstrap.log" ] && tail -40 "$root/debootstrap/debootstrap.log" >&2
  rm -f "$log"
  echo "docker-base: debootstrap failed" >&2
  exit 1
fi
rm -f "$log"

# ---- apt sources: bookworm, -updates, -security (deb822, as the official images have them) ----
rm -f "$root/etc/apt/sources.list"
mkdir -p "$root/etc/apt/sources.list.d"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF

# ---- what the official images configure for a container (debuerreotype's "slimify" + docker) --
# dpkg leaves docs, man pages, info and locales out of every later install too
mkdir -p "$root/etc/dpkg/dpkg.cfg.d" "$root/etc/apt/apt.conf.d"
cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# made by scripts/docker-base.sh (as Debian's slim images): no docs, man pages, info, locales
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
# apt: no package cache kept, no translations, no recommends/suggests kept by autoremove
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
echo 'Acquire::GzipIndexes "true";' >"$root/etc/apt/apt.conf.d/docker-gzip-indexes"
echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$root/etc/apt/apt.conf.d/docker-autoremove-suggests"
# no service starts from package scripts inside a build
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"

# ---- trim -------------------------------------------------------------------------------------
rm -rf "$root/debootstrap"
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$root"/usr/share/man/* "$root"/usr/share/groff/* "$root"/usr/share/info/* \
       "$root"/usr/share/lintian/* "$root"/usr/share/linda/* "$root"/var/cache/man/*
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} + \
  2>/dev/null || true
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
       "$root"/var/lib/dpkg/*-old
mkdir -p "$root/var/lib/apt/lists/partial" "$root/var/cache/apt/archives/partial"
# logs, the build host's identity (docker supplies hostname, hosts, resolv.conf at run time)
find "$root/var/log" -type f -delete
rm -f "$root/etc/hostname" "$root/etc/resolv.conf" "$root/etc/machine-id" \
      "$root/var/lib/dbus/machine-id"
: >"$root/etc/machine-id"
rm -rf "$root"/tmp/* "$root"/var/tmp/* "$root"/root/.cache

size=$(du -sm "$root" | cut -f1)
echo "docker-base: root tree ${size} MB; importing as $image"
tar --numeric-owner --xattrs -C "$root" -c . |
  "$DOCKER" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    --message "scripts/docker-base.sh: debootstrap --variant=minbase $suite $mirror" \
    - "$image" >/dev/null
echo "docker-base: $image made in $(( $(date +%s) - t0 )) s: $("$DOCKER" image inspect -f '{{.Size}}' "$image" | awk '{printf "%.1f MB", $1/1e6}')"
