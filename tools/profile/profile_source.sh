#!/usr/bin/env bash
# profile_source.sh - where the attention kernel's warps wait, per SASS instruction (on the GPU machine).
#
# Profiles the second call of tools/profile/profile_call.py under ncu with the speed-of-light, memory,
# warp-state and source-counter sections, then writes under OUT_DIR:
#   NAME.details.txt  the report's sections (pipe use, L2 throughput, stall reasons per instruction)
#   NAME.sass.csv     every SASS instruction with its stall samples (ncu --page source)
#   NAME.top.txt      the instructions holding the most samples, with their neighbours (profile_top.py)
#   usage: tools/profile/profile_source.sh OUT_DIR NAME DTYPE HEAD_DIM MASK     (e.g. out bf16-d128-dense bf16 128 dense)
# ncu holds the SM clock near its base clock: read ratios, not absolute times.
set -euo pipefail
out=$1 name=$2
shift 2
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
ncu --kernel-name regex:prefill --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SourceCounters --section SchedulerStats --section ComputeWorkloadAnalysis \
  --import-source no -f -o "$out/$name" python3 "$repo/tools/profile/profile_call.py" "$@" >/dev/null
ncu --import "$out/$name.ncu-rep" --page details >"$out/$name.details.txt"
ncu --import "$out/$name.ncu-rep" --page source --csv --print-source sass >"$out/$name.sass.csv"
python3 "$repo/tools/profile/profile_top.py" "$out/$name.sass.csv" >"$out/$name.top.txt"
rm -f "$out/$name.ncu-rep"
