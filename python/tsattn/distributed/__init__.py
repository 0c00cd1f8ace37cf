"""Context-parallel prefill: one long sequence (or packed batch) sharded over the ranks of a
torch.distributed process group (docs/distributed.md).

Each rank holds a zigzag shard of q, k and v: the sequence is cut into ``2 * world_size`` chunks and
rank r holds chunks r and ``2 * world_size - 1 - r``, so that every rank has the same causal work.
The K/V shards travel around the ring (batched isend/irecv, double-buffered, overlapped with the
attention on the shard at hand); each rank attends to each shard with the masks that its chunks'
global positions call for, skips the shards its window cannot reach, and merges the partial
outputs through their log-sum-exp.

    import tsattn.distributed as cp

    q_local = cp.zigzag_shard(q, world_size, rank)           # [B, S / world_size, H, D]
    out_local = cp.ring_prefill(q_local, k_local, v_local, mask_type="causal")
    out = cp.zigzag_unshard(gathered_outs)                    # rank order

``import tsattn`` does not import this package; importing it imports torch.
"""

from ._backends import AttentionBackend, ReferenceBackend, TsattnBackend
from ._ring import RingPrefill, ring_prefill, simulate_ring_prefill
from ._step_plan import Block, BlockMask, PackedCall, Visibility, classify_chunk_pair, plan_packed_step, plan_step
from ._zigzag import zigzag_chunks, zigzag_shard, zigzag_shard_packed, zigzag_unshard, zigzag_unshard_packed

__all__ = [
    "AttentionBackend",
    "Block",
    "BlockMask",
    "PackedCall",
    "ReferenceBackend",
    "RingPrefill",
    "TsattnBackend",
    "Visibility",
    "classify_chunk_pair",
    "plan_packed_step",
    "plan_step",
    "ring_prefill",
    "simulate_ring_prefill",
    "zigzag_chunks",
    "zigzag_shard",
    "zigzag_shard_packed",
    "zigzag_unshard",
    "zigzag_unshard_packed",
]
