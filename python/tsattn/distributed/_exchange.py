"""Passing the K/V shards around the ring.

At step t (0 .. world - 1) rank r holds the K/V shard of rank ``(r - t) mod world``: each step it
sends the shard at hand to rank r + 1 and receives the next one from rank r - 1, in one
``torch.distributed.batch_isend_irecv`` of four ops (k and v each way), started before the step's
attention and waited for after it, so the transfer overlaps the compute. Two receive buffers
alternate: the one being received into is never the one being read (double buffering).

On NCCL the ops run on NCCL's streams: starting them orders them after the work queued so far on
the current stream, and waiting makes the current stream wait for them (the host does not block).
On gloo (CPU tensors) waiting blocks the host. The same code serves both.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple

import torch

KV = Tuple[torch.Tensor, torch.Tensor]


def group_rank_and_size(group) -> Tuple[int, int]:
    """This process's rank in ``group`` (None: the default group) and the group's size."""
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this build of torch")
    if not dist.is_initialized():
        raise ValueError(
            "group=None needs torch.distributed's default process group, which is not initialized: "
            "call torch.distributed.init_process_group first"
            if group is None
            else "torch.distributed is not initialized: call torch.distributed.init_process_group first"
        )
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"this process (global rank {dist.get_rank()}) is not a member of group={group!r}")
    return rank, dist.get_world_size(group)


class RingExchange:
    """The batched send to the next rank and receive from the previous one, within ``group``."""

    def __init__(self, group=None) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.group = group
        self.rank, self.world_size = group_rank_and_size(group)
        self.next_peer = self._global_rank((self.rank + 1) % self.world_size)
        self.previous_peer = self._global_rank((self.rank - 1) % self.world_size)
        self._pending: List = []

    def _global_rank(self, group_rank: int) -> int:
        # P2POp takes global ranks; within the default group they are the group's own.
        if self.group is None or self.group is self._dist.group.WORLD:
            return group_rank
        return self._dist.get_global_rank(self.group, group_rank)

    def start(self, send: Sequence[torch.Tensor], receive: Sequence[torch.Tensor]) -> None:
        """Starts sending ``send`` to the next rank and receiving ``receive`` from the previous one
        (tensor i of each with tag i, which gloo uses to pair them)."""
        if self._pending:
            raise RuntimeError("RingExchange.start() called again before wait()")
        dist = self._dist
        ops = [dist.P2POp(dist.isend, t, self.next_peer, self.group, tag) for tag, t in enumerate(send)]
        ops += [dist.P2POp(dist.irecv, t, self.previous_peer, self.group, tag) for tag, t in enumerate(receive)]
        self._pending = dist.batch_isend_irecv(ops)

    def wait(self) -> None:
        pending, self._pending = self._pending, []
        for request in pending:
            request.wait()

    def forget(self) -> None:
        """Drops the started transfers without waiting (after an error on this rank, so that the
        next ``start`` is not refused; the process group still owns them)."""
        self._pending = []


def ring_kv(k: torch.Tensor, v: torch.Tensor, exchange: RingExchange, buffers: Sequence[KV]) -> Iterator[KV]:
    """Yields the K/V shard of each step, own one first. The transfer of the next shard runs while
    the caller works on the one yielded; it is waited for when the caller asks for the next.
    ``buffers``: two (k, v) pairs shaped like the shard, used in turn to receive."""
    current: KV = (k, v)
    finished = False
    try:
        for step in range(exchange.world_size):
            incoming: Optional[KV] = None
            if step + 1 < exchange.world_size:
                incoming = buffers[step % 2]
                exchange.start(current, incoming)
            yield current
            if incoming is not None:
                exchange.wait()
                current = incoming
        finished = True
    finally:
        if not finished:  # the caller stopped early (an exception in its step)
            exchange.forget()


def simulated_kv(k_shards: Sequence[torch.Tensor], v_shards: Sequence[torch.Tensor], rank: int) -> Iterator[KV]:
    """What ``ring_kv`` yields on ``rank``, taken from every rank's shards in one process."""
    world_size = len(k_shards)
    for step in range(world_size):
        source = (rank - step) % world_size
        yield k_shards[source], v_shards[source]
