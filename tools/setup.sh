#!/usr/bin/env bash
# setup.sh - shared by main.sh and test.sh: install the Debian build dependencies that are
# missing, then configure and build into build/. Needs the CUDA 13.0 toolkit (nvcc on PATH
# or in /usr/local/cuda). Usage: source tools/setup.sh [extra cmake args...]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev doctest-dev libcli11-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "tsattn setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if ! command -v nvcc >/dev/null 2>&1; then
  echo "tsattn setup: the CUDA 13.0 toolkit (nvcc, NVRTC) was not found; install it first" >&2
  exit 3
fi

cmake -S "$repo" -B "$repo/build" -G Ninja "$@" >/dev/null
cmake --build "$repo/build" -j "$(nproc)"
