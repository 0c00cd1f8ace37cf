"""Which kernel family ran, as tsattn.last_kernel_name() reports it: the Hopper family (sm90a) on a
compute capability 9.x GPU (every dtype), the portable family (sm80) elsewhere.
Each output is checked against the fp32 oracle too. Skipped with "skipped: no CUDA device" without one.
"""

import os
import threading

import pytest
import torch

import tsattn

from support import FP8, assert_close_to_reference, indptr, poisoned, randn, reference

BF16 = torch.bfloat16
ARCHS = {8: "sm_80", 9: "sm_90a", 10: "sm_100", 12: "sm_120"}


def _automatic_family() -> str:
    """The family tsattn picks for a bf16 call on this GPU by itself."""
    if os.environ.get("TSATTN_KERNEL_FAMILY", "auto") not in ("", "auto"):
        pytest.skip("skipped: TSATTN_KERNEL_FAMILY forces a kernel family")
    major, _ = torch.cuda.get_device_capability()
    return "sm90a" if major == 9 else "sm80"


def _arch() -> str:
    return ARCHS.get(torch.cuda.get_device_capability()[0], "?")


def _checked_call(q, k, v, **kwargs):
    out = poisoned(q.shape, q.dtype if kwargs.get("out_dtype") is None else kwargs["out_dtype"])
    tsattn.batch_prefill(q, k, v, out=out, **kwargs)
    name = tsattn.last_kernel_name()  # read right after the call, on the calling thread
    torch.cuda.synchronize()
    ref_kwargs = {key: val for key, val in kwargs.items() if key != "out_dtype"}
    assert_close_to_reference(out, reference(q, k, v, **ref_kwargs), q.dtype, name)
    return name


def test_bf16_d128_causal_fixed_and_packed():
    family = _automatic_family()
    torch.manual_seed(90)
    q = randn((2, 300, 8, 128), BF16)
    k = randn((2, 300, 2, 128), BF16)
    v = randn((2, 300, 2, 128), BF16)
    name = _checked_call(q, k, v, mask_type="causal")
    assert name == f"prefill.{family}.{_arch()}.d128.bf16_bf16.causal.fixed"
    if family == "sm90a":
        assert ".sm90a." in name

    lengths = [(70, 100), (0, 5), (129, 129), (1, 1)]
    qo, kv = indptr([s for s, _ in lengths]), indptr([s for _, s in lengths])
    q = randn((int(qo[-1]), 8, 128), BF16)
    k = randn((int(kv[-1]), 2, 128), BF16)
    v = randn((int(kv[-1]), 2, 128), BF16)
    name = _checked_call(q, k, v, qo_indptr=qo, kv_indptr=kv, mask_type="causal")
    assert name == f"prefill.{family}.{_arch()}.d128.bf16_bf16.causal.packed"


@pytest.mark.skipif(FP8 is None, reason="skipped: torch has no float8_e4m3fn")
def test_fp8_inputs_run_on_sm90a_on_hopper():
    family = _automatic_family()
    torch.manual_seed(91)
    q = randn((1, 129, 4, 128), FP8)
    k = randn((1, 129, 4, 128), FP8)
    v = randn((1, 129, 4, 128), FP8)
    name = _checked_call(q, k, v, mask_type="causal", out_dtype=BF16)
    assert name == f"prefill.{family}.{_arch()}.d128.e4m3_bf16.causal.fixed"
    qo, kv = indptr([1, 0, 127, 40]), indptr([33, 7, 200, 40])
    q = randn((int(qo[-1]), 4, 256), FP8)
    k = randn((int(kv[-1]), 2, 256), FP8)
    v = randn((int(kv[-1]), 2, 256), FP8)
    name = _checked_call(q, k, v, qo_indptr=qo, kv_indptr=kv, mask_type="causal", out_dtype=FP8)
    assert name == f"prefill.{family}.{_arch()}.d256.e4m3_e4m3.causal.packed"


def test_last_kernel_name_is_per_thread():
    _automatic_family()
    q = randn((1, 17, 2, 128), BF16)
    tsattn.batch_prefill(q, q, q)
    assert tsattn.last_kernel_name().startswith("prefill.")
    seen = []
    worker = threading.Thread(target=lambda: seen.append(tsattn.last_kernel_name()))
    worker.start()
    worker.join()
    assert seen == [""]
    # A call with nothing to launch (no query rows) leaves "".
    empty = randn((1, 0, 2, 128), BF16)
    tsattn.batch_prefill(empty, q, q)
    assert tsattn.last_kernel_name() == ""
    torch.cuda.synchronize()
