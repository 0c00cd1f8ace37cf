#!/usr/bin/env bash
# test.sh - README's second command: set up, build with warnings as errors, run every test.
# GPU tests print "skipped: no CUDA device" where there is none.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" -DTSATTN_WERROR=ON
ctest --test-dir "$repo/build" --output-on-failure -j "$(nproc)"
