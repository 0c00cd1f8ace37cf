#!/usr/bin/env bash
# profile_compare.sh - tsattn's kernels next to a baseline's under ncu, case by case (on the GPU machine).
#
# For each tools/bench/bench.py case and each contender, one ncu run of tools/profile/profile_compare.py
# profiles that contender's call of that case (all its kernels) with the speed-of-light, launch,
# occupancy, pipe, instruction-mix, scheduler, warp-state, memory and source-counter sections.
# Writes under OUT_DIR, per contender and case (NAME = CONTENDER.CASE):
#   NAME.raw.csv   every collected metric of every kernel of the call (ncu --page raw)
#   NAME.sass.csv  every SASS instruction with its executed count and stall samples (ncu --page source)
#   NAME.log       the call's own output (the correctness check) and ncu's
# Summarise with tools/profile/profile_compare_report.py OUT_DIR. ncu holds the SM clock near its base
# clock: compare cycles and instruction counts, not times at boost clock.
#   usage: tools/profile/profile_compare.sh OUT_DIR CASE[,CASE...] [CONTENDERS]   (CONTENDERS default: tsattn,cudnn)
set -uo pipefail
out=$1 cases=$2 contenders=${3:-tsattn,cudnn}
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
status=0
for case_name in ${cases//,/ }; do
  for contender in ${contenders//,/ }; do
    name="$contender.$case_name"
    if ! ncu --profile-from-start off --nvtx \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
      --section InstructionStats --section SchedulerStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section SourceCounters \
      --metrics sm__cycles_active.min,sm__cycles_active.max,smsp__inst_executed.sum \
      --import-source no -f -o "$out/$name" \
      python3 "$repo/tools/profile/profile_compare.py" "$case_name" --contenders "$contender" >"$out/$name.log" 2>&1; then
      echo "FAILED: $name (tail of $out/$name.log:)"
      tail -n 15 "$out/$name.log"
      status=1
      continue
    fi
    ncu --import "$out/$name.ncu-rep" --page raw --csv >"$out/$name.raw.csv"
    ncu --import "$out/$name.ncu-rep" --page source --csv --print-source sass >"$out/$name.sass.csv"
    rm -f "$out/$name.ncu-rep"
    echo "profiled $name: $(grep -c '' "$out/$name.sass.csv") SASS lines"
  done
done
exit $status
