#!/usr/bin/env bash
# wheel_on_gpu.sh WHEEL - the wheel on a GPU machine as a user gets it: `pip install --no-deps` into
# this machine's Python (whose CUDA 13 PyTorch brought nvidia-cuda-nvrtc), the CUDA toolkit hidden
# (a mount namespace with an empty tmpfs over /usr/local/cuda*), then the Python suite against the
# installed package twice: from an empty cache, every kernel JIT-compiled through pip's NVRTC; then
# on that cache with TSATTN_DISABLE_JIT=1. Extra arguments go to pytest. Needs root (unshare -m).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
wheel="$1"
shift
python3 -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"
cache="$(mktemp -d)/tsattn"

hidden() { bash "$repo/tests/packaging/hide_toolkit.sh" "$@"; }

cd "$repo"
unset TSATTN_LIBRARY  # the installed package's own library
export TSATTN_CACHE_DIR="$cache" TSATTN_CACHE_RO_PATH= TSATTN_TEST_INSTALLED=1 PYTHONUNBUFFERED=1

echo "== where things come from, toolkit hidden"
hidden python3 - <<'PY'
import json, pathlib, subprocess, sys, torch, tsattn
pkg = pathlib.Path(tsattn.__file__).parent
print("tsattn", tsattn.__version__, "from", pkg, "library", tsattn.library_path())
assert tsattn.library_path() == str(pkg / "lib" / "libtsattn.so")
env = json.loads(subprocess.run([sys.executable, "-m", "tsattn", "env", "--json"], capture_output=True, text=True).stdout)
print("tsattn env: nvrtc", env["nvrtc"])
assert env["nvrtc"]["found_through"] == "pip package nvidia-cuda-nvrtc", env["nvrtc"]
q = 0.2 * torch.randn(1, 300, 8, 128, device="cuda", dtype=torch.bfloat16)
out = tsattn.batch_prefill(q, q, q, mask_type="causal")
maps = [line.split()[-1] for line in open("/proc/self/maps") if "libnvrtc" in line]
print("NVRTC mapped in this process:", sorted(set(maps)))
assert maps and all("site-packages/nvidia/cu13/lib" in m for m in maps), maps
print("kernel", tsattn.last_kernel_name(), "cache", tsattn.cache_info())
PY

echo "== the Python suite from an empty cache (JIT through pip's NVRTC)"
start=$SECONDS
hidden python3 -m pytest -q -rs -p no:cacheprovider tests/python "$@"
echo "JIT run: $((SECONDS - start)) s; cache: $(find "$cache" -name '*.tsk' | wc -l) kernels, $(du -sh "$cache" | cut -f1)"

echo "== the same suite on that cache with TSATTN_DISABLE_JIT=1"
start=$SECONDS
TSATTN_DISABLE_JIT=1 hidden python3 -m pytest -q -rs -p no:cacheprovider tests/python "$@"
echo "no-JIT run: $((SECONDS - start)) s"
