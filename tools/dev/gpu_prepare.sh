#!/usr/bin/env bash
# gpu_prepare.sh - on the build machine (no GPU needed): build everything and precompile the
# default manifest for sm_90a into build/aot-cache (and two model-family manifests into
# build/deploy-cache) and build the wheel into build/dist, so the GPU machine spends its time
# running, not compiling. Then carry build/ and run tools/dev/gpu_check.sh there.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../setup.sh" -DTSATTN_WERROR=ON
cd "$repo"
# Fresh directories: entries of older template versions would only add to what is carried.
rm -rf build/aot-cache build/deploy-cache
build/tsattn precompile --manifest cache/manifests/default.json --arch sm_90a --out build/aot-cache
# For the deployment story (gpu_check.sh deploy): what a serving image for two model families holds.
for manifest in llama3 gemma; do
  build/tsattn precompile --manifest "cache/manifests/$manifest.json" --arch sm_90a --out build/deploy-cache
done
# The wheel, for gpu_check.sh wheel (built in build-wheel/: only the wheel travels, in build/dist).
rm -rf build/dist
python3 -m pip wheel --quiet --disable-pip-version-check --no-deps -w build/dist .
du -sh build | tail -1
