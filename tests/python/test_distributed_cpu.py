"""No-GPU tests of tsattn.distributed (docs/distributed.md): zigzag sharding, the visibility of
chunk pairs and the calls of each ring step against a brute-force mask, the merge and its order,
the whole ring simulated in one process and run for real on 2 and 4 gloo ranks with the fp32
reference backend, argument errors, and the launcher tools/distributed/cp_check.py on 2 CPU ranks.

Every attention result is compared with support.py's fp64-computed oracle over the whole sequence.
"""

import itertools
import math
import os
import random
import subprocess
import sys

import pytest
import torch

import tsattn.distributed as cp
from tsattn.distributed import Visibility

from distributed_ranks import spawn_ranks, subgroups
from support import REPO, indptr, reference, reference_lse, visible_mask

# fp32 ring against the fp64-computed oracle: merges and sums in fp32 stay far inside this.
ATOL, RTOL = 2e-5, 1e-4


def _randn(*shape):
    return 0.5 * torch.randn(*shape)


def _positions(length: int, world_size: int, rank: int) -> torch.Tensor:
    """The global positions a rank's zigzag shard holds, written out chunk by chunk."""
    c = length // (2 * world_size)
    back = 2 * world_size - 1 - rank
    return torch.cat([torch.arange(rank * c, (rank + 1) * c), torch.arange(back * c, (back + 1) * c)])


# ---------------------------------------------------------------- zigzag sharding


@pytest.mark.parametrize("seed", range(6))
def test_zigzag_fixed_round_trip(seed):
    rng = random.Random(seed)
    world, c, batch = rng.randint(1, 5), rng.randint(1, 4), rng.randint(1, 3)
    x = _randn(batch, 2 * world * c, 3, 5)
    dim = rng.choice([1, -3])
    shards = [cp.zigzag_shard(x, world, r, dim=dim) for r in range(world)]
    for r, shard in enumerate(shards):
        assert cp.zigzag_chunks(world, r) == (r, 2 * world - 1 - r)
        assert torch.equal(shard, x[:, _positions(2 * world * c, world, r)])
    assert torch.equal(cp.zigzag_unshard(shards, dim=dim), x)
    # [S, H, D] along dim 0: every position on exactly one rank
    tokens = torch.arange(2 * world * c)
    held = torch.cat([cp.zigzag_shard(tokens, world, r, dim=0) for r in range(world)])
    assert torch.equal(held.sort().values, tokens)


@pytest.mark.parametrize("seed", range(6))
def test_zigzag_packed_round_trip(seed):
    """Random lengths, an empty request and one of exactly 2 * world tokens (one token per chunk)."""
    rng = random.Random(100 + seed)
    world = rng.randint(1, 4)
    lengths = [2 * world * rng.randint(0, 4) for _ in range(rng.randint(1, 5))] + [2 * world, 0]
    rng.shuffle(lengths)
    full_indptr = indptr(lengths)
    x = _randn(int(full_indptr[-1]), 2, 3)
    shards = []
    for r in range(world):
        local, local_indptr = cp.zigzag_shard_packed(x, full_indptr, world, r)
        assert local_indptr.dtype == torch.int32
        assert local_indptr.tolist() == indptr([n // world for n in lengths]).tolist()
        rows = torch.cat(
            [start + _positions(n, world, r) for start, n in zip(full_indptr.tolist(), lengths)]
            + [torch.zeros(0, dtype=torch.int64)]
        )
        assert torch.equal(local, x[rows])
        shards.append(local)
    whole, whole_indptr = cp.zigzag_unshard_packed(shards, local_indptr)
    assert torch.equal(whole, x) and torch.equal(whole_indptr, full_indptr)


ZIGZAG_REJECTIONS = [
    (
        "fixed_length",
        lambda: cp.zigzag_shard(torch.zeros(1, 10, 2, 4), 2, 0),
        ValueError,
        ["x.shape[1]=10", "2*world_size=4"],
    ),
    (
        "packed_length",
        lambda: cp.zigzag_shard_packed(torch.zeros(14, 2, 4), indptr([8, 6]), 2, 1),
        ValueError,
        ["request 1", "indptr[2]-indptr[1]=6", "2*world_size=4"],
    ),
    ("rank_range", lambda: cp.zigzag_shard(torch.zeros(1, 8, 2, 4), 2, 2), ValueError, ["rank=2", "world_size=2"]),
    ("world_zero", lambda: cp.zigzag_shard(torch.zeros(1, 8, 2, 4), 0, 0), ValueError, ["world_size=0"]),
    ("world_float", lambda: cp.zigzag_shard(torch.zeros(1, 8, 2, 4), 2.0, 0), TypeError, ["world_size must be an int"]),
    ("dim_range", lambda: cp.zigzag_shard(torch.zeros(1, 8, 2, 4), 2, 0, dim=4), ValueError, ["dim=4"]),
    (
        "indptr_int64",
        lambda: cp.zigzag_shard_packed(torch.zeros(8, 2), torch.tensor([0, 8]), 2, 0),
        TypeError,
        ["int32"],
    ),
    (
        "indptr_end",
        lambda: cp.zigzag_shard_packed(torch.zeros(8, 2), indptr([4]), 2, 0),
        ValueError,
        ["indptr[-1]=4", "x.shape[0]=8"],
    ),
    (
        "unshard_shapes",
        lambda: cp.zigzag_unshard([torch.zeros(1, 4), torch.zeros(1, 6)]),
        ValueError,
        ["shards[1].shape"],
    ),
    ("unshard_odd", lambda: cp.zigzag_unshard([torch.zeros(1, 3)]), ValueError, ["shards[0].shape[1]=3"]),
    ("unshard_tensor", lambda: cp.zigzag_unshard(torch.zeros(2, 4)), TypeError, ["list of tensors"]),
]


@pytest.mark.parametrize("case", ZIGZAG_REJECTIONS, ids=[c[0] for c in ZIGZAG_REJECTIONS])
def test_zigzag_rejects_bad_input(case):
    _, call, exc, needles = case
    with pytest.raises(exc) as info:
        call()
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {str(info.value)!r}"


# ---------------------------------------------------------------- visibility and step plans


def _random_window(rng, c, chunks):
    return rng.choice([-1, 1, 2, rng.randint(1, c + 1), rng.randint(c, 2 * c + 1), rng.randint(1, chunks * c)])


@pytest.mark.parametrize("seed", range(4))
def test_chunk_pair_classification_matches_brute_force(seed):
    rng = random.Random(200 + seed)
    seen = set()
    for _ in range(30):
        chunks, c = 2 * rng.randint(1, 4), rng.randint(1, 5)
        mask = rng.choice(["dense", "causal", "causal"])
        window = _random_window(rng, c, chunks) if mask == "causal" else -1
        truth = visible_mask(chunks * c, chunks * c, mask, window)
        for qc, kc in itertools.product(range(chunks), repeat=2):
            block = truth[qc * c : (qc + 1) * c, kc * c : (kc + 1) * c]
            got = cp.classify_chunk_pair(qc, kc, c, mask, window)
            seen.add((got, qc > kc))
            if mask == "causal" and qc == kc:
                assert got is Visibility.DIAGONAL
                assert torch.equal(block, visible_mask(c, c, "causal", window))
            elif not block.any():
                assert got is Visibility.NONE, (qc, kc, c, mask, window)
            elif block.all():
                assert got is Visibility.FULL, (qc, kc, c, mask, window)
            else:
                assert got is Visibility.PARTIAL, (qc, kc, c, mask, window)
    # keys before the queries that a window hides entirely, cuts, or leaves whole all came up
    assert {(Visibility.NONE, True), (Visibility.PARTIAL, True), (Visibility.FULL, True)} <= seen


def _cover(blocks, num_rows, num_keys, window):
    """int [rows, keys]: how many calls of a step compute each (row, key) pair, each call's mask read
    the way batch_prefill reads it (support.visible_mask, the contract's oracle)."""
    count = torch.zeros(num_rows, num_keys, dtype=torch.int64)
    for block in blocks:
        m, n, mask = len(block.rows), len(block.keys), block.mask
        if mask.mask_type == "causal":
            assert m <= n, "a causal call needs Sq <= Sk"
        if mask.mask_type == "variable_window":
            nonempty = mask.starts <= mask.ends
            assert ((mask.starts >= 0) & (mask.ends < n))[nonempty].all(), "bounds outside the documented range"
        seen = visible_mask(m, n, mask.mask_type, mask.window_left, mask.starts, mask.ends)
        assert seen.any(), "a call that computes nothing"
        count[block.rows.start : block.rows.stop, block.keys.start : block.keys.stop] += seen.long()
    return count


def _step_truth(c, world, rank, source, mask, window):
    length = 2 * world * c
    whole = visible_mask(length, length, mask, window)
    return whole[_positions(length, world, rank)][:, _positions(length, world, source)]


@pytest.mark.parametrize("seed", range(4))
def test_step_plans_compute_exactly_the_visible_pairs(seed):
    """Every (query, key) pair of a step that the brute-force mask makes visible is computed by
    exactly one call, no other pair is, and a step the window cannot reach has no call."""
    rng = random.Random(300 + seed)
    skipped = 0
    for _ in range(12):
        world, c = rng.randint(1, 5), rng.randint(1, 5)
        mask = rng.choice(["dense", "causal", "causal"])
        window = _random_window(rng, c, 2 * world) if mask == "causal" else -1
        for rank, source in itertools.product(range(world), repeat=2):
            blocks = cp.plan_step(c, world, rank, source, mask, window)
            truth = _step_truth(c, world, rank, source, mask, window)
            count = _cover(blocks, 2 * c, 2 * c, window)
            assert count.max() <= 1, (world, c, rank, source, mask, window)
            assert torch.equal(count.bool(), truth), (world, c, rank, source, mask, window)
            assert len(blocks) <= 2 and (len(blocks) == 0) == (not truth.any())
            skipped += not blocks
    assert skipped > 0  # windows made whole steps invisible


def test_step_plans_without_window_are_one_dense_or_causal_call():
    """The plain zigzag ring: the own shard is one causal call, a shard from a lower rank one dense
    call of every query on its front chunk, one from a higher rank one dense call of the back chunk
    on all of it; the dense mask is one dense call per step."""
    world, c = 4, 3
    for rank, source in itertools.product(range(world), repeat=2):
        (block,) = cp.plan_step(c, world, rank, source, "causal")
        if source == rank:
            expected = ("causal", range(0, 2 * c), range(0, 2 * c))
        elif source < rank:
            expected = ("dense", range(0, 2 * c), range(0, c))
        else:
            expected = ("dense", range(c, 2 * c), range(0, 2 * c))
        assert (block.mask.mask_type, block.rows, block.keys) == expected
        (block,) = cp.plan_step(c, world, rank, source, "dense")
        assert (block.mask.mask_type, block.rows, block.keys) == ("dense", range(0, 2 * c), range(0, 2 * c))


def _packed_cover(call, total, window):
    count = torch.zeros(total, total, dtype=torch.int64)
    qo, kv = call.qo_indptr.tolist(), call.kv_indptr.tolist()
    assert qo[-1] == total and kv[-1] == total and len(qo) == len(kv)
    for b in range(len(qo) - 1):
        rows, keys = slice(qo[b], qo[b + 1]), slice(kv[b], kv[b + 1])
        m, n = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
        if call.mask.mask_type == "causal":
            assert m <= n, "a causal call needs Sq <= Sk in every request"
        starts = None if call.mask.starts is None else call.mask.starts[rows]
        ends = None if call.mask.ends is None else call.mask.ends[rows]
        count[rows, keys] += visible_mask(m, n, call.mask.mask_type, call.mask.window_left, starts, ends).long()
    return count


@pytest.mark.parametrize("seed", range(4))
def test_packed_step_calls_compute_exactly_the_visible_pairs(seed):
    """One call per packed step, whose requests (sub-requests for dense calls) and mask compute
    exactly each request's visible pairs; requests of 0 and of 2 * world tokens among them."""
    rng = random.Random(400 + seed)
    kinds = set()
    for _ in range(10):
        world = rng.randint(1, 4)
        chunk_lens = [rng.randint(0, 4) for _ in range(rng.randint(1, 4))] + [1, 0]
        rng.shuffle(chunk_lens)
        mask = rng.choice(["dense", "causal", "causal"])
        window = _random_window(rng, max(chunk_lens), 2 * world) if mask == "causal" else -1
        total = 2 * sum(chunk_lens)
        for rank, source in itertools.product(range(world), repeat=2):
            truth = torch.zeros(total, total, dtype=torch.bool)
            offset = 0
            for c in chunk_lens:
                truth[offset : offset + 2 * c, offset : offset + 2 * c] = _step_truth(
                    c, world, rank, source, mask, window
                )
                offset += 2 * c
            call = cp.plan_packed_step(chunk_lens, world, rank, source, mask, window)
            if call is None:
                assert not truth.any()
                continue
            kinds.add(call.mask.mask_type)
            count = _packed_cover(call, total, window)
            assert count.max() <= 1 and torch.equal(count.bool(), truth), (
                chunk_lens,
                world,
                rank,
                source,
                mask,
                window,
            )
    assert kinds == {"dense", "causal", "variable_window"}


def test_packed_steps_without_window_avoid_variable_windows():
    world, chunk_lens = 3, [2, 0, 1, 3]
    for rank, source in itertools.product(range(world), repeat=2):
        call = cp.plan_packed_step(chunk_lens, world, rank, source, "causal")
        assert call.mask.mask_type == ("causal" if source == rank else "dense")


# ---------------------------------------------------------------- merging


def test_merge_matches_attention_over_the_union_in_any_order():
    """Parts of the keys merged in every order give attention over all of them; an empty part (lse
    -inf) leaves the accumulator bit for bit, even with NaN in its output, as merge_state promises."""
    torch.manual_seed(5)
    backend = cp.ReferenceBackend()
    dense = cp.BlockMask("dense")
    q, k, v = _randn(1, 6, 4, 16), _randn(1, 23, 2, 16), _randn(1, 23, 2, 16)
    cut = [0, 5, 5, 14, 23]  # the second part is empty
    parts = [backend.attention(q, k[:, a:b], v[:, a:b], dense) for a, b in zip(cut, cut[1:])]
    assert torch.isneginf(parts[1][1]).all() and not parts[1][0].any()
    expected_out, expected_lse = backend.attention(q, k, v, dense)
    for order in itertools.permutations(range(len(parts))):
        acc_out, acc_lse = torch.zeros(q.shape), torch.full(q.shape[:-1], float("-inf"))
        for i in order:
            before = (acc_out.clone(), acc_lse.clone())
            out = parts[i][0] if i != 1 else torch.full_like(parts[i][0], float("nan"))
            backend.merge_into(acc_out, acc_lse, out, parts[i][1])
            if i == 1:
                assert torch.equal(acc_out, before[0]) and torch.equal(acc_lse, before[1])
        torch.testing.assert_close(acc_out, expected_out, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(acc_lse, expected_lse, atol=1e-6, rtol=1e-5)
    # the first part merged into the empty accumulator is that part, bit for bit
    acc_out, acc_lse = torch.zeros(q.shape), torch.full(q.shape[:-1], float("-inf"))
    backend.merge_into(acc_out, acc_lse, *parts[0])
    assert torch.equal(acc_out, parts[0][0]) and torch.equal(acc_lse, parts[0][1])


class _RecordingBackend(cp.ReferenceBackend):
    """The reference, noting which rank's K/V shard each call read."""

    def __init__(self, k_shards):
        self.owner = {shard.untyped_storage().data_ptr(): r for r, shard in enumerate(k_shards)}
        self.sources = []

    def attention(self, q, k, v, mask, **kwargs):
        source = self.owner[k.untyped_storage().data_ptr()]
        if not self.sources or self.sources[-1] != source:
            self.sources.append(source)
        return super().attention(q, k, v, mask, **kwargs)


def test_ring_visits_the_shards_in_ring_order():
    """Rank r attends to its own K/V first, then to rank r-1's, r-2's, ..., as the ring brings them."""
    world = 4
    x = [_randn(1, 8 * world, 2, 8) for _ in range(3)]
    shards = [[cp.zigzag_shard(t, world, r) for r in range(world)] for t in x]
    backends = []

    def make_backend():
        backends.append(_RecordingBackend(shards[1]))
        return backends[-1]

    cp.simulate_ring_prefill(*shards, mask_type="dense", make_backend=make_backend)
    assert [b.sources for b in backends] == [[(r - t) % world for t in range(world)] for r in range(world)]


# ---------------------------------------------------------------- the ring, in one process


def _shard_case(q, k, v, world, full_indptr):
    if full_indptr is None:
        return [[cp.zigzag_shard(t, world, r) for r in range(world)] for t in (q, k, v)], None
    pieces = [[cp.zigzag_shard_packed(t, full_indptr, world, r) for r in range(world)] for t in (q, k, v)]
    return [[p[0] for p in per_tensor] for per_tensor in pieces], pieces[0][0][1]


def _unshard(results, local_indptr):
    outs, lses = [r[0] for r in results], [r[1] for r in results]
    if local_indptr is None:
        return cp.zigzag_unshard(outs), cp.zigzag_unshard(lses)
    return cp.zigzag_unshard_packed(outs, local_indptr)[0], cp.zigzag_unshard_packed(lses, local_indptr)[0]


def _check_against_reference(out, lse, q, k, v, full_indptr, mask, window, sm_scale=None):
    kwargs = dict(qo_indptr=full_indptr, kv_indptr=full_indptr, mask_type=mask, window_left=window, sm_scale=sm_scale)
    torch.testing.assert_close(out, reference(q, k, v, **kwargs), atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(lse, reference_lse(q, k, **kwargs), atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("seed", range(10))
def test_simulated_ring_matches_attention_over_the_whole_sequence(seed):
    rng = random.Random(500 + seed)
    torch.manual_seed(500 + seed)
    for _ in range(4):
        world, c = rng.randint(1, 4), rng.randint(1, 5)
        mask = rng.choice(["dense", "causal", "causal"])
        window = _random_window(rng, c, 2 * world) if mask == "causal" else -1
        hq, hkv = rng.choice([(2, 1), (4, 2), (3, 3)])
        d = rng.choice([128, 7, 16])
        sm_scale = rng.choice([None, 0.3])
        if rng.random() < 0.5:
            full_indptr, shape = None, (rng.randint(1, 2), 2 * world * c)
        else:
            lengths = [2 * world * rng.randint(0, 4) for _ in range(rng.randint(1, 3))] + [2 * world]
            full_indptr, shape = indptr(lengths), (sum(lengths),)
        q, k, v = _randn(*shape, hq, d), _randn(*shape, hkv, d), _randn(*shape, hkv, d)
        shards, local = _shard_case(q, k, v, world, full_indptr)
        results = cp.simulate_ring_prefill(
            *shards,
            mask_type=mask,
            window_left=window,
            sm_scale=sm_scale,
            qo_indptr=local,
            kv_indptr=local,
            return_lse=True,
            make_backend=cp.ReferenceBackend,
        )
        out, lse = _unshard(results, local)
        _check_against_reference(out, lse, q, k, v, full_indptr, mask, window, sm_scale)


# ---------------------------------------------------------------- the ring, on real ranks


def _multiprocess_cases(world):
    """Whole-sequence inputs of every layout and mask the ring supports, small enough for the CPU."""
    torch.manual_seed(600 + world)
    cases = []

    def add(shape, hq, hkv, d, mask, window, full_indptr=None):
        q, k, v = _randn(*shape, hq, d), _randn(*shape, hkv, d), _randn(*shape, hkv, d)
        cases.append(dict(q=q, k=k, v=v, indptr=full_indptr, mask_type=mask, window_left=window, reference=True))

    c = 3
    add((2, 2 * world * c), 4, 2, 128, "dense", -1)
    add((1, 2 * world * c), 2, 1, 13, "causal", -1)
    add((1, 2 * world * c), 2, 2, 16, "causal", c - 1)  # a window that leaves most shards unseen
    add((1, 2 * world * c), 4, 1, 16, "causal", 2 * c + 1)
    lengths = [2 * world * 3, 0, 2 * world, 2 * world * 2]
    add((sum(lengths),), 4, 2, 128, "causal", -1, indptr(lengths))
    add((sum(lengths),), 2, 1, 13, "causal", 4, indptr(lengths))
    add((sum(lengths),), 2, 2, 16, "dense", -1, indptr(lengths))
    return cases


def _check_rank_results(case, per_rank):
    """per_rank: the ring's ranks' saved results, in ring order."""
    local = None
    if case["indptr"] is not None:
        local = cp.zigzag_shard_packed(case["q"], case["indptr"], len(per_rank), 0)[1]
    out, lse = _unshard([(r["out"], r["lse"]) for r in per_rank], local)
    _check_against_reference(
        out, lse, case["q"], case["k"], case["v"], case["indptr"], case["mask_type"], case["window_left"]
    )
    for r in per_rank:  # a RingPrefill's second run, on its kept plans and buffers
        assert torch.equal(r["again"], r["out"])


@pytest.mark.parametrize("world", [2, 4])
def test_ring_prefill_on_gloo_ranks_matches_attention_over_the_whole_sequence(world, tmp_path):
    """Every case on all ranks; with 4 ranks the first case also on two rings of 2 (ranks 0, 2 and
    1, 3: group ranks differ from global ones)."""
    cases = _multiprocess_cases(world)
    results, by_rank = spawn_ranks(world, "gloo", cases, tmp_path, timeout_s=120, with_subgroups=world == 4)
    for case, per_rank in zip(cases, results):
        _check_rank_results(case, per_rank)
    for members in subgroups(world) if world == 4 else []:
        _check_rank_results(cases[0], [by_rank[r] for r in members])


# ---------------------------------------------------------------- errors


def _fixed(length=8, hq=2, hkv=1, d=16):
    return _randn(1, length, hq, d), _randn(1, length, hkv, d), _randn(1, length, hkv, d)


def _packed():
    q, k, v = _randn(8, 2, 16), _randn(8, 1, 16), _randn(8, 1, 16)
    return q, k, v


REFERENCE = cp.ReferenceBackend()
RING_REJECTIONS = [
    ("mask_variable", dict(mask_type="variable_window"), NotImplementedError, ["mask_type='variable_window'"]),
    ("mask_int", dict(mask_type=1), TypeError, ["mask_type must be a str"]),
    ("mask_unknown", dict(mask_type="Causal"), ValueError, ["mask_type='Causal'", "'dense', 'causal'"]),
    ("window_dense", dict(window_left=4), ValueError, ["window_left=4", "mask_type='causal'"]),
    ("window_zero", dict(mask_type="causal", window_left=0), ValueError, ["window_left=0"]),
    ("window_float", dict(mask_type="causal", window_left=2.0), TypeError, ["window_left must be an int"]),
    ("scale_negative", dict(sm_scale=-1.0), ValueError, ["sm_scale=-1.0"]),
    ("odd_shard", dict(tensors=_fixed(length=7)), ValueError, ["q.shape[1]=7 is odd"]),
    ("heads", dict(tensors=_fixed(hq=3, hkv=2)), ValueError, ["Hq=q.shape[-2]=3", "Hkv=k.shape[-2]=2"]),
    (
        "lengths",
        dict(tensors=(_randn(1, 8, 2, 16), _randn(1, 6, 1, 16), _randn(1, 6, 1, 16))),
        ValueError,
        ["q.shape[1]=8 != k.shape[1]=6"],
    ),
    ("one_indptr", dict(tensors=_packed(), qo_indptr=indptr([8])), ValueError, ["given together"]),
    (
        "unequal_indptrs",
        dict(tensors=_packed(), qo_indptr=indptr([4, 4]), kv_indptr=indptr([2, 6])),
        ValueError,
        ["qo_indptr[1]=4 != kv_indptr[1]=2"],
    ),
    (
        "odd_request",
        dict(tensors=_packed(), qo_indptr=indptr([3, 5]), kv_indptr=indptr([3, 5])),
        ValueError,
        ["request 0", "qo_indptr[1]-qo_indptr[0]=3"],
    ),
    ("cpu_default_backend", dict(backend=None), ValueError, ["backend=ReferenceBackend()"]),
    ("no_process_group", dict(), ValueError, ["init_process_group"]),
    ("lse_flag", dict(return_lse=1), TypeError, ["return_lse must be a bool"]),
]


@pytest.mark.parametrize("case", RING_REJECTIONS, ids=[c[0] for c in RING_REJECTIONS])
def test_ring_prefill_rejects_bad_arguments(case):
    import torch.distributed as dist

    assert not dist.is_initialized()  # the ranks run in their own processes
    _, overrides, exc, needles = case
    args = dict(backend=REFERENCE)
    args.update(overrides)
    q, k, v = args.pop("tensors", _fixed())
    with pytest.raises(exc) as info:
        cp.ring_prefill(q, k, v, **args)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {str(info.value)!r}"


def test_simulation_rejects_unequal_shards():
    q, k, v = _fixed()
    q2, k2, v2 = _fixed(length=4)
    with pytest.raises(ValueError, match="rank 1's shards differ"):
        cp.simulate_ring_prefill([q, q2], [k, k2], [v, v2], make_backend=cp.ReferenceBackend)


# ---------------------------------------------------------------- the launcher

CP_CHECK = REPO / "tools" / "distributed" / "cp_check.py"


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")]))


def test_cp_check_help():
    r = subprocess.run(
        [sys.executable, str(CP_CHECK), "--help"], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "torchrun" in r.stdout and "--seq-lens" in r.stdout and "--device" in r.stdout


def test_cp_check_runs_on_two_cpu_ranks(tmp_path):
    """The launcher under torchrun, on gloo with the fp32 reference: its correctness checks pass and
    its benchmark reports every sequence length."""
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(CP_CHECK)]
    command += ["--device", "cpu", "--seq-lens", "64,128", "--heads", "4", "--kv-heads", "2", "--head-dim", "16"]
    command += ["--check-seq-len", "48", "--warmup", "0", "--iters", "2", "--json", str(report)]
    r = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("check ok") >= 5 and "FAILED" not in r.stdout, r.stdout
    import json

    results = json.loads(report.read_text())
    assert results["world_size"] == 2 and [row["seq_len"] for row in results["bench"]] == [64, 128]
    for row in results["bench"]:
        assert row["ring_ms"] > 0 and row["single_ms"] > 0 and math.isfinite(row["speedup"])
