#!/usr/bin/env bash
# check_format.sh - the formatting check of the test command: clang-format 14 (Debian 12's
# clang-format package; .clang-format) on every tracked C++ and CUDA source, and ruff (the version
# pinned here; pyproject.toml's [tool.ruff]) on the Python. Installs what is missing.
# Usage: tools/dev/check_format.sh [--fix]   (--fix rewrites the files instead of checking them)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ruff_version=0.17.6

if ! command -v clang-format >/dev/null 2>&1; then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq clang-format >/dev/null
fi
# Other clang-format versions break lines differently: the style is pinned to one.
if ! clang-format --version | grep -q 'version 14\.'; then
  echo "check_format: clang-format 14 is needed, found: $(clang-format --version)" >&2
  exit 3
fi
python3 -m pip install --quiet --disable-pip-version-check "ruff==$ruff_version"

mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cuh' '*.cu')
if [[ ${1:-} == --fix ]]; then
  clang-format -i "${sources[@]}"
  python3 -m ruff format python tools tests
  python3 -m ruff check --fix python tools tests
else
  clang-format --dry-run --Werror "${sources[@]}"
  python3 -m ruff format --check python tools tests
  python3 -m ruff check python tools tests
fi
echo "check_format: ${#sources[@]} C++/CUDA sources and the Python formatted"
