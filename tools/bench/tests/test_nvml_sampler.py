"""tools/bench/nvml_sampler.py without a GPU: the summary of synthetic samples, work per SM cycle, and
the sampler's no-op when NVML cannot be opened."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import nvml_sampler as ns  # noqa: E402

POWER_CAP = ns.SLOWDOWN_REASONS["sw_power_cap"]
THERMAL = ns.SLOWDOWN_REASONS["hw_thermal"]


def test_summary_trims_the_ends_and_takes_medians():
    # 20 samples: the first and last 2 (10%) are the workload starting and draining.
    samples = (
        [(1980.0, 100.0, 0)] * 2 + [(1600.0 + 10 * i, 600.0 + i, POWER_CAP) for i in range(16)] + [(345.0, 90.0, 0)] * 2
    )
    samples[5] = (1500.0, 650.0, POWER_CAP | THERMAL)
    s = ns.summarize_samples(samples)
    assert s["samples"] == 16
    middle = sorted([1600.0 + 10 * i for i in range(16) if i != 3] + [1500.0])
    assert s["sm_clock_mhz"] == pytest.approx((middle[7] + middle[8]) / 2)
    assert s["sm_clock_min_mhz"] == 1500.0
    assert s["slowdown_share"]["sw_power_cap"] == 1.0
    assert s["slowdown_share"]["hw_thermal"] == pytest.approx(1 / 16)
    assert s["slowdown_share"]["hw_slowdown"] == 0.0


def test_summary_of_few_or_no_samples():
    assert ns.summarize_samples([]) is None
    one = ns.summarize_samples([(1700.0, 500.0, 0)])
    assert one["samples"] == 1 and one["sm_clock_mhz"] == 1700.0 and one["power_w"] == 500.0


def test_flop_per_sm_cycle():
    # 989.4 TFLOP/s on 132 SMs at 1830 MHz: the H100/H200 dense bf16 peak, 4096 per SM cycle
    assert ns.flop_per_sm_cycle(989.4, 132, 1830.0) == pytest.approx(4096, rel=1e-3)


def test_nvml_index_follows_cuda_visible_devices():
    assert ns.nvml_index(0, "") == 0 and ns.nvml_index(2, "") == 2
    assert ns.nvml_index(0, "3,1") == 3 and ns.nvml_index(1, "3, 1") == 1
    assert ns.nvml_index(0, "GPU-8e6c2a0b") == 0  # a UUID: taken as in order
    assert ns.nvml_index(2, "3,1") == 2  # past the list: unchanged


def test_sampler_without_nvml_records_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    sampler = ns.NvmlSampler(0)
    assert not sampler.available and sampler.limits() is None
    with sampler as s:
        pass
    assert s.samples == [] and s.summary() is None
