#!/usr/bin/env python3
"""time_unchecked.py - tools/bench/bench.py's timing of tsattn, without the correctness check.

For upper bounds that are wrong by design (a variant library that skips work, e.g. never stores
O), which tools/bench/bench.py reports as WRONG and does not time. Never use it for a figure that
claims speed: those come from tools/bench/bench.py or tools/bench/power_probe.py, which check first.
Same inputs and timing as the harness (case_data.make_case_data, timing.cuda_timer: batches of calls
queued behind a GPU sleep, median); the library is $TSATTN_LIBRARY.

usage: TSATTN_LIBRARY=build-x/libtsattn.so.0.1.0 PYTHONPATH=python python3 tools/bench/time_unchecked.py \\
           [--cases GLOB,...] [--label NAME]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import bench_cases as bc  # noqa: E402
from case_data import input_sets_for, make_case_data  # noqa: E402
from contenders import prepared_call  # noqa: E402
from timing import cuda_timer, time_stats  # noqa: E402

DEFAULT_CASES = "d128-dense-bf16-h32kv8-b1-s1k,d128-dense-bf16-h32kv8-b1-s2k,d128-dense-bf16-h32kv8-b1-s4k,d128-dense-bf16-h32kv8-b1-s8k"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", default=DEFAULT_CASES, help="comma-separated glob patterns over tools/bench/bench.py case names"
    )
    parser.add_argument("--label", default="tsattn", help="printed on every line (e.g. the build's name)")
    args = parser.parse_args()
    cases, unmatched = bc.catalog_cases(args.cases)
    if unmatched:
        return 1
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 2
    device = torch.device("cuda")
    for case in cases:
        n_sets = input_sets_for(case)
        data = make_case_data(case, device, n_sets)
        call = prepared_call(case, data, "tsattn")
        if isinstance(call, str):
            print(f"{case.name} {args.label}: {call}")
            continue
        ms = time_stats(cuda_timer(call, n_sets, bc.WARMUP, None, device))["ms"]
        print(
            f"{case.name} {args.label} {bc.flops(case) / (ms * 1e-3) / 1e12:7.1f} TFLOP/s ({ms:.4f} ms, unchecked)",
            flush=True,
        )
        del data
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
