"""The benchmark's cases: names, selection, mask semantics and FLOP counts (no GPU needed).

A case is one point of the product
    head dim {128, 256} x mask {dense, causal, win1k, win4k, vwin} x dtype {bf16, fp16, fp8}
    x heads Hq/Hkv {32/32, 32/8, 32/4} (D256 also 16/4 and 16/16)
    x shape {b1-s1k .. b1-s16k, b4-s4k, chunk-q256-k4k, ragged16, serving batches
             b16-s512, b8-s1k, b4-s2k, b32-s256 and two packed twins of each: packed-* (every
             request as long as the fixed shape's) and ragged-* (lengths drawn around it)}
named ``d{D}-{mask}-{dtype}-h{Hq}kv{Hkv}-{shape}``, e.g. ``d128-causal-bf16-h32kv8-b1-s8k``.

Masks follow docs/contract.md (per request b, query row i, key j, offset = Sk - Sq):
    dense   every key
    causal  j <= i + offset (bottom-right aligned)
    winW    causal and j >= i + offset - W (W = 1024 or 4096: at most W + 1 keys)
    vwin    per-row inclusive bounds starts[i] <= j <= ends[i]; here ends[i] = i + offset (causal end)
            and starts[i] = ends[i] - w_i + 1 with w_i ~ U[512, 4096] drawn per row from a fixed seed
Every mask is described by per-row inclusive bounds (lo, hi) clamped to [0, Sk): the FLOP count,
the fp32 reference, FlexAttention's block masks and the tests all derive from them.
FLOPs follow docs/contract.md: 4 * Hq * D * (visible (i, j) pairs), summed over requests.
"""

from __future__ import annotations

import fnmatch
import itertools
import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch

HEAD_DIMS = (128, 256)
MASKS = ("dense", "causal", "win1k", "win4k", "vwin")
WINDOWS = {"win1k": 1024, "win4k": 4096}
DTYPES = ("bf16", "fp16", "fp8")
HEADS: Dict[int, Tuple[Tuple[int, int], ...]] = {
    128: ((32, 32), (32, 8), (32, 4)),
    256: ((32, 32), (32, 8), (32, 4), (16, 4), (16, 16)),
}
PRIMARY_HEADS = (32, 8)  # the default set's head configuration (Llama-3-8B-like)
SEQ_SWEEP = (1024, 2048, 4096, 8192, 16384)
SERVING_BATCHES = ((16, 512), (8, 1024), (4, 2048), (32, 256))  # (B, S) of batched short prompts
# 16 requests of mixed 128..4096 tokens (27,136 in all), Sq == Sk per request
RAGGED16 = (128, 4096, 512, 2048, 256, 3072, 1024, 768, 4096, 128, 1536, 2560, 640, 3584, 896, 1792)
VWIN_MIN, VWIN_MAX, VWIN_SEED = 512, 4096, 1234

CONTENDERS = ("tsattn", "cudnn", "fa2", "flex")
LABELS = {"tsattn": "tsattn", "cudnn": "cuDNN SDPA", "fa2": "FA2 (torch flash)", "flex": "FlexAttention"}
BASELINES = ("cudnn", "fa2", "flex")


@dataclass(frozen=True)
class Shape:
    name: str
    q_lens: Tuple[int, ...]  # one entry per request
    kv_lens: Tuple[int, ...]
    packed: bool  # packed ragged layout (indptrs) rather than fixed [B, S, H, D]

    @property
    def batch(self) -> int:
        return len(self.q_lens)

    @property
    def sq(self) -> int:  # fixed layout: the common query length
        return self.q_lens[0]

    @property
    def sk(self) -> int:
        return self.kv_lens[0]


def _kname(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def _fixed(batch: int, sq: int, sk: int, name: str) -> Shape:
    return Shape(name, (sq,) * batch, (sk,) * batch, False)


SHAPES: Dict[str, Shape] = {}
for _s in SEQ_SWEEP:
    SHAPES[f"b1-s{_kname(_s)}"] = _fixed(1, _s, _s, f"b1-s{_kname(_s)}")
SHAPES["b4-s4k"] = _fixed(4, 4096, 4096, "b4-s4k")
SHAPES["chunk-q256-k4k"] = _fixed(1, 256, 4096, "chunk-q256-k4k")
SHAPES["ragged16"] = Shape("ragged16", RAGGED16, RAGGED16, True)


def _around(batch: int, mean: int, seed: int) -> Tuple[int, ...]:
    """`batch` lengths drawn uniformly in [mean/2, 3*mean/2] from a fixed seed, then moved by one
    token at a time until they sum to batch * mean (so the FLOPs stay near the fixed shape's)."""
    g = torch.Generator().manual_seed(seed)
    lens = [int(x) for x in torch.randint(mean // 2, 3 * mean // 2 + 1, (batch,), generator=g)]
    i = 0
    while sum(lens) != batch * mean:
        lens[i % batch] += 1 if sum(lens) < batch * mean else -1
        i += 1
    return tuple(lens)


# Serving's batched prompts: fixed [B, S, H, D], and packed batches of the same size: every request
# S long (the packed layout's own cost against the fixed one) and lengths drawn around S (ragged).
SERVING_PREFIXES = ("", "packed-", "ragged-")
SERVING_SHAPES = set()
for _b, _s in SERVING_BATCHES:
    _name = f"b{_b}-s{_kname(_s)}"
    SHAPES[_name] = _fixed(_b, _s, _s, _name)
    SHAPES[f"packed-{_name}"] = Shape(f"packed-{_name}", (_s,) * _b, (_s,) * _b, True)
    _lens = _around(_b, _s, seed=_b * 100003 + _s)
    SHAPES[f"ragged-{_name}"] = Shape(f"ragged-{_name}", _lens, _lens, True)
    SERVING_SHAPES |= {prefix + _name for prefix in SERVING_PREFIXES}
SHAPE_DESCRIPTIONS = {
    "b4-s4k": "B=4, S=4096",
    "chunk-q256-k4k": "chunked prefill: B=1, Sq=256 new tokens after 3840 cached (Sk=4096), bottom-right masks",
    "ragged16": f"packed ragged: 16 requests of {min(RAGGED16)}..{max(RAGGED16)} tokens ({sum(RAGGED16)} in all), Sq=Sk each",
}


@dataclass(frozen=True)
class Case:
    head_dim: int
    mask: str
    dtype: str
    hq: int
    hkv: int
    shape_name: str

    @property
    def name(self) -> str:
        return f"d{self.head_dim}-{self.mask}-{self.dtype}-h{self.hq}kv{self.hkv}-{self.shape_name}"

    @property
    def shape(self) -> Shape:
        return SHAPES[self.shape_name]

    @property
    def window(self) -> int:
        """window_left for tsattn (-1: none)."""
        return WINDOWS.get(self.mask, -1)

    @property
    def mask_type(self) -> str:
        """tsattn's mask_type."""
        return {"dense": "dense", "vwin": "variable_window"}.get(self.mask, "causal")

    @property
    def causal(self) -> bool:
        return self.mask in ("causal", "win1k", "win4k")

    @property
    def group(self) -> int:
        return self.hq // self.hkv

    @property
    def seq_len(self) -> Optional[int]:
        """S for the B=1 square sweep shapes (the x axis of the plots), else None."""
        s = self.shape
        if not s.packed and s.batch == 1 and s.sq == s.sk and self.shape_name.startswith("b1-s"):
            return s.sq
        return None

    def params(self) -> dict:
        s = self.shape
        p = {
            "head_dim": self.head_dim,
            "mask": self.mask,
            "dtype": self.dtype,
            "hq": self.hq,
            "hkv": self.hkv,
            "shape": self.shape_name,
            "batch": s.batch,
            "packed": s.packed,
            "window_left": self.window,
            "tsattn_mask_type": self.mask_type,
        }
        if s.packed:
            p.update(q_lens=list(s.q_lens), kv_lens=list(s.kv_lens))
        else:
            p.update(sq=s.sq, sk=s.sk)
        if self.seq_len is not None:
            p["seq_len"] = self.seq_len
        if self.dtype == "fp8":
            p["tsattn_out_dtype"] = "bf16"
        return p


def parse_name(name: str) -> Case:
    """The inverse of Case.name (ValueError for a malformed or unknown name)."""
    parts = name.split("-")
    try:
        d, mask, dtype, heads = parts[0], parts[1], parts[2], parts[3]
        shape = "-".join(parts[4:])
        hq, hkv = heads[1:].split("kv")
        case = Case(int(d[1:]), mask, dtype, int(hq), int(hkv), shape)
    except (IndexError, ValueError):
        raise ValueError(f"{name!r} is not a case name (e.g. d128-causal-bf16-h32kv8-b1-s8k)") from None
    if case not in set(full_catalog()):
        raise ValueError(f"{name!r} is not in the catalog")
    return case


# ---------------------------------------------------------------- catalogs


def full_catalog() -> List[Case]:
    """The whole product, in a fixed order (--full)."""
    cases = []
    for d in HEAD_DIMS:
        for mask, dtype, (hq, hkv), shape in itertools.product(MASKS, DTYPES, HEADS[d], SHAPES):
            cases.append(Case(d, mask, dtype, hq, hkv, shape))
    return cases


def default_cases() -> List[Case]:
    """Covers every axis in about five minutes on an H200, most important first (a time budget cuts
    the tail): headline S=8K cases, every mask at 8K, every shape, the dtype and head axes at 8K
    (each value at least once per head dim where it matters), then the rest of the sequence sweep
    (bf16, 32/8, dense and causal, both head dims: the plots). The serving batches have their own
    set (serving_cases)."""
    hq, hkv = PRIMARY_HEADS
    out: List[Case] = []

    def add(d, mask, dtype, heads, shape):
        c = Case(d, mask, dtype, heads[0], heads[1], shape)
        if c not in out:
            out.append(c)

    for d in HEAD_DIMS:
        for mask in ("dense", "causal"):
            add(d, mask, "bf16", (hq, hkv), "b1-s8k")
    for d in HEAD_DIMS:
        for mask in ("win1k", "win4k", "vwin"):
            add(d, mask, "bf16", (hq, hkv), "b1-s8k")
    for d in HEAD_DIMS:
        for shape in ("b4-s4k", "chunk-q256-k4k", "ragged16"):
            add(d, "causal", "bf16", (hq, hkv), shape)
    for d in HEAD_DIMS:
        for dtype in ("fp16", "fp8"):
            for mask in ("dense", "causal"):
                if not (d == 256 and dtype == "fp16" and mask == "dense"):
                    add(d, mask, dtype, (hq, hkv), "b1-s8k")
    for heads in HEADS[128]:
        add(128, "causal", "bf16", heads, "b1-s8k")
    add(256, "causal", "bf16", (16, 4), "b1-s8k")  # D256 group 4 (32/4 runs at D128)
    for mask in ("dense", "causal"):  # D256 MHA: 16/16 heads, as issue 8's bar table measures cuDNN
        add(256, mask, "bf16", (16, 16), "b1-s8k")
    for d in HEAD_DIMS:
        for mask in ("dense", "causal"):
            for s in SEQ_SWEEP:
                add(d, mask, "bf16", (hq, hkv), f"b1-s{_kname(s)}")
    return out


def quick_cases() -> List[Case]:
    """tools/dev/gpu_check.sh's smoke set: the S=8K headline cases and one of each other kind."""
    hq, hkv = PRIMARY_HEADS
    cases = [Case(d, m, "bf16", hq, hkv, "b1-s8k") for d in HEAD_DIMS for m in ("dense", "causal")]
    cases += [
        Case(128, "win1k", "bf16", hq, hkv, "b1-s8k"),
        Case(128, "vwin", "bf16", hq, hkv, "b1-s8k"),
        Case(128, "causal", "fp8", hq, hkv, "b1-s8k"),
        Case(128, "causal", "bf16", hq, hkv, "chunk-q256-k4k"),
        Case(128, "causal", "bf16", hq, hkv, "ragged16"),
    ]
    return cases


def serving_cases() -> List[Case]:
    """Batched short prompts (--serving): every serving batch, fixed and in its two packed twins, at
    D128 32/8 and 32/32 and D256 16/4 heads, dense and causal, bf16 and fp16."""
    heads = [(128, (32, 8)), (128, (32, 32)), (256, (16, 4))]
    return [
        Case(d, mask, dtype, hk[0], hk[1], f"{prefix}b{b}-s{_kname(s)}")
        for prefix in SERVING_PREFIXES
        for dtype in ("bf16", "fp16")
        for d, hk in heads
        for mask in ("dense", "causal")
        for b, s in SERVING_BATCHES
    ]


def select(cases: Sequence[Case], patterns: Iterable[str]) -> Tuple[List[Case], List[str]]:
    """Cases whose name matches any glob pattern (fnmatch, case-sensitive), in catalog order, and
    the patterns that matched nothing."""
    pats = [p.strip() for p in patterns if p.strip()]
    chosen = [c for c in cases if any(fnmatch.fnmatchcase(c.name, p) for p in pats)]
    unmatched = [p for p in pats if not any(fnmatch.fnmatchcase(c.name, p) for c in cases)]
    return chosen, unmatched


def split_patterns(text: str) -> List[str]:
    return [p for p in (t.strip() for t in text.replace(" ", ",").split(",")) if p]


def catalog_cases(text: str) -> Tuple[List[Case], List[str]]:
    """For tools that take --cases outside the harness: the catalog's cases matching the
    comma-separated patterns, and the patterns that matched nothing (each printed)."""
    cases, unmatched = select(full_catalog(), split_patterns(text))
    for pattern in unmatched:
        print(f"--cases pattern {pattern!r} matches no case")
    return cases, unmatched


# ---------------------------------------------------------------- mask semantics


def vwin_bounds(case: Case, request: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The variable-window bounds (inclusive, int64, CPU) of one request, as tsattn receives them."""
    sq, sk = case.shape.q_lens[request], case.shape.kv_lens[request]
    gen = torch.Generator().manual_seed(VWIN_SEED + 7919 * request)
    widths = torch.randint(VWIN_MIN, VWIN_MAX + 1, (sq,), generator=gen, dtype=torch.int64)
    ends = torch.arange(sq, dtype=torch.int64) + (sk - sq)
    starts = (ends - widths + 1).clamp(min=0)
    return starts, ends


def row_bounds(case: Case, request: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per query row of one request, the inclusive visible key range (lo, hi), clamped to [0, Sk).
    A row with lo > hi sees no key."""
    sq, sk = case.shape.q_lens[request], case.shape.kv_lens[request]
    i = torch.arange(sq, dtype=torch.int64)
    if case.mask == "dense":
        lo, hi = torch.zeros(sq, dtype=torch.int64), torch.full((sq,), sk - 1, dtype=torch.int64)
    elif case.mask == "vwin":
        lo, hi = vwin_bounds(case, request)
    else:
        hi = i + (sk - sq)
        lo = hi - case.window if case.window >= 1 else torch.zeros(sq, dtype=torch.int64)
    return lo.clamp(min=0), hi.clamp(max=sk - 1)


def visible_pairs(case: Case) -> int:
    total = 0
    for b in range(case.shape.batch):
        lo, hi = row_bounds(case, b)
        total += int((hi - lo + 1).clamp(min=0).sum())
    return total


def flops(case: Case) -> int:
    """docs/contract.md: 4 * Hq * D * visible (i, j) pairs."""
    return 4 * case.hq * case.head_dim * visible_pairs(case)


def input_bytes(case: Case) -> int:
    """q, k, v and the output, once (what one input set occupies)."""
    el = 1 if case.dtype == "fp8" else 2
    out_el = 2
    tq, tk = sum(case.shape.q_lens), sum(case.shape.kv_lens)
    return (tq * case.hq * case.head_dim * (el + out_el)) + 2 * tk * case.hkv * case.head_dim * el


# ---------------------------------------------------------------- what each contender can express


def static_na(contender: str, case: Case) -> Optional[str]:
    """'n/a: reason' when a contender cannot express a case at all (known before running), else None.
    Run-time probes (torch version features) can add more n/a's in tools/bench/bench.py."""
    if contender == "tsattn":
        return None
    if case.dtype == "fp8":
        return {
            "cudnn": "n/a: torch SDPA takes no fp8 inputs",
            "fa2": "n/a: FA2 takes no fp8 inputs",
            "flex": "n/a: FlexAttention takes no fp8 inputs",
        }[contender]
    if contender == "cudnn":
        if case.mask in WINDOWS:
            return "n/a: torch SDPA has no sliding window"
        if case.mask == "vwin":
            return "n/a: torch SDPA has no per-row window"
    if contender == "fa2" and case.mask == "vwin":
        return "n/a: FA2 has no per-row window"
    return None


def gqa_handling(contender: str) -> str:
    return {
        "tsattn": "native",
        "fa2": "native",
        "flex": "native (enable_gqa)",
        "cudnn": "K/V expanded to Hq heads (repeat_interleave) before timing, not timed",
    }[contender]


# ---------------------------------------------------------------- repetitions and run-time estimate

WARMUP = 5
REPS_TARGET_MS = 100.0
REPS_MIN, REPS_MAX = 30, 200


def choose_reps(
    call_ms: float,
    fixed: Optional[int] = None,
    target_ms: float = REPS_TARGET_MS,
    lo: int = REPS_MIN,
    hi: int = REPS_MAX,
) -> int:
    """Timed repetitions: --reps if given, else enough for ~target_ms of calls, within [lo, hi]."""
    if fixed:
        return int(fixed)
    if not call_ms > 0 or not math.isfinite(call_ms):
        return lo
    return int(max(lo, min(hi, math.ceil(target_ms / call_ms))))


@dataclass
class Assumptions:
    tflops: float = 250.0  # every contender, every case (a deliberately low figure)
    startup_s: float = 15.0  # python + torch import, CUDA context, meta, nvidia-smi
    jit_s: float = 25.0  # JIT figures: cold compiles, 3 fresh subprocesses, host cost loop
    case_s: float = 0.6  # per case: inputs, fp32 reference, checks, clock sample
    first_call_s: Dict[str, float] = None  # per contender and case: compile / plan / first launch
    flex_first_extra_s: float = 15.0  # the first torch.compile of a process (inductor warm-up)
    sleep_ms_per_batch: float = 20.0  # GPU sleep ahead of each batch of 50 timed calls
    cudnn_varlen_probe_s: float = 8.0  # a fresh process that tries cuDNN varlen once (ragged cases)

    def __post_init__(self):
        if self.first_call_s is None:
            self.first_call_s = {"tsattn": 0.05, "cudnn": 0.3, "fa2": 0.05, "flex": 4.0}


def estimate(
    cases: Sequence[Case],
    contenders: Sequence[str] = CONTENDERS,
    fixed_reps: Optional[int] = None,
    a: Optional[Assumptions] = None,
    with_jit: bool = True,
) -> dict:
    """Seconds a run should take: cases x contenders x (check + warm-up + reps) x time at the
    assumed TFLOP/s, plus the fixed costs in Assumptions."""
    a = a or Assumptions()
    timed_s = first_s = 0.0
    calls = 0
    runs = 0
    flex_used = False
    for c in cases:
        t_ms = flops(c) / (a.tflops * 1e9)
        for name in contenders:
            if static_na(name, c):
                continue
            runs += 1
            reps = choose_reps(t_ms, fixed_reps)
            n = 1 + WARMUP + reps
            calls += n
            timed_s += n * t_ms / 1e3 + math.ceil(reps / 50) * a.sleep_ms_per_batch / 1e3
            first_s += a.first_call_s.get(name, 0.0)
            flex_used |= name == "flex"
    fixed_s = a.startup_s + (a.jit_s if with_jit else 0.0) + a.case_s * len(cases)
    if "cudnn" in contenders and any(c.shape.packed and not static_na("cudnn", c) for c in cases):
        fixed_s += a.cudnn_varlen_probe_s
    if flex_used:
        first_s += a.flex_first_extra_s
    total = fixed_s + timed_s + first_s
    return {
        "cases": len(cases),
        "contender_runs": runs,
        "calls": calls,
        "timed_s": round(timed_s, 1),
        "first_calls_s": round(first_s, 1),
        "fixed_s": round(fixed_s, 1),
        "total_s": round(total, 1),
        "assumed_tflops": a.tflops,
    }
