"""tools/bench/bench_cases.py without a GPU: the catalog, names and globs, mask semantics and FLOP counts
(checked against a brute-force count of docs/contract.md's mask definitions), applicability, the estimate."""

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_cases as bc  # noqa: E402


def brute_mask(case, b):
    """docs/contract.md's definitions, element by element: [Sq, Sk] visibility of one request."""
    sq, sk = case.shape.q_lens[b], case.shape.kv_lens[b]
    m = torch.zeros(sq, sk, dtype=torch.bool)
    starts, ends = bc.vwin_bounds(case, b) if case.mask == "vwin" else (None, None)
    for i in range(sq):
        for j in range(sk):
            if case.mask == "dense":
                keep = True
            elif case.mask == "vwin":
                keep = int(starts[i]) <= j <= int(ends[i])
            else:
                keep = j <= i + (sk - sq)
                if case.window >= 1:
                    keep = keep and j >= i + sk - sq - case.window
            m[i, j] = keep
    return m


def test_catalog_names_are_unique_and_parse_back():
    full = bc.full_catalog()
    names = [c.name for c in full]
    assert len(names) == len(set(names)) == 5 * 3 * 3 * 20 + 5 * 3 * 5 * 20
    for c in full[::37]:
        assert bc.parse_name(c.name) == c
    assert bc.parse_name("d128-causal-bf16-h32kv8-b1-s8k") == bc.Case(128, "causal", "bf16", 32, 8, "b1-s8k")
    for bad in ("d128-causal", "d96-causal-bf16-h32kv8-b1-s8k", "d128-causal-bf16-h32kv8-b1-s3k", "x"):
        with pytest.raises(ValueError):
            bc.parse_name(bad)


def test_default_set_covers_every_axis_and_is_in_the_catalog():
    full = set(bc.full_catalog())
    default = bc.default_cases()
    assert len(default) == len(set(default))
    assert set(default) <= full and set(bc.quick_cases()) <= full
    assert {c.head_dim for c in default} == set(bc.HEAD_DIMS)
    assert {c.mask for c in default} == set(bc.MASKS)
    assert {c.dtype for c in default} == set(bc.DTYPES)
    assert {c.shape_name for c in default} == set(bc.SHAPES) - bc.SERVING_SHAPES
    assert {c.shape_name for c in bc.serving_cases()} == bc.SERVING_SHAPES
    assert {(c.hq, c.hkv) for c in default} == {hk for d in bc.HEAD_DIMS for hk in bc.HEADS[d]}
    for d in bc.HEAD_DIMS:
        assert {c.dtype for c in default if c.head_dim == d} == set(bc.DTYPES)
        assert {c.mask for c in default if c.head_dim == d} == set(bc.MASKS)
        assert {c.shape_name for c in default if c.head_dim == d} == set(bc.SHAPES) - bc.SERVING_SHAPES
        assert len({(c.hq, c.hkv) for c in default if c.head_dim == d}) >= 3
        for mask in ("dense", "causal"):  # the sweep that the plots draw
            assert {
                c.seq_len
                for c in default
                if c.head_dim == d
                and c.mask == mask
                and c.dtype == "bf16"
                and (c.hq, c.hkv) == bc.PRIMARY_HEADS
                and c.seq_len
            } == set(bc.SEQ_SWEEP)
    assert default[0].name == "d128-dense-bf16-h32kv8-b1-s8k"  # headline first: a time budget cuts the tail


def test_glob_selection_and_unmatched_patterns():
    full = bc.full_catalog()
    chosen, unmatched = bc.select(full, ["d128-causal-bf16-h32kv8-b1-s*", "*ragged16", "nothing-*"])
    names = [c.name for c in chosen]
    assert "d128-causal-bf16-h32kv8-b1-s1k" in names and "d128-causal-bf16-h32kv8-b1-s16k" in names
    assert all(n.startswith("d128-causal-bf16-h32kv8-b1-s") or n.endswith("ragged16") for n in names)
    ragged = [c for c in full if c.shape.name == "ragged16"]
    assert ragged and len([n for n in names if n.endswith("ragged16")]) == len(ragged)
    assert unmatched == ["nothing-*"]
    assert [c.name for c in bc.select(full, ["d256-vwin-fp8-h16kv4-chunk-q256-k4k"])[0]] == [
        "d256-vwin-fp8-h16kv4-chunk-q256-k4k"
    ]
    assert bc.split_patterns(" a,b  c,,") == ["a", "b", "c"]


def test_catalog_cases_for_tools_print_unmatched_patterns(capsys):
    cases, unmatched = bc.catalog_cases("d128-dense-bf16-h32kv8-b1-s2k, nothing-*,d256-causal-fp8-h32kv8-b1-s8k")
    assert [c.name for c in cases] == ["d128-dense-bf16-h32kv8-b1-s2k", "d256-causal-fp8-h32kv8-b1-s8k"]
    assert unmatched == ["nothing-*"]
    assert capsys.readouterr().out == "--cases pattern 'nothing-*' matches no case\n"


@pytest.mark.parametrize("mask", bc.MASKS)
def test_flops_match_a_brute_force_count(small_shape, mask):
    case = bc.Case(128, mask, "bf16", 4, 2, small_shape)
    pairs = 0
    for b in range(case.shape.batch):
        brute = brute_mask(case, b)
        lo, hi = bc.row_bounds(case, b)
        j = torch.arange(case.shape.kv_lens[b])
        from_bounds = (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])
        assert torch.equal(brute, from_bounds), (case.name, b)
        pairs += int(brute.sum())
    assert bc.visible_pairs(case) == pairs
    assert bc.flops(case) == 4 * 4 * 128 * pairs


def test_flops_of_catalog_cases_in_closed_form():
    def f(name):
        return bc.flops(bc.parse_name(name))

    s = 8192
    assert f("d128-dense-bf16-h32kv8-b1-s8k") == 4 * 32 * 128 * s * s
    assert f("d128-causal-bf16-h32kv8-b1-s8k") == 4 * 32 * 128 * s * (s + 1) // 2
    assert f("d256-causal-bf16-h16kv4-b1-s8k") == 4 * 16 * 256 * s * (s + 1) // 2
    assert f("d128-win1k-fp8-h32kv4-b1-s8k") == 4 * 32 * 128 * sum(min(i, 1024) + 1 for i in range(s))
    assert f("d128-causal-bf16-h32kv8-b4-s4k") == 4 * 4 * 32 * 128 * 4096 * 4097 // 2
    # chunked prefill: row i sees keys 0 .. i + 3840 (bottom-right)
    assert f("d128-causal-bf16-h32kv8-chunk-q256-k4k") == 4 * 32 * 128 * sum(i + 3840 + 1 for i in range(256))
    assert f("d128-win1k-bf16-h32kv8-chunk-q256-k4k") == 4 * 32 * 128 * 256 * 1025
    assert f("d128-dense-bf16-h32kv8-chunk-q256-k4k") == 4 * 32 * 128 * 256 * 4096
    assert f("d128-causal-bf16-h32kv8-ragged16") == 4 * 32 * 128 * sum(n * (n + 1) // 2 for n in bc.RAGGED16)


def test_variable_window_bounds_are_valid_and_reproducible():
    case = bc.parse_name("d128-vwin-bf16-h32kv8-chunk-q256-k4k")
    st, en = bc.vwin_bounds(case, 0)
    st2, en2 = bc.vwin_bounds(case, 0)
    assert torch.equal(st, st2) and torch.equal(en, en2)
    assert int(st.min()) >= 0 and int(en.max()) < 4096 and bool((st <= en).all())
    width = en - st + 1
    assert int(width.max()) <= bc.VWIN_MAX and int(width.min()) >= 1
    assert bool((en[1:] >= en[:-1]).all())  # causal ends: non-decreasing
    ragged = bc.parse_name("d128-vwin-bf16-h32kv8-ragged16")
    assert not torch.equal(bc.vwin_bounds(ragged, 1)[0], bc.vwin_bounds(ragged, 8)[0])  # both 4096 long


def test_static_applicability():
    fp8 = bc.parse_name("d128-causal-fp8-h32kv8-b1-s8k")
    assert bc.static_na("tsattn", fp8) is None
    assert all(bc.static_na(n, fp8).startswith("n/a: ") for n in bc.BASELINES)
    win = bc.parse_name("d256-win4k-bf16-h16kv4-b1-s8k")
    assert bc.static_na("cudnn", win).startswith("n/a") and bc.static_na("fa2", win) is None
    assert bc.static_na("flex", win) is None
    vwin = bc.parse_name("d128-vwin-fp16-h32kv8-ragged16")
    assert bc.static_na("fa2", vwin).startswith("n/a") and bc.static_na("flex", vwin) is None
    assert bc.static_na("cudnn", bc.parse_name("d128-causal-bf16-h32kv8-chunk-q256-k4k")) is None
    for c in bc.full_catalog():  # every case runs tsattn and FlexAttention unless fp8
        assert bc.static_na("tsattn", c) is None
        assert (bc.static_na("flex", c) is None) == (c.dtype != "fp8")


def test_case_params_and_tsattn_arguments():
    c = bc.parse_name("d128-win1k-fp8-h32kv4-chunk-q256-k4k")
    p = c.params()
    assert (p["sq"], p["sk"], p["window_left"], p["tsattn_mask_type"], p["tsattn_out_dtype"]) == (
        256,
        4096,
        1024,
        "causal",
        "bf16",
    )
    assert c.seq_len is None and c.group == 8
    assert bc.parse_name("d256-vwin-bf16-h16kv4-b1-s2k").mask_type == "variable_window"
    assert bc.parse_name("d256-dense-bf16-h16kv4-b1-s2k").seq_len == 2048
    r = bc.parse_name("d128-causal-bf16-h32kv8-ragged16").params()
    assert r["packed"] and r["q_lens"] == list(bc.RAGGED16) and r["batch"] == 16


def test_repetition_policy():
    assert bc.choose_reps(1.0) == 100
    assert bc.choose_reps(0.01) == bc.REPS_MAX
    assert bc.choose_reps(50.0) == bc.REPS_MIN
    assert bc.choose_reps(float("nan")) == bc.REPS_MIN
    assert bc.choose_reps(1.0, fixed=7) == 7


def test_estimate_counts_and_default_budget():
    cases = [bc.parse_name("d128-causal-bf16-h32kv8-b1-s8k"), bc.parse_name("d128-causal-fp8-h32kv8-b1-s8k")]
    a = bc.Assumptions(
        tflops=500.0, startup_s=0, jit_s=0, case_s=0, flex_first_extra_s=0, first_call_s={}, sleep_ms_per_batch=0
    )
    est = bc.estimate(cases, bc.CONTENDERS, fixed_reps=10, a=a)
    t_ms = bc.flops(cases[0]) / 500e9
    assert est["contender_runs"] == 5  # four on bf16, tsattn alone on fp8
    assert est["calls"] == 5 * (1 + bc.WARMUP + 10)
    assert math.isclose(est["total_s"], round(5 * 16 * t_ms / 1e3, 1), abs_tol=0.11)
    default = bc.estimate(bc.default_cases())
    assert default["total_s"] < 300, default  # the issue: the default set runs in under 5 minutes
    assert bc.estimate(bc.default_cases(), a=bc.Assumptions(tflops=125.0))["timed_s"] > default["timed_s"]
