"""tools/profile/profile_compare_report.py on a synthetic ncu run (raw metrics and SASS source page of one
kernel): the table's arithmetic and the choice of the main loop. No GPU."""

import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
NAME = "tsattn.d128-dense-bf16-h32kv8-b1-s8k"  # 4 * 32 * 128 * 8192^2 = 1.0995e12 FLOP

RAW = {  # metric: (unit, value)
    "gpu__time_duration.sum": ("ms", "2.5"),
    "sm__cycles_active.avg": ("cycle", "2,000,000"),
    "sm__cycles_active.max": ("cycle", "2,100,000"),
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": ("%", "50"),
    "launch__sm_count": ("SM", "132"),
    "smsp__inst_executed.sum": ("inst", "1,099,511,627"),
    "smsp__issue_active.avg.pct_of_peak_sustained_active": ("%", "40.5"),
}

SASS_HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
SASS = [  # the idle warps' final wait (many samples, few executions), the loop, a spin loop
    ("0x00", "UCGABAR_WAIT ;", "300", "1,584"),
    ("0x10", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;", "500", "1,048,576"),
    ("0x20", "MUFU.EX2 R1, R1 ;", "150", "1,048,576"),
    ("0x30", "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R1], R2 ;", "50", "5,948,525"),
]


def run_report(tmp_path: Path, kernels=(RAW,)) -> str:
    """The report of one call whose kernels have these raw metrics (ncu writes a row per kernel)."""
    with open(tmp_path / f"{NAME}.raw.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(RAW.keys())
        writer.writerow(unit for unit, _ in RAW.values())
        for kernel in kernels:
            writer.writerow(kernel[name][1] for name in RAW)
    with open(tmp_path / f"{NAME}.sass.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Kernel Name", "prefill_sm90a_sm_90a_d128_bf16_bf16_dense_fixed_pairs"])
        writer.writerow(SASS_HEADER)
        writer.writerows(SASS)
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "profile" / "profile_compare_report.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def test_cycles_tensor_work_and_instructions(tmp_path):
    row = next(line for line in run_report(tmp_path).splitlines() if line.startswith(NAME))
    fields = row.split()
    # time in us (ms converted), active cycles avg / max, tensor-active share of the active cycles
    assert fields[1:5] == ["2500.0", "2000000", "2100000", "50.0"]
    # FLOP per SM per tensor-active cycle: 1.0995e12 / 132 / 1e6; warp instructions per MFLOP:
    # 1.0995e9 / 1.0995e6
    assert fields[5:8] == ["8330", "1000.0", "40.5"]


def test_main_loop_is_the_busiest_sampled_count(tmp_path):
    row = next(line for line in run_report(tmp_path).splitlines() if line.startswith(NAME))
    # Not the spin loop (executed most, few samples) nor the final wait (few executions): the two
    # instructions executed 1,048,576 times, 8 warp passes per 128 x 128 tile (131072 tiles), 65% of
    # the samples.
    assert "2 instructions x 1048576 (8 warp passes per 128x128 tile), 65% of samples" in row


def test_kernel_without_tensor_work(tmp_path):
    """An e4m3 call runs the V^T pre-pass before attention: no tensor work there, so no FLOP per
    tensor cycle ("-"), and the attention kernel's row is unchanged."""
    pre_pass = dict(RAW)
    pre_pass["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"] = ("%", "0")
    rows = [line.split() for line in run_report(tmp_path, (pre_pass, RAW)).splitlines() if line.startswith(NAME)]
    assert [fields[4:6] for fields in rows] == [["0.0", "-"], ["50.0", "8330"]]
