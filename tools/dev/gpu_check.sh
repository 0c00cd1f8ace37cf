#!/usr/bin/env bash
# gpu_check.sh - every GPU check in one run, for the lent H200 (or any CUDA machine).
#
# Builds nothing: it runs what `tools/dev/gpu_prepare.sh` built and precompiled on a machine without a
# GPU (carry build/ to the GPU machine), or, with the step `precompile` first, what that machine
# precompiles itself from the carried build (faster there than on a 2-core build machine). Results go
# under $OUT (default: gpu-results/): one log per step (steps.log holds them all, in order, for tools
# that bring back few files), bench/ for the benchmark, and a short table last on stdout.
#   usage: tools/dev/gpu_check.sh [step ...]
#   steps: precompile env blocks tests sanitizer demo deploy python wheel bench host serving cp
#   (default: all but precompile, wheel, bench, host, serving and cp)
# Two instances with different $OUT may run at once on one GPU (after `precompile`), e.g.
# `env blocks tests sanitizer` beside `demo deploy python`: no step times anything.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-$repo/gpu-results}"
mkdir -p "$out"
cd "$repo"
export PYTHONUNBUFFERED=1
# Serve the kernels precompiled here; anything missing still JIT-compiles into a fresh user cache.
export TSATTN_CACHE_RO_PATH="$repo/build/aot-cache"
export TSATTN_CACHE_DIR="${TMPDIR:-/tmp}/tsattn-user-cache"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(env blocks tests sanitizer demo deploy python)
summary=()
block_index=0

run_step() {  # name, log file, command...
  local name=$1 log=$2
  shift 2
  local start=$SECONDS
  "$@" >"$out/$log" 2>&1
  local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - start))" "$log")")
  { echo "===== $name ($log) rc=$rc"; cat "$out/$log"; } >>"$out/steps.log"
  tail -n 4 "$out/$log"
}

for step in "${steps[@]}"; do
  case "$step" in
    precompile)
      # What gpu_prepare.sh precompiles, on this machine's cores.
      run_step precompile precompile.log bash -c '
        set -e
        build/tsattn precompile --manifest default --arch sm_90a --out build/aot-cache -j "$(nproc)"
        for m in llama3 gemma; do
          build/tsattn precompile --manifest "cache/manifests/$m.json" --arch sm_90a --out build/deploy-cache -j "$(nproc)"
        done' ;;
    env)
      run_step env env.log bash -c 'nvidia-smi; build/tsattn --version; build/tsattn env' ;;
    blocks)
      # The sm90a building blocks, one test case per process: a faulting TMA or wgmma
      # instruction poisons its CUDA context, which would fail every later case too.
      build/tsattn_tests -ts='gpu/sm90a_blocks' -ltc --no-version | grep -v '^\[doctest\]\|^=\|^$' >"$out/blocks.list"
      while IFS= read -r case_name; do
        run_step "block" "block_$((++block_index)).log" timeout 60 build/tsattn_tests -ts='gpu/sm90a_blocks' \
          -tc="$case_name"
      done <"$out/blocks.list" ;;
    tests)
      run_step tests tests.log timeout 480 build/tsattn_tests -ts='gpu*' -tse='gpu/sm90a_blocks'
      # The family is chosen once per process: the paged calls again on the portable family.
      run_step paged-sm80 paged_sm80.log env TSATTN_KERNEL_FAMILY=sm80 timeout 300 build/tsattn_tests -ts='gpu/paged' ;;
    sanitizer)
      # A representative subset under memcheck and racecheck (the full matrix is too slow there).
      run_step memcheck memcheck.log timeout 260 compute-sanitizer --tool memcheck --error-exitcode 9 \
        build/tsattn_tests -ts='gpu/attention' -tc='strided*,a side stream*,packed layout with indptrs on the GPU*,malformed*,Hopper: fp8*,Hopper: CTA pairs*,Hopper: short keys*'
      run_step racecheck racecheck.log timeout 210 compute-sanitizer --tool racecheck --error-exitcode 9 \
        build/tsattn_tests -ts='gpu/attention' -tc='strided*,Hopper: fp8*,Hopper: CTA pairs*,Hopper: short keys*'
      run_step memcheck-merge memcheck_merge.log timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
        build/tsattn_tests -ts='gpu/merge'
      # Plans: runs within and beyond their capacities, the device-planned lists of packed runs.
      run_step memcheck-plan memcheck_plan.log timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 \
        build/tsattn_tests -ts='gpu/prefill_plan' -tc='validate*,one plan serves*,packed runs*'
      # Paged calls: the gather (scan and copy) under bad GPU tables, capacities and graph replays,
      # and the sm90a kernels that read the pages in place.
      run_step memcheck-paged memcheck_paged.log timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
        build/tsattn_tests -ts='gpu/paged' -tc='bad GPU tables*,validate*,a CUDA graph*,every dtype pair*,sm90a*'
      run_step racecheck-paged racecheck_paged.log timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 \
        build/tsattn_tests -ts='gpu/paged' -tc='bad GPU tables*,a plan*,sm90a*' ;;
    demo)
      for preset in llama3-8b gemma-window ragged; do
        run_step "run:$preset" "run_$preset.log" build/tsattn run --preset "$preset"
      done ;;
    deploy)
      # The deployment story: kernels precompiled without a GPU (build/deploy-cache) are warmed
      # into an empty user cache, then served with JIT forbidden: the first calls compile nothing.
      run_step deploy deploy.log env -u TSATTN_CACHE_RO_PATH TSATTN_CACHE_DIR="$(mktemp -d)/tsattn" bash -c '
        set -e
        for m in llama3 gemma; do build/tsattn warm --manifest cache/manifests/$m.json --from build/deploy-cache; done
        build/tsattn cache info
        for p in llama3-8b ragged gemma-window; do TSATTN_DISABLE_JIT=1 build/tsattn run --preset $p --stats; done
        build/tsattn_tests -ts="tools/*"' ;;
    python)
      run_step python python.log env TSATTN_LIBRARY="$repo/build/libtsattn.so" PYTHONPATH="$repo/python" \
        python3 -m pytest -q tests/python tools/bench/tests tools/profile/tests tools/dev/tests
      # The family is chosen once per process: the lse tests, the chunked prefills merged from
      # them and the paged calls again on the portable family.
      run_step python-sm80 python_sm80.log env TSATTN_KERNEL_FAMILY=sm80 TSATTN_LIBRARY="$repo/build/libtsattn.so" \
        PYTHONPATH="$repo/python" python3 -m pytest -q tests/python/test_gpu_lse.py tests/python/test_gpu_merge.py \
        tests/python/test_gpu_paged.py ;;
    wheel)
      # The wheel as a user installs it, with the toolkit hidden (tools/dev/gpu_prepare.sh built it).
      run_step wheel wheel.log timeout 560 bash tests/packaging/wheel_on_gpu.sh "$(ls build/dist/tsattn-*.whl)" \
        -n 8 ;;
    bench)
      run_step bench bench.log env TSATTN_LIBRARY="$repo/build/libtsattn.so" PYTHONPATH="$repo/python" \
        python3 tools/bench/bench.py --quick --out "$out/bench" ;;
    host)
      # Host time per call: C (with the driver calls' own floor), then Python beside torch SDPA.
      run_step host-c host_c.log build/tsattn_bench_host
      run_step host-python host_python.log env TSATTN_LIBRARY="$repo/build/libtsattn.so" PYTHONPATH="$repo/python" \
        python3 tools/bench/run_host_time.py --batches 100 ;;
    serving)
      # The serving batches against cuDNN and FA2, bf16 and fp16, fixed and in both packed twins.
      run_step serving serving.log env TSATTN_LIBRARY="$repo/build/libtsattn.so" PYTHONPATH="$repo/python" \
        python3 tools/bench/bench.py --serving --contenders tsattn,cudnn,fa2 --no-jit --no-ceiling --no-plots \
        --reps 30 --out "$out/serving" ;;
    cp)
      # Context-parallel prefill on every GPU of the machine: check against one GPU, then scaling.
      run_step cp cp.log env TSATTN_LIBRARY="$repo/build/libtsattn.so" PYTHONPATH="$repo/python" \
        python3 -m torch.distributed.run --standalone --nproc_per_node "$(nvidia-smi -L | wc -l)" \
        tools/distributed/cp_check.py --json "$out/cp.json" ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
