"""The inputs of a case and the answer they must give: input sets in tsattn's layout, rotated so
that together they exceed twice the L2 (CaseData, make_case_data); the fp32 reference; and
docs/contract.md's check of an output against it (compare)."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch

import bench_cases as bc

L2_BYTES = 60 * 2**20  # H200
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": getattr(torch, "float8_e4m3fn", None)}
# docs/contract.md reference tolerances by the least precise of input and output dtype: rtol, atol, relative norm
TOLERANCES = {"fp8": (5e-2, 1.3e-1, 1e-1), "bf16": (2e-2, 1e-2, 2e-2), "fp16": (1e-2, 2e-3, 1e-2)}


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


def indptr(lengths: Sequence[int]) -> torch.Tensor:
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
        data.qo_cpu, data.kv_cpu = indptr(s.q_lens), indptr(s.kv_lens)
        data.qo_dev, data.kv_dev = data.qo_cpu.to(device), data.kv_cpu.to(device)
    return data


def _request_views(case: bc.Case, t: torch.Tensor, lengths: Sequence[int]):
    """The per-request [S, H, D] views of a fixed or packed tensor."""
    if case.shape.packed:
        start = 0
        for n in lengths:
            yield t[start : start + n]
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
    for qb, kb, vb, ob, (lo, hi) in zip(qs, ks, vs, os_, bounds):
        sq, sk = qb.shape[0], kb.shape[0]
        if sq == 0 or sk == 0:
            continue
        lo_d, hi_d = lo.to(q.device), hi.to(q.device)
        j = torch.arange(sk, device=q.device)
        rows = max(1, min(sq, budget_bytes // (4 * g * sk)))
        for h in range(case.hkv):
            kt = kb[:, h].float().t().contiguous()  # [D, Sk]
            vh = vb[:, h].float()
            qh = qb[:, h * g : (h + 1) * g].float().permute(1, 0, 2)  # [g, Sq, D]
            for r0 in range(0, sq, rows):
                r1 = min(sq, r0 + rows)
                scores = (qh[:, r0:r1] @ kt) * scale  # [g, rows, Sk]
                keep = (j[None, :] >= lo_d[r0:r1, None]) & (j[None, :] <= hi_d[r0:r1, None])
                scores.masked_fill_(~keep, float("-inf"))
                m = scores.amax(-1, keepdim=True)
                m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
                p = torch.exp(scores - m)
                row_sum = p.sum(-1, keepdim=True)
                o = (p @ vh) / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum))
                ob[r0:r1, h * g : (h + 1) * g] = o.permute(1, 0, 2)
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
    res = {
        "rel_norm_error": rel,
        "max_abs_error": float(diff.nan_to_num(nan=float("inf")).max()) if diff.numel() else 0.0,
        "mismatches": mism,
        "elements": o.numel(),
        "nonfinite": nonfinite,
        "tolerance": {"rtol": rtol, "atol": atol, "rel_norm": norm_tol},
    }
    reasons = []
    if nonfinite:
        reasons.append(f"{nonfinite} non-finite")
    if not rel <= norm_tol:
        reasons.append(f"relative norm error {rel:.3g} > {norm_tol}")
    if mism:
        reasons.append(
            f"{mism} of {o.numel()} elements outside rtol={rtol} atol={atol} (max abs error {res['max_abs_error']:.3g})"
        )
    res["ok"] = not reasons
    if reasons:
        res["reason"] = "; ".join(reasons)
    return res
