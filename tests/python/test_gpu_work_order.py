"""The two work orders of the sm90a kernels (TSATTN_WORK_ORDER; plan/work_order.hpp): CTAs taking
their work items in static turns, or claiming them from a counter (dynamic order, the default where
items differ in cost and there is enough work). Both must give the oracle's answer on every layout,
mask and CTA-pair axis; and the library must pick the order it says it picks.

Every case: fresh 0.2*randn inputs, out poisoned with NaN, checked against the fp32 oracle in
support.py. Skipped with "skipped: no CUDA device" on machines without a GPU.
"""

import os
import subprocess
import sys

import pytest
import torch

import tsattn

from support import (
    FP8,
    assert_close_to_reference,
    capture_graph,
    indptr,
    poisoned,
    randn,
    reference,
    replay_with_fresh_inputs,
)

F16, BF16 = torch.float16, torch.bfloat16
DTYPES = {"fp16": F16, "bf16": BF16, "fp8": FP8}

# (id, fixed (B, S) or packed [(Sq, Sk) per request], Hq, Hkv, D, dtype, mask, window_left)
# Head counts pick the CTA-pair axis: even groups pair along heads, MHA and odd groups along query
# tiles (dense and plain causal only), windows run single CTAs.
CASES = [
    ("causal_bf16_fixed_gqa4_many_items", (2, 2049), 8, 2, 128, "bf16", "causal", -1),
    ("causal_fp16_fixed_mha_pairs_along_tiles", (2, 513), 4, 4, 128, "fp16", "causal", -1),
    (
        "causal_bf16_packed_ragged_with_empty_requests",
        [(700, 700), (0, 0), (1, 1), (129, 129), (300, 450), (0, 7), (127, 127)],
        8,
        2,
        128,
        "bf16",
        "causal",
        -1,
    ),
    ("dense_bf16_fixed_d256_gqa2", (1, 300), 4, 2, 256, "bf16", "dense", -1),
    ("dense_fp16_packed_odd_group", [(257, 300), (1, 17), (129, 0), (400, 129)], 6, 2, 128, "fp16", "dense", -1),
    ("window100_bf16_packed_gqa3", [(400, 400), (17, 129), (0, 0), (260, 260)], 6, 2, 128, "bf16", "causal", 100),
    ("causal_d256_fp16_packed_mha", [(513, 513), (1, 1), (200, 300)], 4, 4, 256, "fp16", "causal", -1),
    ("causal_fp8_fixed_static_only", (1, 700), 4, 2, 128, "fp8", "causal", -1),
]


def _inputs(shape, hq, hkv, d, dtype):
    if isinstance(shape, tuple):
        b, s = shape
        return randn((b, s, hq, d), dtype), randn((b, s, hkv, d), dtype), randn((b, s, hkv, d), dtype), {}
    qo, kv = indptr([sq for sq, _ in shape]), indptr([sk for _, sk in shape])
    q = randn((int(qo[-1]), hq, d), dtype)
    k = randn((int(kv[-1]), hkv, d), dtype)
    v = randn((int(kv[-1]), hkv, d), dtype)
    return q, k, v, {"qo_indptr": qo, "kv_indptr": kv}


@pytest.mark.parametrize("order", ["static", "dynamic"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_both_orders_match_the_reference(monkeypatch, case, order):
    name, shape, hq, hkv, d, dtype, mask, window = case
    if dtype == "fp8" and FP8 is None:
        pytest.skip("skipped: torch has no float8_e4m3fn")
    monkeypatch.setenv("TSATTN_WORK_ORDER", order)  # read by the library at every call
    torch.manual_seed(sum(map(ord, name + order)))
    q, k, v, packed = _inputs(shape, hq, hkv, d, DTYPES[dtype])
    out_dtype = BF16 if dtype == "fp8" else None
    out = poisoned(q.shape, out_dtype or q.dtype)
    tsattn.batch_prefill(q, k, v, out=out, out_dtype=out_dtype, mask_type=mask, window_left=window, **packed)
    torch.cuda.synchronize()
    expected = reference(q, k, v, mask_type=mask, window_left=window, **packed)
    assert_close_to_reference(out, expected, q.dtype, f"{name}, {order} order")


def test_variable_windows_in_both_orders(monkeypatch):
    b, s, hq, hkv, d = 2, 257, 4, 2, 128
    starts = torch.randint(-20, s, (b, s), dtype=torch.int32, device="cuda")
    ends = starts + torch.randint(0, 200, (b, s), dtype=torch.int32, device="cuda")
    for order in ("static", "dynamic"):
        monkeypatch.setenv("TSATTN_WORK_ORDER", order)
        torch.manual_seed(7 if order == "static" else 8)
        q, k, v = randn((b, s, hq, d), F16), randn((b, s, hkv, d), F16), randn((b, s, hkv, d), F16)
        out = poisoned(q.shape, F16)
        tsattn.batch_prefill(
            q,
            k,
            v,
            out=out,
            mask_type="variable_window",
            variable_window_token_starts=starts,
            variable_window_token_ends=ends,
        )
        torch.cuda.synchronize()
        expected = reference(q, k, v, mask_type="variable_window", starts=starts, ends=ends)
        assert_close_to_reference(out, expected, F16, f"variable windows, {order} order")


_PROBE = """
import torch, tsattn
def call(mask, lengths, heads, batch=1):
    q = torch.randn(sum(lengths), heads, 128, device="cuda", dtype=torch.bfloat16)
    if len(lengths) == 1:
        q = q[None].repeat(batch, 1, 1, 1)
        tsattn.batch_prefill(q, q, q, mask_type=mask)
    else:
        starts = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0).to(torch.int32)
        tsattn.batch_prefill(q, q, q, mask_type=mask, qo_indptr=starts, kv_indptr=starts)
    torch.cuda.synchronize()
call("dense", [1024], 32)         # items all alike
call("causal", [8192], 32)        # unequal items, 504 key tiles per CTA
call("causal", [300], 8)          # unequal items, but a few key tiles per CTA
call("dense", [4096, 8192], 32)   # requests of different lengths, 1241 key tiles per CTA
call("dense", [300, 200], 8)      # requests of different lengths, however little work
call("causal", [300], 8, batch=2) # a causal D128 batch of two, however little work
"""


def _launch_orders(env_order):
    """The order named in each sm90a launch's debug line of a fresh process running _PROBE."""
    env = dict(
        os.environ,
        TSATTN_LOG_LEVEL="debug",
        TSATTN_WORK_ORDER=env_order,
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
    )  # this checkout's package
    run = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    return [
        line.rsplit(", ", 1)[1].split()[0]
        for line in run.stderr.splitlines()
        if "launching prefill.sm90a" in line and line.endswith(" order")
    ]


def test_the_order_each_launch_takes():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("skipped: the work orders are an sm90a (compute capability 9.x) feature")
    if os.environ.get("TSATTN_KERNEL_FAMILY", "auto") not in ("", "auto", "sm90a"):
        pytest.skip("skipped: TSATTN_KERNEL_FAMILY forces another kernel family")
    # _PROBE's key tiles per CTA (for 132 SMs) are far from the threshold of 256 on any Hopper GPU.
    assert _launch_orders("auto") == ["static", "dynamic", "static", "dynamic", "dynamic", "dynamic"]
    assert _launch_orders("static") == ["static"] * 6
    # The first call's 1024 keys take the 128-key dense kernel, which has no scheduler's ring to claim
    # through: it takes static turns whatever the knob says.
    assert _launch_orders("dynamic") == ["static"] + ["dynamic"] * 5


@pytest.mark.parametrize("layout", ["fixed", "packed_gpu_indptrs"])
def test_graph_replays_claim_from_a_fresh_counter(monkeypatch, layout):
    """A captured call replayed three times with new inputs: each replay must zero its counter again
    (the fixed layout's memset node, the device planner of GPU indptrs), or the later replays would
    find every slot claimed and leave out poisoned."""
    monkeypatch.setenv("TSATTN_WORK_ORDER", "dynamic")
    torch.manual_seed(21 if layout == "fixed" else 22)
    hq, hkv, d = 8, 2, 128
    if layout == "fixed":
        q, k, v = randn((2, 700, hq, d), BF16), randn((2, 700, hkv, d), BF16), randn((2, 700, hkv, d), BF16)
        packed = {}
    else:
        lengths = [700, 0, 129, 1, 300]
        qo = indptr(lengths, device="cuda")
        q, k, v = (
            randn((sum(lengths), hq, d), BF16),
            randn((sum(lengths), hkv, d), BF16),
            randn((sum(lengths), hkv, d), BF16),
        )
        packed = {"qo_indptr": qo, "kv_indptr": qo}
    out = poisoned(q.shape, BF16)

    def call():
        tsattn.batch_prefill(q, k, v, out=out, mask_type="causal", **packed)

    ref_packed = {key: val.cpu() for key, val in packed.items()}

    def check(replay):
        expected = reference(q, k, v, mask_type="causal", **ref_packed)
        assert_close_to_reference(out, expected, BF16, f"{layout}, replay {replay}")

    replay_with_fresh_inputs(capture_graph(call), (q, k, v), out, check)


# (id, (B, S), Hq, Hkv, D, dtype, mask, TSATTN_CTA_PAIRS): many items per CTA, paired where the
# kernel can pair ("on": also the short GQA batches, which the automatic rule runs in single CTAs).
REPEATED = [
    ("causal_d256_gqa4_b32_s256", (32, 256), 16, 4, 256, "bf16", "causal", "on"),
    ("causal_d256_fp16_mha_b8_s384", (8, 384), 8, 8, 256, "fp16", "causal", "on"),
    ("dense_d256_gqa4_b2_s2048", (2, 2048), 16, 4, 256, "bf16", "dense", "on"),
    ("causal_d128_gqa4_b32_s256", (32, 256), 32, 8, 128, "bf16", "causal", "on"),
    ("dense_d128_gqa4_b16_s512", (16, 512), 32, 8, 128, "bf16", "dense", "on"),
    ("dense_d128_gqa4_b16_s512_single_ctas", (16, 512), 32, 8, 128, "bf16", "dense", "auto"),
    ("dense_d128_gqa4_b2_s2048_160_key_tiles", (2, 2048), 32, 8, 128, "bf16", "dense", "on"),
    ("causal_d128_gqa4_b1_s4096", (1, 4096), 32, 8, 128, "bf16", "causal", "on"),
]


@pytest.mark.parametrize("order", ["static", "dynamic"])
@pytest.mark.parametrize("case", REPEATED, ids=[c[0] for c in REPEATED])
def test_many_calls_in_a_row_give_one_answer(monkeypatch, case, order):
    """400 identical calls queued back to back, each into a NaN-poisoned buffer: every output must
    equal the first bit for bit, and the first must match the reference. Races between the warps
    or the CTAs of a pair show up here as rows left unwritten, wrong rows or a hung launch."""
    name, (b, s), hq, hkv, d, dtype, mask, pairs = case
    monkeypatch.setenv("TSATTN_WORK_ORDER", order)
    monkeypatch.setenv("TSATTN_CTA_PAIRS", pairs)
    torch.manual_seed(sum(map(ord, name + order)))
    q, k, v = (
        randn((b, s, hq, d), DTYPES[dtype]),
        randn((b, s, hkv, d), DTYPES[dtype]),
        randn((b, s, hkv, d), DTYPES[dtype]),
    )
    first = poisoned(q.shape, q.dtype)
    tsattn.batch_prefill(q, k, v, out=first, mask_type=mask)
    torch.cuda.synchronize()
    assert_close_to_reference(first, reference(q, k, v, mask_type=mask), q.dtype, f"{name}, {order} order")
    outs = [poisoned(q.shape, q.dtype) for _ in range(8)]
    differing = []
    for call in range(400):
        out = outs[call % 8]
        out.fill_(float("nan"))
        tsattn.batch_prefill(q, k, v, out=out, mask_type=mask)
        if call % 8 == 7:
            differing += [call - 7 + i for i, o in enumerate(outs) if not torch.equal(o, first)]
    torch.cuda.synchronize()
    assert not differing, f"{name}, {order} order: calls {differing[:10]} of 400 differ from the first"
