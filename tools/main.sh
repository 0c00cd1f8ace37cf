#!/usr/bin/env bash
# main.sh - README's first command: set up, build, and run the main job: `tsattn run`, which on a
# GPU machine runs attention and checks it against the CPU oracle, and without a GPU precompiles
# the default manifest into the user cache.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$repo"
"$repo/build/tsattn" --version
"$repo/build/tsattn" run "$@"
