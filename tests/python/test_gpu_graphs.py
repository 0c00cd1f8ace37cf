"""GPU: packed layout with indptrs on the GPU, and CUDA-graph capture of the one-shot call
(docs/contract.md, "CUDA graphs and streams"). While the library does not support them yet, a NotImplementedError
from it makes these tests xfail with its message; any other failure fails them."""

import torch

import tsattn

from support import assert_close_to_reference, call_or_xfail, capture_graph, indptr, poisoned, randn, reference

F16, BF16 = torch.float16, torch.bfloat16


def test_packed_layout_gpu_indptrs():
    torch.manual_seed(11)
    lengths = [(17, 17), (0, 0), (129, 200), (1, 129), (0, 7)]
    qo = indptr([a for a, _ in lengths], device="cuda")
    kv = indptr([b for _, b in lengths], device="cuda")
    q = randn((int(qo[-1]), 8, 128), BF16)
    k = randn((int(kv[-1]), 2, 128), BF16)
    v = randn((int(kv[-1]), 2, 128), BF16)
    for mask, window in (("causal", -1), ("causal", 17), ("dense", -1)):
        out = poisoned(q.shape, BF16)
        call_or_xfail(
            lambda: tsattn.batch_prefill(
                q, k, v, qo_indptr=qo, kv_indptr=kv, mask_type=mask, window_left=window, out=out
            )
        )
        torch.cuda.synchronize()
        expected = reference(q, k, v, qo_indptr=qo.cpu(), kv_indptr=kv.cpu(), mask_type=mask, window_left=window)
        assert_close_to_reference(out, expected, BF16, f"GPU indptrs {mask} window={window}")


def test_cuda_graph_capture_gpu_indptrs_replayed_with_new_lengths():
    """Captured once; replayed after the indptr values and the inputs change in place (same totals,
    same batch size): the device-side plan must follow the new lengths."""
    torch.manual_seed(12)
    first = [(40, 60), (89, 100), (0, 0)]
    second = [(100, 110), (0, 20), (29, 30)]  # same totals: 129 queries, 160 keys; causal-valid
    hq, hkv, d = 8, 2, 128
    qo = indptr([a for a, _ in first], device="cuda")
    kv = indptr([b for _, b in first], device="cuda")
    q = randn((129, hq, d), F16)
    k = randn((160, hkv, d), F16)
    v = randn((160, hkv, d), F16)
    out = poisoned(q.shape, F16)

    def call():
        tsattn.batch_prefill(q, k, v, qo_indptr=qo, kv_indptr=kv, mask_type="causal", out=out)

    graph = capture_graph(call)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    expected = reference(q, k, v, qo_indptr=qo.cpu(), kv_indptr=kv.cpu(), mask_type="causal")
    assert_close_to_reference(out, expected, F16, "graph replay, first lengths")

    qo.copy_(indptr([a for a, _ in second], device="cuda"))
    kv.copy_(indptr([b for _, b in second], device="cuda"))
    q.copy_(randn(q.shape, F16))
    k.copy_(randn(k.shape, F16))
    v.copy_(randn(v.shape, F16))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    expected = reference(q, k, v, qo_indptr=qo.cpu(), kv_indptr=kv.cpu(), mask_type="causal")
    assert_close_to_reference(out, expected, F16, "graph replay, new lengths and inputs")


def test_cuda_graph_capture_gpu_indptrs_variable_window():
    torch.manual_seed(13)
    lengths = [(64, 64), (65, 96)]
    qo = indptr([a for a, _ in lengths], device="cuda")
    kv = indptr([b for _, b in lengths], device="cuda")
    q = randn((129, 4, 256), BF16)
    k = randn((160, 4, 256), BF16)
    v = randn((160, 4, 256), BF16)
    starts = torch.randint(0, 64, (129,), device="cuda", dtype=torch.int32)
    ends = (starts + torch.randint(0, 32, (129,), device="cuda", dtype=torch.int32)).to(torch.int32)
    out = poisoned(q.shape, BF16)

    def call():
        tsattn.batch_prefill(
            q,
            k,
            v,
            qo_indptr=qo,
            kv_indptr=kv,
            mask_type="variable_window",
            variable_window_token_starts=starts,
            variable_window_token_ends=ends,
            out=out,
        )

    graph = capture_graph(call)
    starts.copy_(torch.randint(-4, 70, (129,), device="cuda", dtype=torch.int32))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    expected = reference(
        q, k, v, qo_indptr=qo.cpu(), kv_indptr=kv.cpu(), mask_type="variable_window", starts=starts, ends=ends
    )
    assert_close_to_reference(out, expected, BF16, "graph replay, variable window")


def test_cuda_graph_capture_fixed_layout():
    """The fixed layout has nothing data-dependent to plan; its capture replays new inputs."""
    torch.manual_seed(14)
    q = randn((2, 129, 8, 128), BF16)
    k = randn((2, 129, 2, 128), BF16)
    v = randn((2, 129, 2, 128), BF16)
    out = poisoned(q.shape, BF16)
    graph = capture_graph(lambda: tsattn.batch_prefill(q, k, v, mask_type="causal", window_left=33, out=out))
    for _ in range(2):
        q.copy_(randn(q.shape, BF16))
        v.copy_(randn(v.shape, BF16))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expected = reference(q, k, v, mask_type="causal", window_left=33)
        assert_close_to_reference(out, expected, BF16, "graph replay, fixed layout")
