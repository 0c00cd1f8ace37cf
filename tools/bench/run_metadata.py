"""What a run ran on, for bench.json's meta: versions, the GPU and its limits, the TSATTN_* settings
and the method in words (collect_meta); nvidia-smi's clocks, sampled before the run, after every case
and at the end (smi_sample)."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import subprocess
import sys
from typing import Optional

import torch

import bench_cases as bc
from case_data import L2_BYTES, TOLERANCES
from failures import short_error
from nvml_sampler import NvmlSampler
from timing import BATCH, SLEEP_MS, cuda_index
from tsattn_under_test import tsattn


SMI_FULL = "index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,temperature.gpu,power.draw"
SMI_BASIC = "clocks.sm,clocks.mem"


def smi_sample(enabled: bool = True) -> Optional[list]:
    """nvidia-smi's clocks (MHz) etc. per GPU, or None where nvidia-smi is missing or fails."""
    if not enabled:
        return None
    for fields in (SMI_FULL, SMI_BASIC):
        try:
            res = subprocess.run(
                ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=15,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        if res.returncode != 0:
            continue
        return parse_smi(fields, res.stdout)
    return None


def parse_smi(fields: str, text: str) -> list:
    keys = fields.split(",")
    rows = []
    for line in text.strip().splitlines():
        vals = [v.strip() for v in line.split(",")]
        row = {}
        for k, v in zip(keys, vals):
            try:
                row[k] = float(v) if "." in v else int(v)
            except ValueError:
                row[k] = v
        rows.append(row)
    return rows


def _version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_meta(args, device: Optional[torch.device]) -> dict:
    meta = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": [sys.executable] + sys.argv,
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    versions = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "tsattn": tsattn.__version__,
        "triton": _version("triton") or _version("pytorch-triton"),
        "numpy": _version("numpy"),
        "matplotlib": _version("matplotlib"),
    }
    try:
        versions["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        versions["cudnn"] = None
    try:
        versions["tsattn_library"] = tsattn.library_version()
        meta["tsattn_library_path"] = tsattn.library_path()
    except Exception as e:  # noqa: BLE001
        versions["tsattn_library"] = None
        meta["tsattn_library_error"] = short_error(e)
    meta["versions"] = versions
    if device is not None and device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        meta["gpu"] = p.name
        meta["capability"] = f"{p.major}.{p.minor}"
        meta["sm_count"] = p.multi_processor_count
        meta["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
        meta["gpu_limits"] = NvmlSampler(cuda_index(device)).limits()
    meta["env"] = {k: v for k, v in os.environ.items() if k.startswith("TSATTN_") or k in ("CUDA_VISIBLE_DEVICES",)}
    meta["method"] = {
        "flops": "docs/contract.md: 4 * Hq * D * visible (i, j) pairs; TFLOP/s = flops / median time",
        "inputs": "0.2*randn (0.125*randn for fp8), cast to the case dtype; fp8 cases: e4m3 in, bf16 out for tsattn",
        "rotation": f"input sets rotated per call, together > 2 x L2 ({L2_BYTES // 2**20} MB)",
        "check": "each contender's first output vs an fp32 torch reference, docs/contract.md tolerances "
        "(every element within rtol/atol, relative norm, all finite); a failure is WRONG, not timed",
        "first_call": "the first call (JIT compile / cuDNN plan / torch.compile) is timed apart and excluded",
        "warmup": args.warmup,
        "reps": args.reps or f"auto: enough for {bc.REPS_TARGET_MS:.0f} ms, within [{bc.REPS_MIN}, {bc.REPS_MAX}]",
        "timer": f"CUDA events around each call, batches of {BATCH} queued behind a {SLEEP_MS:.0f} ms GPU sleep; median",
        "gqa": {n: bc.gqa_handling(n) for n in bc.CONTENDERS},
        "tolerances": {k: dict(zip(("rtol", "atol", "rel_norm"), v)) for k, v in TOLERANCES.items()},
    }
    meta["contender_labels"] = dict(bc.LABELS)
    return meta
