#!/usr/bin/env python3
"""profile_compare.py - the calls that tools/profile/profile_compare.sh puts under ncu: each contender's call
of each tools/bench/bench.py case, once, inside an NVTX range named "CONTENDER CASE".

    usage (under ncu --profile-from-start off --nvtx): python3 tools/profile/profile_compare.py CASES [--contenders tsattn,cudnn]
CASES are tools/bench/bench.py case-name glob patterns, comma-separated. Every call is checked against the
fp32 reference and warmed up (twice, outside the profiled range) before the profiled call, which runs
between cudaProfilerStart and cudaProfilerStop, so only its kernels are profiled.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import torch  # noqa: E402

import bench_cases as bc  # noqa: E402
from case_data import make_case_data, reference  # noqa: E402
from contenders import checked_call  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases")
    parser.add_argument("--contenders", default="tsattn,cudnn")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 2
    device = torch.device("cuda")
    cases, _ = bc.catalog_cases(args.cases)
    cudart = torch.cuda.cudart()
    status = 0
    for case in cases:
        data = make_case_data(case, device, 2)
        q, k, v = data.sets[0]
        ref = reference(case, q, k, v, data.bounds)
        for contender in args.contenders.split(","):
            call, wrong = checked_call(case, data, ref, contender)
            if call is None:
                status = 1 if wrong else status
                continue
            call(1)
            torch.cuda.synchronize()
            cudart.cudaProfilerStart()
            torch.cuda.nvtx.range_push(f"{contender} {case.name}")
            call(0)
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            cudart.cudaProfilerStop()
            print(f"profiled: {contender} {case.name} ({bc.flops(case) / 1e9:.1f} GFLOP)", flush=True)
        del data, ref
        torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main())
