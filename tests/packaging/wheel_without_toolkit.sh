#!/usr/bin/env bash
# wheel_without_toolkit.sh - a new user's path on a machine with no CUDA toolkit: build the wheel
# from the repository root, install it into a fresh virtual environment, hide the toolkit
# (hide_toolkit.sh), and check that
#   - without NVRTC, `tsattn env` says so and a compile fails naming every place searched and the
#     pip package to install;
#   - with the pip package nvidia-cuda-nvrtc, `tsattn precompile --manifest default --arch sm_90a`
#     compiles every kernel through it;
#   - with NVRTC gone again and TSATTN_DISABLE_JIT=1, every kernel is found in the precompiled layer.
# Needs root (unshare -m) and PyPI. Usage: bash tests/packaging/wheel_without_toolkit.sh [WORKDIR]
# Ends with a line 'N passed, N failed'; exit 1 when a check failed.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
nvrtc_pin="nvidia-cuda-nvrtc==13.0.*"  # the NVRTC of the toolkit the library is built with

echo "== building the wheel"
rm -rf "$work/dist"
python3 -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$work/dist" "$repo"
wheel=$(ls "$work"/dist/tsattn-*.whl)
echo "wheel: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
# auditwheel reads the binaries' symbol versions and libraries: they must fit the tag the wheel carries.
python3 -m pip install --quiet --disable-pip-version-check auditwheel
tag=$(basename "$wheel" .whl | rev | cut -d- -f1 | rev)
python3 -m auditwheel show "$wheel" | tee "$work/auditwheel.txt"
tr -s ' \n' '  ' <"$work/auditwheel.txt" | grep -q "consistent with the following platform tag: \"$tag\"" ||
  { echo "auditwheel does not confirm the wheel's tag $tag" >&2; exit 1; }

echo "== a fresh virtual environment without NVRTC"
rm -rf "$work/venv"
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$wheel"

passed=0
failed=0
check() {  # check DESCRIPTION COMMAND...: runs the command with the venv first on PATH, the toolkit hidden
  local description="$1"
  shift
  if PATH="$work/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin" TSATTN_CACHE_DIR="$work/user-cache" TSATTN_CACHE_RO_PATH= \
       bash "$repo/tests/packaging/hide_toolkit.sh" "$@" >"$work/check.log" 2>&1; then
    passed=$((passed + 1))
    echo "ok: $description"
  else
    failed=$((failed + 1))
    echo "FAILED: $description"
    sed 's/^/    /' "$work/check.log" | tail -40
  fi
}
py="$work/venv/bin/python"

check "the wheel's files: library and CLI inside the package, no soname links" \
  "$py" -c '
import pathlib, tsattn, tsattn._cli as c
pkg = pathlib.Path(tsattn.__file__).parent
assert (pkg / "lib" / "libtsattn.so").is_file() and not (pkg / "lib" / "libtsattn.so").is_symlink()
assert c.cli_path() == str(pkg / "bin" / "tsattn")
assert tsattn.library_path() == str(pkg / "lib" / "libtsattn.so"), tsattn.library_path()
assert tsattn.library_version() == tsattn.__version__'

check "without NVRTC, tsattn env says so and names the pip package" \
  bash -c 'tsattn env --json > "$0/env.json" || true
           "$1" -c "import json,sys; n = json.load(open(sys.argv[1]))[\"nvrtc\"]; assert not n[\"available\"], n
assert \"pip install nvidia-cuda-nvrtc\" in n[\"reason\"] and \"pip package nvidia-cuda-nvrtc\" in n[\"reason\"], n" "$0/env.json"' \
  "$work" "$py"

check "without NVRTC, a compile is a RuntimeError naming every place searched" \
  "$py" -c '
import sys, tsattn
try:
    tsattn.precompile("llama3", archs="sm_90a", out_dir=sys.argv[1])
except RuntimeError as e:
    text = str(e)
    for part in ("pip install nvidia-cuda-nvrtc", "already loaded in this process", "pip package nvidia-cuda-nvrtc",
                 "CUDA toolkit", "system library path", "nvidia/cu13/lib/libnvrtc.so.13"):
        assert part in text, (part, text)
else:
    raise SystemExit("precompile worked without NVRTC")' "$work/no-nvrtc"

echo "== NVRTC from pip ($nvrtc_pin)"
"$py" -m pip install --quiet --disable-pip-version-check --no-deps "$nvrtc_pin"

check "tsattn env finds the pip package's NVRTC" \
  bash -c 'tsattn env --json > "$0/env.json"
           "$1" -c "import json,sys; n = json.load(open(sys.argv[1]))[\"nvrtc\"]
assert n[\"available\"] and n[\"found_through\"] == \"pip package nvidia-cuda-nvrtc\", n
assert n[\"path\"].startswith(sys.argv[2]), n" "$0/env.json" "$0/venv"' \
  "$work" "$py"

rm -rf "$work/aot"
# Every module of the manifest (attention kernels, merges, the page gather), as the CLI lists them.
modules="$("$work/venv/bin/tsattn" precompile --manifest default --arch sm_90a --list | wc -l)"
echo "the default manifest has $modules modules for sm_90a"
check "tsattn precompile --manifest default --arch sm_90a compiles every module through pip's NVRTC" \
  bash -c 'tsattn precompile --manifest default --arch sm_90a --out "$0/aot" -j "$(nproc)" --json > "$0/precompile.json"
           tail -1 "$0/precompile.json"
           "$1" -c "import json,sys; s = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert s[\"event\"] == \"summary\" and s[\"failed\"] == 0 and s[\"compiled\"] == int(sys.argv[2]), s" "$0/precompile.json" "$2"' \
  "$work" "$py" "$modules"

check "python -m tsattn runs the same CLI: a second precompile finds every module" \
  bash -c '"$1" -m tsattn precompile --manifest default --arch sm_90a --out "$0/aot" --json | tail -1 > "$0/again.json"
           "$1" -c "import json,sys; s = json.load(open(sys.argv[1]))
assert s[\"compiled\"] == 0 and s[\"cached\"] == int(sys.argv[2]), s" "$0/again.json" "$2"' \
  "$work" "$py" "$modules"

echo "== NVRTC removed again"
"$py" -m pip uninstall --quiet --yes nvidia-cuda-nvrtc

check "with no NVRTC and TSATTN_DISABLE_JIT=1, every kernel is found in the precompiled layer" \
  bash -c 'TSATTN_DISABLE_JIT=1 tsattn precompile --manifest default --arch sm_90a --out "$0/aot" --json | tail -1 > "$0/nojit.json"
           "$1" -c "import json,sys; s = json.load(open(sys.argv[1]))
assert s[\"compiled\"] == 0 and s[\"cached\"] == int(sys.argv[2]) and s[\"failed\"] == 0, s" "$0/nojit.json" "$2"' \
  "$work" "$py" "$modules"

echo "wheel_without_toolkit: $passed passed, $failed failed"
((failed == 0))
