"""Which attention calls one ring step makes: what a rank's queries see of the K/V shard at hand.

Positions are global positions in the whole sequence (of one request). A rank's shard holds two
chunks of length c (``_zigzag``), so a step pairs two query chunks with two key chunks. Under the
causal mask, with ``window_left`` W (-1: none), the query at position p sees the keys at positions
``p - W .. p``. A pair of chunks is (``classify_chunk_pair``):

* NONE: the key chunk lies after the query chunk, or every key is more than W before every query;
* FULL: every query sees every key (always under the dense mask; under the causal one when the key
  chunk comes first and even its first key is within W of the chunk's last query);
* DIAGONAL: the same chunk: causal within it, window included;
* PARTIAL: the key chunk comes first and the window cuts through it.

The calls (``plan_step``), for each query chunk, over the contiguous run of key chunks it sees:

* only FULL pairs: a dense call;
* the DIAGONAL pair last: a causal call with ``window_left=W``, when that is exact. A bottom-right
  aligned causal call puts the block's last query level with its last key; over m queries and n
  keys whose positions are each one contiguous run ending at the same position, it is exactly
  "keys p - W .. p". That holds for the diagonal chunk alone, and for both key chunks of the last
  rank's own shard (chunks world - 1 and world are adjacent). With a FULL pair before a diagonal
  that is not adjacent to it, the keys have a gap, but a FULL pair there means W = -1 or
  W >= 2c - 1, so the window cuts nothing in the block and causal is exact again. Otherwise:
* a ``"variable_window"`` call with each row's inclusive key range, computed from the positions.
  This is what a PARTIAL pair needs: a causal call is not exact there, since bottom-right alignment
  puts query row i level with key i of a chunk that lies wholly before the queries, so it would
  hide keys i+1 .. c-1, which row i sees.

The two query chunks then share one call where one is exact for both: a dense call when both see
the same keys in full; a causal call over the whole shard on the rank's own K/V when each chunk's
block is causal (the front chunk's on itself, the back chunk's on both); a variable-window call
over the keys either sees when neither block is causal and one needs variable bounds. Keys are those
of the shard at hand in local order; a shard's positions increase, so the keys one query sees are
always one contiguous run of local indices, and one range per row describes them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ._zigzag import zigzag_chunks


class Visibility(enum.Enum):
    """What a query chunk sees of a key chunk (the module docstring says when each holds)."""

    NONE = "none"
    FULL = "full"
    DIAGONAL = "diagonal"
    PARTIAL = "partial"


def classify_chunk_pair(
    query_chunk: int, key_chunk: int, chunk_len: int, mask_type: str, window_left: int = -1
) -> Visibility:
    """What the queries of chunk ``query_chunk`` see of the keys of chunk ``key_chunk`` (chunk i holds
    positions ``i * chunk_len .. (i + 1) * chunk_len - 1``) under ``mask_type`` and ``window_left``."""
    if chunk_len <= 0:
        return Visibility.NONE
    if mask_type == "dense":
        return Visibility.FULL
    if key_chunk > query_chunk:
        return Visibility.NONE
    if key_chunk == query_chunk:
        return Visibility.DIAGONAL
    if window_left < 0:
        return Visibility.FULL
    gap = (query_chunk - key_chunk) * chunk_len  # chunks are aligned, so gap >= chunk_len
    nearest = gap - (chunk_len - 1)  # the chunk's first query to the key chunk's last key
    farthest = gap + (chunk_len - 1)  # the chunk's last query to the key chunk's first key
    if nearest > window_left:
        return Visibility.NONE
    if farthest <= window_left:
        return Visibility.FULL
    return Visibility.PARTIAL


@dataclass(frozen=True, eq=False)
class BlockMask:
    """The mask of one attention call, in ``batch_prefill``'s terms: ``mask_type`` "dense", "causal"
    (bottom-right aligned, with ``window_left``) or "variable_window" with int32 inclusive bounds
    ``starts``/``ends`` (one per query row; a row with start > end sees no key)."""

    mask_type: str
    window_left: int = -1
    starts: Optional[torch.Tensor] = None
    ends: Optional[torch.Tensor] = None

    def row_bounds(self, num_rows: int, num_keys: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """int64 [num_rows] inclusive key ranges this mask gives a block of num_rows x num_keys."""
        rows = torch.arange(num_rows, dtype=torch.int64)
        if self.mask_type == "dense":
            return torch.zeros_like(rows), torch.full_like(rows, num_keys - 1)
        if self.mask_type == "causal":
            ends = rows + (num_keys - num_rows)
            starts = (ends - self.window_left).clamp(min=0) if self.window_left >= 1 else torch.zeros_like(rows)
            return starts, ends
        return self.starts.to(torch.int64).reshape(-1), self.ends.to(torch.int64).reshape(-1)


@dataclass(frozen=True, eq=False)
class Block:
    """One attention call of a step: local query rows ``rows`` of the rank's shard against local key
    rows ``keys`` of the K/V shard at hand (per request), under ``mask`` (bounds relative to keys)."""

    rows: range
    keys: range
    mask: BlockMask


def _visible_key_ranges(
    query_positions: torch.Tensor, key_positions: torch.Tensor, window_left: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Causal: each query's inclusive range of indices into the increasing key_positions, keys at
    ``p - window_left .. p``; start > end where it sees none."""
    ends = torch.searchsorted(key_positions, query_positions, right=True) - 1
    if window_left >= 1:
        starts = torch.searchsorted(key_positions, query_positions - window_left)
    else:
        starts = torch.zeros_like(ends)
    return starts.to(torch.int32), ends.to(torch.int32)


def _chunk_positions(chunk: int, chunk_len: int) -> torch.Tensor:
    return torch.arange(chunk * chunk_len, (chunk + 1) * chunk_len, dtype=torch.int64)


def plan_step(
    chunk_len: int, world_size: int, rank: int, source: int, mask_type: str, window_left: int = -1
) -> Tuple[Block, ...]:
    """The calls of the step where rank's queries meet the K/V shard of rank ``source`` (one request,
    or every request of a fixed-layout batch, of ``2 * world_size`` chunks of ``chunk_len``). Rows
    and keys are local indices, 0 .. 2 * chunk_len - 1; no (row, key) pair is in two blocks; an empty
    tuple means the step has nothing to compute. Bounds tensors are on the CPU."""
    c = chunk_len
    if c == 0:
        return ()
    query_chunks = zigzag_chunks(world_size, rank)
    key_chunks = zigzag_chunks(world_size, source)
    per_chunk: List[Optional[Block]] = []
    for i, query_chunk in enumerate(query_chunks):
        pairs = [classify_chunk_pair(query_chunk, key_chunk, c, mask_type, window_left) for key_chunk in key_chunks]
        seen = [j for j, pair in enumerate(pairs) if pair is not Visibility.NONE]
        if not seen:
            per_chunk.append(None)
            continue
        rows, keys = range(i * c, (i + 1) * c), range(seen[0] * c, (seen[-1] + 1) * c)
        kinds = [pairs[j] for j in seen]
        contiguous = key_chunks[seen[-1]] - key_chunks[seen[0]] == len(seen) - 1
        if all(kind is Visibility.FULL for kind in kinds):
            mask = BlockMask("dense")
        elif kinds[-1] is Visibility.DIAGONAL and (contiguous or all(kind is Visibility.FULL for kind in kinds[:-1])):
            mask = BlockMask("causal", window_left)
        else:
            key_positions = torch.cat([_chunk_positions(key_chunks[j], c) for j in seen])
            starts, ends = _visible_key_ranges(_chunk_positions(query_chunk, c), key_positions, window_left)
            mask = BlockMask("variable_window", window_left=-1, starts=starts, ends=ends)
        per_chunk.append(Block(rows, keys, mask))

    front, back = per_chunk
    if front is not None and back is not None:
        whole = range(0, 2 * c)
        kinds = (front.mask.mask_type, back.mask.mask_type)
        if kinds == ("dense", "dense") and front.keys == back.keys:
            return (Block(whole, front.keys, BlockMask("dense")),)
        if kinds == ("causal", "causal") and front.keys == range(0, c) and back.keys == whole:
            # The rank's own shard: the whole-shard causal call gives the front rows their diagonal
            # and the back rows the back block's ranges (in both, a row's range ends at its own key).
            return (Block(whole, whole, BlockMask("causal", window_left)),)
        if "causal" not in kinds and "variable_window" in kinds:
            keys = range(min(front.keys.start, back.keys.start), max(front.keys.stop, back.keys.stop))
            bounds = [block.mask.row_bounds(len(block.rows), len(block.keys)) for block in (front, back)]
            shifts = [block.keys.start - keys.start for block in (front, back)]
            starts = torch.cat([b[0] + shift for b, shift in zip(bounds, shifts)]).to(torch.int32)
            ends = torch.cat([b[1] + shift for b, shift in zip(bounds, shifts)]).to(torch.int32)
            return (Block(whole, keys, BlockMask("variable_window", starts=starts, ends=ends)),)
    return tuple(block for block in per_chunk if block is not None)


@dataclass(frozen=True, eq=False)
class PackedCall:
    """The one call of a packed step: q, k and v of the rank's shard and the shard at hand as they
    are, cut into requests by ``qo_indptr`` and ``kv_indptr`` (int32, on the CPU), under ``mask``."""

    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    mask: BlockMask


def _is_whole_causal(blocks: Sequence[Block], chunk_len: int) -> bool:
    whole = range(0, 2 * chunk_len)
    return (
        len(blocks) == 1
        and blocks[0].mask.mask_type == "causal"
        and blocks[0].rows == whole
        and blocks[0].keys == whole
    )


def _dense_sub_requests(blocks: Sequence[Block], chunk_len: int) -> Optional[List[Tuple[int, int]]]:
    """(query rows, keys) of sub-requests that cut one request's shard so that a dense call over them
    computes exactly these dense blocks: rows no block covers go alone (no keys: they see nothing) and
    keys no block covers go alone (no rows). None when the blocks' keys are not disjoint and in row order."""
    sub: List[Tuple[int, int]] = []
    row = key = 0
    for block in blocks:
        if block.mask.mask_type != "dense" or block.keys.start < key:
            return None
        if block.rows.start > row:
            sub.append((block.rows.start - row, 0))
        if block.keys.start > key:
            sub.append((0, block.keys.start - key))
        sub.append((len(block.rows), len(block.keys)))
        row, key = block.rows.stop, block.keys.stop
    if row < 2 * chunk_len:
        sub.append((2 * chunk_len - row, 0))
    if key < 2 * chunk_len:
        sub.append((0, 2 * chunk_len - key))
    return sub


def _indptr(lengths: Sequence[int]) -> torch.Tensor:
    values = [0]
    for n in lengths:
        values.append(values[-1] + n)
    return torch.tensor(values, dtype=torch.int32)


def plan_packed_step(
    chunk_lens: Sequence[int], world_size: int, rank: int, source: int, mask_type: str, window_left: int = -1
) -> Optional[PackedCall]:
    """The call of a packed step (request b of ``2 * world_size`` chunks of ``chunk_lens[b]``), or None
    when no query sees a key of the shard at hand. One call for all requests:

    * causal on the shards as they are, when every request's step is ``plan_step``'s causal block
      over its whole shard (the rank's own K/V without a window cut);
    * dense, when every request's blocks are dense with disjoint keys in row order: the call's
      requests are then sub-requests of the real ones (``_dense_sub_requests``);
    * otherwise ``"variable_window"`` on the shards as they are, every row's bounds from its blocks.
    """
    cache: Dict[int, Tuple[Block, ...]] = {}
    plans = []
    for c in chunk_lens:
        if c not in cache:
            cache[c] = plan_step(c, world_size, rank, source, mask_type, window_left)
        plans.append(cache[c])
    if not any(plans):
        return None
    local = _indptr([2 * c for c in chunk_lens])
    if all(c == 0 or _is_whole_causal(blocks, c) for blocks, c in zip(plans, chunk_lens)):
        return PackedCall(local, local, BlockMask("causal", window_left))

    subs = [_dense_sub_requests(blocks, c) for blocks, c in zip(plans, chunk_lens)]
    if all(sub is not None for sub in subs):
        pairs = [pair for sub in subs for pair in sub]
        return PackedCall(_indptr([m for m, _ in pairs]), _indptr([n for _, n in pairs]), BlockMask("dense"))

    total = int(local[-1])
    starts = torch.zeros(total, dtype=torch.int32)
    ends = torch.full((total,), -1, dtype=torch.int32)  # start > end: a row no block covers sees nothing
    for offset, blocks in zip(local.tolist(), plans):
        for block in blocks:
            row_starts, row_ends = block.mask.row_bounds(len(block.rows), len(block.keys))
            rows = slice(offset + block.rows.start, offset + block.rows.stop)
            starts[rows] = (row_starts + block.keys.start).to(torch.int32)
            ends[rows] = (row_ends + block.keys.start).to(torch.int32)
    return PackedCall(local, local, BlockMask("variable_window", starts=starts, ends=ends))
