#!/usr/bin/env python3
"""power_probe.py - what the GPU's clock and power do while a kernel runs back to back.

A kernel's TFLOP/s is (work per SM cycle) x (SM clock). Under sustained tensor-core load an H100/H200
lowers its SM clock to stay inside its power limit, so two kernels can differ in clock as much as in
work per cycle. For each workload (tools/bench/bench.py cases for the contenders asked for, and a cuBLAS
bf16 GEMM as the ceiling), this runs it back to back for --seconds while a thread samples NVML
every 10 ms, and prints: TFLOP/s over the whole loop, median SM clock and power, the share of
samples with the power cap / thermal slowdown reasons active, and FLOP per SM cycle (TFLOP/s /
(SMs x clock)), which is the figure a kernel change moves when the clock is pinned by power.
Every attention output is checked against the fp32 reference first (docs/contract.md tolerances), as in
tools/bench/bench.py.

usage: tools/bench/power_probe.py [--cases GLOB,...] [--contenders tsattn,cudnn] [--seconds 3] [--gap-ms 0] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import bench_cases as bc  # noqa: E402
from case_data import input_sets_for, make_case_data, reference  # noqa: E402
from contenders import checked_call  # noqa: E402
from gemm_ceiling import gemm_calls  # noqa: E402
from nvml_sampler import NvmlSampler, flop_per_sm_cycle  # noqa: E402
from timing import ASSUMED_CLOCK_HZ, BATCH  # noqa: E402

DEFAULT_CASES = "d128-dense-bf16-h32kv8-b1-s8k,d128-causal-bf16-h32kv8-b1-s8k,d256-dense-bf16-h32kv8-b1-s8k"


def run_loop(call, n_sets: int, seconds: float, cuda_index: int, gap_ms: float = 0.0) -> dict:
    """Runs call(i) back to back (input sets rotated) for about `seconds`, sampling NVML; returns
    the mean milliseconds per call and the samples' summary. gap_ms > 0 queues a GPU sleep of that
    length before every timing.BATCH calls, as tools/bench/bench.py times them, and times only the calls."""
    for i in range(3):
        call(i % n_sets)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    call(0)
    torch.cuda.synchronize()
    calls = max(10, int(seconds / max(time.perf_counter() - t0, 1e-6)))
    batch = BATCH if gap_ms > 0 else calls
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(0, calls, batch)
    ]
    with NvmlSampler(cuda_index) as sampler:
        time.sleep(0.05)
        for b, (start, end) in enumerate(events):
            if gap_ms > 0:
                torch.cuda._sleep(int(gap_ms * 1e-3 * ASSUMED_CLOCK_HZ))
            start.record()
            for i in range(b * batch, min(calls, (b + 1) * batch)):
                call(i % n_sets)
            end.record()
        torch.cuda.synchronize()
    busy_ms = sum(start.elapsed_time(end) for start, end in events)
    return dict(sampler.summary(), ms=busy_ms / calls, gap_ms=gap_ms, calls=calls)


def report(name: str, flops: float, loop: dict, sms: int) -> dict:
    tflops = flops / (loop["ms"] * 1e-3) / 1e12
    per_cycle = flop_per_sm_cycle(tflops, sms, loop["sm_clock_mhz"])
    row = dict(loop, workload=name, tflops=tflops, flop_per_sm_cycle=per_cycle)
    reasons = ", ".join(f"{k} {v:.0%}" for k, v in loop["slowdown_share"].items() if v > 0) or "none"
    print(
        f"{name:44s} {tflops:7.1f} TFLOP/s  SM {loop['sm_clock_mhz']:5.0f} MHz (min {loop['sm_clock_min_mhz']:4.0f})  "
        f"{loop['power_w']:5.0f} W  {per_cycle:6.0f} FLOP/SM-cycle  slowdown: {reasons}",
        flush=True,
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", default=DEFAULT_CASES, help="comma-separated glob patterns over tools/bench/bench.py case names"
    )
    parser.add_argument("--contenders", default="tsattn,cudnn")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--gemm", type=int, default=8192, help="size of the bf16 GEMM ceiling (0: none)")
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=0.0,
        help="GPU sleep before every batch of calls (tools/bench/bench.py's timing: 20); 0: back to back",
    )
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 2
    device = torch.device("cuda")
    index = torch.cuda.current_device()
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    limits = NvmlSampler(index).limits()
    if limits is None:
        print("NVML (nvidia-ml-py) is not available: no clocks to sample")
        return 2
    print(
        f"{torch.cuda.get_device_name()} ({sms} SMs), power limit {limits['power_limit_w']:.0f} W, "
        f"max SM clock {limits['max_sm_clock_mhz']} MHz"
    )
    rows = []
    if args.gemm:
        n = args.gemm
        gemm = gemm_calls(device, n)["bf16"]
        rows.append(
            report(f"cuBLAS bf16 GEMM {n}^3", 2.0 * n**3, run_loop(gemm, 1, args.seconds, index, args.gap_ms), sms)
        )
        del gemm
    cases, _ = bc.catalog_cases(args.cases)
    status = 0
    for case in cases:
        n_sets = input_sets_for(case)
        data = make_case_data(case, device, n_sets)
        q, k, v = data.sets[0]
        ref = reference(case, q, k, v, data.bounds)
        for contender in args.contenders.split(","):
            call, wrong = checked_call(case, data, ref, contender)
            if call is None:
                status = 1 if wrong and contender == "tsattn" else status
                continue
            rows.append(
                report(
                    f"{case.name} {contender}",
                    bc.flops(case),
                    run_loop(call, n_sets, args.seconds, index, args.gap_ms),
                    sms,
                )
            )
        del data, ref
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
