"""GPU: the short-key variants of the sm90a 16-bit kernels (D128 dense: 128-key tiles instead of
160; D256 dense and causal: 64 instead of 80; src/plan/short_keys.hpp, TSATTN_SHORT_KEYS) against
the oracle, with the log-sum-exp output.

Forced on (TSATTN_SHORT_KEYS=on, read at every one-shot call): each kind, f16 and bf16, fixed and
packed (ragged, an empty request, host and GPU indptrs), sizes 1, 127, 129, 256, 512; out and lse
poisoned, out checked against the fp32 oracle and bit for bit against the same call without lse,
lse against the fp64 logsumexp. Then the automatic rule through tsattn.last_kernel_name(): D128 512
keys take the variant and 8192 keep 160, D256 256 keys take it and 512 keep 80; and a plan's runs
take the one-shot call's width run by run. Hopper only; skipped with "skipped: no CUDA device"
without a GPU.
"""

import os

import pytest
import torch

import tsattn
from tsattn import _call

from support import assert_close_to_reference, indptr, poisoned, randn, reference, reference_lse

F16, BF16 = torch.float16, torch.bfloat16
DTYPES = {"fp16": F16, "bf16": BF16}
NAMES = {F16: "f16", BF16: "bf16"}
# The kinds with a variant: (head dim, mask).
KINDS = {"d128-dense": (128, "dense"), "d256-dense": (256, "dense"), "d256-causal": (256, "causal")}


def _hopper_only():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("skipped: the short-key variant is an sm90a (compute capability 9.x) kernel")
    if os.environ.get("TSATTN_KERNEL_FAMILY", "auto") not in ("", "auto", "sm90a"):
        pytest.skip("skipped: TSATTN_KERNEL_FAMILY forces another kernel family")


def _call_with_lse(q, k, v, with_lse, qo=None, kv=None, mask="dense"):
    out = poisoned(q.shape, q.dtype)
    lse = poisoned(q.shape[:-1], torch.float32) if with_lse else None
    _call.run(q, k, v, qo, kv, mask, -1, None, None, None, 1.0, 0, out, lse)
    return out, lse, tsattn.last_kernel_name()


def _check(q, k, v, layout, mask, qo=None, kv=None):
    """The call without and with lse: the variant ran both times, out matches the oracle and is the
    same bytes either way, lse matches the fp64 oracle."""
    plain, _, plain_kernel = _call_with_lse(q, k, v, False, qo, kv, mask)
    out, lse, kernel = _call_with_lse(q, k, v, True, qo, kv, mask)
    d = q.shape[-1]
    name = f"prefill.sm90a.sm_90a.d{d}.{NAMES[q.dtype]}_{NAMES[q.dtype]}.{mask}.{layout}.short_keys"
    assert plain_kernel == name and kernel == name + ".lse"
    torch.cuda.synchronize()
    expected_out = reference(q, k, v, qo_indptr=qo, kv_indptr=kv, mask_type=mask)
    assert_close_to_reference(out, expected_out, q.dtype, name)
    assert torch.equal(out.view(torch.uint8), plain.view(torch.uint8)), "out differs with lse"
    expected = reference_lse(q, k, qo_indptr=qo, kv_indptr=kv, mask_type=mask)
    assert not torch.isnan(lse).any(), "lse left unwritten"
    empty = torch.isinf(expected)
    assert torch.equal(torch.isinf(lse) & (lse < 0), empty), "-inf rows differ"
    torch.testing.assert_close(lse[~empty], expected[~empty], atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
@pytest.mark.parametrize("keys", [1, 127, 129, 256, 512])
def test_forced_fixed_layout(monkeypatch, kind, dtype_name, keys):
    _hopper_only()
    monkeypatch.setenv("TSATTN_SHORT_KEYS", "on")
    torch.manual_seed(keys)
    dtype = DTYPES[dtype_name]
    d, mask = KINDS[kind]
    for queries in sorted({keys, max(1, keys // 3)}):
        q = randn((2, queries, 8, d), dtype)
        k, v = randn((2, keys, 2, d), dtype), randn((2, keys, 2, d), dtype)
        _check(q, k, v, "fixed", mask)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
@pytest.mark.parametrize("indptr_device", ["cpu", "cuda"])
def test_forced_packed_layout(monkeypatch, kind, dtype_name, indptr_device):
    """Ragged requests, an empty one among them: key tiles cross request ends."""
    _hopper_only()
    monkeypatch.setenv("TSATTN_SHORT_KEYS", "on")
    torch.manual_seed(3)
    q_lens, kv_lens = [1, 127, 0, 129, 256, 300], [1, 127, 40, 129, 512, 300]
    dtype = DTYPES[dtype_name]
    d, mask = KINDS[kind]
    q = randn((sum(q_lens), 8, d), dtype)
    k, v = randn((sum(kv_lens), 2, d), dtype), randn((sum(kv_lens), 2, d), dtype)
    _check(q, k, v, "packed", mask, qo=indptr(q_lens, indptr_device), kv=indptr(kv_lens, indptr_device))


def test_the_automatic_rule_picks_by_padded_keys(monkeypatch):
    """D128 512 keys: 512 padded against 640 (the variant); 8192: 8192 against 8320 (160-key tiles).
    D256 256 keys: 256 against 320 (the variant); 512: 512 against 560, above 0.87 of it (80 keys)."""
    _hopper_only()
    monkeypatch.delenv("TSATTN_SHORT_KEYS", raising=False)
    torch.manual_seed(4)
    for keys, short in [(256, True), (512, True), (1024, True), (2048, False), (8192, False)]:
        q = randn((1, 64, 4, 128), BF16)
        k, v = randn((1, keys, 4, 128), BF16), randn((1, keys, 4, 128), BF16)
        out = tsattn.batch_prefill(q, k, v)
        name = tsattn.last_kernel_name()
        assert name.endswith(".short_keys") == short, (keys, name)
        torch.cuda.synchronize()
        assert_close_to_reference(out, reference(q, k, v), BF16, name)
    for keys, short in [(192, True), (256, True), (512, False), (2048, False)]:
        q = randn((1, 64, 4, 256), BF16)
        k, v = randn((1, keys, 4, 256), BF16), randn((1, keys, 4, 256), BF16)
        out = tsattn.batch_prefill(q, k, v, mask_type="causal")
        name = tsattn.last_kernel_name()
        assert name.endswith(".causal.fixed.short_keys" if short else ".causal.fixed"), (keys, name)
        torch.cuda.synchronize()
        assert_close_to_reference(out, reference(q, k, v, mask_type="causal"), BF16, name)
    monkeypatch.setenv("TSATTN_SHORT_KEYS", "off")
    q = randn((1, 64, 4, 128), BF16)
    k = randn((1, 512, 4, 128), BF16)
    tsattn.batch_prefill(q, k, k)
    assert tsattn.last_kernel_name() == "prefill.sm90a.sm_90a.d128.bf16_bf16.dense.fixed"


def test_plan_runs_take_the_one_shot_width_run_by_run(monkeypatch):
    """A plan sized for 8192 keys: runs of 512 keys take the variant, 8192 not, as batch_prefill does,
    with the same out and lse bytes."""
    _hopper_only()
    monkeypatch.delenv("TSATTN_SHORT_KEYS", raising=False)
    torch.manual_seed(6)
    w = tsattn.BatchPrefillTSWrapper()
    w.plan(
        device="cuda",
        batch_size=2,
        max_seq_len_q=256,
        max_kv_len=8192,
        num_qo_heads=8,
        num_kv_heads=2,
        head_dim=128,
        q_dtype=BF16,
        kv_dtype=BF16,
    )
    for keys, short in [(512, True), (8192, False), (256, True)]:
        q = randn((2, 256, 8, 128), BF16)
        k, v = randn((2, keys, 2, 128), BF16), randn((2, keys, 2, 128), BF16)
        out, lse = w.run(q, k, v, out=poisoned(q.shape, BF16), return_lse=True)
        run_kernel = tsattn.last_kernel_name()
        assert run_kernel.endswith(".short_keys.lse" if short else ".dense.fixed.lse"), (keys, run_kernel)
        expected_out, expected_lse, kernel = _call_with_lse(q, k, v, True)
        assert kernel == run_kernel
        torch.cuda.synchronize()
        assert torch.equal(out.view(torch.uint8), expected_out.view(torch.uint8)), keys
        assert torch.equal(lse.view(torch.int32), expected_lse.view(torch.int32)), keys
