"""tools/bench/power_probe.py without a GPU: the report line's figures from a synthetic loop summary,
and the visible skip when there is no CUDA device."""

import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOOLS))
torch = pytest.importorskip("torch")
import power_probe  # noqa: E402


def test_report_line_and_row(capsys):
    loop = {
        "ms": 2.0,
        "sm_clock_mhz": 1650.0,
        "sm_clock_min_mhz": 1500.0,
        "power_w": 690.0,
        "slowdown_share": {"sw_power_cap": 1.0, "hw_thermal": 0.0},
        "samples": 300,
    }
    row = power_probe.report("some workload", 1.2e12, loop, 132)
    # 1.2e12 FLOP in 2 ms is 600 TFLOP/s; over 132 SMs at 1650 MHz, 2755 FLOP per SM cycle
    assert row["tflops"] == pytest.approx(600.0)
    assert row["flop_per_sm_cycle"] == pytest.approx(600e12 / (132 * 1650e6))
    assert row["workload"] == "some workload" and row["power_w"] == 690.0
    line = capsys.readouterr().out
    assert "600.0 TFLOP/s" in line and "SM  1650 MHz (min 1500)" in line and "690 W" in line
    assert "2755 FLOP/SM-cycle" in line and "slowdown: sw_power_cap 100%" in line and "hw_thermal" not in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA device")
def test_without_a_gpu_it_says_so():
    res = subprocess.run([sys.executable, str(TOOLS / "power_probe.py")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "skipped: no CUDA device" in res.stdout
