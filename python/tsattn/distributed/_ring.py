"""Ring attention over zigzag shards: each rank's queries meet every rank's K/V in turn, and the
partial results merge through their log-sum-exp.

A rank runs ``world_size`` steps. At step t it holds the K/V shard of rank ``(rank - t) mod
world_size`` (``_exchange``), makes that step's attention calls (``_step_plan``: from none, when the
window cannot reach that shard, to two) and merges each call's ``(out, lse)`` into a float32
accumulator that starts empty (lse -inf). The merge is associative and commutative up to rounding,
so the order the shards arrive in does not change the result beyond that. The output is the
accumulator in q's dtype, and its lse on request.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import torch

from .._args import check_scalars, check_tensor
from ._backends import AttentionBackend, TsattnBackend, _check_heads
from ._exchange import KV, RingExchange, ring_kv, simulated_kv
from ._step_plan import Block, BlockMask, PackedCall, plan_packed_step, plan_step
from ._zigzag import check_indptr

MASK_TYPES = ("dense", "causal")


class Settings(NamedTuple):
    mask_type: str
    window_left: int
    sm_scale: Optional[float]


def check_settings(mask_type, window_left, sm_scale) -> Settings:
    """The mask, window and scale under ``batch_prefill``'s rules, restricted to the ring's masks."""
    if not isinstance(mask_type, str):
        raise TypeError(f"mask_type must be a str, 'dense' or 'causal' (got {type(mask_type).__name__}: {mask_type!r})")
    if mask_type == "variable_window":
        raise NotImplementedError(
            "mask_type='variable_window' is not supported by ring_prefill; supported: 'dense', 'causal'"
        )
    if mask_type not in MASK_TYPES:
        raise ValueError(f"mask_type={mask_type!r} is not one of 'dense', 'causal'")
    s = check_scalars(mask_type, window_left, sm_scale, 1.0, None)
    if s.window_left == 0 or s.window_left < -1:
        raise ValueError(f"window_left={s.window_left} is not allowed; use -1 to disable the window")
    if s.window_left >= 1 and s.mask_type != "causal":
        raise ValueError(f"window_left={s.window_left} needs mask_type='causal' (got mask_type={s.mask_type!r})")
    if s.sm_scale is not None and not (math.isfinite(s.sm_scale) and s.sm_scale > 0):
        raise ValueError(f"sm_scale={s.sm_scale} must be finite and > 0")
    return Settings(s.mask_type, s.window_left, s.sm_scale)


class Geometry(NamedTuple):
    """What the step plans depend on: the layout, the batch size and each request's chunk length
    (fixed layout: one length for every request)."""

    packed: bool
    batch_size: int
    chunk_lens: Tuple[int, ...]


def check_shards(q, k, v, qo_indptr, kv_indptr) -> Geometry:
    """Checks one rank's local shards of q, k and v (and the local indptrs) and returns their geometry."""
    for value, name in ((q, "q"), (k, "k"), (v, "v")):
        check_tensor(value, name, optional=False)
    check_tensor(qo_indptr, "qo_indptr", optional=True)
    check_tensor(kv_indptr, "kv_indptr", optional=True)
    if (qo_indptr is None) != (kv_indptr is None):
        raise ValueError(
            "qo_indptr and kv_indptr must be given together (packed layout) or both left out (fixed layout); "
            f"got qo_indptr={'None' if qo_indptr is None else 'a tensor'}, "
            f"kv_indptr={'None' if kv_indptr is None else 'a tensor'}"
        )
    if qo_indptr is None:
        if q.dim() != 4 or k.dim() != 4:
            raise ValueError(
                f"the fixed layout takes q and k of [B, S, H, D] (got q.shape={list(q.shape)}, k.shape={list(k.shape)})"
            )
        _check_heads(q, k, v)
        if q.shape[0] != k.shape[0]:
            raise ValueError(f"q.shape[0]={q.shape[0]} (batch) must equal k.shape[0]={k.shape[0]}")
        if q.shape[1] != k.shape[1]:
            raise ValueError(
                "ring_prefill attends a sequence to itself, so a rank's shards of q and k have the same "
                f"length: q.shape[1]={q.shape[1]} != k.shape[1]={k.shape[1]}"
            )
        if q.shape[1] % 2:
            raise ValueError(f"q.shape[1]={q.shape[1]} is odd: a zigzag shard holds two equal chunks (zigzag_shard)")
        return Geometry(False, q.shape[0], (q.shape[1] // 2,))

    if q.dim() != 3 or k.dim() != 3:
        raise ValueError(
            f"the packed layout takes q and k of [total, H, D] (got q.shape={list(q.shape)}, k.shape={list(k.shape)})"
        )
    _check_heads(q, k, v)
    qo = check_indptr(qo_indptr, "qo_indptr", q.shape[0], "q.shape[0]")
    kv = check_indptr(kv_indptr, "kv_indptr", k.shape[0], "k.shape[0]")
    if len(qo) != len(kv):
        raise ValueError(f"qo_indptr has {len(qo)} entries but kv_indptr has {len(kv)}; both are [B + 1]")
    for b, (a, c) in enumerate(zip(qo, kv)):
        if a != c:
            raise ValueError(
                "ring_prefill attends each request to itself, so qo_indptr and kv_indptr are equal: "
                f"qo_indptr[{b}]={a} != kv_indptr[{b}]={c}"
            )
    chunk_lens = []
    for b in range(len(qo) - 1):
        length = qo[b + 1] - qo[b]
        if length % 2:
            raise ValueError(
                f"request {b} has local length qo_indptr[{b + 1}]-qo_indptr[{b}]={length}, which is odd: "
                "a zigzag shard holds two equal chunks of each request (zigzag_shard_packed)"
            )
        chunk_lens.append(length // 2)
    return Geometry(True, len(qo) - 1, tuple(chunk_lens))


def _default_backend(q: torch.Tensor) -> AttentionBackend:
    if q.device.type != "cuda":
        raise ValueError(
            f"q is on {q.device}: the default backend runs tsattn's kernels and needs CUDA tensors; "
            "pass backend=ReferenceBackend() to compute with the fp32 torch reference instead"
        )
    return TsattnBackend()


def _on_device(mask: BlockMask, device, batch_size: Optional[int]) -> BlockMask:
    """mask with its bounds on device; fixed layout (batch_size given): bounds [B, rows], one row of
    bounds shared by every request (a stride-0 view)."""
    if mask.starts is None:
        return mask
    starts, ends = mask.starts.to(device), mask.ends.to(device)
    if batch_size is not None:
        starts = starts.unsqueeze(0).expand(batch_size, -1)
        ends = ends.unsqueeze(0).expand(batch_size, -1)
    return BlockMask(mask.mask_type, mask.window_left, starts, ends)


class RingPrefill:
    """Context-parallel prefill on this rank's zigzag shards, planned once and run for every layer.

    Holds the settings, the backend (whose plans and workspaces it reuses), the step plans of the
    last shard geometry it ran (with their bounds already on the device) and the two receive
    buffers of the last K/V shape; a ``run`` with the same shapes (every layer of a forward pass)
    then only exchanges K/V, launches and merges. One object per stream of use, like the wrapper it
    runs on. ``group`` is resolved at the first ``run``."""

    def __init__(
        self,
        *,
        group=None,
        mask_type: str = "dense",
        window_left: int = -1,
        sm_scale: Optional[float] = None,
        backend: Optional[AttentionBackend] = None,
    ) -> None:
        self.settings = check_settings(mask_type, window_left, sm_scale)
        self.group = group
        self.backend = backend
        self._exchange: Optional[RingExchange] = None
        self._plans: Dict[tuple, list] = {}
        self._buffers: Dict[tuple, List[KV]] = {}

    def run(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        qo_indptr: Optional[torch.Tensor] = None,
        kv_indptr: Optional[torch.Tensor] = None,
        *,
        return_lse: bool = False,
    ):
        """Attention of this rank's queries over the whole sequence: q, k, v are this rank's zigzag
        shards (fixed ``[B, S/world, H, D]``, or packed ``[total, H, D]`` with the local int32
        indptrs of ``zigzag_shard_packed``). Every rank of the group must call it with shards of the
        same shapes. Returns out (q's shape and dtype) or ``(out, lse)`` with ``return_lse=True``
        (lse float32 of ``q.shape[:-1]``, natural log)."""
        geometry, backend, exchange = self._prepare(q, k, v, qo_indptr, kv_indptr, return_lse)
        k, v = k.contiguous(), v.contiguous()  # sent as they are
        buffers = self._receive_buffers(k, v) if exchange.world_size > 1 else []
        steps = ring_kv(k, v, exchange, buffers)
        return self._run_rank(q, steps, geometry, exchange.rank, exchange.world_size, backend, return_lse)

    def run_compute_only(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        qo_indptr: Optional[torch.Tensor] = None,
        kv_indptr: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """A measuring aid: the attention and merge calls of ``run`` with no communication; every
        step reads this rank's own K/V in place of the shard the ring would bring, so the calls and
        their shapes are run's but the output is not attention. run's time minus this one's is the
        communication that the compute does not hide."""
        geometry, backend, exchange = self._prepare(q, k, v, qo_indptr, kv_indptr, False)
        steps = ((k, v) for _ in range(exchange.world_size))
        return self._run_rank(q, steps, geometry, exchange.rank, exchange.world_size, backend, False)

    def _prepare(self, q, k, v, qo_indptr, kv_indptr, return_lse):
        if return_lse is not True and return_lse is not False:
            raise TypeError(f"return_lse must be a bool (got {type(return_lse).__name__}: {return_lse!r})")
        geometry = check_shards(q, k, v, qo_indptr, kv_indptr)
        if self.backend is None:
            self.backend = _default_backend(q)
        if self._exchange is None:
            self._exchange = RingExchange(self.group)
        return geometry, self.backend, self._exchange

    def _receive_buffers(self, k: torch.Tensor, v: torch.Tensor) -> List[KV]:
        key = (tuple(k.shape), k.dtype, tuple(v.shape), v.dtype, k.device)
        if key not in self._buffers:
            self._buffers = {key: [(torch.empty_like(k), torch.empty_like(v)) for _ in range(2)]}
        return self._buffers[key]

    def _step_calls(self, geometry: Geometry, rank: int, world_size: int, device) -> list:
        """For each source rank: the fixed layout's blocks, or the packed layout's call (None: skip)."""
        key = (geometry, rank, world_size, device)
        calls = self._plans.get(key)
        if calls is not None:
            return calls
        s = self.settings
        calls = []
        for source in range(world_size):
            if geometry.packed:
                call = plan_packed_step(geometry.chunk_lens, world_size, rank, source, s.mask_type, s.window_left)
                if call is not None:
                    call = PackedCall(call.qo_indptr, call.kv_indptr, _on_device(call.mask, device, None))
                calls.append(call)
            else:
                blocks = plan_step(geometry.chunk_lens[0], world_size, rank, source, s.mask_type, s.window_left)
                calls.append(
                    tuple(Block(b.rows, b.keys, _on_device(b.mask, device, geometry.batch_size)) for b in blocks)
                )
        self._plans = {key: calls}  # the last geometry only: packed lengths change from batch to batch
        return calls

    def _run_rank(
        self,
        q: torch.Tensor,
        steps: Iterable[KV],
        geometry: Geometry,
        rank: int,
        world_size: int,
        backend: AttentionBackend,
        return_lse: bool,
    ):
        calls = self._step_calls(geometry, rank, world_size, q.device)
        sm_scale = self.settings.sm_scale
        acc_out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        acc_lse = torch.full(q.shape[:-1], float("-inf"), dtype=torch.float32, device=q.device)
        for step, (k, v) in enumerate(steps):
            source = (rank - step) % world_size
            if geometry.packed:
                call = calls[source]
                if call is not None:
                    out, lse = backend.attention(
                        q, k, v, call.mask, qo_indptr=call.qo_indptr, kv_indptr=call.kv_indptr, sm_scale=sm_scale
                    )
                    backend.merge_into(acc_out, acc_lse, out, lse)
                continue
            for block in calls[source]:
                rows = slice(block.rows.start, block.rows.stop)
                keys = slice(block.keys.start, block.keys.stop)
                out, lse = backend.attention(q[:, rows], k[:, keys], v[:, keys], block.mask, sm_scale=sm_scale)
                backend.merge_into(acc_out[:, rows], acc_lse[:, rows], out, lse)
        out = acc_out.to(q.dtype)
        return (out, acc_lse) if return_lse else out


def ring_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    group=None,
    mask_type: str = "dense",
    window_left: int = -1,
    sm_scale: Optional[float] = None,
    qo_indptr: Optional[torch.Tensor] = None,
    kv_indptr: Optional[torch.Tensor] = None,
    return_lse: bool = False,
    backend: Optional[AttentionBackend] = None,
):
    """Context-parallel prefill attention of one long sequence (or packed batch) sharded zigzag over
    the ranks of ``group`` (None: the default process group): ``RingPrefill(...).run(...)`` once.

    q, k, v are this rank's shards (``zigzag_shard`` / ``zigzag_shard_packed``); the result is this
    rank's shard of ``batch_prefill(q_full, k_full, v_full, mask_type=..., window_left=...)`` (and of
    its lse with ``return_lse=True``). ``mask_type`` is "dense" or "causal" (with ``window_left`` W:
    the query at position p sees keys p - W .. p). ``backend``: None runs tsattn on CUDA tensors;
    ``ReferenceBackend()`` computes in fp32 torch on any device."""
    ring = RingPrefill(group=group, mask_type=mask_type, window_left=window_left, sm_scale=sm_scale, backend=backend)
    return ring.run(q, k, v, qo_indptr, kv_indptr, return_lse=return_lse)


def simulate_ring_prefill(
    q_shards: Sequence[torch.Tensor],
    k_shards: Sequence[torch.Tensor],
    v_shards: Sequence[torch.Tensor],
    *,
    mask_type: str = "dense",
    window_left: int = -1,
    sm_scale: Optional[float] = None,
    qo_indptr: Optional[torch.Tensor] = None,
    kv_indptr: Optional[torch.Tensor] = None,
    return_lse: bool = False,
    make_backend: Optional[Callable[[], AttentionBackend]] = None,
    streams: Optional[Sequence["torch.cuda.Stream"]] = None,
) -> list:
    """Every rank's ``ring_prefill`` in this one process, with no process group: rank r's steps read
    the other ranks' shards directly, in the ring's order. ``q_shards[r]`` etc. are rank r's shards
    (one local indptr pair for all ranks, packed). Returns each rank's result, in rank order.

    ``make_backend`` gives each rank its own backend (default: tsattn's, CUDA tensors only).
    ``streams`` (one CUDA stream per rank) queues each rank's work on its own stream, as separate
    GPUs would run it; they start after the work queued so far on the current stream, which waits
    for all of them before this returns."""
    world_size = len(q_shards)
    if world_size == 0 or len(k_shards) != world_size or len(v_shards) != world_size:
        raise ValueError(
            f"q_shards, k_shards and v_shards must hold one shard per rank, at least one "
            f"(got {len(q_shards)}, {len(k_shards)}, {len(v_shards)})"
        )
    if streams is not None and len(streams) != world_size:
        raise ValueError(f"streams must hold one stream per rank: {len(streams)} != {world_size}")
    settings = check_settings(mask_type, window_left, sm_scale)
    geometry = None
    for rank in range(world_size):
        shape = check_shards(q_shards[rank], k_shards[rank], v_shards[rank], qo_indptr, kv_indptr)
        if geometry is not None and shape != geometry:
            raise ValueError(f"rank {rank}'s shards differ in shape from rank 0's: every rank holds equal shards")
        geometry = shape

    results = []
    caller = torch.cuda.current_stream() if streams is not None else None
    for rank in range(world_size):
        backend = make_backend() if make_backend is not None else _default_backend(q_shards[rank])
        ring = RingPrefill(
            mask_type=settings.mask_type, window_left=settings.window_left, sm_scale=settings.sm_scale, backend=backend
        )
        context = contextlib.nullcontext()
        if streams is not None:
            streams[rank].wait_stream(caller)
            context = torch.cuda.stream(streams[rank])
        with context:
            steps = simulated_kv(k_shards, v_shards, rank)
            results.append(ring._run_rank(q_shards[rank], steps, geometry, rank, world_size, backend, return_lse))
    if streams is not None:
        for rank, stream in enumerate(streams):
            caller.wait_stream(stream)
            for tensor in results[rank] if return_lse else (results[rank],):
                tensor.record_stream(caller)  # made on the rank's stream, used on the caller's from now on
    return results
