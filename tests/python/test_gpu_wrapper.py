"""GPU: BatchPrefillTSWrapper (docs/contract.md, "Plan once, run every layer"). Every run writes
exactly the bytes batch_prefill writes for the same fresh inputs (fixed and packed layouts, host and
GPU indptrs, odd sizes, empty requests, smaller batches than planned, GQA, the masks); one plan
serves many runs of different lengths; a CUDA graph of runs replays with new indptr values; the
capacities are checked (validate=True) or clamped without faults (validate=False)."""

import random

import pytest
import torch

import tsattn

from support import FP8, indptr, poisoned, randn

BF16, F16 = torch.bfloat16, torch.float16


def _wrapper(**overrides):
    settings = dict(
        device="cuda",
        batch_size=4,
        max_seq_len_q=256,
        max_kv_len=512,
        num_qo_heads=8,
        num_kv_heads=2,
        head_dim=128,
        q_dtype=BF16,
        kv_dtype=BF16,
    )
    settings.update(overrides)
    w = tsattn.BatchPrefillTSWrapper()
    w.plan(**settings)
    return w, settings


def _inputs(settings, q_lens, kv_lens, packed):
    hq, hkv, d, dtype = settings["num_qo_heads"], settings["num_kv_heads"], settings["head_dim"], settings["q_dtype"]
    if packed:
        q = randn((sum(q_lens), hq, d), dtype)
        k = randn((sum(kv_lens), hkv, d), dtype)
        v = randn((sum(kv_lens), hkv, d), dtype)
    else:
        q = randn((len(q_lens), q_lens[0], hq, d), dtype)
        k = randn((len(q_lens), kv_lens[0], hkv, d), dtype)
        v = randn((len(q_lens), kv_lens[0], hkv, d), dtype)
    return q, k, v


def _bounds(settings, q_lens, kv_lens, packed):
    rows = sum(q_lens) if packed else len(q_lens) * q_lens[0]
    keys = max(max(kv_lens), 1)
    starts = torch.randint(-3, keys + 1, (rows,), dtype=torch.int32, device="cuda")
    ends = (starts + torch.randint(-2, keys, (rows,), dtype=torch.int32, device="cuda")).to(torch.int32)
    if not packed:
        starts, ends = starts.view(len(q_lens), q_lens[0]), ends.view(len(q_lens), q_lens[0])
    return starts, ends


def _same_bytes(a, b, what):
    assert a.shape == b.shape, what
    x, y = a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    assert torch.equal(x, y), f"{what}: {int((x != y).sum())} bytes differ"
    if a.dtype != FP8:
        assert not torch.isnan(a).any(), f"{what}: output left unwritten"


def _check_run(w, settings, q_lens, kv_lens, packed, where, what, **run_kwargs):
    """One run and one batch_prefill on the same fresh inputs: the same bytes."""
    q, k, v = _inputs(settings, q_lens, kv_lens, packed)
    extra = {}
    if settings.get("mask_type") == "variable_window":
        extra["variable_window_token_starts"], extra["variable_window_token_ends"] = _bounds(
            settings, q_lens, kv_lens, packed
        )
    out_dtype = settings.get("out_dtype") or settings["q_dtype"]
    qo = indptr(q_lens, device=where) if packed else None
    kv = indptr(kv_lens, device=where) if packed else None
    expected = poisoned(q.shape, out_dtype)
    tsattn.batch_prefill(
        q,
        k,
        v,
        qo_indptr=qo,
        kv_indptr=kv,
        mask_type=settings.get("mask_type", "dense"),
        window_left=settings.get("window_left", -1),
        out_dtype=out_dtype,
        out=expected,
        **extra,
    )
    one_shot_kernel = tsattn.last_kernel_name()
    actual = poisoned(q.shape, out_dtype)
    returned = w.run(q, k, v, qo, kv, out=actual, **extra, **run_kwargs)
    assert returned is actual
    if tsattn.last_kernel_name():
        assert tsattn.last_kernel_name() == one_shot_kernel, what
    torch.cuda.synchronize()
    _same_bytes(actual, expected, what)


FIXED_LENGTHS = [([1], [1]), ([127, 127, 127], [129, 129, 129]), ([129, 129], [257, 257]), ([256] * 4, [512] * 4)]
PACKED_LENGTHS = [([1, 127, 0, 129], [1, 200, 0, 129]), ([129], [129]), ([256, 256, 1, 255], [512, 300, 512, 256])]
MASKS = [("dense", -1), ("causal", -1), ("causal", 33), ("variable_window", -1)]
HEADS = [(8, 2), (4, 4), (6, 2)]


@pytest.mark.parametrize("mask,window", MASKS, ids=[f"{m}{w}" for m, w in MASKS])
@pytest.mark.parametrize("hq,hkv", HEADS, ids=[f"h{a}x{b}" for a, b in HEADS])
@pytest.mark.parametrize("layout", ["fixed", "packed_host", "packed_gpu"])
def test_run_matches_batch_prefill_bit_for_bit(layout, hq, hkv, mask, window):
    torch.manual_seed(hq * 100 + hkv + window)
    packed = layout != "fixed"
    w, settings = _wrapper(num_qo_heads=hq, num_kv_heads=hkv, mask_type=mask, window_left=window, packed=packed)
    where = "cuda" if layout == "packed_gpu" else "cpu"
    for q_lens, kv_lens in PACKED_LENGTHS if packed else FIXED_LENGTHS:
        _check_run(w, settings, q_lens, kv_lens, packed, where, f"{layout} {mask} {q_lens} {kv_lens}")


@pytest.mark.parametrize("dtype,out_dtype", [(F16, F16), (FP8, BF16), (BF16, F16)])
@pytest.mark.parametrize("head_dim", [128, 256])
def test_run_matches_batch_prefill_dtypes(dtype, out_dtype, head_dim):
    if dtype is None:
        pytest.skip("no float8_e4m3fn in this torch")
    torch.manual_seed(head_dim)
    for packed in (False, True):
        w, settings = _wrapper(
            q_dtype=dtype, kv_dtype=dtype, out_dtype=out_dtype, head_dim=head_dim, mask_type="causal", packed=packed
        )
        lengths = PACKED_LENGTHS[0] if packed else FIXED_LENGTHS[1]
        _check_run(w, settings, *lengths, packed, "cuda", f"{dtype} -> {out_dtype} D{head_dim} packed={packed}")


def test_one_plan_many_runs():
    rng = random.Random(5)
    torch.manual_seed(5)
    for packed in (True, False):
        w, settings = _wrapper(packed=packed, mask_type="causal", batch_size=6, max_seq_len_q=300, max_kv_len=700)
        for i in range(20):
            batch = rng.randint(1, 6)
            if packed:
                q_lens = [rng.choice([0, rng.randint(1, 300)]) for _ in range(batch)]
                kv_lens = [rng.randint(q, 700) for q in q_lens]
            else:
                sq = rng.randint(1, 300)
                q_lens, kv_lens = [sq] * batch, [rng.randint(sq, 700)] * batch
            where = "cuda" if i % 2 else "cpu"
            _check_run(w, settings, q_lens, kv_lens, packed, where, f"run {i}: {q_lens} {kv_lens}")


def test_out_is_allocated_in_the_plans_dtype():
    w, settings = _wrapper(out_dtype=F16)
    q, k, v = _inputs(settings, [3, 3], [5, 5], packed=False)
    out = w.run(q, k, v)
    assert out.dtype == F16 and out.shape == q.shape and out.device == q.device
    expected = tsattn.batch_prefill(q, k, v, out_dtype=F16)
    torch.cuda.synchronize()
    _same_bytes(out, expected, "allocated out")


def test_cuda_graph_of_runs_replays_with_new_indptrs():
    """16 runs captured once (GPU indptrs); each replay after new lengths (same totals) writes what
    16 batch_prefill calls write."""
    torch.manual_seed(9)
    rng = random.Random(9)
    w, settings = _wrapper(packed=True, mask_type="causal", batch_size=5, max_seq_len_q=200, max_kv_len=400)
    runs = []
    for _ in range(16):
        q, k, v = _inputs(settings, [100, 50, 0, 150, 7], [200, 50, 10, 300, 40], packed=True)
        qo = indptr([100, 50, 0, 150, 7], device="cuda")
        kv = indptr([200, 50, 10, 300, 40], device="cuda")
        runs.append((q, k, v, qo, kv, poisoned(q.shape, BF16)))

    def all_runs():
        for q, k, v, qo, kv, out in runs:
            w.run(q, k, v, qo, kv, out=out)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        all_runs()  # warm-up: the kernel is loaded before capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        all_runs()

    def resplit():
        q_lens, kv_lens, q_left, extra_left = [], [], 307, 293
        for b in range(5):
            q = q_left if b == 4 else rng.randint(0, min(q_left, 200))
            extra = extra_left if b == 4 else rng.randint(0, min(extra_left, 400 - q))
            q_left, extra_left = q_left - q, extra_left - extra
            q_lens.append(q)
            kv_lens.append(q + extra)
        return q_lens, kv_lens

    for replay in range(3):
        for q, k, v, qo, kv, out in runs:
            q_lens, kv_lens = resplit()
            qo.copy_(indptr(q_lens, device="cuda"))
            kv.copy_(indptr(kv_lens, device="cuda"))
            out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for i, (q, k, v, qo, kv, out) in enumerate(runs):
            expected = tsattn.batch_prefill(q, k, v, qo_indptr=qo, kv_indptr=kv, mask_type="causal")
            torch.cuda.synchronize()
            _same_bytes(out, expected, f"replay {replay}, run {i}")


def test_host_indptrs_during_capture_are_a_value_error():
    w, settings = _wrapper(packed=True)
    q, k, v = _inputs(settings, [10, 20], [10, 20], packed=True)
    qo, kv = indptr([10, 20]), indptr([10, 20])
    w.run(q, k, v, qo, kv)  # warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="capturing"):
        with torch.cuda.graph(graph):
            w.run(q, k, v, qo, kv)


@pytest.mark.parametrize("layout", ["fixed", "packed_host", "packed_gpu"])
def test_capacities_are_value_errors(layout):
    packed = layout != "fixed"
    w, settings = _wrapper(packed=packed, batch_size=2, max_seq_len_q=64, max_kv_len=64)
    where = "cuda" if layout == "packed_gpu" else "cpu"
    cases = [([8, 8, 8], [8, 8, 8], "batch_size=2")]
    if layout == "fixed":
        cases.append(([65, 65], [64, 64], "max_seq_len_q=64"))
    if layout == "packed_host":  # one request too long within the totals (GPU values are never read back)
        cases.append(([65, 1], [64, 1], "max_seq_len_q=64"))
    for q_lens, kv_lens, needle in cases:
        q, k, v = _inputs(settings, q_lens, kv_lens, packed)
        qo = indptr(q_lens, device=where) if packed else None
        kv = indptr(kv_lens, device=where) if packed else None
        out = poisoned(q.shape, BF16)
        with pytest.raises(ValueError, match=needle):
            w.run(q, k, v, qo, kv, out=out)
        torch.cuda.synchronize()
        assert torch.isnan(out).all(), "a rejected run wrote out"


def test_validate_false_clamps_without_faults():
    """Lengths and indptr values beyond the capacities: nothing faults (run under compute-sanitizer
    memcheck too), and the fixed layout writes only the planned prefix."""
    w, settings = _wrapper(batch_size=2, max_seq_len_q=64, max_kv_len=100)
    q, k, v = _inputs(settings, [130] * 3, [300] * 3, packed=False)
    out = poisoned(q.shape, BF16)
    w.run(q, k, v, out=out, validate=False)
    torch.cuda.synchronize()
    assert not torch.isnan(out[:2, :64]).any()
    assert torch.isnan(out[2:]).all() and torch.isnan(out[:, 64:]).all()

    w, settings = _wrapper(packed=True, mask_type="causal", batch_size=3, max_seq_len_q=64, max_kv_len=64)
    q, k, v = _inputs(settings, [64] * 4, [64] * 4, packed=True)
    bad = [
        ([0, 500, 20, 1000000, -5], [0, -100, 40, 7, 2000000000]),
        ([-(2**31) + 1, 2**31 - 1, 0, 1, 2], [2**31 - 1, -(2**31) + 1, 3, 3, 3]),
        ([0, 64, 128, 192, 256], [0, 64, 128, 192, 256]),
    ]
    for where in ("cuda", "cpu"):
        for qo_values, kv_values in bad:
            qo = torch.tensor(qo_values, dtype=torch.int32, device=where)
            kv = torch.tensor(kv_values, dtype=torch.int32, device=where)
            w.run(q, k, v, qo, kv, out=poisoned(q.shape, BF16), validate=False)
            torch.cuda.synchronize()  # raises if a kernel faulted
