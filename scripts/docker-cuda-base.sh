#!/usr/bin/env bash
# docker-cuda-base.sh: the two base images docker/Dockerfile.cuda needs, made offline from the CUDA
# toolkit of this machine, for where NVIDIA's registry is not reachable:
#   inflight-cuda-devel:VERSION    Debian 12 (debian:bookworm-slim, scripts/docker-base.sh) with
#                                  the toolkit's compiler (nvcc, nvvm), headers, cudart and cuBLAS
#                                  under /usr/local/cuda-MAJOR.MINOR;
#   inflight-cuda-runtime:VERSION  Debian 12 with only what the binary loads: cudart, cuBLAS,
#                                  cuBLASLt.
# VERSION is nvcc's (e.g. 13.0). Prints the --build-arg options for docker/Dockerfile.cuda. Skips
# an image that already exists (FORCE=1 remakes them). With registry access, use NVIDIA's images
# instead (docker/Dockerfile.cuda's defaults).
# usage: scripts/docker-cuda-base.sh [CUDA_DIR]   (default: the directory above `which nvcc`'s bin)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${DOCKER:-}" ]; then # Debian's docker.io CLI, as scripts/docker-base.sh
  if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi
export DOCKER

nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] || [ -x /usr/local/cuda/bin/nvcc ] && nvcc=${nvcc:-/usr/local/cuda/bin/nvcc}
cuda=${1:-}
if [ -z "$cuda" ]; then
  [ -n "$nvcc" ] || { echo "docker-cuda-base: no nvcc on PATH or in /usr/local/cuda: give CUDA_DIR" >&2; exit 77; }
  cuda=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
fi
[ -x "$cuda/bin/nvcc" ] || { echo "docker-cuda-base: $cuda/bin/nvcc not found" >&2; exit 1; }
version=$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
[ -n "$version" ] || { echo "docker-cuda-base: cannot read nvcc's version" >&2; exit 1; }
lib=$cuda/lib64
[ -d "$lib" ] || lib=$cuda/lib
devel=inflight-cuda-devel:$version
runtime=inflight-cuda-runtime:$version

FORCE=0 scripts/docker-base.sh >&2 # debian:bookworm-slim (FORCE=1 remakes the CUDA bases only)

# make IMAGE DIR: IMAGE from debian:bookworm-slim with DIR copied to /usr/local/cuda-VERSION
make_image() {
  local image=$1 dir=$2
  if [ "${FORCE:-0}" != 1 ] && "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
    echo "docker-cuda-base: $image exists" >&2
    return
  fi
  cat >"$dir/Dockerfile" <<EOF
FROM debian:bookworm-slim
COPY cuda/ /usr/local/cuda-$version/
RUN ln -s cuda-$version /usr/local/cuda && ln -s lib /usr/local/cuda/lib64 \\
 && echo /usr/local/cuda/lib64 >/etc/ld.so.conf.d/cuda.conf && ldconfig
ENV PATH=/usr/local/cuda/bin:\$PATH CUDA_VERSION=$version
EOF
  echo "docker-cuda-base: building $image ($(du -sh "$dir/cuda" | cut -f1) of the toolkit)" >&2
  DOCKER_BUILDKIT=0 "$DOCKER" build -q -t "$image" "$dir" >&2
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
libs=(libcudart.so* libcublas.so* libcublasLt.so*)

# runtime: the shared libraries only (copied, links kept), in lib/ with lib64 a link to it, as the
# toolkit lays itself out (nvcc looks in lib/)
mkdir -p "$tmp/runtime/cuda/lib"
for pat in "${libs[@]}"; do cp -a "$lib"/$pat "$tmp/runtime/cuda/lib/"; done
make_image "$runtime" "$tmp/runtime"

# devel: the compiler, headers, those libraries and what linking against them needs
d=$tmp/devel/cuda
mkdir -p "$d/lib"
cp -a "$cuda/bin" "$cuda/nvvm" "$d/"
cp -aL "$cuda/include" "$d/include"
for pat in "${libs[@]}" libcudart_static.a libcudadevrt.a libculibos.a stubs cmake; do
  compgen -G "$lib/$pat" >/dev/null && cp -a "$lib"/$pat "$d/lib/"
done
[ -d "$cuda/targets" ] && cp -a "$cuda/targets" "$d/"
make_image "$devel" "$tmp/devel"

echo "--build-arg CUDA_DEVEL_IMAGE=$devel --build-arg CUDA_RUNTIME_IMAGE=$runtime"
