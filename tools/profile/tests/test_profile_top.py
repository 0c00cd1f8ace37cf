"""tools/profile/profile_top.py on a synthetic ncu source-page CSV: the per-opcode shares, the stall
reasons per opcode and the ranked instructions with their predecessors. No GPU."""

import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

HEADER = [
    "Address",
    "Source",
    "Warp Stall Sampling (All Samples)",
    "Warp Stall Sampling (Not-issued Samples)",
    "stall_wait",
    "stall_barrier",
    "stall_selected",
    "stall_wait (Not Issued)",
]
# address, SASS, all samples, not issued, wait, barrier, selected, wait (not issued: ignored)
INSTRUCTIONS = [
    ("0x00", "FFMA R1, R2, R3, -R4 ;", "10", "0", "0", "0", "10", "0"),
    ("0x10", "MUFU.EX2 R1, R1 ;", "50", "40", "40", "0", "10", "40"),
    ("0x20", "@P0 MUFU.EX2 R5, R5 ;", "30", "20", "20", "0", "10", "20"),
    ("0x30", "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;", "1,010", "1,000", "0", "1,000", "10", "0"),
]


def run_tool(tmp_path: Path) -> str:
    path = tmp_path / "k.sass.csv"
    with open(path, "w", newline="") as f:
        f.write('"ncu preamble line"\n')
        writer = csv.writer(f)
        writer.writerow(HEADER)
        writer.writerows(INSTRUCTIONS)
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "profile" / "profile_top.py"), str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def test_shares_per_opcode_and_reason(tmp_path):
    out = run_tool(tmp_path)
    assert "instructions: 4, samples: 1100" in out
    lines = out.splitlines()
    # Predicated instructions count under their opcode; thousands separators are read.
    assert any(line.split() == ["91.82", "WARPGROUP.DEPBAR.LE"] for line in lines)
    assert any(line.split() == ["7.27", "MUFU.EX2"] for line in lines)
    assert "barrier 90.9" in out and "wait 5.5" in out  # the (Not Issued) columns are not added twice
    mufu = next(line for line in lines if line.strip().startswith("MUFU.EX2") and "wait" in line)
    assert "wait 5.5" in mufu and "selected 1.8" in mufu


def test_ranked_instructions_come_with_predecessors(tmp_path):
    out = run_tool(tmp_path)
    ranked = out[out.index("top 40 instructions") :]
    marked = [line for line in ranked.splitlines() if line.startswith(">>")]
    assert len(marked) == 4  # every instruction is among the top 40 here
    depbar = next(line for line in marked if "DEPBAR" in line)
    assert depbar.split()[1:3] == ["91.82", "90.91"]
    before = ranked[: ranked.index(depbar)].splitlines()[-3:]  # its three predecessors, in order
    assert ["FFMA R1" in before[0], "MUFU.EX2 R1" in before[1], "MUFU.EX2 R5" in before[2]] == [True] * 3
