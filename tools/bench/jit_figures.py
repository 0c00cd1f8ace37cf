"""The JIT figures: the NVRTC compile of single kernels into empty caches (jit_cold_compile), the first
call of a fresh process with an empty cache and then served from the disk cache (jit_first_calls), and
the host cost per call with the kernel loaded (jit_host_cost)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import List, Optional

import torch
import torch.nn.functional as F

from contenders import sdpa_backend
from failures import ContextLost, context_alive, short_error
from tsattn_under_test import CHECKOUT_PYTHON, FROM_CHECKOUT, tsattn


JIT_SPECS = [  # (head_dim, input dtype, output dtype, mask variant, layout) in manifest spelling
    (128, "bf16", "bf16", "causal", "fixed"),
    (256, "bf16", "bf16", "causal", "fixed"),
    (128, "e4m3", "bf16", "dense", "fixed"),
    (128, "bf16", "bf16", "varwin", "packed"),
]
JIT_FAMILIES = ("sm90a", "sm80")


def arch_for_device(device: Optional[torch.device]) -> str:
    if device is not None and device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return {8: "sm_80", 9: "sm_90a", 10: "sm_100", 12: "sm_120"}.get(major, f"sm_{major}{minor}")
    return "sm_90a"


def jit_cold_compile(specs=JIT_SPECS, families=JIT_FAMILIES, arch: str = "sm_90a") -> List[dict]:
    """tsattn.precompile of a one-kernel manifest into an empty directory, per spec and family
    (one thread: the NVRTC time of one kernel). A family this build lacks gives one n/a row."""
    out = []
    for fam in families:
        for d, din, dout, mask, layout in specs:
            row = {
                "family": fam,
                "arch": arch,
                "head_dim": d,
                "input_dtype": din,
                "output_dtype": dout,
                "mask": mask,
                "layout": layout,
            }
            with tempfile.TemporaryDirectory(prefix="tsattn-bench-cold-") as tmp:
                manifest = Path(tmp) / "one.json"
                manifest.write_text(
                    json.dumps(
                        {
                            "schema": 1,
                            "kernels": [
                                {
                                    "family": fam,
                                    "head_dim": d,
                                    "input_dtype": din,
                                    "output_dtype": dout,
                                    "mask": mask,
                                    "layout": layout,
                                    "lse": False,
                                }
                            ],
                        }
                    )
                )
                try:
                    t0 = time.perf_counter()
                    res = tsattn.precompile(manifest, arch, Path(tmp) / "cache", jobs=1)
                    row["seconds"] = time.perf_counter() - t0
                    row["result"] = res
                    row["status"] = "ok" if res.get("compiled") == 1 else f"unexpected result {res}"
                except ValueError as e:
                    if "is not a kernel family" in str(e):
                        row["status"] = f"n/a: kernel family {fam} is not in this build"
                    else:
                        row["status"] = f"n/a: {short_error(e, 200)}"
                except Exception as e:  # noqa: BLE001
                    row["status"] = f"error: {short_error(e, 200)}"
            out.append(row)
            if row["status"].startswith("n/a: kernel family"):
                break  # this build has no such family: one row says so
    return out


FIRST_CALL_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
import torch, tsattn
import_s = time.perf_counter() - t0
S, HQ, HKV, D = 1024, 32, 8, 128
dev = torch.device("cuda")
q = (0.2 * torch.randn(1, S, HQ, D, device=dev)).to(torch.bfloat16)
k = (0.2 * torch.randn(1, S, HKV, D, device=dev)).to(torch.bfloat16)
v = (0.2 * torch.randn(1, S, HKV, D, device=dev)).to(torch.bfloat16)
torch.cuda.synchronize()
t0 = time.perf_counter(); tsattn.library_version(); lib_ms = 1e3 * (time.perf_counter() - t0)
t0 = time.perf_counter(); tsattn.batch_prefill(q, k, v, mask_type="causal"); torch.cuda.synchronize()
first_ms = 1e3 * (time.perf_counter() - t0)
t0 = time.perf_counter(); tsattn.batch_prefill(q, k, v, mask_type="causal"); torch.cuda.synchronize()
second_ms = 1e3 * (time.perf_counter() - t0)
print("RESULT " + json.dumps({"import_s": import_s, "library_load_ms": lib_ms, "first_call_ms": first_ms,
                              "second_call_ms": second_ms, "cache": tsattn.cache_info()}))
"""


def _run_first_call(cache_dir: str, disable_jit: bool, timeout: float = 180) -> dict:
    env = dict(os.environ)
    env["TSATTN_CACHE_DIR"] = cache_dir
    env.pop("TSATTN_CACHE_RO_PATH", None)  # only the cache under test
    env.pop("TSATTN_ALWAYS_COMPILE", None)
    env.pop("TSATTN_CACHE_DISABLE", None)
    if disable_jit:
        env["TSATTN_DISABLE_JIT"] = "1"
    else:
        env.pop("TSATTN_DISABLE_JIT", None)
    if FROM_CHECKOUT:
        env["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT_PYTHON)] + [p for p in [env.get("PYTHONPATH")] if p])
    try:
        res = subprocess.run(
            [sys.executable, "-c", FIRST_CALL_SCRIPT], env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"status": f"error: timed out after {timeout:.0f} s"}
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[len("RESULT ") :])
            out["status"] = "ok"
            return out
    tail = " ".join((res.stderr or res.stdout).strip().splitlines()[-3:])[:400]
    return {"status": f"error: rc={res.returncode}: {tail}"}


def jit_first_calls(warm_runs: int = 2) -> dict:
    """Fresh processes, B1 S1024 32/8 D128 bf16 causal: one with an empty cache (NVRTC compile on the
    first call), then `warm_runs` served from that disk cache with TSATTN_DISABLE_JIT=1."""
    with tempfile.TemporaryDirectory(prefix="tsattn-bench-disk-") as tmp:
        cold = _run_first_call(tmp, disable_jit=False)
        warm = [_run_first_call(tmp, disable_jit=True) for _ in range(warm_runs)] if cold["status"] == "ok" else []
    return {"problem": "B=1 S=1024 Hq/Hkv=32/8 D=128 bf16 causal, fixed layout", "cold": cold, "warm": warm}


def jit_host_cost(device: torch.device, calls: int = 2000, sync_every: int = 100) -> dict:
    """time.perf_counter around each call only (the kernel loaded; synchronizing every sync_every
    calls, outside the timed region), for a tiny problem."""
    from torch.nn.attention import sdpa_kernel

    s, hq, hkv, d = 128, 32, 8, 128

    def rnd(*shape):
        return (0.2 * torch.randn(*shape, device=device)).to(torch.bfloat16)

    q, k, v = rnd(1, s, hq, d), rnd(1, s, hkv, d), rnd(1, s, hkv, d)
    out = torch.empty_like(q)
    qp, kp, vp = rnd(2 * s, hq, d), rnd(2 * s, hkv, d), rnd(2 * s, hkv, d)
    ind = torch.tensor([0, s, 2 * s], dtype=torch.int32)
    qt, kt, vt = (
        q.transpose(1, 2),
        k.repeat_interleave(hq // hkv, 2).transpose(1, 2),
        v.repeat_interleave(hq // hkv, 2).transpose(1, 2),
    )
    flash = sdpa_backend("FLASH_ATTENTION")

    def sdpa():
        with sdpa_kernel([flash]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)

    variants = {
        "tsattn fixed layout (allocates out)": lambda: tsattn.batch_prefill(q, k, v, mask_type="causal"),
        "tsattn fixed layout, out= given": lambda: tsattn.batch_prefill(q, k, v, mask_type="causal", out=out),
        "tsattn packed layout, host indptrs (2 requests)": lambda: tsattn.batch_prefill(
            qp, kp, vp, qo_indptr=ind, kv_indptr=ind, mask_type="causal"
        ),
        "torch SDPA flash backend, same problem (for scale)": sdpa,
    }
    res = {
        "problem": f"B=1 S={s} Hq/Hkv={hq}/{hkv} D={d} bf16 causal (packed: 2 x {s})",
        "calls": calls,
        "variants": {},
    }
    for name, fn in variants.items():
        try:
            for _ in range(20):
                fn()
            torch.cuda.synchronize(device)
            ts = []
            for i in range(calls):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
                if (i + 1) % sync_every == 0:
                    torch.cuda.synchronize(device)
            torch.cuda.synchronize(device)
            us = sorted(1e6 * t for t in ts)
            n = len(us)
            res["variants"][name] = {
                "status": "ok",
                "us_median": statistics.median(us),
                "us_p10": us[n // 10],
                "us_p90": us[(9 * n) // 10],
                "us_min": us[0],
                "us_mean": statistics.fmean(us),
            }
        except Exception as e:  # noqa: BLE001
            res["variants"][name] = {"status": f"error: {short_error(e)}"}
    return res


def jit_figures(device: torch.device, arch: str, quick: bool, host_calls: int) -> dict:
    jit: dict = {}
    specs = JIT_SPECS[:1] if quick else JIT_SPECS
    steps = [
        ("cold_compile", lambda: jit_cold_compile(specs, JIT_FAMILIES, arch)),
        ("first_call", lambda: jit_first_calls(1 if quick else 2)),
        ("host_cost", lambda: jit_host_cost(device, host_calls)),
    ]
    for key, fn in steps:
        t0 = time.perf_counter()
        try:
            jit[key] = fn()
        except Exception as e:  # noqa: BLE001
            if not context_alive(device):
                raise ContextLost(f"JIT figures ({key}): {short_error(e)}") from e
            jit[key] = {"status": f"error: {short_error(e)}", "traceback": traceback.format_exc()[-1500:]}
        print(f"[jit] {key}: {time.perf_counter() - t0:.1f} s", flush=True)
    return jit
