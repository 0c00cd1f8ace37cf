"""How one attention call of Hugging Face transformers becomes one tsattn call, or stays on PyTorch.

transformers hands an attention function q ``[B, Hq, Sq, D]``, k/v ``[B, Hkv, Sk, D]``, a mask
and keyword arguments (docs/transformers.md lists them). This module decides, from those alone:

* the mask tsattn runs (``"dense"``, bottom-right ``"causal"`` with ``window_left``, or
  ``"variable_window"`` for a bidirectional sliding window) and the layout: the fixed layout when
  every row of the batch is one whole request, else the packed ragged layout, whose requests are
  the unpadded rows of a padded batch or the sequences packed into one row;
* or the reason why tsattn cannot compute this call exactly (a ``Fallback``).

It is plain torch and imports nothing from transformers, so that every rule here is tested on the
CPU without it (tests/python/test_transformers_plan.py); transformers.py feeds it what transformers
passes and runs the fallback.

Conventions (positions are absolute token positions of one batch row):

* transformers' causal ``sliding_window`` W: the query at position p sees the keys at positions
  k with ``p - W < k <= p``, W keys counting itself. tsattn's ``window_left`` counts the keys
  before the query: ``window_left = W - 1`` (``causal_window_left``).
* A bidirectional ``sliding_window`` W (ModernBERT-style encoders; transformers' flash-attention
  integration reads it the same way): ``|p - k| <= W - 1`` (``bidirectional_half_width``).
* A 2-D mask ``[B, L]`` (True or 1: a real token) marks which keys exist: column j is key row j of
  k, keys from column L on are not attended (static caches are longer than what they hold), and
  for causal attention the Sq queries are the last Sq of the L key positions
  (``transformers.py``'s mask function returns exactly this; ``reference_visibility`` is its meaning).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple, Union

import torch

HEAD_DIMS = (128, 256)
DTYPES = (torch.float16, torch.bfloat16)

# The fallback reasons: key -> what tsattn cannot do (the warning names the detail too).
REASONS = {
    "autograd": "gradients are required and tsattn has no backward",
    "dropout": "attention dropout (training)",
    "softcap": "logit soft-capping",
    "sinks": "attention sinks (s_aux)",
    "position_bias": "an additive position bias",
    "argument": "an attention argument tsattn does not know",
    "device": "tensors not on a CUDA device",
    "dtype": "a dtype other than float16 and bfloat16",
    "head_dim": "a head dim other than 128 and 256, or different head dims for q, k and v",
    "heads": "query heads not a multiple of the key/value heads",
    "window": "a sliding window tsattn's masks cannot express",
    "mask": "an attention mask other than causal, sliding-window, padding or packed sequences",
    "causal_shape": "causal attention with more queries than keys",
    "not_implemented": "tsattn raised NotImplementedError",
}


@dataclass(frozen=True)
class Fallback:
    """This call runs on PyTorch: ``reason`` is a key of REASONS, ``detail`` says what was seen."""

    reason: str
    detail: str = ""

    def message(self) -> str:
        text = f"tsattn cannot compute this attention: {REASONS[self.reason]}"
        return f"{text} ({self.detail})" if self.detail else text


# ---------------------------------------------------------------- windows


def causal_window_left(sliding_window: Optional[int]) -> int:
    """tsattn's ``window_left`` for transformers' causal ``sliding_window`` W (None: no window, -1).

    transformers keeps keys with ``p - W < k <= p`` (W keys, the query's own included); tsattn keeps
    ``p - window_left <= k <= p``; so ``window_left = W - 1``. W = 1 gives 0, a row that sees only
    itself, which tsattn does not take (callers fall back); W < 1 is a ValueError.
    """
    if sliding_window is None:
        return -1
    w = int(sliding_window)
    if w < 1:
        raise ValueError(f"sliding_window={sliding_window} must be >= 1")
    return w - 1


def bidirectional_half_width(sliding_window: Optional[int]) -> Optional[int]:
    """Half-width h of a bidirectional ``sliding_window`` W: keys with ``|p - k| <= h``, h = W - 1."""
    if sliding_window is None:
        return None
    w = int(sliding_window)
    if w < 1:
        raise ValueError(f"sliding_window={sliding_window} must be >= 1")
    return w - 1


def reference_visibility(
    batch: int,
    q_len: int,
    kv_len: int,
    *,
    causal: bool,
    sliding_window: Optional[int] = None,
    padding: Optional[torch.Tensor] = None,
    q_offset: int = 0,
    kv_offset: int = 0,
    device=None,
) -> torch.Tensor:
    """bool ``[B, Sq, Sk]``: may query row i see key row j, by transformers' rules.

    Query i sits at position ``q_offset + i``, key j at ``kv_offset + j``; ``padding`` ``[B, L]``
    covers positions 0..L-1 (positions from L on count as padding). Causal: ``k <= p`` and, with a
    window, ``p - W < k``; bidirectional: every key, or ``|p - k| <= W - 1`` with a window. This
    is the mask transformers' mask functions build for SDPA, and what the fallback hands SDPA.
    """
    device = device if device is not None else (padding.device if padding is not None else "cpu")
    p = (torch.arange(q_len, device=device) + q_offset).view(1, q_len, 1)
    k = (torch.arange(kv_len, device=device) + kv_offset).view(1, 1, kv_len)
    vis = torch.ones(1, q_len, kv_len, dtype=torch.bool, device=device)
    if causal:
        vis = vis & (k <= p)
        if sliding_window is not None:
            vis = vis & (k > p - int(sliding_window))
    elif sliding_window is not None:
        vis = vis & ((p - k).abs() <= bidirectional_half_width(sliding_window))
    vis = vis.expand(batch, q_len, kv_len)
    if padding is not None:
        pad = padding.to(device=device, dtype=torch.bool).expand(batch, -1)
        covered = torch.zeros(batch, kv_offset + kv_len, dtype=torch.bool, device=device)
        n = min(pad.shape[1], kv_offset + kv_len)
        covered[:, :n] = pad[:, :n]
        vis = vis & covered[:, kv_offset:].unsqueeze(1)
    return vis


def key_padding(
    attention_mask: Optional[torch.Tensor], kv_offset: int, width: int, kv_len: int, batch: int, device=None
) -> Optional[torch.Tensor]:
    """The 2-D mask the attention function gets for a plain pattern (see the module docstring).

    ``attention_mask`` is transformers' ``[B, positions]`` padding mask (or None), ``kv_offset``
    the position of key row 0, ``width`` how many key rows can be seen (for causal attention: up
    to the last query's position). None when every one of the ``kv_len`` keys is a real token, so
    that the call runs in the fixed layout; else bool ``[B, width]``.
    """
    if attention_mask is None:
        return None if width == kv_len else torch.ones(batch, width, dtype=torch.bool, device=device)
    m = attention_mask.to(device=device if device is not None else attention_mask.device, dtype=torch.bool)
    if m.shape[0] != batch:
        m = m.expand(batch, -1)
    end = kv_offset + width
    if m.shape[1] < end:  # a static cache reaches past what the mask covers: not attended
        m = torch.nn.functional.pad(m, (0, end - m.shape[1]))
    m = m[:, kv_offset:end]
    if width == kv_len and bool(m.all()):
        return None
    return m


# ---------------------------------------------------------------- requests


@dataclass
class Requests:
    """Which rows of a padded batch go into which request of a packed call.

    ``q_seg[b, i]`` is the request of query row i of batch row b (-1: not computed, its output is
    0), ``k_seg[b, j]`` that of key row j (-1: not attended). In row-major order (b, then position)
    request ids never decrease, so the rows of each request are consecutive once packed.
    """

    q_seg: torch.Tensor  # int64 [B, Sq]
    k_seg: torch.Tensor  # int64 [B, Sk]
    count: int


def requests_from_padding(valid: torch.Tensor, q_len: int, kv_len: int, aligned: bool) -> Requests:
    """One request per batch row: its real keys (``valid`` ``[B, L]``, L <= Sk; keys from L on are
    out) and, when ``aligned`` (self-attention: the queries are the last Sq of the L key
    positions), the queries at real positions; otherwise every query row."""
    batch, width = valid.shape
    rows = torch.arange(batch, device=valid.device).view(batch, 1)
    k_seg = torch.full((batch, kv_len), -1, dtype=torch.int64, device=valid.device)
    k_seg[:, :width] = torch.where(valid, rows, -1)
    if aligned:
        q_seg = k_seg[:, width - q_len : width].clone()
    else:
        q_seg = rows.expand(batch, q_len).clone()
    return Requests(q_seg, k_seg, batch)


def requests_from_position_ids(position_ids: torch.Tensor, batch: int) -> Requests:
    """Sequences packed into rows: a new request starts wherever the position does not go up by
    one (transformers' rule for packed sequences), and at the start of every row."""
    pos = position_ids.expand(batch, -1)
    starts = torch.ones(pos.shape, dtype=torch.bool, device=pos.device)
    starts[:, 1:] = (pos[:, 1:] - pos[:, :-1]) != 1
    seg = starts.flatten().cumsum(0).view(pos.shape) - 1
    count = int(seg[-1, -1]) + 1 if seg.numel() else 0
    return Requests(seg, seg, count)


def requests_from_cu_seq_lens(cu_q: torch.Tensor, cu_k: torch.Tensor, batch: int, q_len: int, kv_len: int) -> Requests:
    """Requests given as cumulative lengths over the flattened ``[B * S]`` tokens (transformers'
    ``cu_seq_lens_q`` / ``cu_seq_lens_k``); tokens past the last entry are not part of any."""

    def seg(cu: torch.Tensor, rows: int, length: int) -> torch.Tensor:
        cu = cu.to(torch.int64).flatten()
        t = torch.arange(rows * length, device=cu.device)
        s = torch.searchsorted(cu[1:], t, right=True)
        return torch.where(t < cu[-1], s, -1).view(rows, length)

    if cu_q.numel() != cu_k.numel():
        raise ValueError(f"cu_seq_lens_q has {cu_q.numel()} entries and cu_seq_lens_k {cu_k.numel()}")
    return Requests(seg(cu_q, batch, q_len), seg(cu_k, batch, kv_len), cu_q.numel() - 1)


@dataclass
class Packed:
    """A packed call's rows and indptrs (``pack``), on the device of the masks it came from."""

    q_rows: Tuple[torch.Tensor, torch.Tensor]  # (batch row, position) of each packed query row
    k_rows: Tuple[torch.Tensor, torch.Tensor]
    qo_indptr: torch.Tensor  # int32 [R + 1], host
    kv_indptr: torch.Tensor
    q_local: torch.Tensor  # each packed query row's index within its request
    q_kv_len: torch.Tensor  # the Sk of each packed query row's request
    max_kv_len: int
    keys_consecutive: bool  # every request's keys are consecutive positions of one batch row


def pack(req: Requests) -> Packed:
    """The packed rows of ``req``: gathered in row-major order, so request by request."""
    qb, qs = (req.q_seg >= 0).nonzero(as_tuple=True)
    kb, ks = (req.k_seg >= 0).nonzero(as_tuple=True)
    q_ids, k_ids = req.q_seg[qb, qs], req.k_seg[kb, ks]
    device = req.q_seg.device
    q_counts = torch.bincount(q_ids, minlength=req.count)
    k_counts = torch.bincount(k_ids, minlength=req.count)
    zero = torch.zeros(1, dtype=torch.int64, device=device)
    qo = torch.cat([zero, q_counts.cumsum(0)])
    kv = torch.cat([zero, k_counts.cumsum(0)])
    same = k_ids[1:] == k_ids[:-1]
    step_ok = ((ks[1:] - ks[:-1]) == 1) & (kb[1:] == kb[:-1])
    flags = torch.stack(
        [
            (q_ids[1:] >= q_ids[:-1]).all() & (k_ids[1:] >= k_ids[:-1]).all(),
            (step_ok | ~same).all(),
        ]
    ).to(torch.int64)
    max_kv = k_counts.max().view(1) if req.count else zero
    host = torch.cat([qo, kv, flags, max_kv]).cpu()  # one device-to-host copy for all of it
    n = req.count + 1
    if not bool(host[2 * n]):
        raise ValueError("requests must not go back in row-major order")
    return Packed(
        q_rows=(qb, qs),
        k_rows=(kb, ks),
        qo_indptr=host[:n].to(torch.int32),
        kv_indptr=host[n : 2 * n].to(torch.int32),
        q_local=torch.arange(q_ids.numel(), device=device) - qo[q_ids],
        q_kv_len=k_counts[q_ids],
        max_kv_len=int(host[2 * n + 2]),
        keys_consecutive=bool(host[2 * n + 1]),
    )


# ---------------------------------------------------------------- plans


@dataclass
class Plan:
    """One tsattn call: its mask and layout (``packed`` None: the fixed layout)."""

    mask_type: str  # "dense" | "causal" | "variable_window"
    window_left: int = -1
    half_width: Optional[int] = None  # variable_window: key j visible to row i iff |i - j| <= half_width
    key_width: Optional[int] = None  # fixed layout: only the first key_width key rows take part
    packed: Optional[Packed] = None

    @property
    def layout(self) -> str:
        return "fixed" if self.packed is None else "packed"


def _mask_of(causal: bool, window_left: int, half_width: Optional[int], max_kv_len: int) -> Tuple[str, int]:
    """tsattn's (mask_type, window_left). A causal window that reaches every key of every request
    (``window_left >= Sk - 1``: bottom-right, the last row sees Sk - 1 keys before itself) is
    dropped: the plain causal kernel computes the same."""
    if causal:
        return "causal", window_left if 1 <= window_left < max_kv_len - 1 else -1
    return ("variable_window" if half_width is not None else "dense"), -1


def _packed_plan(req: Requests, causal: bool, window_left: int, half_width: Optional[int]) -> Union[Plan, Fallback]:
    packed = pack(req)
    if causal and bool((packed.qo_indptr.diff() > packed.kv_indptr.diff()).any()):
        return Fallback("causal_shape", "a request with more queries than keys")
    if (window_left >= 1 or half_width is not None) and not packed.keys_consecutive:
        # tsattn counts a window in packed rows, transformers in positions: the same only when each
        # request's keys are consecutive positions (left or right padding, not holes inside a row).
        return Fallback("window", "a sliding window over padding with gaps inside a row")
    mask_type, wl = _mask_of(causal, window_left, half_width, packed.max_kv_len)
    if mask_type == "variable_window" and half_width >= packed.max_kv_len - 1:
        mask_type = "dense"
    if mask_type == "variable_window":
        # Self-attention only (the caller checks): the queries are the request's keys.
        counts_equal = bool(torch.equal(packed.qo_indptr, packed.kv_indptr))
        if not counts_equal:
            return Fallback("window", "a bidirectional window whose queries are not its keys")
    return Plan(mask_type, wl, half_width if mask_type == "variable_window" else None, packed=packed)


def _fixed_plan(
    q_len: int, kv_len: int, causal: bool, window_left: int, half_width: Optional[int], key_width: Optional[int]
) -> Union[Plan, Fallback]:
    width = kv_len if key_width is None else key_width
    if causal and q_len > width:
        return Fallback("causal_shape", f"Sq={q_len} > Sk={width}")
    mask_type, wl = _mask_of(causal, window_left, half_width, width)
    if mask_type == "variable_window":
        if q_len != width:
            return Fallback("window", f"a bidirectional window with Sq={q_len} != Sk={width}")
        if half_width >= width - 1:
            mask_type = "dense"
    return Plan(
        mask_type,
        wl,
        half_width if mask_type == "variable_window" else None,
        key_width=None if width == kv_len else width,
    )


def plan_from_padding(
    valid: torch.Tensor, q_len: int, kv_len: int, *, causal: bool, aligned: bool, window_left: int, half_width
) -> Union[Plan, Fallback]:
    """The call for a 2-D padding mask ``valid`` ``[B, L]`` (see the module docstring)."""
    width = valid.shape[1]
    if width > kv_len:  # more columns than keys: the keys are the last ones
        valid, width = valid[:, width - kv_len :], kv_len
    if aligned and width < q_len:
        return Fallback("mask", f"a 2-D mask of {width} columns for {q_len} queries")
    if bool(valid.all()):
        return _fixed_plan(q_len, kv_len, causal, window_left, half_width, width)
    return _packed_plan(requests_from_padding(valid, q_len, kv_len, aligned), causal, window_left, half_width)


# ---------------------------------------------------------------- the decision


class PlanCache:
    """The plans of the masks seen last. transformers passes one mask object to every layer of a
    forward, and planning a padded call reads the mask's values on the host (a device sync), so
    each mask is planned once per forward, not once per layer. Entries hold the mask weakly and
    are valid only while it is the same, unmodified object."""

    def __init__(self, size: int = 16):
        self._size = size
        self._entries: "OrderedDict[tuple, tuple]" = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _version(t: torch.Tensor):
        try:
            return t._version
        except RuntimeError:  # inference tensors have no version counter (and cannot change outside it)
            return None

    def get(self, mask: torch.Tensor, key: tuple):
        with self._lock:
            entry = self._entries.get((id(mask),) + key)
            if entry is None:
                return None
            ref, version, plan = entry
            if ref() is not mask or version != self._version(mask):
                return None
            self._entries.move_to_end((id(mask),) + key)
            return plan

    def put(self, mask: torch.Tensor, key: tuple, plan) -> None:
        with self._lock:
            self._entries[(id(mask),) + key] = (weakref.ref(mask), self._version(mask), plan)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


def _dense_bool(mask: torch.Tensor, batch: int, q_len: int, kv_len: int) -> Optional[torch.Tensor]:
    """A 4-D mask as bool ``[B, Sq, Sk]`` (True: attend), or None when it is not one tsattn can read:
    float masks only with 0 (attend) and very negative values (do not), the same mask in every head."""
    if mask.dtype != torch.bool:
        if not mask.is_floating_point():
            return None
        attend = mask == 0
        blocked = mask <= torch.finfo(mask.dtype).min / 2
        if not bool((attend | blocked).all()):
            return None
        mask = attend
    if mask.shape[-2] != q_len or mask.shape[-1] < kv_len:
        return None
    mask = mask[..., :kv_len]
    if mask.shape[1] != 1:
        if not bool((mask == mask[:, :1]).all()):
            return None
    return mask[:, 0].expand(batch, q_len, kv_len)


def _plan_dense_mask(
    dense: torch.Tensor,
    q_len: int,
    kv_len: int,
    *,
    causal: bool,
    aligned: bool,
    sliding_window: Optional[int],
    window_left: int,
    half_width: Optional[int],
    position_ids: Optional[torch.Tensor],
    cu_seq_lens: Tuple[Optional[torch.Tensor], Optional[torch.Tensor]],
) -> Union[Plan, Fallback, None]:
    """The plan for a 4-D mask ``dense`` ``[B, Sq, Sk]`` that is exactly, on every row, the mask
    transformers builds for this layer's pattern with sequences packed into rows (given by
    ``cu_seq_lens`` or by ``position_ids`` restarts) or with key padding; None for any other mask."""
    batch = dense.shape[0]
    req = None
    cu_q, cu_k = cu_seq_lens
    if q_len == kv_len and cu_q is not None and cu_k is not None and torch.equal(cu_q, cu_k):
        req = requests_from_cu_seq_lens(cu_q, cu_k, batch, q_len, kv_len)
    elif position_ids is not None and position_ids.dim() == 2 and q_len == kv_len and position_ids.shape[-1] == q_len:
        req = requests_from_position_ids(position_ids.to(dense.device), batch)
    if req is not None:
        same = (req.q_seg.unsqueeze(2) == req.k_seg.unsqueeze(1)) & (req.q_seg >= 0).unsqueeze(2)
        pattern = reference_visibility(
            batch, q_len, kv_len, causal=causal, sliding_window=sliding_window, device=dense.device
        )
        if torch.equal(same & pattern, dense):
            return _packed_plan(req, causal, window_left, half_width)

    valid = dense.any(dim=1)  # key padding: the keys no query sees
    width = kv_len
    if causal:
        # Where the queries sit: a real query sees its own position last, so with the queries the
        # last Sq of `width` key rows, last - i = width - Sq on real rows (padding rows see less).
        # A static cache has key rows past the last query: width < Sk.
        last = torch.where(dense, torch.arange(kv_len, device=dense.device), -1).amax(dim=-1)  # [B, Sq]
        rows = last >= 0
        if bool(rows.any()):
            width = int((last - torch.arange(q_len, device=dense.device))[rows].max()) + q_len
    if not (q_len <= width <= kv_len or (not aligned and width == kv_len)) or bool(valid[:, width:].any()):
        return None
    padding = valid[:, :width]
    expected = reference_visibility(
        batch,
        q_len,
        kv_len,
        causal=causal,
        sliding_window=sliding_window,
        padding=padding,
        q_offset=width - q_len if aligned else 0,
        device=dense.device,
    )
    if not torch.equal(expected, dense):
        return None
    return plan_from_padding(
        padding, q_len, kv_len, causal=causal, aligned=aligned, window_left=window_left, half_width=half_width
    )


def plan_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    *,
    causal: bool,
    sliding_window: Optional[int] = None,
    dropout: float = 0.0,
    softcap: Optional[float] = None,
    sinks: Optional[torch.Tensor] = None,
    position_bias: Optional[torch.Tensor] = None,
    position_ids: Optional[torch.Tensor] = None,
    cu_seq_lens: Tuple[Optional[torch.Tensor], Optional[torch.Tensor]] = (None, None),
    cross_attention: bool = False,
    unknown_arguments: Sequence[str] = (),
    devices: Sequence[str] = ("cuda",),
    dtypes: Sequence[torch.dtype] = DTYPES,
    cache: Optional[PlanCache] = None,
) -> Union[Plan, Fallback]:
    """The tsattn call for one attention call of transformers, or why there is none.

    ``query`` ``[B, Hq, Sq, D]``, ``key``/``value`` ``[B, Hkv, Sk, D]``; ``attention_mask`` None, a
    2-D padding mask (module docstring) or a 4-D mask ``[B, 1 or H, Sq, Sk]`` (bool, or float with 0
    and -inf). ``devices`` and ``dtypes`` are what the backend runs (tests put a CPU reference there).
    """
    tensors = (query, key, value)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return Fallback("autograd", "use torch.no_grad() or torch.inference_mode() for inference")
    if dropout:
        return Fallback("dropout", f"dropout={dropout}")
    if softcap:
        return Fallback("softcap", f"softcap={softcap}")
    if sinks is not None:
        return Fallback("sinks")
    if position_bias is not None:
        return Fallback("position_bias")
    if unknown_arguments:
        return Fallback("argument", ", ".join(sorted(unknown_arguments)))
    if any(t.device.type not in devices for t in tensors):
        return Fallback("device", f"{query.device.type} tensors")
    if query.dtype not in dtypes or key.dtype != query.dtype or value.dtype != query.dtype:
        return Fallback("dtype", f"q, k, v: {query.dtype}, {key.dtype}, {value.dtype}".replace("torch.", ""))
    d = query.shape[-1]
    if key.shape[-1] != d or value.shape[-1] != d or d not in HEAD_DIMS:
        return Fallback("head_dim", f"q, k, v head dims {d}, {key.shape[-1]}, {value.shape[-1]}")
    if key.shape[1] == 0 or query.shape[1] % key.shape[1]:
        return Fallback("heads", f"Hq={query.shape[1]}, Hkv={key.shape[1]}")

    batch, q_len, kv_len = query.shape[0], query.shape[2], key.shape[2]
    window_left, half_width = -1, None
    if sliding_window is not None:
        if int(sliding_window) < 1:
            return Fallback("window", f"sliding_window={sliding_window}")
        if causal:
            window_left = causal_window_left(sliding_window)
            if window_left == 0:
                return Fallback("window", "sliding_window=1: each row sees only itself")
        else:
            half_width = bidirectional_half_width(sliding_window)
    # Self-attention: causal always; bidirectional when the queries are the keys' own positions.
    aligned = causal or (not cross_attention and q_len == kv_len)
    if half_width is not None and not aligned:
        return Fallback("window", "a bidirectional window between different query and key sequences")

    if attention_mask is None:
        cu_q, cu_k = cu_seq_lens
        if cu_q is not None and cu_k is not None:  # padding-free batches: the caller says where requests start
            req = requests_from_cu_seq_lens(cu_q, cu_k, batch, q_len, kv_len)
            return _packed_plan(req, causal, window_left, half_width)
        return _fixed_plan(q_len, kv_len, causal, window_left, half_width, None)

    key_ = (attention_mask.dim(), q_len, kv_len, causal, aligned, window_left, half_width)
    if cache is not None:
        hit = cache.get(attention_mask, key_)
        if hit is not None:
            return hit
    if attention_mask.dim() == 2:
        if attention_mask.is_floating_point() or attention_mask.is_complex():
            plan = Fallback("mask", f"a 2-D {attention_mask.dtype} mask".replace("torch.", ""))
        else:
            valid = attention_mask.to(torch.bool)
            if valid.shape[0] != batch:
                valid = valid.expand(batch, -1)
            plan = plan_from_padding(
                valid, q_len, kv_len, causal=causal, aligned=aligned, window_left=window_left, half_width=half_width
            )
    elif attention_mask.dim() == 4:
        dense = _dense_bool(attention_mask, batch, q_len, kv_len)
        plan = None
        if dense is not None:
            plan = _plan_dense_mask(
                dense,
                q_len,
                kv_len,
                causal=causal,
                aligned=aligned,
                sliding_window=sliding_window,
                window_left=window_left,
                half_width=half_width,
                position_ids=position_ids,
                cu_seq_lens=cu_seq_lens,
            )
        if plan is None:
            plan = Fallback(
                "mask", f"a {attention_mask.dtype} mask of shape {list(attention_mask.shape)}".replace("torch.", "")
            )
    else:
        plan = Fallback("mask", f"a {attention_mask.dim()}-D mask")
    if cache is not None:
        cache.put(attention_mask, key_, plan)
    return plan


# ---------------------------------------------------------------- running a plan


def run_plan(
    plan: Plan, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling, prefill: Callable
) -> torch.Tensor:
    """Runs ``plan`` through ``prefill`` (tsattn.batch_prefill's signature) and returns the output
    as transformers wants it: ``[B, Sq, Hq, D]``, contiguous, rows not computed are 0.

    q, k, v reach the fixed layout as strided ``[B, S, H, D]`` views of transformers' ``[B, H, S, D]``
    tensors (no copy); the packed layout gathers the requests' rows (one copy each)."""
    # tsattn needs the head dim contiguous; transformers' projections always give that.
    query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
    # A scalar tensor or numpy scale (some models keep one) is a plain float to tsattn.
    options = {"mask_type": plan.mask_type, "sm_scale": None if scaling is None else float(scaling)}
    if plan.window_left >= 1:
        options["window_left"] = plan.window_left
    batch, q_len = query.shape[0], query.shape[2]
    if plan.packed is None:
        k, v = key, value
        if plan.key_width is not None:
            k, v = k[:, :, : plan.key_width], v[:, :, : plan.key_width]
        if plan.mask_type == "variable_window":
            i = torch.arange(q_len, device=query.device)
            starts = (i - plan.half_width).clamp(min=0).to(torch.int32)
            ends = (i + plan.half_width).clamp(max=k.shape[2] - 1).to(torch.int32)
            options["variable_window_token_starts"] = starts.expand(batch, q_len)
            options["variable_window_token_ends"] = ends.expand(batch, q_len)
        return prefill(query.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **options)
    p = plan.packed
    qb, qs = (t.to(query.device) for t in p.q_rows)
    kb, ks = (t.to(query.device) for t in p.k_rows)
    q = query[qb, :, qs]  # [total_q, Hq, D]: advanced indices around a slice go first
    k = key[kb, :, ks]
    v = value[kb, :, ks]
    if plan.mask_type == "variable_window":
        local = p.q_local.to(query.device)
        options["variable_window_token_starts"] = (local - plan.half_width).clamp(min=0).to(torch.int32)
        last = p.q_kv_len.to(query.device) - 1
        options["variable_window_token_ends"] = torch.minimum(local + plan.half_width, last).to(torch.int32)
    packed_out = prefill(q, k, v, qo_indptr=p.qo_indptr, kv_indptr=p.kv_indptr, **options)
    out = query.new_zeros(batch, q_len, query.shape[1], packed_out.shape[-1])
    out[qb, qs] = packed_out
    return out
