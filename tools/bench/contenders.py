"""The contenders: per contender, a preparer that says how it runs a case (Prepared calls, tried in
order) or "n/a: reason" when it cannot express the case (PREPARERS); and one contender's call for
tools that run it outside the harness (prepared_call unchecked, checked_call after the reference
check)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F

import bench_cases as bc
from case_data import CaseData, compare, indptr
from failures import short_error
from tsattn_under_test import tsattn


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


def sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend

    return getattr(SDPBackend, name)


def _sdpa_prepare(data: CaseData, backend_name: str, label: str) -> PrepResult:
    """torch SDPA with one backend, fixed layout; K/V expanded for GQA outside the timing.
    Bottom-right causal with Sq != Sk goes through an explicit boolean mask."""
    from torch.nn.attention import sdpa_kernel

    c = data.case
    s = c.shape
    backend = sdpa_backend(backend_name)
    state: dict = {}

    def sets():  # built on the first call (timed apart), so an unused fallback costs nothing
        if "sets" not in state:
            state["sets"] = [
                (q.transpose(1, 2), _expand(k, c.group, 2).transpose(1, 2), _expand(v, c.group, 2).transpose(1, 2))
                for q, k, v in data.sets
            ]
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

    return [
        Prepared(
            call,
            via,
            notes,
            na_if_error=("No available kernel",),
            na_prefix=f"torch SDPA's {label} backend refused this case",
        )
    ]


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
            res = subprocess.run(
                [sys.executable, "-c", CUDNN_VARLEN_PROBE], capture_output=True, text=True, timeout=timeout
            )
            line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                tail = " ".join((res.stderr or res.stdout).strip().splitlines()[-2:])[:300]
                _CUDNN_VARLEN = f"the call failed (rc={res.returncode}: {tail})"
            else:
                errs = json.loads(line[len("RESULT ") :])
                bad = {k: v for k, v in errs.items() if not v <= 2e-2}
                _CUDNN_VARLEN = f"wrong answers (relative error {bad})" if bad else ""
        except (OSError, subprocess.SubprocessError) as e:
            _CUDNN_VARLEN = f"the probe did not run ({short_error(e)})"
    return _CUDNN_VARLEN


def _cudnn_prepare(data: CaseData) -> PrepResult:
    c = data.case
    if not c.shape.packed:
        return _sdpa_prepare(data, "CUDNN_ATTENTION", "cuDNN")
    op = getattr(torch.ops.aten, "_cudnn_attention_forward", None)
    if op is None or "cum_seq_q" not in _schema_args(op):
        return (
            f"n/a: torch {torch.__version__} has no cuDNN varlen entry (aten._cudnn_attention_forward with cum_seq_q)"
        )
    if c.mask not in ("dense", "causal"):
        return f"n/a: cuDNN varlen in torch cannot express mask {c.mask}"
    if data.device.type == "cuda":
        why = cudnn_varlen_probe()
        if why:
            return (
                f"n/a: torch's cuDNN varlen path (aten._cudnn_attention_forward with cum_seq_q) failed a probe: {why}"
            )
    sets = [(q, _expand(k, c.group, 1), _expand(v, c.group, 1)) for q, k, v in data.sets]
    mq, mk = max(c.shape.q_lens), max(c.shape.kv_lens)
    qo, kv = data.qo_dev, data.kv_dev
    causal = c.mask == "causal"

    def call(i):
        q, k, v = sets[i]
        return op(q, k, v, None, qo, kv, mq, mk, False, 0.0, causal, False)[0]

    notes = [f"K/V expanded {c.hkv}->{c.hq} heads before timing"] if c.group > 1 else []
    return [
        Prepared(
            call,
            "aten._cudnn_attention_forward with cum_seq_q/k (cuDNN varlen, Sq == Sk per request)",
            notes,
            na_if_error=("",),
            na_prefix="cuDNN varlen path not usable in this torch",
        )
    ]


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

                flash = sdpa_backend("FLASH_ATTENTION")

                def call_varlen(i, kw=kw):
                    q, k, v = sets[i]
                    with sdpa_kernel([flash]):
                        return varlen_attn(q, k, v, qo, kv, mq, mk, **kw)

                alts.append(
                    Prepared(
                        call_varlen,
                        f"torch.nn.attention.varlen.varlen_attn({', '.join(f'{a}={b}' for a, b in kw.items())}) under sdpa_kernel(FLASH_ATTENTION)",
                    )
                )
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
        kstart = indptr(s.kv_lens)[:-1].to(torch.int64)
        lo = torch.cat([b_lo + kstart[b] for b, (b_lo, _) in enumerate(data.bounds)]).to(dev)
        hi = torch.cat([b_hi + kstart[b] for b, (_, b_hi) in enumerate(data.bounds)]).to(dev)

        def packed_vwin_mod(b, h, q_idx, kv_idx):
            return (doc_q[q_idx] == doc_k[kv_idx]) & (kv_idx >= lo[q_idx]) & (kv_idx <= hi[q_idx])

        return packed_vwin_mod, None
    q_start = indptr(s.q_lens)[:-1].to(dev)
    k_start = indptr(s.kv_lens)[:-1].to(dev)
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

    via = "torch.compile(flex_attention)" if compiled else "flex_attention (eager)"
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
