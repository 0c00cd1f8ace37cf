#!/usr/bin/env bash
# main.sh - README's first command: set up, build, and run the main job.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# The attention demo (`tsattn run`) arrives with the kernels; until then show what the CLI offers.
"$repo/build/tsattn" --version
"$repo/build/tsattn" --help
"$repo/build/tsattn" env
