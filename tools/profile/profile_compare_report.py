#!/usr/bin/env python3
"""profile_compare_report.py - the table of a tools/profile/profile_compare.sh run (no GPU needed).

    usage: python3 tools/profile/profile_compare_report.py DIR
For each CONTENDER.CASE in DIR, per kernel of the call: time and SM active cycles (ncu's clock is
near base: compare cycles), tensor-pipe activity, FLOP per tensor-active SM cycle (4096 is the
dense 16-bit peak: less means the tensor cores computed keys the mask throws away), warp
instructions per MFLOP, issue activity; and from the SASS, the main loop (the instructions
executed most often, stall samples included): its instructions, its warp passes per 128 x 128
tile of work (8 consumer warps passing once per 128 keys: 8; per 160 keys: 6.4) and its share of
the stall samples. FLOP follow docs/contract.md (tools/bench/bench_cases.py).
"""

from __future__ import annotations

import collections
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_cases as bc  # noqa: E402


def metric(row: dict, units: dict, name: str) -> float:
    value = float(row[name].replace(",", ""))
    return value * 1000.0 if units.get(name) == "ms" else value  # times in us


def kernels(raw_csv: Path):
    rows = list(csv.reader(raw_csv.open()))
    header, units = rows[0], dict(zip(rows[0], rows[1]))
    for values in rows[2:]:
        yield dict(zip(header, values)), units


def sass_loop(sass_csv: Path) -> dict:
    """The most executed instruction count that holds most samples: the main loop's body."""
    rows = list(csv.reader(sass_csv.open()))
    header = rows[1]
    executed, samples = header.index("Instructions Executed"), header.index("Warp Stall Sampling (All Samples)")
    by_count = collections.defaultdict(lambda: [0, 0])
    total = 0
    for r in rows[2:]:
        try:
            count, sampled = int(r[executed].replace(",", "")), int(r[samples].replace(",", ""))
        except (ValueError, IndexError):
            continue
        by_count[count][0] += 1
        by_count[count][1] += sampled
        total += sampled
    count = max((c for c in by_count if c > 0), key=lambda c: (by_count[c][1] > 0.2 * total, c))
    return dict(executed=count, instructions=by_count[count][0], sample_share=by_count[count][1] / max(total, 1))


def main() -> int:
    directory = Path(sys.argv[1])
    catalog = {case.name: case for case in bc.full_catalog()}
    print(
        f"{'contender.case':48s} {'us':>8s} {'act.avg':>9s} {'act.max':>9s} {'tensor%':>7s} {'FLOP/tcyc':>9s} "
        f"{'inst/MFLOP':>10s} {'issue%':>6s}  main loop"
    )
    for raw in sorted(directory.glob("*.raw.csv")):
        name = raw.name[: -len(".raw.csv")]
        case = catalog.get(name.split(".", 1)[1])
        flop = bc.flops(case) if case else float("nan")
        for row, units in kernels(raw):
            active = metric(row, units, "sm__cycles_active.avg")
            tensor = metric(row, units, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active") / 100 * active
            sms = metric(row, units, "launch__sm_count")
            loop = sass_loop(raw.with_name(name + ".sass.csv"))
            items = flop / (4 * case.head_dim * 128 * 128) if case else float("nan")
            # A kernel without tensor work (the e4m3 V^T pre-pass) has no FLOP per tensor cycle.
            per_tensor_cycle = f"{flop / sms / tensor:9.0f}" if tensor > 0 else f"{'-':>9s}"
            print(
                f"{name:48s} {metric(row, units, 'gpu__time_duration.sum'):8.1f} {active:9.0f} "
                f"{metric(row, units, 'sm__cycles_active.max'):9.0f} {100 * tensor / active:7.1f} "
                f"{per_tensor_cycle} {metric(row, units, 'smsp__inst_executed.sum') / flop * 1e6:10.1f} "
                f"{metric(row, units, 'smsp__issue_active.avg.pct_of_peak_sustained_active'):6.1f}  "
                f"{loop['instructions']} instructions x {loop['executed']} "
                f"({loop['executed'] / items:.0f} warp passes per 128x128 tile), {100 * loop['sample_share']:.0f}% of samples"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
