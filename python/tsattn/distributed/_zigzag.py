"""Zigzag sharding of one sequence (or of each request of a packed batch) over ``world_size`` ranks.

The sequence is cut into ``2 * world_size`` equal chunks; rank r holds chunks r and
``2 * world_size - 1 - r``, in that order. Under a causal mask the early chunks see few keys and
the late ones many, so pairing the r-th from the front with the r-th from the back gives every rank
the same amount of work. Within a shard the two chunks keep their global order (r comes first), so
a shard's positions always increase.

Packed batches are sharded request by request: each request's length must be a multiple of
``2 * world_size`` and each rank holds, per request, that request's two chunks; the local indptr
has the same values on every rank.
"""

from __future__ import annotations

import numbers
from typing import List, Sequence, Tuple

import torch

from .._args import _is_bool, check_tensor


def _check_int(value, name: str) -> int:
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int (got {type(value).__name__}: {value!r})")
    return int(value)


def check_world(world_size, rank) -> Tuple[int, int]:
    """(world_size, rank) as ints; world_size >= 1 and 0 <= rank < world_size."""
    world_size = _check_int(world_size, "world_size")
    rank = _check_int(rank, "rank")
    if world_size < 1:
        raise ValueError(f"world_size={world_size} must be at least 1")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
    return world_size, rank


def zigzag_chunks(world_size: int, rank: int) -> Tuple[int, int]:
    """The two chunk indices rank holds, front one first: ``(rank, 2 * world_size - 1 - rank)``."""
    world_size, rank = check_world(world_size, rank)
    return rank, 2 * world_size - 1 - rank


def _check_dim(x: torch.Tensor, dim, name: str) -> int:
    dim = _check_int(dim, "dim")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for {name} with {x.dim()} dims (shape {list(x.shape)})")
    return dim % x.dim()


def zigzag_shard(x: torch.Tensor, world_size: int, rank: int, *, dim: int = 1) -> torch.Tensor:
    """Rank ``rank``'s zigzag shard of ``x`` along ``dim`` (the sequence dim; 1 for ``[B, S, H, D]``):
    chunks ``rank`` and ``2 * world_size - 1 - rank`` of ``2 * world_size`` equal chunks, concatenated
    (a new tensor). ``x.shape[dim]`` must be divisible by ``2 * world_size``."""
    check_tensor(x, "x", optional=False)
    world_size, rank = check_world(world_size, rank)
    dim = _check_dim(x, dim, "x")
    length = x.shape[dim]
    if length % (2 * world_size):
        raise ValueError(
            f"x.shape[{dim}]={length} is not divisible by 2*world_size={2 * world_size}: "
            "zigzag sharding cuts the sequence into 2*world_size equal chunks"
        )
    chunk = length // (2 * world_size)
    front, back = zigzag_chunks(world_size, rank)
    return torch.cat([x.narrow(dim, front * chunk, chunk), x.narrow(dim, back * chunk, chunk)], dim=dim)


def _check_shards(shards, name: str) -> List[torch.Tensor]:
    if isinstance(shards, torch.Tensor) or not isinstance(shards, Sequence) or len(shards) == 0:
        raise TypeError(f"{name} must be a non-empty list of tensors, one per rank in rank order (got {shards!r})")
    for i, shard in enumerate(shards):
        check_tensor(shard, f"{name}[{i}]", optional=False)
        if shard.shape != shards[0].shape:
            raise ValueError(
                f"{name}[{i}].shape={list(shard.shape)} differs from {name}[0].shape={list(shards[0].shape)}"
            )
    return list(shards)


def zigzag_unshard(shards: Sequence[torch.Tensor], *, dim: int = 1) -> torch.Tensor:
    """The whole sequence from every rank's zigzag shard (``shards[r]`` is rank r's): the inverse of
    ``zigzag_shard`` along ``dim``."""
    shards = _check_shards(shards, "shards")
    world_size = len(shards)
    dim = _check_dim(shards[0], dim, "shards[0]")
    local = shards[0].shape[dim]
    if local % 2:
        raise ValueError(f"shards[0].shape[{dim}]={local} is odd: a zigzag shard holds two equal chunks")
    chunk = local // 2
    pieces: List[torch.Tensor] = [shards[0]] * (2 * world_size)
    for rank, shard in enumerate(shards):
        front, back = zigzag_chunks(world_size, rank)
        pieces[front] = shard.narrow(dim, 0, chunk)
        pieces[back] = shard.narrow(dim, chunk, chunk)
    return torch.cat(pieces, dim=dim)


def check_indptr(indptr, name: str, total: int, total_name: str) -> List[int]:
    """The host values of an int32 ``[B + 1]`` indptr that starts at 0, never decreases and ends at ``total``."""
    check_tensor(indptr, name, optional=False)
    if indptr.dtype != torch.int32:
        raise TypeError(f"{name} has dtype {str(indptr.dtype).replace('torch.', '')}; expected int32")
    if indptr.dim() != 1 or indptr.numel() < 1:
        raise ValueError(f"{name} must be 1-D with at least one entry (got shape {list(indptr.shape)})")
    values = indptr.tolist()
    if values[0] != 0:
        raise ValueError(f"{name}[0]={values[0]} must be 0")
    for b in range(1, len(values)):
        if values[b] < values[b - 1]:
            raise ValueError(
                f"{name} must be non-decreasing, but {name}[{b}]={values[b]} < {name}[{b - 1}]={values[b - 1]}"
            )
    if values[-1] != total:
        raise ValueError(f"{name}[-1]={values[-1]} must equal {total_name}={total}")
    return values


def _chunk_lengths(values: Sequence[int], world_size: int, name: str) -> List[int]:
    chunks = []
    for b in range(len(values) - 1):
        length = values[b + 1] - values[b]
        if length % (2 * world_size):
            raise ValueError(
                f"request {b} has length {name}[{b + 1}]-{name}[{b}]={length}, not divisible by "
                f"2*world_size={2 * world_size}: each request is cut into 2*world_size equal chunks"
            )
        chunks.append(length // (2 * world_size))
    return chunks


def _packed_source_rows(full_starts: Sequence[int], chunks: Sequence[int], world_size: int, rank: int) -> torch.Tensor:
    """int64 [local total]: for each local token of rank, its row in the whole packed batch."""
    front, back = zigzag_chunks(world_size, rank)
    chunk = torch.tensor(chunks, dtype=torch.int64)
    local_lengths = 2 * chunk
    request = torch.repeat_interleave(torch.arange(len(chunks)), local_lengths)
    local_starts = torch.cumsum(local_lengths, 0) - local_lengths
    offset = torch.arange(int(local_lengths.sum())) - local_starts[request]  # token within the request's shard
    c = chunk[request]
    within = torch.where(offset < c, front * c + offset, back * c + offset - c)
    return torch.tensor(full_starts, dtype=torch.int64)[request] + within


def zigzag_shard_packed(
    x: torch.Tensor, indptr: torch.Tensor, world_size: int, rank: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s zigzag shard of a packed batch ``x`` ``[total, ...]`` whose requests are cut by
    the int32 ``indptr`` ``[B + 1]``: per request, its chunks ``rank`` and ``2 * world_size - 1 - rank``.
    Returns ``(local_x, local_indptr)``; local_indptr (int32, on indptr's device) is the same on every
    rank. Every request's length must be divisible by ``2 * world_size`` (0 is: an empty request
    stays empty)."""
    check_tensor(x, "x", optional=False)
    world_size, rank = check_world(world_size, rank)
    if x.dim() < 1:
        raise ValueError("x must have a token dim (got a 0-dim tensor)")
    values = check_indptr(indptr, "indptr", x.shape[0], "x.shape[0]")
    chunks = _chunk_lengths(values, world_size, "indptr")
    rows = _packed_source_rows(values[:-1], chunks, world_size, rank)
    local_indptr = torch.tensor([0] + [2 * c for c in chunks], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return x.index_select(0, rows.to(x.device)), local_indptr.to(indptr.device)


def zigzag_unshard_packed(
    shards: Sequence[torch.Tensor], local_indptr: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The whole packed batch from every rank's shard (``shards[r]`` is rank r's, all cut by the same
    ``local_indptr``): the inverse of ``zigzag_shard_packed``. Returns ``(x, indptr)``."""
    shards = _check_shards(shards, "shards")
    world_size = len(shards)
    if shards[0].dim() < 1:
        raise ValueError("shards[0] must have a token dim (got a 0-dim tensor)")
    values = check_indptr(local_indptr, "local_indptr", shards[0].shape[0], "shards[0].shape[0]")
    chunks = []
    for b in range(len(values) - 1):
        length = values[b + 1] - values[b]
        if length % 2:
            raise ValueError(
                f"request {b} has local length local_indptr[{b + 1}]-local_indptr[{b}]={length}, which is odd: "
                "a zigzag shard holds two equal chunks of each request"
            )
        chunks.append(length // 2)
    full_lengths = [2 * world_size * c for c in chunks]
    full_values = [0]
    for length in full_lengths:
        full_values.append(full_values[-1] + length)
    out = shards[0].new_empty((full_values[-1],) + tuple(shards[0].shape[1:]))
    for rank, shard in enumerate(shards):
        out[_packed_source_rows(full_values[:-1], chunks, world_size, rank).to(out.device)] = shard
    return out, torch.tensor(full_values, dtype=torch.int32, device=local_indptr.device)
