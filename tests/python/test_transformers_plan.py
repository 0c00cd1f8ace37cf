"""No-GPU, no-transformers tests of how transformers' attention calls map onto tsattn
(tsattn/integrations/_transformers_plan.py): the window arithmetic, the padding and packing
plans, the exactness check of 4-D masks, the fallback reasons, and that nothing imports
transformers before it is asked for. Every plan runs through reference_prefill (contract-checked
fp64 batch_prefill on the CPU) and is compared with attention written out from transformers' rules."""

import itertools
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import reference_prefill
from tsattn.integrations import _transformers_plan as tp

D = 128
CPU = dict(devices=("cpu",), dtypes=(torch.float32, torch.float64))


def hf_visible(p, k, causal, sliding_window, key_is_real=True):
    """transformers' rule for one (query position p, key position k), written out."""
    if not key_is_real:
        return False
    if causal:
        return k <= p and (sliding_window is None or p - sliding_window < k)
    return sliding_window is None or abs(p - k) <= sliding_window - 1


def hf_dense(batch, q_len, kv_len, q_offset, kv_offset, causal, sliding_window, padding):
    """bool [B, Sq, Sk] from hf_visible; padding [B, L] over positions (None: all real)."""
    out = torch.zeros(batch, q_len, kv_len, dtype=torch.bool)
    for b, i, j in itertools.product(range(batch), range(q_len), range(kv_len)):
        pos = kv_offset + j
        real = padding is None or (pos < padding.shape[1] and bool(padding[b, pos]))
        out[b, i, j] = hf_visible(q_offset + i, pos, causal, sliding_window, real)
    return out


def attention_with_mask(query, key, value, visible, scale):
    """fp64 attention of [B, H, S, D] tensors under visible [B, Sq, Sk]; rows that see nothing are 0."""
    q, k, v = query.double(), key.double(), value.double()
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = torch.einsum("bhid,bhjd->bhij", q, k) * scale
    s = s.masked_fill(~visible.unsqueeze(1), float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhij,bhjd->bihd", p, v)  # [B, Sq, H, D]


def random_padding(gen, batch, length, kinds=("none", "left", "right", "holes")):
    valid = torch.ones(batch, length, dtype=torch.bool)
    for b in range(batch):
        kind, n = gen.choice(kinds), gen.randint(0, length - 1)
        if kind == "left":
            valid[b, :n] = False
        elif kind == "right":
            valid[b, length - n :] = False
        elif kind == "holes":
            valid[b] = torch.tensor([gen.random() < 0.7 for _ in range(length)])
    return valid


# ---------------------------------------------------------------- windows


@pytest.mark.parametrize("sq,sk", [(1, 1), (5, 5), (3, 9), (1, 12), (12, 12)])
@pytest.mark.parametrize("sliding_window", [None, 2, 3, 4, 7, 30])
def test_causal_window_left_keeps_the_keys_transformers_keeps(sq, sk, sliding_window):
    import support

    window_left = tp.causal_window_left(sliding_window)
    # the queries are the last Sq positions: bottom-right, as tsattn's causal mask
    expected = torch.tensor([[hf_visible(sk - sq + i, j, True, sliding_window) for j in range(sk)] for i in range(sq)])
    assert torch.equal(support.visible_mask(sq, sk, "causal", window_left), expected)


def test_window_arithmetic_edges():
    assert tp.causal_window_left(None) == -1
    assert tp.causal_window_left(4096) == 4095
    assert tp.causal_window_left(1) == 0  # only itself: tsattn has no such window, the plan falls back
    assert tp.bidirectional_half_width(None) is None and tp.bidirectional_half_width(65) == 64
    for bad in (0, -3):
        with pytest.raises(ValueError):
            tp.causal_window_left(bad)
        with pytest.raises(ValueError):
            tp.bidirectional_half_width(bad)


def test_reference_visibility_is_transformers_rule():
    gen = random.Random(1)
    for _ in range(60):
        batch, q_len, kv_len = gen.randint(1, 3), gen.randint(1, 7), gen.randint(1, 9)
        q_offset, kv_offset = gen.randint(0, 6), gen.randint(0, 4)
        causal, window = gen.random() < 0.6, gen.choice([None, 1, 2, 4])
        padding = random_padding(gen, batch, gen.randint(1, 14)) if gen.random() < 0.7 else None
        got = tp.reference_visibility(
            batch,
            q_len,
            kv_len,
            causal=causal,
            sliding_window=window,
            padding=padding,
            q_offset=q_offset,
            kv_offset=kv_offset,
        )
        assert torch.equal(got, hf_dense(batch, q_len, kv_len, q_offset, kv_offset, causal, window, padding))


def test_key_padding_for_the_cache_geometries():
    real = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    # no cache, all real: None (the fixed layout)
    assert tp.key_padding(torch.ones(2, 6, dtype=torch.long), 0, 6, 6, 2) is None
    assert tp.key_padding(None, 0, 6, 6, 2) is None
    # padding: bool [B, width]
    assert torch.equal(tp.key_padding(real, 0, 6, 6, 2), real.bool())
    # a sliding-window cache holding positions 2..5: the columns of those positions
    assert tp.key_padding(real, 2, 4, 4, 2) is None  # all real there
    late = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    assert torch.equal(tp.key_padding(late, 2, 4, 4, 2), late[:, 2:].bool())
    # a static cache of 10 slots holding 6 tokens: the first 6 key rows, padding kept
    assert torch.equal(tp.key_padding(real, 0, 6, 10, 2), real.bool())
    assert torch.equal(tp.key_padding(None, 0, 6, 10, 2), torch.ones(2, 6, dtype=torch.bool))
    # the mask shorter than the keys it must cover: the rest is not attended
    assert torch.equal(tp.key_padding(real[:, :4], 0, 6, 6, 2)[:, 4:], torch.zeros(2, 2, dtype=torch.bool))


# ---------------------------------------------------------------- requests and packing


def test_unpad_and_pad_back_round_trip():
    """The packed rows are exactly the real rows, in order; the output lands back where they came
    from; rows not computed are 0. prefill returns q itself, so the round trip must be exact."""
    gen = random.Random(2)
    for trial in range(80):
        batch, kv_len = gen.randint(1, 4), gen.randint(1, 12)
        q_len = gen.choice([1, kv_len, gen.randint(1, kv_len)])
        hq, hkv = gen.choice([(2, 2), (4, 2), (4, 1)])
        valid = random_padding(gen, batch, kv_len)
        query = torch.randn(batch, hq, q_len, D)
        key = torch.randn(batch, hkv, kv_len, D)
        value = torch.randn(batch, hkv, kv_len, D)
        plan = tp.plan_from_padding(valid, q_len, kv_len, causal=True, aligned=True, window_left=-1, half_width=None)
        seen = {}

        def echo(q, k, v, **options):
            seen.update(options, k=k, v=v)
            return q.clone()

        out = tp.run_plan(plan, query, key, value, 0.1, echo)
        q_real = valid[:, kv_len - q_len :]
        expected = torch.where(q_real.view(batch, q_len, 1, 1), query.transpose(1, 2), torch.zeros(()))
        if plan.packed is None:  # every row real: no copies, no indptrs
            assert bool(valid.all()) and "qo_indptr" not in seen
            assert torch.equal(out, query.transpose(1, 2))
            continue
        assert torch.equal(out, expected), trial
        assert seen["qo_indptr"].tolist() == [0] + q_real.sum(1).cumsum(0).tolist()
        assert seen["kv_indptr"].tolist() == [0] + valid.sum(1).cumsum(0).tolist()
        assert torch.equal(seen["k"], key.transpose(1, 2)[valid])
        assert torch.equal(seen["v"], value.transpose(1, 2)[valid])


def test_position_ids_restarts_are_requests():
    req = tp.requests_from_position_ids(torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]]), 1)
    assert tp.pack(req).qo_indptr.tolist() == [0, 3, 5, 9]
    # several rows; a restart at any value (RoBERTa-like ids start at 2); a jump is a restart too
    pos = torch.tensor([[2, 3, 4, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6], [7, 8, 0, 1, 2, 5, 6]])
    packed = tp.pack(tp.requests_from_position_ids(pos, 3))
    assert packed.qo_indptr.tolist() == [0, 3, 7, 14, 16, 19, 21]
    assert torch.equal(packed.qo_indptr, packed.kv_indptr)
    # broadcast [1, S] position ids, as models pass them
    one = tp.pack(tp.requests_from_position_ids(torch.tensor([[0, 1, 0, 1, 2]]), 2))
    assert one.qo_indptr.tolist() == [0, 2, 5, 7, 10]


def test_cu_seq_lens_are_requests():
    cu = torch.tensor([0, 4, 7, 12], dtype=torch.int32)
    packed = tp.pack(tp.requests_from_cu_seq_lens(cu, cu, 1, 12, 12))
    assert packed.qo_indptr.tolist() == [0, 4, 7, 12] and packed.kv_indptr.tolist() == [0, 4, 7, 12]
    short = tp.pack(tp.requests_from_cu_seq_lens(cu[:3], cu[:3], 1, 12, 12))  # tokens past the end: none
    assert short.qo_indptr.tolist() == [0, 4, 7]


# ---------------------------------------------------------------- plans against transformers' rules


def run_case(gen, *, four_d=False):
    """One random attention call as transformers makes it, planned and run on reference_prefill,
    compared with attention under transformers' rules. Returns the plan (or Fallback)."""
    causal = gen.random() < 0.7
    batch = gen.randint(1, 3)
    hq, hkv = gen.choice([(2, 2), (4, 2), (4, 1)])
    if causal:
        past, q_len = gen.choice(
            [(0, gen.randint(1, 10)), (gen.randint(1, 8), 1), (gen.randint(1, 6), gen.randint(2, 5))]
        )
        kv_offset = gen.choice([0, 0, min(past, gen.randint(0, 3))])  # a sliding cache drops old positions
        q_offset, width = past, past + q_len - kv_offset
        kv_len = width + gen.choice([0, 0, 3])  # a static cache has unfilled slots
        window = gen.choice([None, None, 1, 2, 3, 5, 40])
    else:
        q_len = kv_len = width = gen.randint(1, 10)
        q_offset = kv_offset = 0
        window = gen.choice([None, None, 2, 3])
    positions = kv_offset + width
    padding = random_padding(gen, batch, positions) if gen.random() < 0.7 else None
    query = torch.randn(batch, hq, q_len, D, dtype=torch.float64)
    key = torch.randn(batch, hkv, kv_len, D, dtype=torch.float64)
    value = torch.randn(batch, hkv, kv_len, D, dtype=torch.float64)
    truth_mask = hf_dense(batch, q_len, kv_len, q_offset, kv_offset, causal, window, padding)
    if four_d:
        mask = truth_mask.unsqueeze(1)
    else:
        mask = tp.key_padding(padding, kv_offset, width, kv_len, batch)
    plan = tp.plan_attention(query, key, value, mask, causal=causal, sliding_window=window, **CPU)
    if isinstance(plan, tp.Fallback):
        return plan
    scale = 0.3
    out = tp.run_plan(plan, query, key, value, scale, reference_prefill.batch_prefill)
    expected = attention_with_mask(query, key, value, truth_mask, scale)
    # The rows a plan does not compute are padding (their own position is not a real token): 0.
    if padding is None:
        computed = torch.ones(batch, q_len, dtype=torch.bool)
    else:
        computed = padding[:, q_offset : q_offset + q_len]
    rows = computed.view(batch, q_len, 1, 1)
    torch.testing.assert_close(torch.where(rows, out, 0.0), torch.where(rows, expected, 0.0), rtol=1e-5, atol=1e-5)
    padding_rows = torch.where(rows, 0.0, out)
    if four_d:
        # A 4-D mask cannot say which rows are padding: a padding row may also be computed from
        # its mask row (as SDPA does), but it must be all of that or 0.
        same = torch.isclose(out, expected, rtol=1e-5, atol=1e-5).all(dim=(2, 3))
        assert bool((computed | same | (out == 0).all(dim=(2, 3))).all()), "padding rows: SDPA's value or 0"
    else:
        assert not bool(padding_rows.any()), "padding rows are 0"
    return plan


@pytest.mark.parametrize("four_d", [False, True], ids=["2d-mask", "4d-mask"])
def test_plans_compute_what_transformers_masks_say(four_d):
    gen = random.Random(3 + four_d)
    outcomes = []
    for _ in range(150):
        plan = run_case(gen, four_d=four_d)
        if isinstance(plan, tp.Fallback):
            # only what tsattn cannot express: W = 1, and windows over padding holes
            assert plan.reason == "window", plan
            outcomes.append("fallback")
        else:
            outcomes.append(f"{plan.layout}.{plan.mask_type}")
    # the random cases reached every layout and mask
    for seen in ("fixed.causal", "packed.causal", "fixed.dense", "packed.dense", "fixed.variable_window"):
        assert seen in outcomes, (seen, sorted(set(outcomes)))


def test_packed_sequences_from_position_ids():
    """A 4-D block-diagonal mask (what transformers builds for sequences packed in one row) with
    the position ids that made it: one request per sequence, causal or sliding."""
    pos = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4]])
    seg = tp.requests_from_position_ids(pos, 1).q_seg
    for window in (None, 2):
        same = seg.unsqueeze(2) == seg.unsqueeze(1)
        mask = (same & hf_dense(1, 12, 12, 0, 0, True, window, None)).unsqueeze(1)
        q, k, v = (torch.randn(1, h, 12, D, dtype=torch.float64) for h in (4, 2, 2))
        plan = tp.plan_attention(q, k, v, mask, causal=True, sliding_window=window, position_ids=pos, **CPU)
        assert isinstance(plan, tp.Plan) and plan.packed.qo_indptr.tolist() == [0, 4, 7, 12]
        out = tp.run_plan(plan, q, k, v, 0.2, reference_prefill.batch_prefill)
        torch.testing.assert_close(out, attention_with_mask(q, k, v, mask[:, 0], 0.2), rtol=1e-5, atol=1e-5)
        # without position ids the same mask is not one request per row: PyTorch computes it
        assert tp.plan_attention(q, k, v, mask, causal=True, sliding_window=window, **CPU).reason == "mask"


def test_four_d_masks_tsattn_cannot_express_fall_back():
    q, k, v = (torch.randn(2, 2, 6, D) for _ in range(3))
    causal = torch.tril(torch.ones(6, 6, dtype=torch.bool)).expand(2, 1, 6, 6).clone()
    odd = causal.clone()
    odd[1, 0, 4, 1] = False  # one hole in a row
    assert tp.plan_attention(q, k, v, odd, causal=True, **CPU).reason == "mask"
    per_head = causal.expand(2, 2, 6, 6).clone()
    per_head[0, 1, 5, 0] = False  # heads that differ
    assert tp.plan_attention(q, k, v, per_head, causal=True, **CPU).reason == "mask"
    additive = torch.zeros(2, 1, 6, 6).masked_fill(~causal, torch.finfo(torch.float32).min)
    assert isinstance(tp.plan_attention(q, k, v, additive, causal=True, **CPU), tp.Plan)
    biased = additive.clone()
    biased[0, 0, 3, 1] = -0.5  # an additive bias, not a mask
    assert tp.plan_attention(q, k, v, biased, causal=True, **CPU).reason == "mask"
    assert tp.plan_attention(q, k, v, causal[:, 0, 0].float(), causal=True, **CPU).reason == "mask"  # 2-D float


# ---------------------------------------------------------------- fallback reasons


def test_each_fallback_reason():
    q, k, v = (torch.randn(1, h, 5, D) for h in (4, 2, 2))

    def reason(*args, devices=("cpu",), dtypes=(torch.float32,), **kw):
        args = args or (q, k, v, None)
        plan = tp.plan_attention(*args, causal=kw.pop("causal", True), devices=devices, dtypes=dtypes, **kw)
        return plan.reason if isinstance(plan, tp.Fallback) else plan.layout

    assert reason() == "fixed"
    with torch.enable_grad():
        grad_q = q.clone().requires_grad_()
        assert reason(grad_q, k, v, None) == "autograd"
    assert reason(dropout=0.1) == "dropout"
    assert reason(softcap=50.0) == "softcap"
    assert reason(sinks=torch.zeros(4)) == "sinks"
    assert reason(position_bias=torch.zeros(1, 4, 5, 5)) == "position_bias"
    assert reason(unknown_arguments=["indices"]) == "argument"
    assert reason(devices=("cuda",)) == "device"
    assert reason(dtypes=(torch.float16, torch.bfloat16)) == "dtype"
    assert reason(q.half(), k, v, None, dtypes=(torch.float16, torch.float32)) == "dtype"  # mixed
    for d in (64, 96, 192):
        small = [torch.randn(1, h, 5, d) for h in (4, 2, 2)]
        assert reason(*small, None) == "head_dim"
    assert reason(q, k, v[..., :64].contiguous(), None) == "head_dim"  # v head dim differs (MLA)
    assert reason(torch.randn(1, 3, 5, D), k, v, None) == "heads"
    assert reason(sliding_window=1) == "window"
    assert reason(sliding_window=0) == "window"
    assert reason(q, k[:, :, :3], v[:, :, :3], None) == "causal_shape"  # Sq > Sk
    cu_q, cu_k = torch.tensor([0, 3, 5], dtype=torch.int32), torch.tensor([0, 2, 5], dtype=torch.int32)
    assert reason(cu_seq_lens=(cu_q, cu_k)) == "causal_shape"  # a request with Sq > Sk
    cross_q = torch.randn(1, 4, 4, D)
    assert reason(cross_q, k, v, None, causal=False, sliding_window=3, cross_attention=True) == "window"
    assert reason(q, k, v, torch.ones(1, 1, 1, 5, 5, dtype=torch.bool)) == "mask"  # 5-D
    assert reason(q, k, v, torch.ones(1, 3, dtype=torch.bool)) == "mask"  # narrower than the queries
    # Every reason has its words.
    assert set(tp.REASONS) >= {"autograd", "dropout", "softcap", "sinks", "device", "dtype", "head_dim", "mask"}
    assert "soft-capping" in tp.Fallback("softcap", "softcap=50").message()


def test_plan_cache_follows_the_mask_object():
    cache = tp.PlanCache()
    q, k, v = (torch.randn(2, 2, 6, D) for _ in range(3))
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, :2] = False
    first = tp.plan_attention(q, k, v, mask, causal=True, cache=cache, **CPU)
    assert tp.plan_attention(q, k, v, mask, causal=True, cache=cache, **CPU) is first
    assert tp.plan_attention(q, k, v, mask.clone(), causal=True, cache=cache, **CPU) is not first
    # the same mask for another layer kind (a window) is another plan
    assert tp.plan_attention(q, k, v, mask, causal=True, sliding_window=3, cache=cache, **CPU) is not first
    mask[1, :3] = False  # changed in place: planned again
    again = tp.plan_attention(q, k, v, mask, causal=True, cache=cache, **CPU)
    assert again is not first and again.packed.kv_indptr.tolist() == [0, 4, 7]


# ---------------------------------------------------------------- imports


def test_transformers_is_imported_only_when_asked_for(tmp_path):
    """import tsattn, a batch_prefill call and the integration modules never import transformers
    (the call fails here for want of a library, after its whole Python path has run)."""
    code = (
        "import sys, torch, tsattn\n"
        "assert 'transformers' not in sys.modules\n"
        "try:\n"
        "    tsattn.batch_prefill(torch.zeros(1, 1, 1, 128), torch.zeros(1, 1, 1, 128), torch.zeros(1, 1, 1, 128))\n"
        "except RuntimeError:\n"
        "    pass\n"
        "assert 'transformers' not in sys.modules, 'batch_prefill imported transformers'\n"
        "assert 'tsattn.integrations' not in sys.modules\n"
        "import tsattn.integrations, tsattn.integrations.transformers\n"
        "assert 'transformers' not in sys.modules, 'the integration imported transformers'\n"
        "print('ok')\n"
    )
    env = dict(os.environ, TSATTN_LIBRARY=str(tmp_path / "nowhere" / "libtsattn.so"))
    package_root = Path(__import__("tsattn").__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(package_root), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
