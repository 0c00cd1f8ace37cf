#!/usr/bin/env bash
# ab_bench.sh - A/B timing of libtsattn builds on the GPU machine: each build's library runs the
# same benchmark cases, the builds alternating, for several rounds (the spread between rounds of
# one build is the noise to compare a difference with).
#   usage: tools/bench/ab_bench.sh CASES ROUNDS BUILD_DIR...      (CASES: tools/bench/bench.py --cases patterns)
# Typical use: build a second library here from a copy of the tree with one change
#   (cmake -S /tmp/variant -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build-b --target tsattn_shared),
# then on the GPU machine, carrying build/libtsattn.so.0.1.0 and build-b/libtsattn.so.0.1.0:
#   tools/bench/ab_bench.sh "d128-dense-bf16-h32kv8-b1-s8k,d128-causal-bf16-h32kv8-b1-s8k" 2 build build-b
# Each build JIT-compiles into its own cache (first calls are not timed); a build folder holding
# ab-cache/ (BUILD_DIR/tsattn precompile --out BUILD_DIR/ab-cache, done on the build machine) reads
# its precompiled kernels from there first, so the GPU machine spends no time in NVRTC. A build folder
# may also hold ab-env: NAME=value lines set for its runs only (e.g. TSATTN_WORK_ORDER=static, to
# time one library in two modes). One line per case, build and round: TFLOP/s, the correctness
# check's status and relative norm error; tools/bench/ab_ratio.py turns them into ratios to the
# first build.
set -uo pipefail
cases=$1 rounds=$2
shift 2
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="${OUT:-/tmp}/ab"
mkdir -p "$work"
export PYTHONPATH="$repo/python" PYTHONUNBUFFERED=1
for round in $(seq 1 "$rounds"); do
  for build in "$@"; do
    name=$(basename "$build") run="$work/$(basename "$build")-$round"
    build_env=()
    [[ -f "$repo/$build/ab-env" ]] && mapfile -t build_env <"$repo/$build/ab-env"
    if ! env "${build_env[@]}" TSATTN_LIBRARY="$repo/$build/libtsattn.so.0.1.0" TSATTN_CACHE_DIR="/tmp/ab-cache-$name" \
      TSATTN_CACHE_RO_PATH="$repo/$build/ab-cache" \
      python3 "$repo/tools/bench/bench.py" --out "$run" --cases "$cases" --contenders tsattn --no-jit --no-plots \
      --no-smi --no-ceiling --reps 40 >"$run.log" 2>&1; then
      echo "FAILED: $build round $round"
      tail -n 20 "$run.log"
      continue
    fi
    python3 - "$run/bench.json" "$name" "$round" <<'PY'
import json
import sys

path, name, round_ = sys.argv[1:]
for case in json.load(open(path))["cases"]:
    r = case["contenders"].get("tsattn", {})
    error = r.get("check", {}).get("rel_norm_error", float("nan"))
    print(f"{case['name']:42s} {name:10s} r{round_} {r.get('tflops', 0.0):7.1f} {r.get('status', '?')} err={error:.4f}")
PY
  done
done | sort
