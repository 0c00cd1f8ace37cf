"""Real multi-process runs of tsattn.distributed for the tests: ``spawn_ranks`` starts one process
per rank (torch.multiprocessing, a file store in a test's tmp_path) and each runs ``run_rank``: it
joins the process group, shards every case's whole q, k and v itself, runs the ring and saves its
local results for the test to unshard and compare. test_distributed_cpu.py uses gloo with the fp32
reference backend; test_gpu_distributed.py NCCL with tsattn's kernels.

A case is a dict: q, k, v (the whole sequence, CPU), indptr (None: fixed layout; else the packed
batch's int32 indptr), mask_type, window_left, reference (True: ReferenceBackend; False: the
default backend).
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import List, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tsattn.distributed as cp


def _result_path(results_dir, case: int, rank: int) -> Path:
    return Path(results_dir) / f"case{case}_rank{rank}.pt"


def _subgroup_result_path(results_dir, rank: int) -> Path:
    return Path(results_dir) / f"subgroup_rank{rank}.pt"


def subgroups(world_size: int) -> List[List[int]]:
    """The two rings of the subgroup run: even ranks and odd ranks (global ranks, in ring order)."""
    return [list(range(parity, world_size, 2)) for parity in (0, 1)]


def _run_case(case: dict, world_size: int, rank: int, device, group=None) -> dict:
    """One case on this rank of a ring of world_size: its shards, ring_prefill, then two runs of one
    RingPrefill (the second reuses its plans and buffers)."""
    indptr = case["indptr"]
    if indptr is None:
        shards = [cp.zigzag_shard(case[name].to(device), world_size, rank) for name in "qkv"]
        local = None
    else:
        pieces = [cp.zigzag_shard_packed(case[name].to(device), indptr, world_size, rank) for name in "qkv"]
        shards, local = [p[0] for p in pieces], pieces[0][1]
    settings = dict(group=group, mask_type=case["mask_type"], window_left=case["window_left"])

    def backend_of_case():
        return cp.ReferenceBackend() if case["reference"] else None

    out, lse = cp.ring_prefill(
        *shards, qo_indptr=local, kv_indptr=local, return_lse=True, backend=backend_of_case(), **settings
    )
    ring = cp.RingPrefill(backend=backend_of_case(), **settings)
    ring.run(*shards, local, local)
    again = ring.run(*shards, local, local)
    return {"out": out.cpu(), "lse": lse.cpu(), "again": again.cpu()}


def run_rank(
    rank: int, world_size: int, backend: str, store: str, cases_file: str, results_dir: str, with_subgroups: bool
) -> None:
    """One rank: every case on the whole group; then, with_subgroups, the first case again on two
    rings of half the ranks each (``subgroups``), which must map group ranks to global peers."""
    device = torch.device("cpu")
    torch.set_num_threads(1)  # the ranks share the machine's cores
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group(
        backend, init_method=f"file://{store}", rank=rank, world_size=world_size, timeout=timedelta(seconds=120)
    )
    try:
        cases = torch.load(cases_file)
        for i, case in enumerate(cases):
            torch.save(_run_case(case, world_size, rank, device), _result_path(results_dir, i, rank))
        if with_subgroups:
            rings = subgroups(world_size)
            groups = [dist.new_group(members) for members in rings]  # every rank creates every group
            members = rings[rank % 2]
            result = _run_case(cases[0], len(members), members.index(rank), device, groups[rank % 2])
            torch.save(result, _subgroup_result_path(results_dir, rank))
    finally:
        dist.destroy_process_group()


def spawn_ranks(
    world_size: int, backend: str, cases: Sequence[dict], tmp_path: Path, timeout_s: float, with_subgroups=False
):
    """Runs ``run_rank`` on world_size spawned processes; returns (results[case][rank], the dicts
    run_rank saved; the subgroup run's dicts by global rank, or None). A rank's
    exception is raised here; past timeout_s the ranks are killed."""
    cases_file = tmp_path / "cases.pt"
    torch.save(list(cases), cases_file)
    args = (world_size, backend, str(tmp_path / "store"), str(cases_file), str(tmp_path), with_subgroups)
    context = mp.start_processes(run_rank, args=args, nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            raise TimeoutError(f"{world_size} ranks on {backend} did not finish within {timeout_s} s")
    results = [[torch.load(_result_path(tmp_path, i, r)) for r in range(world_size)] for i in range(len(cases))]
    by_rank = [torch.load(_subgroup_result_path(tmp_path, r)) for r in range(world_size)] if with_subgroups else None
    return results, by_rank
