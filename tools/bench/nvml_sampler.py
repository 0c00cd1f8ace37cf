"""nvml_sampler.py - the GPU's SM clock, power draw and clock slowdown reasons, sampled by a thread
while a workload runs (tools/bench/bench.py around each contender's timed calls, tools/bench/power_probe.py).

Why: an H100/H200 under sustained tensor-core load runs at its power limit and lowers its SM clock
to stay there, so a TFLOP/s figure is (work per SM cycle) x (clock), and two kernels can differ in
either. With the clock recorded next to the time, a report can say which.

Without NVML (no nvidia-ml-py, no GPU) the sampler records nothing and summary() is None.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import List, Optional, Sequence, Tuple

# NVML clock event reasons (nvml.h, nvmlClocksEventReason*) that mean "slowed down".
SLOWDOWN_REASONS = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
}

Sample = Tuple[float, float, int]  # (SM clock MHz, power W, clock event reason bits)


def summarize_samples(samples: Sequence[Sample], trim: float = 0.1) -> Optional[dict]:
    """Median SM clock and power, the lowest clock, and the share of samples with each slowdown
    reason active; the first and last `trim` of the samples are dropped (the workload starting and
    draining). None for no samples."""
    if not samples:
        return None
    cut = int(len(samples) * trim)
    busy = list(samples[cut : len(samples) - cut]) or list(samples)
    clocks = [s[0] for s in busy]
    return {
        "samples": len(busy),
        "sm_clock_mhz": statistics.median(clocks),
        "sm_clock_min_mhz": min(clocks),
        "power_w": statistics.median(s[1] for s in busy),
        "slowdown_share": {
            name: sum(1 for s in busy if s[2] & bit) / len(busy) for name, bit in SLOWDOWN_REASONS.items()
        },
    }


def nvml_index(cuda_index: int, visible: Optional[str] = None) -> int:
    """NVML's index of CUDA device `cuda_index`: CUDA counts only the devices CUDA_VISIBLE_DEVICES
    lists, in its order; NVML counts every device. Entries given as UUIDs are not resolved: the CUDA
    index is used as is."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    entries = [e.strip() for e in (visible or "").split(",") if e.strip()]
    if cuda_index < len(entries) and entries[cuda_index].isdigit():
        return int(entries[cuda_index])
    return cuda_index


def flop_per_sm_cycle(tflops: float, sms: int, sm_clock_mhz: float) -> float:
    """Work per SM cycle: TFLOP/s over (SMs x clock)."""
    return tflops * 1e12 / (sms * sm_clock_mhz * 1e6)


class NvmlSampler:
    """with NvmlSampler(cuda_index) as s: <run the workload>; then s.summary(). One sample every
    `period` seconds from a thread; a no-op where NVML cannot be opened."""

    def __init__(self, cuda_index: int = 0, period: float = 0.01):
        self.period = period
        self.samples: List[Sample] = []
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._nvml = None
        self._handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index(cuda_index))
            self._nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML means no samples, not a failed run
            self._nvml = None

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def limits(self) -> Optional[dict]:
        """The enforced power limit (W) and the maximum SM clock (MHz)."""
        if not self.available:
            return None
        nv = self._nvml
        return {
            "power_limit_w": nv.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1000.0,
            "max_sm_clock_mhz": nv.nvmlDeviceGetMaxClockInfo(self._handle, nv.NVML_CLOCK_SM),
        }

    def _run(self):
        nv = self._nvml
        while not self._done.is_set():
            self.samples.append(
                (
                    float(nv.nvmlDeviceGetClockInfo(self._handle, nv.NVML_CLOCK_SM)),
                    nv.nvmlDeviceGetPowerUsage(self._handle) / 1000.0,
                    int(nv.nvmlDeviceGetCurrentClocksEventReasons(self._handle)),
                )
            )
            time.sleep(self.period)

    def __enter__(self) -> "NvmlSampler":
        if self.available:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> Optional[dict]:
        return summarize_samples(self.samples)
