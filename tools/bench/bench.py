#!/usr/bin/env python3
"""tsattn against the strongest baselines on the same GPU, the same inputs, in the same run.

Contenders: tsattn; PyTorch SDPA with the cuDNN backend; PyTorch's flash kernel (FA2, called as
aten._flash_attention_forward, the op behind SDPA's flash backend, which also takes windows,
bottom-right causal masks and cu_seqlens; torch.nn.attention.varlen.varlen_attn for ragged
batches where torch has it); FlexAttention (torch.compile'd, block masks). A contender that cannot
express a case says "n/a: reason" in the results, never disappears. GQA: cuDNN gets K/V expanded
to Hq heads before timing; FA2, FlexAttention and tsattn take GQA natively.

Method: inputs 0.2*randn (0.125 for fp8), several input sets rotated so that the data touched by a
call is not in L2 (sets together > 2x the 60 MB L2 of an H200); every contender's output is checked
against an fp32 torch reference (docs/contract.md's tolerances: rtol/atol per element and the relative norm)
before it is timed: a wrong answer is reported WRONG, with no time. Timing: the first call (JIT
compile, cuDNN plan, torch.compile) is reported separately, then warm-up calls, then per-call CUDA
events around each call, queued behind a GPU sleep so host overhead does not leak into the figures;
the median is reported. TFLOP/s follow docs/contract.md: 4 * Hq * D * visible (i, j) pairs / median time.
JIT figures: NVRTC compile of single kernels into empty caches, the first call of a fresh process
served from the disk cache, and the host cost per call with the kernel loaded. The ceiling: cuBLAS
8192^3 GEMMs (bf16, fp8) timed the same way. While anything is timed, NVML records the SM clock and
power (an H100/H200 under tensor load runs at its power limit and sets its clock by it).

Cases are named d{D}-{mask}-{dtype}-h{Hq}kv{Hkv}-{shape} (tools/bench/bench_cases.py); --list shows them.

usage: tools/bench/bench.py [--quick | --full] [--cases GLOB,...] [--skip-cases GLOB,...] [--contenders a,b]
                      [--out DIR] [--reps N] [--budget-s S] [--no-jit | --jit-only] [--no-ceiling] [--list]
Outputs under --out: bench.json (every figure), bench.md, PNG plots, perf_section.md (for
docs/PERF.md), readme_section.md; tools/bench/bench_report.py regenerates them from bench.json.
Exit status: 0 done (baseline failures are results), 1 a tsattn result is WRONG or an error,
2 usage / no CUDA device, 3 the CUDA context was lost (results so far are written).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import inspect
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parents[1]
sys.path.insert(0, str(TOOLS))
if os.environ.get("TSATTN_BENCH_INSTALLED") != "1":
    sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bench_cases as bc  # noqa: E402
import bench_report as br  # noqa: E402
from nvml_sampler import NvmlSampler  # noqa: E402
import tsattn  # noqa: E402

L2_BYTES = 60 * 2**20  # H200
SCHEMA = 1
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": getattr(torch, "float8_e4m3fn", None)}
# docs/contract.md reference tolerances by the least precise of input and output dtype: rtol, atol, relative norm
TOLERANCES = {"fp8": (5e-2, 1.3e-1, 1e-1), "bf16": (2e-2, 1e-2, 2e-2), "fp16": (1e-2, 2e-3, 1e-2)}
SLEEP_MS = 20.0       # GPU sleep queued before each batch of timed calls
BATCH = 50            # timed calls queued behind one sleep
ASSUMED_CLOCK_HZ = 1.98e9


class ContextLost(RuntimeError):
    """The CUDA context is unusable (a sticky error): nothing more can run in this process."""


# ---------------------------------------------------------------- inputs and reference

@dataclass
class CaseData:
    case: bc.Case
    device: torch.device
    sets: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # tsattn layout
    bounds: List[Tuple[torch.Tensor, torch.Tensor]]  # per request, CPU int64, inclusive
    starts: Optional[torch.Tensor] = None  # vwin bounds in tsattn's layout (int32, on device)
    ends: Optional[torch.Tensor] = None
    qo_cpu: Optional[torch.Tensor] = None  # packed: int32 indptrs
    kv_cpu: Optional[torch.Tensor] = None
    qo_dev: Optional[torch.Tensor] = None
    kv_dev: Optional[torch.Tensor] = None

    @property
    def set_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.sets[0])


def input_sets_for(case: bc.Case, l2_bytes: int = L2_BYTES) -> int:
    """How many input sets to rotate so that together they exceed twice the L2 (at least 2)."""
    return max(2, min(32, 2 * l2_bytes // bc.input_bytes(case) + 1))


def _indptr(lengths: Sequence[int]) -> torch.Tensor:
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return torch.tensor(out, dtype=torch.int32)


def make_case_data(case: bc.Case, device, n_sets: int, seed: int = 0) -> CaseData:
    device = torch.device(device)
    s = case.shape
    dtype = TORCH_DTYPES[case.dtype]
    scale = 0.125 if case.dtype == "fp8" else 0.2
    gen = torch.Generator(device=device).manual_seed(seed + zlib.crc32(case.name.encode()))
    if s.packed:
        q_shape = (sum(s.q_lens), case.hq, case.head_dim)
        k_shape = (sum(s.kv_lens), case.hkv, case.head_dim)
    else:
        q_shape = (s.batch, s.sq, case.hq, case.head_dim)
        k_shape = (s.batch, s.sk, case.hkv, case.head_dim)

    def rnd(shape):
        return (scale * torch.randn(shape, generator=gen, device=device, dtype=torch.float32)).to(dtype)

    sets = [(rnd(q_shape), rnd(k_shape), rnd(k_shape)) for _ in range(n_sets)]
    bounds = [bc.row_bounds(case, b) for b in range(s.batch)]
    data = CaseData(case, device, sets, bounds)
    if case.mask == "vwin":
        raw = [bc.vwin_bounds(case, b) for b in range(s.batch)]
        st = [r[0] for r in raw]
        en = [r[1] for r in raw]
        cat = torch.cat if s.packed else torch.stack
        data.starts = cat(st).to(torch.int32).to(device)
        data.ends = cat(en).to(torch.int32).to(device)
    if s.packed:
        data.qo_cpu, data.kv_cpu = _indptr(s.q_lens), _indptr(s.kv_lens)
        data.qo_dev, data.kv_dev = data.qo_cpu.to(device), data.kv_cpu.to(device)
    return data


def _request_views(case: bc.Case, t: torch.Tensor, lengths: Sequence[int]):
    """The per-request [S, H, D] views of a fixed or packed tensor."""
    if case.shape.packed:
        start = 0
        for n in lengths:
            yield t[start:start + n]
            start += n
    else:
        for b in range(t.shape[0]):
            yield t[b]


def reference(case: bc.Case, q, k, v, bounds, budget_bytes: int = 256 * 2**20) -> torch.Tensor:
    """fp32 attention in tsattn's layout from the (dtype-rounded) inputs: per request, per kv head,
    in row blocks small enough for budget_bytes of scores. Rows that see no key output 0."""
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    scale = 1.0 / math.sqrt(case.head_dim)
    g = case.group
    qs = _request_views(case, q, case.shape.q_lens)
    ks = _request_views(case, k, case.shape.kv_lens)
    vs = _request_views(case, v, case.shape.kv_lens)
    os_ = _request_views(case, out, case.shape.q_lens)
    for (qb, kb, vb, ob, (lo, hi)) in zip(qs, ks, vs, os_, bounds):
        sq, sk = qb.shape[0], kb.shape[0]
        if sq == 0 or sk == 0:
            continue
        lo_d, hi_d = lo.to(q.device), hi.to(q.device)
        j = torch.arange(sk, device=q.device)
        rows = max(1, min(sq, budget_bytes // (4 * g * sk)))
        for h in range(case.hkv):
            kt = kb[:, h].float().t().contiguous()  # [D, Sk]
            vh = vb[:, h].float()
            qh = qb[:, h * g:(h + 1) * g].float().permute(1, 0, 2)  # [g, Sq, D]
            for r0 in range(0, sq, rows):
                r1 = min(sq, r0 + rows)
                scores = (qh[:, r0:r1] @ kt) * scale  # [g, rows, Sk]
                keep = (j[None, :] >= lo_d[r0:r1, None]) & (j[None, :] <= hi_d[r0:r1, None])
                scores.masked_fill_(~keep, float("-inf"))
                m = scores.amax(-1, keepdim=True)
                m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
                p = torch.exp(scores - m)
                l = p.sum(-1, keepdim=True)
                o = (p @ vh) / torch.where(l > 0, l, torch.ones_like(l))
                ob[r0:r1, h * g:(h + 1) * g] = o.permute(1, 0, 2)
    return out


def compare(out: torch.Tensor, ref: torch.Tensor, tol_key: str) -> dict:
    """docs/contract.md's check: every element within rtol/atol, relative norm within bound, all finite."""
    rtol, atol, norm_tol = TOLERANCES[tol_key]
    o = out.float()
    if tuple(o.shape) != tuple(ref.shape):
        return {"ok": False, "reason": f"output shape {tuple(o.shape)}, expected {tuple(ref.shape)}"}
    nonfinite = int((~torch.isfinite(o)).sum())
    diff = (o - ref).abs()
    ref_norm = float(ref.norm())
    rel = float((o - ref).nan_to_num(nan=1e30, posinf=1e30, neginf=1e30).norm()) / max(ref_norm, 1e-30)
    mism = int((~(diff <= atol + rtol * ref.abs())).sum())
    res = {"rel_norm_error": rel, "max_abs_error": float(diff.nan_to_num(nan=float("inf")).max()) if diff.numel() else 0.0,
           "mismatches": mism, "elements": o.numel(), "nonfinite": nonfinite,
           "tolerance": {"rtol": rtol, "atol": atol, "rel_norm": norm_tol}}
    reasons = []
    if nonfinite:
        reasons.append(f"{nonfinite} non-finite")
    if not rel <= norm_tol:
        reasons.append(f"relative norm error {rel:.3g} > {norm_tol}")
    if mism:
        reasons.append(f"{mism} of {o.numel()} elements outside rtol={rtol} atol={atol} (max abs error {res['max_abs_error']:.3g})")
    res["ok"] = not reasons
    if reasons:
        res["reason"] = "; ".join(reasons)
    return res


# ---------------------------------------------------------------- contenders

@dataclass
class Prepared:
    """One way of running a contender on a case: call(i) runs input set i and returns the output
    in tsattn's layout (a view is fine). Alternatives are tried in order on the first call."""
    call: Callable[[int], torch.Tensor]
    via: str
    notes: List[str] = field(default_factory=list)
    na_if_error: Tuple[str, ...] = ()  # a first-call error containing one of these means "n/a", not "error"
    na_prefix: str = ""


PrepResult = Union[str, List[Prepared]]


def _tsattn_prepare(data: CaseData) -> PrepResult:
    c = data.case
    kw = dict(mask_type=c.mask_type, window_left=c.window)
    if c.mask == "vwin":
        kw.update(variable_window_token_starts=data.starts, variable_window_token_ends=data.ends)
    if c.dtype == "fp8":
        kw["out_dtype"] = torch.bfloat16
    via = "tsattn.batch_prefill"
    if c.shape.packed:
        kw.update(qo_indptr=data.qo_cpu, kv_indptr=data.kv_cpu)
        via += " (packed layout, indptrs on the host)"
    sets = data.sets
    return [Prepared(lambda i: tsattn.batch_prefill(*sets[i], **kw), via)]


def _expand(t: torch.Tensor, group: int, dim: int) -> torch.Tensor:
    return t.repeat_interleave(group, dim=dim) if group > 1 else t


def _sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend
    return getattr(SDPBackend, name)


def _sdpa_prepare(data: CaseData, backend_name: str, label: str) -> PrepResult:
    """torch SDPA with one backend, fixed layout; K/V expanded for GQA outside the timing.
    Bottom-right causal with Sq != Sk goes through an explicit boolean mask."""
    from torch.nn.attention import sdpa_kernel
    c = data.case
    s = c.shape
    backend = _sdpa_backend(backend_name)
    state: dict = {}

    def sets():  # built on the first call (timed apart), so an unused fallback costs nothing
        if "sets" not in state:
            state["sets"] = [(q.transpose(1, 2), _expand(k, c.group, 2).transpose(1, 2), _expand(v, c.group, 2).transpose(1, 2))
                             for q, k, v in data.sets]
        return state["sets"]
    mask, is_causal = None, False
    via = f"F.scaled_dot_product_attention under sdpa_kernel({backend_name})"
    notes = []
    if c.mask == "causal":
        if s.sq == s.sk:
            is_causal = True
        else:
            lo, hi = data.bounds[0]
            j = torch.arange(s.sk)
            mask = ((j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])).to(data.device)
            via += ", explicit bottom-right causal mask (is_causal is top-left when Sq != Sk)"
    elif c.mask != "dense":
        return f"n/a: torch SDPA cannot express mask {c.mask}"
    if c.group > 1:
        notes.append(f"K/V expanded {c.hkv}->{c.hq} heads before timing")

    def call(i):
        q, k, v = sets()[i]
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal).transpose(1, 2)
    return [Prepared(call, via, notes, na_if_error=("No available kernel",),
                     na_prefix=f"torch SDPA's {label} backend refused this case")]


def _schema_args(op) -> List[str]:
    try:
        return [a.name for a in op.default._schema.arguments]
    except Exception:  # noqa: BLE001
        return []


CUDNN_VARLEN_PROBE = r"""
import json, torch
import torch.nn.functional as F
op = torch.ops.aten._cudnn_attention_forward
lens, h, d = [5, 64, 130], 4, 128
cu = torch.tensor([0, 5, 69, 199], dtype=torch.int32, device="cuda")
q, k, v = ((0.2 * torch.randn(199, h, d, device="cuda")).to(torch.bfloat16) for _ in range(3))
errs = {}
for causal in (False, True):
    out = op(q, k, v, None, cu, cu, 130, 130, False, 0.0, causal, False)[0]
    torch.cuda.synchronize()
    ref = torch.cat([F.scaled_dot_product_attention(*(t[a:b].float().transpose(0, 1) for t in (q, k, v)),
                                                    is_causal=causal).transpose(0, 1)
                     for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())])
    errs["causal" if causal else "dense"] = ((out.float() - ref).norm() / ref.norm()).item()
print("RESULT " + json.dumps(errs))
"""
_CUDNN_VARLEN: Optional[str] = None  # "" when usable, else why not


def cudnn_varlen_probe(timeout: float = 180) -> str:
    """Whether aten._cudnn_attention_forward with cum_seq_q/k gives right answers, tried once in a
    fresh process on a tiny problem (a bad call there cannot take this process's CUDA context down).
    Returns "" when usable, else the reason."""
    global _CUDNN_VARLEN
    if _CUDNN_VARLEN is None:
        try:
            res = subprocess.run([sys.executable, "-c", CUDNN_VARLEN_PROBE], capture_output=True, text=True,
                                 timeout=timeout)
            line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                tail = " ".join((res.stderr or res.stdout).strip().splitlines()[-2:])[:300]
                _CUDNN_VARLEN = f"the call failed (rc={res.returncode}: {tail})"
            else:
                errs = json.loads(line[len("RESULT "):])
                bad = {k: v for k, v in errs.items() if not v <= 2e-2}
                _CUDNN_VARLEN = f"wrong answers (relative error {bad})" if bad else ""
        except (OSError, subprocess.SubprocessError) as e:
            _CUDNN_VARLEN = f"the probe did not run ({_short(e)})"
    return _CUDNN_VARLEN


def _cudnn_prepare(data: CaseData) -> PrepResult:
    c = data.case
    if not c.shape.packed:
        return _sdpa_prepare(data, "CUDNN_ATTENTION", "cuDNN")
    op = getattr(torch.ops.aten, "_cudnn_attention_forward", None)
    if op is None or "cum_seq_q" not in _schema_args(op):
        return f"n/a: torch {torch.__version__} has no cuDNN varlen entry (aten._cudnn_attention_forward with cum_seq_q)"
    if c.mask not in ("dense", "causal"):
        return f"n/a: cuDNN varlen in torch cannot express mask {c.mask}"
    if data.device.type == "cuda":
        why = cudnn_varlen_probe()
        if why:
            return f"n/a: torch's cuDNN varlen path (aten._cudnn_attention_forward with cum_seq_q) failed a probe: {why}"
    sets = [(q, _expand(k, c.group, 1), _expand(v, c.group, 1)) for q, k, v in data.sets]
    mq, mk = max(c.shape.q_lens), max(c.shape.kv_lens)
    qo, kv = data.qo_dev, data.kv_dev
    causal = c.mask == "causal"

    def call(i):
        q, k, v = sets[i]
        return op(q, k, v, None, qo, kv, mq, mk, False, 0.0, causal, False)[0]
    notes = [f"K/V expanded {c.hkv}->{c.hq} heads before timing"] if c.group > 1 else []
    return [Prepared(call, "aten._cudnn_attention_forward with cum_seq_q/k (cuDNN varlen, Sq == Sk per request)",
                     notes, na_if_error=("",), na_prefix="cuDNN varlen path not usable in this torch")]


def _fa2_prepare(data: CaseData) -> PrepResult:
    c = data.case
    s = c.shape
    op = getattr(torch.ops.aten, "_flash_attention_forward", None)
    names = _schema_args(op) if op is not None else []
    has_window = "window_size_left" in names and "window_size_right" in names
    causal = c.mask != "dense"
    wl = c.window if c.window >= 1 else -1
    wr = 0 if causal else -1
    alts: List[Prepared] = []
    if s.packed:
        mq, mk = max(s.q_lens), max(s.kv_lens)
        qo, kv = data.qo_dev, data.kv_dev
        sets = data.sets
        try:
            from torch.nn.attention.varlen import varlen_attn
            params = inspect.signature(varlen_attn).parameters
        except Exception:  # noqa: BLE001
            varlen_attn, params = None, {}
        if varlen_attn is not None:
            kw = {}
            ok = True
            if "window_size" in params:
                kw["window_size"] = (wl, wr)
            elif "is_causal" in params and c.window < 1:
                kw["is_causal"] = causal
            else:
                ok = False
            if "enable_gqa" in params and c.group > 1:
                kw["enable_gqa"] = True
            if ok:
                from torch.nn.attention import sdpa_kernel
                flash = _sdpa_backend("FLASH_ATTENTION")

                def call_varlen(i, kw=kw):
                    q, k, v = sets[i]
                    with sdpa_kernel([flash]):
                        return varlen_attn(q, k, v, qo, kv, mq, mk, **kw)
                alts.append(Prepared(call_varlen, f"torch.nn.attention.varlen.varlen_attn({', '.join(f'{a}={b}' for a, b in kw.items())}) under sdpa_kernel(FLASH_ATTENTION)"))
        if op is not None and (has_window or c.window < 1):
            wkw = {"window_size_left": wl, "window_size_right": wr} if has_window else {}

            def call_op(i):
                q, k, v = sets[i]
                return op(q, k, v, qo, kv, mq, mk, 0.0, causal, False, **wkw)[0]
            alts.append(Prepared(call_op, "aten._flash_attention_forward with cum_seq_q/k (FA2 varlen)"))
        if not alts:
            return f"n/a: torch {torch.__version__} has neither torch.nn.attention.varlen nor aten._flash_attention_forward"
        return alts
    if op is not None and (has_window or c.window < 1):
        wkw = {"window_size_left": wl, "window_size_right": wr} if has_window else {}
        sets = data.sets

        def call_fixed(i):
            q, k, v = sets[i]
            return op(q, k, v, None, None, s.sq, s.sk, 0.0, causal, False, **wkw)[0]
        via = "aten._flash_attention_forward ([B,S,H,D], native GQA"
        via += ", bottom-right causal" if causal else ""
        via += f", window_size_left={wl}" if c.window >= 1 else ""
        alts.append(Prepared(call_fixed, via + ")"))
    if c.mask in ("dense", "causal"):  # fallback: SDPA's flash backend
        alts += _sdpa_prepare(data, "FLASH_ATTENTION", "flash")
    if not alts:
        return f"n/a: torch {torch.__version__}'s flash entry points take no sliding window"
    return alts


_FLEX = None


def _flex_compiled():
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention
        _FLEX = torch.compile(flex_attention, dynamic=False)  # one static kernel per case
    return _FLEX


def flex_mask_mod(data: CaseData):
    """(mask_mod, B) for create_block_mask, or (None, None) for an unmasked fixed-layout case.
    Fixed layout: arithmetic on (q, kv) for causal and windows (bottom-right: offset Sk - Sq),
    per-row start/end tensors for vwin. Packed layout: a document mask over the packed sequence."""
    c = data.case
    s = c.shape
    dev = data.device
    w = c.window
    if not s.packed:
        off = s.sk - s.sq
        if c.mask == "dense":
            return None, None
        if c.mask == "vwin":
            st = torch.stack([lo for lo, _ in data.bounds]).to(dev)
            en = torch.stack([hi for _, hi in data.bounds]).to(dev)

            def vwin_mod(b, h, q_idx, kv_idx):
                return (kv_idx >= st[b, q_idx]) & (kv_idx <= en[b, q_idx])
            return vwin_mod, s.batch
        if w >= 1:
            def window_mod(b, h, q_idx, kv_idx):
                return (kv_idx <= q_idx + off) & (kv_idx >= q_idx + off - w)
            return window_mod, None

        def causal_mod(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx + off
        return causal_mod, None

    doc_q = torch.repeat_interleave(torch.arange(s.batch), torch.tensor(s.q_lens)).to(torch.int32).to(dev)
    doc_k = torch.repeat_interleave(torch.arange(s.batch), torch.tensor(s.kv_lens)).to(torch.int32).to(dev)
    if c.mask == "vwin":
        # per-row key ranges, moved to packed key positions: still only keys of the row's own request
        kstart = _indptr(s.kv_lens)[:-1].to(torch.int64)
        lo = torch.cat([b_lo + kstart[b] for b, (b_lo, _) in enumerate(data.bounds)]).to(dev)
        hi = torch.cat([b_hi + kstart[b] for b, (_, b_hi) in enumerate(data.bounds)]).to(dev)

        def packed_vwin_mod(b, h, q_idx, kv_idx):
            return (doc_q[q_idx] == doc_k[kv_idx]) & (kv_idx >= lo[q_idx]) & (kv_idx <= hi[q_idx])
        return packed_vwin_mod, None
    q_start = _indptr(s.q_lens)[:-1].to(dev)
    k_start = _indptr(s.kv_lens)[:-1].to(dev)
    offs = (torch.tensor(s.kv_lens) - torch.tensor(s.q_lens)).to(torch.int32).to(dev)
    if c.mask == "dense":
        def doc_mod(b, h, q_idx, kv_idx):
            return doc_q[q_idx] == doc_k[kv_idx]
        return doc_mod, None

    def doc_causal_mod(b, h, q_idx, kv_idx):
        d = doc_q[q_idx]
        qi = q_idx - q_start[d]
        kj = kv_idx - k_start[d]
        keep = (d == doc_k[kv_idx]) & (kj <= qi + offs[d])
        if w >= 1:
            keep = keep & (kj >= qi + offs[d] - w)
        return keep
    return doc_causal_mod, None


def _flex_prepare(data: CaseData, compiled: bool = True) -> PrepResult:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    c = data.case
    s = c.shape
    fn = _flex_compiled() if compiled else flex_attention
    mod, b = flex_mask_mod(data)
    block = None
    notes = []
    if mod is not None:
        lq, lk = (sum(s.q_lens), sum(s.kv_lens)) if s.packed else (s.sq, s.sk)
        try:
            block = create_block_mask(mod, b, None, lq, lk, device=data.device)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            block = create_block_mask(mod, b, None, lq, lk, device=data.device, _compile=True)
            notes.append("block mask built with _compile=True")
    if s.packed:
        sets = [tuple(t.unsqueeze(0).transpose(1, 2) for t in qkv) for qkv in data.sets]
    else:
        sets = [tuple(t.transpose(1, 2) for t in qkv) for qkv in data.sets]
    gqa = c.group > 1
    packed = s.packed

    def call(i):
        q, k, v = sets[i]
        o = fn(q, k, v, block_mask=block, enable_gqa=gqa)
        return o[0].transpose(0, 1) if packed else o.transpose(1, 2)
    via = ("torch.compile(flex_attention)" if compiled else "flex_attention (eager)")
    via += {None: ""}.get(mod, ", block mask" + (" (document mask over the packed sequence)" if packed else ""))
    if c.mask == "vwin":
        via += ", mask_mod reading per-row start/end tensors"
    return [Prepared(call, via, notes)]


PREPARERS: Dict[str, Callable[[CaseData], PrepResult]] = {
    "tsattn": _tsattn_prepare,
    "cudnn": _cudnn_prepare,
    "fa2": _fa2_prepare,
    "flex": _flex_prepare,
}


def prepared_call(case: bc.Case, data: CaseData, contender: str) -> Union[Callable, str]:
    """The contender's call of the case (call(set index) -> out), unchecked; or why it cannot run."""
    prepared = bc.static_na(contender, case) or PREPARERS[contender](data)
    return prepared if isinstance(prepared, str) else prepared[0].call


def checked_call(case: bc.Case, data: CaseData, ref: torch.Tensor, contender: str) -> Tuple[Optional[Callable], bool]:
    """For tools that run one contender's call outside the harness (power_probe.py,
    profile_compare.py): (call, False) when the contender runs the case and its first output
    passes the fp32 reference check; otherwise prints why and returns (None, wrong), wrong
    telling a WRONG answer from a case the contender cannot run."""
    call = prepared_call(case, data, contender)
    if isinstance(call, str):
        print(f"{case.name} {contender}: {call}")
        return None, False
    check = compare(call(0), ref, case.dtype)  # the least precise of input and output dtype
    if not check["ok"]:
        print(f"{case.name} {contender}: WRONG: {check['reason']}")
        return None, True
    return call, False


# ---------------------------------------------------------------- timing

def _sync(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cuda_timer(call: Callable[[int], object], n_sets: int, warmup: int, fixed_reps: Optional[int],
               device: torch.device, sleep: bool = True) -> List[float]:
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
    _sync(device)
    reps = fixed_reps or 3
    out = []
    for i in range(reps):
        t0 = time.perf_counter()
        call((warmup + 1 + i) % n_sets)
        _sync(device)
        out.append(1e3 * (time.perf_counter() - t0))
    return out


def time_stats(times: Sequence[float]) -> dict:
    xs = sorted(times)
    n = len(xs)

    def pct(p):
        return xs[min(n - 1, max(0, int(round(p * (n - 1)))))]
    return {"ms": statistics.median(xs), "ms_min": xs[0], "ms_p10": pct(0.1), "ms_p90": pct(0.9),
            "ms_mean": statistics.fmean(xs), "reps": n}


# ---------------------------------------------------------------- running cases

def _short(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:limit]}" + ("..." if len(text) > limit else "")


def _warning_text(caught) -> str:
    msgs = []
    for w in caught:
        m = " ".join(str(w.message).split())
        if m and m not in msgs:
            msgs.append(m[:200])
    return " | ".join(msgs[:4])


def _context_alive(device: torch.device) -> bool:
    if device.type != "cuda":
        return True
    try:
        torch.cuda.synchronize(device)
        torch.zeros(1, device=device).add_(1).item()
        return True
    except Exception:  # noqa: BLE001
        return False


def _cuda_index(dev: torch.device) -> int:
    return dev.index if dev.index is not None else torch.cuda.current_device()


def _cache_counters() -> Optional[dict]:
    try:
        return tsattn.cache_info()
    except Exception:  # noqa: BLE001
        return None


def run_contender(name: str, prepared: List[Prepared], data: CaseData, ref: torch.Tensor, timer,
                  warmup: int, fixed_reps: Optional[int]) -> dict:
    entry: dict = {}
    tried = []
    dev = data.device
    chosen, out, na = None, None, None
    before = _cache_counters() if name == "tsattn" else None
    for prep in prepared:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                t0 = time.perf_counter()
                out = prep.call(0)
                _sync(dev)
                entry["first_call_ms"] = 1e3 * (time.perf_counter() - t0)
                chosen = prep
            except Exception as e:  # noqa: BLE001 - a contender's failure is a result
                if not _context_alive(dev):
                    raise ContextLost(f"{name} via {prep.via}: {_short(e)}") from e
                msg = _short(e)
                wtext = _warning_text(caught)
                if wtext:
                    msg += f" [warnings: {wtext}]"
                tried.append(f"{prep.via}: {msg}")
                if any(p in str(e) for p in prep.na_if_error) and na is None:
                    na = f"n/a: {prep.na_prefix}: {msg}"
                continue
        break
    if tried:
        entry["failed_paths"] = tried
    if chosen is None:
        entry["status"] = na or f"error: {tried[-1] if tried else 'nothing to run'}"
        return entry
    entry["via"] = chosen.via
    if chosen.notes:
        entry["notes"] = list(chosen.notes)
    if before is not None:
        after = _cache_counters()
        if after:
            entry["tsattn_cache"] = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    tol_key = data.case.dtype  # the least precise of input and output dtype
    check = compare(out, ref, tol_key)
    del out
    entry["check"] = {k: v for k, v in check.items() if k not in ("ok", "reason")}
    if not check["ok"]:
        entry["status"] = f"WRONG: {check['reason']}"
        return entry
    try:
        # The clock and power while timed (tools/bench/nvml_sampler.py): under a power limit the clock
        # moves with the kernel, so the report can tell work per cycle from clock.
        with NvmlSampler(_cuda_index(dev)) if dev.type == "cuda" else contextlib.nullcontext() as gpu:
            times = timer(chosen.call, len(data.sets), warmup, fixed_reps, dev)
        state = gpu.summary() if gpu is not None else None
        if state:
            entry["gpu_state"] = state
    except Exception as e:  # noqa: BLE001
        if not _context_alive(dev):
            raise ContextLost(f"{name} via {chosen.via} (timing): {_short(e)}") from e
        entry["status"] = f"error: while timing: {_short(e)}"
        return entry
    entry.update(time_stats(times))
    entry["status"] = "ok"
    return entry


def run_case(case: bc.Case, contenders: Sequence[str], device, *, timer=None, warmup: int = bc.WARMUP,
             fixed_reps: Optional[int] = None, n_sets: Optional[int] = None, seed: int = 0,
             preparers: Optional[Dict[str, Callable]] = None, static_na=bc.static_na) -> dict:
    """Runs every contender on one case; returns the case's JSON row. Raises ContextLost only."""
    device = torch.device(device)
    timer = timer or (cuda_timer if device.type == "cuda" else wall_timer)
    preparers = preparers or PREPARERS
    fl = bc.flops(case)
    row = {"name": case.name, "params": case.params(), "flops": fl, "visible_pairs": bc.visible_pairs(case),
           "contenders": {}}
    t_case = time.perf_counter()
    n_sets = n_sets or input_sets_for(case)
    try:
        data = make_case_data(case, device, n_sets, seed)
        ref = reference(case, *data.sets[0], data.bounds)
    except Exception as e:  # noqa: BLE001
        if not _context_alive(device):
            raise ContextLost(f"{case.name}: inputs/reference: {_short(e)}") from e
        for name in contenders:
            row["contenders"][name] = {"status": f"error: inputs or reference failed: {_short(e)}"}
        return row
    row["input_sets"] = n_sets
    row["set_bytes"] = data.set_bytes
    for name in contenders:
        na = static_na(name, case)
        if na:
            entry = {"status": na}
        else:
            try:
                prepared = preparers[name](data)
            except Exception as e:  # noqa: BLE001
                if not _context_alive(device):
                    raise ContextLost(f"{case.name}: {name} setup: {_short(e)}") from e
                prepared = f"error: setup: {_short(e)}"
            if isinstance(prepared, str):
                entry = {"status": prepared}
            else:
                entry = run_contender(name, prepared, data, ref, timer, warmup, fixed_reps)
        if entry.get("status") == "ok":
            entry["tflops"] = fl / entry["ms"] / 1e9
        if case.group > 1 and name in bc.CONTENDERS:
            entry["gqa"] = bc.gqa_handling(name)
        row["contenders"][name] = entry
    row["ratios"] = br.ratios(row)
    row["case_seconds"] = time.perf_counter() - t_case
    del data, ref
    return row


# ---------------------------------------------------------------- environment and clocks

SMI_FULL = "index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,temperature.gpu,power.draw"
SMI_BASIC = "clocks.sm,clocks.mem"


def smi_sample(enabled: bool = True) -> Optional[list]:
    """nvidia-smi's clocks (MHz) etc. per GPU, or None where nvidia-smi is missing or fails."""
    if not enabled:
        return None
    for fields in (SMI_FULL, SMI_BASIC):
        try:
            res = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=15)
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
    meta = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": [sys.executable] + sys.argv, "host": platform.node(), "platform": platform.platform(),
            "python": platform.python_version()}
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda, "tsattn": tsattn.__version__,
                "triton": _version("triton") or _version("pytorch-triton"), "numpy": _version("numpy"),
                "matplotlib": _version("matplotlib")}
    try:
        versions["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        versions["cudnn"] = None
    try:
        versions["tsattn_library"] = tsattn.library_version()
        meta["tsattn_library_path"] = tsattn.library_path()
    except Exception as e:  # noqa: BLE001
        versions["tsattn_library"] = None
        meta["tsattn_library_error"] = _short(e)
    meta["versions"] = versions
    if device is not None and device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        meta["gpu"] = p.name
        meta["capability"] = f"{p.major}.{p.minor}"
        meta["sm_count"] = p.multi_processor_count
        meta["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
        meta["gpu_limits"] = NvmlSampler(_cuda_index(device)).limits()
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


# ---------------------------------------------------------------- the GEMM ceiling

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
    return {"bf16": lambda i: torch.matmul(a16, b16),
            "fp8": lambda i: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)}


def gemm_ceiling(device: torch.device, n: int = CEILING_N) -> List[dict]:
    """gemm_calls timed like the contenders, with the clock and power while timed: what this GPU's
    tensor cores deliver in this run, the ceiling for an attention kernel's two GEMMs."""
    rows = []
    for dtype, call in gemm_calls(device, n).items():
        row = {"dtype": dtype, "n": n, "via": "torch._scaled_mm" if dtype == "fp8" else "torch.matmul"}
        try:
            with NvmlSampler(_cuda_index(device)) as gpu:
                row.update(time_stats(cuda_timer(call, 1, bc.WARMUP, None, device)))
            row.update(status="ok", tflops=2.0 * n**3 / row["ms"] / 1e9)
            state = gpu.summary()
            if state:
                row["gpu_state"] = state
        except Exception as e:  # noqa: BLE001 - a missing GEMM path is a result, not a failed run
            row["status"] = f"error: {_short(e)}"
        rows.append(row)
    return rows


# ---------------------------------------------------------------- JIT figures

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
            row = {"family": fam, "arch": arch, "head_dim": d, "input_dtype": din, "output_dtype": dout,
                   "mask": mask, "layout": layout}
            with tempfile.TemporaryDirectory(prefix="tsattn-bench-cold-") as tmp:
                manifest = Path(tmp) / "one.json"
                manifest.write_text(json.dumps({"schema": 1, "kernels": [
                    {"family": fam, "head_dim": d, "input_dtype": din, "output_dtype": dout, "mask": mask,
                     "layout": layout}]}))
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
                        row["status"] = f"n/a: {_short(e, 200)}"
                except Exception as e:  # noqa: BLE001
                    row["status"] = f"error: {_short(e, 200)}"
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
    if os.environ.get("TSATTN_BENCH_INSTALLED") != "1":
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python")] + [p for p in [env.get("PYTHONPATH")] if p])
    try:
        res = subprocess.run([sys.executable, "-c", FIRST_CALL_SCRIPT], env=env, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"error: timed out after {timeout:.0f} s"}
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[len("RESULT "):])
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
    qt, kt, vt = q.transpose(1, 2), k.repeat_interleave(hq // hkv, 2).transpose(1, 2), v.repeat_interleave(hq // hkv, 2).transpose(1, 2)
    flash = _sdpa_backend("FLASH_ATTENTION")

    def sdpa():
        with sdpa_kernel([flash]):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    variants = {
        "tsattn fixed layout (allocates out)": lambda: tsattn.batch_prefill(q, k, v, mask_type="causal"),
        "tsattn fixed layout, out= given": lambda: tsattn.batch_prefill(q, k, v, mask_type="causal", out=out),
        "tsattn packed layout, host indptrs (2 requests)": lambda: tsattn.batch_prefill(
            qp, kp, vp, qo_indptr=ind, kv_indptr=ind, mask_type="causal"),
        "torch SDPA flash backend, same problem (for scale)": sdpa,
    }
    res = {"problem": f"B=1 S={s} Hq/Hkv={hq}/{hkv} D={d} bf16 causal (packed: 2 x {s})", "calls": calls, "variants": {}}
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
            res["variants"][name] = {"status": "ok", "us_median": statistics.median(us), "us_p10": us[n // 10],
                                     "us_p90": us[(9 * n) // 10], "us_min": us[0], "us_mean": statistics.fmean(us)}
        except Exception as e:  # noqa: BLE001
            res["variants"][name] = {"status": f"error: {_short(e)}"}
    return res


def jit_figures(device: torch.device, arch: str, quick: bool, host_calls: int) -> dict:
    jit: dict = {}
    specs = JIT_SPECS[:1] if quick else JIT_SPECS
    steps = [("cold_compile", lambda: jit_cold_compile(specs, JIT_FAMILIES, arch)),
             ("first_call", lambda: jit_first_calls(1 if quick else 2)),
             ("host_cost", lambda: jit_host_cost(device, host_calls))]
    for key, fn in steps:
        t0 = time.perf_counter()
        try:
            jit[key] = fn()
        except Exception as e:  # noqa: BLE001
            if not _context_alive(device):
                raise ContextLost(f"JIT figures ({key}): {_short(e)}") from e
            jit[key] = {"status": f"error: {_short(e)}", "traceback": traceback.format_exc()[-1500:]}
        print(f"[jit] {key}: {time.perf_counter() - t0:.1f} s", flush=True)
    return jit


# ---------------------------------------------------------------- command line

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sel = p.add_mutually_exclusive_group()
    sel.add_argument("--quick", action="store_true", help="the smoke set (tools/dev/gpu_check.sh bench)")
    sel.add_argument("--full", action="store_true", help="the whole product of the axes (about an hour)")
    p.add_argument("--cases", default="", help="comma-separated glob patterns over case names; without --quick/--full "
                   "they select from the whole product (e.g. 'd128-causal-*-b1-s8k,*ragged16')")
    p.add_argument("--skip-cases", default="", help="comma-separated glob patterns of cases to leave out")
    p.add_argument("--contenders", default=",".join(bc.CONTENDERS), help="comma-separated subset of "
                   + ", ".join(bc.CONTENDERS))
    p.add_argument("--list", action="store_true", help="print the selected cases, what runs them, the estimate; exit")
    p.add_argument("--out", default="bench-results", help="output directory")
    p.add_argument("--reps", type=int, default=0, help="timed calls per contender and case (default: auto)")
    p.add_argument("--warmup", type=int, default=bc.WARMUP)
    p.add_argument("--budget-s", type=float, default=540.0,
                   help="stop starting cases after this many seconds from launch (0: no limit); the rest are "
                        "recorded as skipped")
    jit = p.add_mutually_exclusive_group()
    jit.add_argument("--no-jit", action="store_true", help="leave out the JIT figures")
    jit.add_argument("--jit-only", action="store_true", help="only the JIT figures")
    p.add_argument("--jit-host-calls", type=int, default=2000)
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-smi", action="store_true", help="do not call nvidia-smi for clocks")
    p.add_argument("--no-ceiling", action="store_true", help="do not time the cuBLAS GEMM ceiling (bf16, fp8)")
    p.add_argument("--assume-tflops", type=float, default=bc.Assumptions.tflops, help="for the --list estimate")
    p.add_argument("--seed", type=int, default=0)
    return p


def select_cases(args) -> Tuple[List[bc.Case], List[str]]:
    """(cases, problems): the base set (quick / full / default, or the whole product when only
    --cases is given) filtered by --cases and --skip-cases."""
    problems = []
    pats = bc.split_patterns(args.cases)
    if args.full:
        base = bc.full_catalog()
    elif args.quick:
        base = bc.quick_cases()
    elif pats:
        base = bc.full_catalog()
    else:
        base = bc.default_cases()
    cases = base
    if pats:
        cases, unmatched = bc.select(base, pats)
        problems += [f"--cases pattern {p!r} matches no case" for p in unmatched]
    skip = bc.split_patterns(args.skip_cases)
    if skip:
        dropped, unmatched = bc.select(cases, skip)
        cases = [c for c in cases if c not in dropped]
        problems += [f"--skip-cases pattern {p!r} matches no selected case" for p in unmatched]
    return cases, problems


def parse_contenders(text: str) -> List[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in bc.CONTENDERS]
    if bad or not names:
        raise ValueError(f"--contenders: unknown {', '.join(bad) or '(none given)'} (choose from {', '.join(bc.CONTENDERS)})")
    return [n for n in bc.CONTENDERS if n in names]


def list_cases(cases: Sequence[bc.Case], contenders: Sequence[str], args) -> str:
    lines = []
    for c in cases:
        runs = [n for n in contenders if not bc.static_na(n, c)]
        nas = [n for n in contenders if bc.static_na(n, c)]
        lines.append(f"{c.name:40s} {bc.flops(c) / 1e9:10.1f} GFLOP  runs: {' '.join(runs):26s}"
                     + (f" n/a: {' '.join(nas)}" if nas else ""))
    est = bc.estimate(cases, contenders, args.reps or None, bc.Assumptions(tflops=args.assume_tflops),
                      with_jit=not args.no_jit)
    lines.append(f"{len(cases)} cases; estimate {est['total_s']:.0f} s ({est['total_s'] / 60:.1f} min) at "
                 f"{est['assumed_tflops']:.0f} TFLOP/s for every contender: {est['calls']} calls, "
                 f"timed {est['timed_s']:.0f} s + first calls {est['first_calls_s']:.0f} s + fixed {est['fixed_s']:.0f} s")
    return "\n".join(lines)


def write_outputs(doc: dict, out_dir: Path, plots: bool) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    doc["summary"] = br.summarize(doc)
    tmp = out_dir / "bench.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(out_dir / "bench.json")
    br.write_all(doc, out_dir, plots=plots)


def _skipped_row(case: bc.Case, contenders: Sequence[str], why: str) -> dict:
    return {"name": case.name, "params": case.params(), "flops": bc.flops(case),
            "contenders": {k: {"status": f"skipped: {why}"} for k in contenders}}


def run_cases(doc: dict, cases: Sequence[bc.Case], contenders: Sequence[str], device, args, out_dir: Path,
              t_start: float, runner=None) -> int:
    """The JIT figures, then every case in order until the time budget is spent, rewriting the
    outputs after each; a lost CUDA context ends the run with what was measured. Returns 0 or 3."""
    runner = runner or run_case
    try:
        if not args.no_jit:
            doc["jit"] = jit_figures(device, arch_for_device(device), args.quick, args.jit_host_calls)
            write_outputs(doc, out_dir, plots=False)
        if args.jit_only:
            return 0
        for n, case in enumerate(cases):
            elapsed = time.perf_counter() - t_start
            if args.budget_s and elapsed > args.budget_s:
                doc["run"]["skipped"] = [c.name for c in cases[n:]]
                why = f"time budget (--budget-s {args.budget_s:.0f}) spent"
                doc["cases"] += [_skipped_row(c, contenders, why) for c in cases[n:]]
                print(f"bench: time budget spent after {elapsed:.0f} s; {len(cases) - n} cases skipped", flush=True)
                break
            try:
                row = runner(case, contenders, device, fixed_reps=args.reps or None, warmup=args.warmup,
                             seed=args.seed)
            except ContextLost:
                raise
            except Exception as e:  # noqa: BLE001 - a harness bug in one case must not lose the run
                if not _context_alive(torch.device(device)):
                    raise ContextLost(f"{case.name}: {_short(e)}") from e
                row = _skipped_row(case, contenders, "")
                for entry in row["contenders"].values():
                    entry["status"] = f"error: harness: {_short(e)}"
                row["traceback"] = traceback.format_exc()[-2000:]
            row["clocks"] = smi_sample(not args.no_smi)
            doc["cases"].append(row)
            print(br.console_line(row), flush=True)
            write_outputs(doc, out_dir, plots=False)
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
    except ContextLost as e:
        done = {r["name"] for r in doc["cases"]}
        rest = [c for c in cases if c.name not in done]
        doc["run"]["aborted"] = f"CUDA context lost: {e}"
        doc["run"]["skipped"] = [c.name for c in rest]
        doc["cases"] += [_skipped_row(c, contenders, "CUDA context lost earlier") for c in rest]
        print(f"bench: CUDA context lost ({e}); writing what was measured", file=sys.stderr, flush=True)
        return 3
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    t_start = time.perf_counter()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        contenders = parse_contenders(args.contenders)
    except ValueError as e:
        parser.error(str(e))
    cases, problems = select_cases(args)
    for msg in problems:
        print(f"bench: {msg}", file=sys.stderr)
    if args.list:
        print(list_cases(cases, contenders, args))
        return 2 if problems and not cases else 0
    if not cases and not args.jit_only:
        print("bench: no case selected", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench: no CUDA device (torch.cuda.is_available() is False); --list works without one", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is plain fp32
    torch.backends.cudnn.allow_tf32 = False
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):  # one FlexAttention graph per case: never fall back to eager
            setattr(torch._dynamo.config, knob, 4096)

    out_dir = Path(args.out)
    doc = {"schema": SCHEMA, "meta": collect_meta(args, device), "cases": [], "jit": {}, "run": {}}
    doc["meta"]["clocks_before"] = smi_sample(not args.no_smi)
    doc["meta"]["estimate"] = bc.estimate(cases, contenders, args.reps or None, with_jit=not args.no_jit)
    doc["run"] = {"selected": [] if args.jit_only else [c.name for c in cases], "contenders": contenders,
                  "budget_s": args.budget_s, "skipped": []}
    print(f"bench: {len(cases)} cases x {len(contenders)} contenders on {doc['meta'].get('gpu')}, "
          f"estimate {doc['meta']['estimate']['total_s']:.0f} s; results in {out_dir}", flush=True)
    if not (args.no_ceiling or args.jit_only):
        doc["ceiling"] = gemm_ceiling(device)
    rc = run_cases(doc, cases, contenders, device, args, out_dir, t_start)
    return finish_run(doc, args, out_dir, t_start, rc)


def finish_run(doc: dict, args, out_dir: Path, t_start: float, rc: int) -> int:
    """Final clocks, timestamps, every output file with plots, the summary; 1 when tsattn was WRONG
    or failed somewhere (and nothing worse happened)."""
    lost = doc["run"].get("aborted")
    doc["meta"]["clocks_after"] = smi_sample(not args.no_smi) if lost is None else None
    doc["meta"]["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    doc["run"]["elapsed_s"] = time.perf_counter() - t_start
    write_outputs(doc, out_dir, plots=not args.no_plots)
    print()
    print(br.render_summary_text(doc))
    print(f"bench: {doc['run']['elapsed_s']:.0f} s; wrote {out_dir}/bench.json, bench.md, perf_section.md, readme_section.md")
    bad = [r["name"] for r in doc["cases"]
           if str(r["contenders"].get("tsattn", {}).get("status", "ok")).startswith(("WRONG", "error"))]
    if bad and rc == 0:
        print(f"bench: tsattn WRONG or failed in {len(bad)} case(s): {', '.join(bad[:10])}", file=sys.stderr)
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
