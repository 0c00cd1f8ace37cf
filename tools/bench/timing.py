"""How a call is timed: per-call CUDA events, in batches queued behind a GPU sleep so that host
overhead stays out of the figures (cuda_timer); host wall-clock for the CPU tests of the harness
(wall_timer); the statistics reported (time_stats)."""

from __future__ import annotations

import statistics
import time
from typing import Callable, List, Optional, Sequence

import torch

import bench_cases as bc

SLEEP_MS = 20.0  # GPU sleep queued before each batch of timed calls
BATCH = 50  # timed calls queued behind one sleep
ASSUMED_CLOCK_HZ = 1.98e9


def sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cuda_index(dev: torch.device) -> int:
    """The device's CUDA ordinal, which NvmlSampler takes."""
    return dev.index if dev.index is not None else torch.cuda.current_device()


def cuda_timer(
    call: Callable[[int], object],
    n_sets: int,
    warmup: int,
    fixed_reps: Optional[int],
    device: torch.device,
    sleep: bool = True,
) -> List[float]:
    """Per-call CUDA-event times (ms). Warm-up first (its mean sizes the repetition count), then
    batches of BATCH calls, each batch queued behind a GPU sleep so the host runs ahead."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for i in range(warmup):
        call((i + 1) % n_sets)
    e1.record()
    torch.cuda.synchronize(device)
    est = e0.elapsed_time(e1) / max(1, warmup)
    reps = bc.choose_reps(est, fixed_reps)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    can_sleep = sleep and hasattr(torch.cuda, "_sleep")
    for b0 in range(0, reps, BATCH):
        if can_sleep:
            torch.cuda._sleep(int(SLEEP_MS * 1e-3 * ASSUMED_CLOCK_HZ))
        for i in range(b0, min(reps, b0 + BATCH)):
            idx = (warmup + 1 + i) % n_sets
            starts[i].record()
            call(idx)
            stops[i].record()
        torch.cuda.synchronize(device)
    return [a.elapsed_time(b) for a, b in zip(starts, stops)]


def wall_timer(call, n_sets, warmup, fixed_reps, device, sleep=True) -> List[float]:
    """Host wall-clock per call (ms), synchronizing after each: for CPU tests of the harness."""
    for i in range(warmup):
        call((i + 1) % n_sets)
    sync(device)
    reps = fixed_reps or 3
    out = []
    for i in range(reps):
        t0 = time.perf_counter()
        call((warmup + 1 + i) % n_sets)
        sync(device)
        out.append(1e3 * (time.perf_counter() - t0))
    return out


def time_stats(times: Sequence[float]) -> dict:
    xs = sorted(times)
    n = len(xs)

    def pct(p):
        return xs[min(n - 1, max(0, int(round(p * (n - 1)))))]

    return {
        "ms": statistics.median(xs),
        "ms_min": xs[0],
        "ms_p10": pct(0.1),
        "ms_p90": pct(0.9),
        "ms_mean": statistics.fmean(xs),
        "reps": n,
    }


def median_event_ms(call: Callable[[], object], reps: int, warmup: int = 3) -> float:
    """The median of `reps` calls' CUDA-event times after `warmup` calls, the calls queued behind a
    GPU sleep (cuda_timer), so the figure is the GPU's time and not the host's: the single-question
    scripts' timer (lse_cost.py, paged_cost.py), where the variants alternate in rounds instead."""
    return statistics.median(cuda_timer(lambda _: call(), 1, warmup, reps, torch.device("cuda")))
