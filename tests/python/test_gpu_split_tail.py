"""The split tail of the sm90a dense kernels (TSATTN_SPLIT_TAIL; plan/split_tail.hpp): in a
fixed-layout dense D128 call the last two rounds of work items go out by key tiles, so a slot may be
computed in two parts on two CTAs (or CTA pairs) and merged by the later one. Every way a slot can be
cut must give the oracle's answer: both CTA-pair axes, Sq != Sk, one key tile per slot (nothing
cut), 16-bit output dtypes, CUDA graph replays (the counts are zeroed again), and D256 and the
128-key (short-key) D128 kernels, which do not split; and the library must split where it says it
does. The split tail belongs to the 160-key D128 kernels, so the tests that need it turn the
short-key variant off (TSATTN_SHORT_KEYS=off); the cases also run with it chosen as usual, where
the 128-key kernels walk the same shapes in static turns without a split.

Every case: fresh 0.2*randn inputs, out poisoned with NaN, checked against the fp32 oracle in
support.py. Skipped with "skipped: no CUDA device" on machines without a GPU.
"""

import os
import subprocess
import sys

import pytest
import torch

import tsattn

from support import assert_close_to_reference, capture_graph, poisoned, randn, reference, replay_with_fresh_inputs

F16, BF16 = torch.float16, torch.bfloat16

# (id, B, Sq, Sk, Hq, Hkv, D, dtype, out dtype). The slot counts are for an H200 (66 CTA pairs)
# and the 160-key kernels: each case has more slots than walkers and a last round that is not
# full, so "on" splits it.
CASES = [
    ("d128_gqa4_pairs_along_heads", 1, 1152, 1152, 32, 8, 128, BF16, BF16),  # 144 slots of 8 key tiles
    ("d128_mha_pairs_along_tiles", 1, 1000, 1000, 32, 32, 128, F16, F16),  # 128 slots: all in the tail
    ("d128_odd_group_batch2", 2, 700, 700, 24, 8, 128, BF16, F16),  # group 3: along tiles
    ("d256_never_splits", 1, 1100, 1100, 16, 8, 256, BF16, BF16),  # D256 kernels ignore the knob
    ("d128_fewer_keys_than_queries", 2, 600, 333, 32, 8, 128, F16, BF16),  # 3 key tiles, last one partial
    ("d128_one_key_tile_per_slot", 4, 300, 100, 32, 8, 128, BF16, BF16),  # whole slots only
    ("d128_longer_keys", 1, 4000, 4000, 32, 8, 128, BF16, BF16),  # 512 slots of 25
]


def _sm90a_only():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("skipped: the split tail is an sm90a (compute capability 9.x) feature")
    if os.environ.get("TSATTN_KERNEL_FAMILY", "auto") not in ("", "auto", "sm90a"):
        pytest.skip("skipped: TSATTN_KERNEL_FAMILY forces another kernel family")


@pytest.mark.parametrize("short_keys", ["off", "auto"])
@pytest.mark.parametrize("mode", ["on", "off", "auto"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_split_and_whole_tails_match_the_reference(monkeypatch, case, mode, short_keys):
    name, b, sq, sk, hq, hkv, d, dtype, out_dtype = case
    monkeypatch.setenv("TSATTN_SPLIT_TAIL", mode)  # read by the library at every call
    monkeypatch.setenv("TSATTN_SHORT_KEYS", short_keys)
    torch.manual_seed(sum(map(ord, name + mode + short_keys)))
    q, k, v = randn((b, sq, hq, d), dtype), randn((b, sk, hkv, d), dtype), randn((b, sk, hkv, d), dtype)
    out = poisoned(q.shape, out_dtype)
    tsattn.batch_prefill(q, k, v, out=out, out_dtype=out_dtype, mask_type="dense")
    torch.cuda.synchronize()
    expected = reference(q, k, v, mask_type="dense")
    assert_close_to_reference(out, expected, dtype, f"{name}, split tail {mode}, short keys {short_keys}")


def test_parts_of_unequal_maxima_merge_to_the_reference(monkeypatch):
    """Parts whose row maxima differ a lot (one part sees large scores, the other small ones) and v
    of one sign: the merge must weigh both parts by exp2 of their maxima, not add them."""
    torch.manual_seed(5)
    b, s, hq, hkv, d = 1, 1152, 32, 8, 128
    q = randn((b, s, hq, d), BF16)
    k = randn((b, s, hkv, d), BF16)
    k[:, : s // 2] *= 8  # the first half of the keys scores far higher
    v = (1.0 + randn((b, s, hkv, d), BF16).float()).to(BF16)
    monkeypatch.setenv("TSATTN_SPLIT_TAIL", "on")
    monkeypatch.setenv("TSATTN_SHORT_KEYS", "off")
    out = poisoned(q.shape, BF16)
    tsattn.batch_prefill(q, k, v, out=out, mask_type="dense")
    torch.cuda.synchronize()
    assert_close_to_reference(out, reference(q, k, v, mask_type="dense"), BF16, "parts of unequal maxima")


def test_graph_replays_zero_the_counts_again(monkeypatch):
    """A captured split-tail call replayed three times with new inputs: each replay must zero the
    parts' counts again (the memset node), or the later replays would find both parts counted and
    leave rows unwritten (poisoned)."""
    monkeypatch.setenv("TSATTN_SPLIT_TAIL", "on")
    monkeypatch.setenv("TSATTN_SHORT_KEYS", "off")
    torch.manual_seed(23)
    q, k, v = randn((1, 1152, 32, 128), BF16), randn((1, 1152, 8, 128), BF16), randn((1, 1152, 8, 128), BF16)
    out = poisoned(q.shape, BF16)

    def call():
        tsattn.batch_prefill(q, k, v, out=out, mask_type="dense")

    replay_with_fresh_inputs(
        capture_graph(call),
        (q, k, v),
        out,
        lambda replay: assert_close_to_reference(out, reference(q, k, v, mask_type="dense"), BF16, f"replay {replay}"),
    )


_PROBE = """
import sys, torch, tsattn
for s, d, mask in [(1152, 128, "dense"), (2048, 128, "dense"), (1152, 128, "causal"), (1152, 256, "dense")]:
    q = torch.randn(1, s, 32, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, s, 8, d, device="cuda", dtype=torch.bfloat16)
    tsattn.batch_prefill(q, k, k, mask_type=mask)
    torch.cuda.synchronize()
    print("call done", file=sys.stderr, flush=True)
"""


def _split_calls(mode, short_keys="off"):
    """Per call of _PROBE in a fresh process: whether its launch split the tail (debug log)."""
    env = dict(
        os.environ,
        TSATTN_LOG_LEVEL="debug",
        TSATTN_SPLIT_TAIL=mode,
        TSATTN_SHORT_KEYS=short_keys,
        TSATTN_WORK_ORDER="auto",
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
    )  # this checkout's package
    run = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    calls, split = [], False
    for line in run.stderr.splitlines():
        if "go out by key tiles" in line:
            split = True
        elif line == "call done":
            calls.append(split)
            split = False
    return calls


def test_which_calls_split():
    _sm90a_only()
    # Causal calls never split (their items differ in cost: the dynamic order evens them out), nor
    # do D256 kernels, nor the 128-key D128 kernels (static turns without the scheduler's ring).
    assert _split_calls("on") == [True, True, False, False]
    assert _split_calls("on", short_keys="on") == [False, False, False, False]
    assert _split_calls("off") == [False, False, False, False]
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:
        # 66 CTA pairs: S1152 has 144 slots of 8 key tiles of 160 (2.2 rounds in 3: split), S2K 256
        # of 13 tiles of 160 (3.9 rounds in 4: the model predicts the split's cost above its gain).
        assert _split_calls("auto") == [True, False, False, False]
