"""The ceiling the attention figures are read against: cuBLAS n x n x n GEMMs (bf16, fp8) timed like
the contenders, with the GPU's clock and power while timed."""

from __future__ import annotations

from typing import Callable, Dict, List

import torch

import bench_cases as bc
from failures import short_error
from nvml_sampler import NvmlSampler
from timing import cuda_index, cuda_timer, time_stats


CEILING_N = 8192


def gemm_calls(device: torch.device, n: int = CEILING_N) -> Dict[str, Callable[[int], torch.Tensor]]:
    """cuBLAS n x n x n GEMMs on random inputs, as call(i) like a contender's: bf16 through
    torch.matmul; e4m3 through torch._scaled_mm with a bf16 result."""
    gen = torch.Generator(device=device).manual_seed(n)
    a = torch.randn(n, n, device=device, generator=gen)
    b = torch.randn(n, n, device=device, generator=gen)
    one = torch.ones((), device=device)
    a16, b16 = a.bfloat16(), b.bfloat16()
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()  # _scaled_mm takes B column-major
    return {
        "bf16": lambda i: torch.matmul(a16, b16),
        "fp8": lambda i: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
    }


def gemm_ceiling(device: torch.device, n: int = CEILING_N) -> List[dict]:
    """gemm_calls timed like the contenders, with the clock and power while timed: what this GPU's
    tensor cores deliver in this run, the ceiling for an attention kernel's two GEMMs."""
    rows = []
    for dtype, call in gemm_calls(device, n).items():
        row = {"dtype": dtype, "n": n, "via": "torch._scaled_mm" if dtype == "fp8" else "torch.matmul"}
        try:
            with NvmlSampler(cuda_index(device)) as gpu:
                row.update(time_stats(cuda_timer(call, 1, bc.WARMUP, None, device)))
            row.update(status="ok", tflops=2.0 * n**3 / row["ms"] / 1e9)
            state = gpu.summary()
            if state:
                row["gpu_state"] = state
        except Exception as e:  # noqa: BLE001 - a missing GEMM path is a result, not a failed run
            row["status"] = f"error: {short_error(e)}"
        rows.append(row)
    return rows
