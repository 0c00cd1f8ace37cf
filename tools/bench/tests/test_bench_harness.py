"""The harness (tools/bench/bench.py and the modules it runs on) without a GPU: the fp32 reference,
the output check, FlexAttention's mask_mods, the per-case runner's handling of contenders that are
right, wrong, failing or n/a, the command line, nvidia-smi parsing and the cold-compile figure (when
libtsattn is here)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import bench  # noqa: E402
import bench_cases as bc  # noqa: E402
import case_data  # noqa: E402
import contenders as ct  # noqa: E402  (as ct: several tests call their list of contender names "contenders")
import failures  # noqa: E402
import jit_figures  # noqa: E402
import run_metadata  # noqa: E402
import timing  # noqa: E402


def _mask(lo, hi, sk):
    j = torch.arange(sk)
    return (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])


def _sdpa_reference(case, q, k, v, bounds):
    """An independent reference: per request, math SDPA with an explicit boolean mask."""
    outs = []
    qs = list(case_data._request_views(case, q, case.shape.q_lens))
    ks = list(case_data._request_views(case, k, case.shape.kv_lens))
    vs = list(case_data._request_views(case, v, case.shape.kv_lens))
    for qb, kb, vb, (lo, hi) in zip(qs, ks, vs, bounds):
        m = _mask(lo, hi, kb.shape[0])
        kk = kb.float().repeat_interleave(case.group, 1).transpose(0, 1)
        vv = vb.float().repeat_interleave(case.group, 1).transpose(0, 1)
        o = F.scaled_dot_product_attention(qb.float().transpose(0, 1), kk, vv, attn_mask=m)
        outs.append(torch.where(m.any(-1)[None, :, None], o, torch.zeros_like(o)).transpose(0, 1))
    return torch.cat(outs) if case.shape.packed else torch.stack(outs)


@pytest.mark.parametrize("mask", bc.MASKS)
def test_reference_matches_sdpa_with_explicit_masks(small_shape, mask):
    case = bc.Case(128, mask, "bf16", 4, 2, small_shape)
    data = case_data.make_case_data(case, "cpu", 1)
    ref = case_data.reference(case, *data.sets[0], data.bounds, budget_bytes=4096)  # many row blocks
    assert torch.allclose(ref, _sdpa_reference(case, *data.sets[0], data.bounds), atol=1e-5, rtol=1e-5)


def test_reference_rows_without_keys_are_zero(small):
    case = bc.Case(128, "causal", "fp16", 2, 2, "t-sq")
    data = case_data.make_case_data(case, "cpu", 1)
    lo, hi = data.bounds[0]
    lo, hi = lo.clone(), hi.clone()
    lo[:5], hi[:5] = 10, 9  # empty
    ref = case_data.reference(case, *data.sets[0], [(lo, hi), data.bounds[1]])
    assert ref[0, :5].abs().max() == 0 and torch.isfinite(ref).all() and ref[0, 5:].abs().max() > 0


def test_inputs_are_scaled_random_rotated_sets(small):
    case = bc.Case(256, "vwin", "fp8", 4, 1, "t-packed")
    data = case_data.make_case_data(case, "cpu", 3)
    q, k, v = data.sets[0]
    assert q.dtype == torch.float8_e4m3fn and q.shape == (65, 4, 256) and k.shape == (82, 1, 256)
    assert 0.09 < q.float().std() < 0.16  # 0.125 * randn for fp8
    assert not torch.equal(data.sets[0][0].float(), data.sets[1][0].float())
    assert data.qo_cpu.tolist() == [0, 9, 9, 49, 65] and data.kv_cpu.tolist() == [0, 9, 9, 49, 82]
    assert data.starts.dtype == torch.int32 and data.starts.shape == (65,)
    again = case_data.make_case_data(case, "cpu", 1)
    assert torch.equal(again.sets[0][0].float(), q.float())  # reproducible across processes (crc32 seed)
    bf = case_data.make_case_data(bc.Case(128, "dense", "bf16", 2, 2, "t-sq"), "cpu", 1).sets[0][0].float()
    assert 0.17 < bf.std() < 0.23
    for c in bc.default_cases():  # rotated sets together exceed twice the L2
        assert case_data.input_sets_for(c) * bc.input_bytes(c) > 2 * case_data.L2_BYTES
    assert case_data.input_sets_for(bc.parse_name("d256-dense-bf16-h32kv32-b1-s16k")) == 2


def test_compare_uses_spec_tolerances():
    ref = torch.full((4, 64), 0.5)
    assert case_data.compare(ref.to(torch.bfloat16), ref, "bf16")["ok"]
    off = ref.clone()
    off[0, 0] = 0.6  # one element outside rtol/atol: a wrong answer
    res = case_data.compare(off, ref, "bf16")
    assert not res["ok"] and res["mismatches"] == 1 and "outside" in res["reason"]
    nan = ref.clone()
    nan[1, 1] = float("nan")
    res = case_data.compare(nan, ref, "fp8")
    assert not res["ok"] and res["nonfinite"] == 1
    assert not case_data.compare(torch.zeros(4, 64), ref, "fp8")["ok"]
    assert not case_data.compare(torch.zeros(4, 65), ref, "bf16")["ok"]
    assert case_data.compare(ref + 0.04, ref, "fp8")["ok"] and not case_data.compare(ref + 0.04, ref, "fp16")["ok"]


@pytest.mark.parametrize("mask", bc.MASKS)
def test_flex_mask_mods_match_the_row_bounds(small_shape, mask):
    case = bc.Case(128, mask, "bf16", 4, 4, small_shape)
    data = case_data.make_case_data(case, "cpu", 1)
    mod, batch = ct.flex_mask_mod(data)
    s = case.shape
    if mod is None:
        assert mask == "dense" and not s.packed
        return
    if s.packed:
        tq, tk = sum(s.q_lens), sum(s.kv_lens)
        got = mod(torch.tensor(0), torch.tensor(0), torch.arange(tq)[:, None], torch.arange(tk)[None, :])
        want = torch.zeros(tq, tk, dtype=torch.bool)
        qo, kv = data.qo_cpu.tolist(), data.kv_cpu.tolist()
        for b, (lo, hi) in enumerate(data.bounds):
            want[qo[b] : qo[b + 1], kv[b] : kv[b + 1]] = _mask(lo, hi, s.kv_lens[b])
        assert torch.equal(got.expand(tq, tk), want)
    else:
        for b in range(s.batch):
            got = mod(torch.tensor(b), torch.tensor(0), torch.arange(s.sq)[:, None], torch.arange(s.sk)[None, :])
            assert torch.equal(got.expand(s.sq, s.sk), _mask(*data.bounds[b], s.sk)), b
        assert batch == (s.batch if mask == "vwin" else None)


def _fake_tsattn(data):
    def call(i):
        return case_data.reference(data.case, *data.sets[i], data.bounds).to(torch.bfloat16)

    return [ct.Prepared(call, "fake tsattn (the reference)")]


def _cpu_preparers(**over):
    prep = {
        "tsattn": _fake_tsattn,
        "cudnn": lambda d: "n/a: packed" if d.case.shape.packed else ct._sdpa_prepare(d, "MATH", "math"),
        "fa2": lambda d: "n/a: FA2 needs CUDA",
        "flex": lambda d: ct._flex_prepare(d, compiled=False),
    }
    prep.update(over)
    return prep


@pytest.mark.parametrize("mask", bc.MASKS)
def test_run_case_checks_and_times_real_baselines_on_cpu(small_shape, mask):
    """SDPA (math backend standing in for cuDNN: same call path, K/V expansion, explicit
    bottom-right mask) and eager FlexAttention (the same mask_mods and layouts as the compiled
    one) pass the check against the reference on every mask and layout."""
    case = bc.Case(128, mask, "bf16", 4, 2, small_shape)
    row = bench.run_case(case, bc.CONTENDERS, "cpu", preparers=_cpu_preparers(), n_sets=2, fixed_reps=2, warmup=1)
    c = row["contenders"]
    assert c["tsattn"]["status"] == "ok" and c["flex"]["status"] == "ok", row
    assert c["flex"]["check"]["mismatches"] == 0
    if bc.static_na("cudnn", case) is None and not case.shape.packed:
        assert c["cudnn"]["status"] == "ok", c["cudnn"]
        if small_shape == "t-chunk" and mask == "causal":
            assert "explicit bottom-right" in c["cudnn"]["via"]
        assert c["cudnn"]["notes"] == ["K/V expanded 2->4 heads before timing"]
    else:
        assert c["cudnn"]["status"].startswith("n/a")
    assert c["fa2"]["status"].startswith("n/a")
    for name in ("tsattn", "flex"):
        e = c[name]
        assert e["reps"] == 2 and e["ms"] > 0 and e["tflops"] == pytest.approx(row["flops"] / e["ms"] / 1e9)
        assert "first_call_ms" in e
    assert set(row["ratios"]) >= {"flex"}
    assert c["flex"]["gqa"].startswith("native") and c["cudnn"]["gqa"].startswith("K/V expanded")


def test_prepared_and_checked_calls_for_tools_outside_the_harness(small, monkeypatch, capsys):
    """power_probe.py and profile_compare.py time checked calls; time_unchecked.py the same calls
    without the check (bounds that are wrong by design)."""
    case = bc.Case(128, "causal", "bf16", 4, 2, "t-sq")
    data = case_data.make_case_data(case, "cpu", 2)
    ref = case_data.reference(case, *data.sets[0], data.bounds)

    def zeros(d):
        return [ct.Prepared(lambda i: torch.zeros_like(d.sets[i][0]), "zeros")]

    monkeypatch.setattr(ct, "PREPARERS", _cpu_preparers(cudnn=zeros))
    right = ct.prepared_call(case, data, "tsattn")
    assert torch.equal(right(1), case_data.reference(case, *data.sets[1], data.bounds).to(torch.bfloat16))
    assert ct.prepared_call(case, data, "fa2") == "n/a: FA2 needs CUDA"
    assert ct.prepared_call(case, data, "cudnn")(0).abs().max() == 0  # unchecked: zeros come back

    call, wrong = ct.checked_call(case, data, ref, "tsattn")
    assert call is not None and not wrong
    assert ct.checked_call(case, data, ref, "cudnn") == (None, True)
    assert ct.checked_call(case, data, ref, "fa2") == (None, False)
    printed = capsys.readouterr().out
    assert "cudnn: WRONG" in printed and "fa2: n/a: FA2 needs CUDA" in printed


def test_run_case_reports_wrong_failing_and_unexpressible_contenders(small):
    case = bc.Case(128, "causal", "bf16", 4, 2, "t-sq")
    calls = []

    def wrong(d):
        return [ct.Prepared(lambda i: torch.zeros_like(d.sets[i][0]), "zeros")]

    def broken(d):
        def call(i):
            raise RuntimeError("kernel exploded")

        return [ct.Prepared(call, "broken")]

    def refused_then_ok(d):
        def refuse(i):
            raise RuntimeError("No available kernel. Aborting execution.")

        def ok(i):
            calls.append(i)
            return case_data.reference(d.case, *d.sets[i], d.bounds)

        return [
            ct.Prepared(refuse, "first path", na_if_error=("No available kernel",), na_prefix="refused"),
            ct.Prepared(ok, "second path"),
        ]

    def setup_fails(d):
        raise ValueError("cannot set up")

    prep = _cpu_preparers(tsattn=wrong, cudnn=broken, fa2=refused_then_ok, flex=setup_fails)
    row = bench.run_case(case, bc.CONTENDERS, "cpu", preparers=prep, n_sets=2, fixed_reps=3, warmup=1)
    c = row["contenders"]
    assert c["tsattn"]["status"].startswith("WRONG") and "ms" not in c["tsattn"]  # a wrong answer gets no time
    assert c["cudnn"]["status"].startswith("error: broken: RuntimeError: kernel exploded")
    assert c["fa2"]["status"] == "ok" and c["fa2"]["via"] == "second path" and len(calls) >= 1 + 1 + 3
    assert c["fa2"]["failed_paths"][0].startswith("first path: RuntimeError: No available kernel")
    assert c["flex"]["status"] == "error: setup: ValueError: cannot set up"
    assert row["ratios"] == {}

    only_refused = _cpu_preparers(cudnn=lambda d: refused_then_ok(d)[:1])
    row = bench.run_case(case, ["cudnn"], "cpu", preparers=only_refused, n_sets=2, fixed_reps=1, warmup=0)
    assert row["contenders"]["cudnn"]["status"].startswith("n/a: refused: RuntimeError: No available kernel")


def test_subprocess_scripts_compile():
    compile(jit_figures.FIRST_CALL_SCRIPT, "first_call", "exec")
    compile(ct.CUDNN_VARLEN_PROBE, "cudnn_varlen_probe", "exec")


def test_time_stats():
    s = timing.time_stats([5.0, 1.0, 2.0, 3.0, 4.0])
    assert s["ms"] == 3.0 and s["ms_min"] == 1.0 and s["reps"] == 5 and s["ms_mean"] == 3.0
    assert s["ms_p10"] == 1.0 and s["ms_p90"] == 5.0


def test_parse_smi():
    rows = run_metadata.parse_smi(
        run_metadata.SMI_FULL, "0, NVIDIA H200, 580.95.05, 1980, 3201, 1980, 3201, 41, 118.52\n"
    )
    assert rows[0]["clocks.sm"] == 1980 and rows[0]["name"] == "NVIDIA H200" and rows[0]["power.draw"] == 118.52
    assert rows[0]["driver_version"] == "580.95.05"
    assert run_metadata.parse_smi(run_metadata.SMI_BASIC, "1755, 3201\n1980, 3201\n")[1]["clocks.sm"] == 1980


def _run_bench(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    return subprocess.run(
        [sys.executable, str(REPO / "tools" / "bench" / "bench.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_command_line_list_and_selection(capsys):
    res = _run_bench("--list", "--cases", "d128-dense-bf16-h32kv8-b1-s8k")  # the script itself, standalone
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("d128-dense-bf16-h32kv8-b1-s8k") and "estimate" in res.stdout

    def run(*argv):
        rc = bench.main(list(argv))
        out = capsys.readouterr()
        return rc, out.out, out.err

    rc, out, _ = run("--list")
    lines = out.strip().splitlines()
    assert rc == 0 and len(lines) == len(bc.default_cases()) + 1 and "estimate" in lines[-1]
    assert lines[0].startswith("d128-dense-bf16-h32kv8-b1-s8k")
    rc, out, err = run("--list", "--cases", "d256-vwin-*-h16kv4-chunk*,nomatch*", "--contenders", "tsattn,flex")
    assert rc == 0
    listed = [ln.split()[0] for ln in out.strip().splitlines()[:-1]]
    assert listed == [
        "d256-vwin-bf16-h16kv4-chunk-q256-k4k",
        "d256-vwin-fp16-h16kv4-chunk-q256-k4k",
        "d256-vwin-fp8-h16kv4-chunk-q256-k4k",
    ]
    assert "n/a: flex" in out.splitlines()[2] and "cudnn" not in out
    assert "'nomatch*' matches no case" in err
    rc, out, _ = run("--list", "--quick", "--skip-cases", "*ragged16")
    assert rc == 0 and len(out.strip().splitlines()) == len(bc.quick_cases())
    rc, out, _ = run("--list", "--cases", "nothing")
    assert rc == 2
    for bad in (["--contenders", "tsattn,nope", "--list"], ["--quick", "--full"]):
        with pytest.raises(SystemExit) as e:
            bench.main(bad)
        assert e.value.code == 2
    capsys.readouterr()


def test_select_cases_semantics():
    args = bench.build_parser().parse_args(["--cases", "d128-causal-bf16-h32kv8-b1-s8k"])
    assert [c.name for c in bench.select_cases(args)[0]] == ["d128-causal-bf16-h32kv8-b1-s8k"]
    args = bench.build_parser().parse_args(["--quick", "--cases", "*fp8*"])
    assert [c.name for c in bench.select_cases(args)[0]] == ["d128-causal-fp8-h32kv8-b1-s8k"]
    args = bench.build_parser().parse_args([])
    assert bench.select_cases(args)[0] == bc.default_cases()
    assert len(bench.select_cases(bench.build_parser().parse_args(["--full"]))[0]) == 2400
    serving = bench.select_cases(bench.build_parser().parse_args(["--serving"]))[0]
    assert serving == bc.serving_cases() and len(serving) == len(set(serving)) == 144
    args = bench.build_parser().parse_args(["--out", "x", "--quick"])  # tools/dev/gpu_check.sh's command line
    assert args.quick and args.out == "x" and bench.select_cases(args)[0] == bc.quick_cases()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU exit")
def test_without_a_gpu_the_run_exits_2_and_writes_nothing(tmp_path):
    res = _run_bench("--quick", "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and "no CUDA device" in res.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the failure path of the subprocess figure")
def test_first_call_subprocess_failure_is_a_result(tmp_path):
    res = jit_figures._run_first_call(str(tmp_path), disable_jit=True, timeout=120)
    assert res["status"].startswith("error: rc=")


def test_cold_compile_figure():
    try:
        import tsattn

        tsattn.library_version()
    except RuntimeError as e:
        pytest.skip(f"skipped: libtsattn not found ({e})")
    rows = jit_figures.jit_cold_compile(jit_figures.JIT_SPECS[:1], families=("nosuch", "sm80"), arch="sm_90a")
    assert rows[0]["status"].startswith("n/a") and len(rows) == 2
    assert rows[1]["status"] == "ok", rows[1]
    assert rows[1]["result"] == {"compiled": 1, "cached": 0, "failed": 0} and rows[1]["seconds"] > 0
    json.dumps(rows)


def _cpu_runner(preparers):
    def runner(case, contenders, device, **kw):
        kw.update(n_sets=2, fixed_reps=2, warmup=1)
        return bench.run_case(case, contenders, device, preparers=preparers, **kw)

    return runner


def _doc(cases, contenders):
    return {
        "schema": 1,
        "meta": {"gpu": "cpu (test)", "versions": {}},
        "cases": [],
        "jit": {},
        "run": {"selected": [c.name for c in cases], "contenders": contenders, "skipped": []},
    }


def test_run_cases_writes_results_after_every_case_and_honours_the_budget(small, tmp_path, capsys):
    cases = [bc.Case(128, m, "bf16", 4, 2, "t-sq") for m in ("dense", "causal", "vwin")]
    contenders = ["tsattn", "flex"]
    args = bench.build_parser().parse_args(["--no-jit", "--no-smi", "--budget-s", "1e9", "--no-plots"])
    doc = _doc(cases, contenders)
    written = []

    def runner(case, *a, **kw):
        row = _cpu_runner(_cpu_preparers())(case, *a, **kw)
        written.append(
            json.loads((tmp_path / "bench.json").read_text())["cases"]
            if written or (tmp_path / "bench.json").exists()
            else []
        )
        return row

    t0 = bench.time.perf_counter()
    assert bench.run_cases(doc, cases, contenders, "cpu", args, tmp_path, t0, runner=runner) == 0
    assert [len(w) for w in written] == [0, 1, 2]  # the file is rewritten after every case
    assert bench.finish_run(doc, args, tmp_path, t0, 0) == 0
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert [r["name"] for r in saved["cases"]] == [c.name for c in cases]
    assert all(r["contenders"]["tsattn"]["status"] == "ok" for r in saved["cases"])
    assert {(s["head_dim"], s["mask"], s["layout"]) for s in saved["summary"]} == {
        (128, "dense", "fixed"),
        (128, "causal", "fixed"),
        (128, "vwin", "fixed"),
    }
    assert (tmp_path / "bench.md").read_text().count("| d128-") >= 3
    assert "geometric mean" in capsys.readouterr().out

    # a budget already spent: every case is recorded as skipped, none silently dropped
    args.budget_s = 1e-9
    doc = _doc(cases, contenders)
    assert bench.run_cases(doc, cases, contenders, "cpu", args, tmp_path, t0, runner=runner) == 0
    assert doc["run"]["skipped"] == [c.name for c in cases]
    assert all(e["status"].startswith("skipped: time budget") for r in doc["cases"] for e in r["contenders"].values())


def test_run_cases_survives_harness_errors_and_stops_on_a_lost_context(small, tmp_path, capsys):
    cases = [bc.Case(128, m, "bf16", 4, 2, "t-sq") for m in ("dense", "causal", "win1k", "vwin")]
    contenders = ["tsattn", "cudnn"]
    args = bench.build_parser().parse_args(["--no-jit", "--no-smi", "--budget-s", "0", "--no-plots"])
    seen = []

    def runner(case, *a, **kw):
        seen.append(case.mask)
        if case.mask == "causal":
            raise KeyError("harness bug")
        if case.mask == "win1k":
            raise failures.ContextLost("illegal memory access")
        return _cpu_runner(
            _cpu_preparers(tsattn=lambda d: [ct.Prepared(lambda i: torch.zeros_like(d.sets[i][0]), "wrong")])
        )(case, *a, **kw)

    doc = _doc(cases, contenders)
    t0 = bench.time.perf_counter()
    rc = bench.run_cases(doc, cases, contenders, "cpu", args, tmp_path, t0, runner=runner)
    assert rc == 3 and seen == ["dense", "causal", "win1k"]
    rows = {r["name"]: r for r in doc["cases"]}
    assert len(rows) == 4
    assert rows[cases[0].name]["contenders"]["tsattn"]["status"].startswith("WRONG")
    assert rows[cases[1].name]["contenders"]["cudnn"]["status"] == "error: harness: KeyError: 'harness bug'"
    assert "traceback" in rows[cases[1].name]
    assert rows[cases[2].name]["contenders"]["tsattn"]["status"] == "skipped: CUDA context lost earlier"
    assert doc["run"]["skipped"] == [cases[2].name, cases[3].name]
    assert "illegal memory access" in doc["run"]["aborted"]
    assert bench.finish_run(doc, args, tmp_path, t0, rc) == 3
    doc2 = _doc(cases[:1], contenders)
    bench.run_cases(doc2, cases[:1], contenders, "cpu", args, tmp_path, t0, runner=runner)
    assert bench.finish_run(doc2, args, tmp_path, t0, 0) == 1  # tsattn WRONG: the run says so
    md = (tmp_path / "bench.md").read_text()
    assert "WRONG [" in md
    capsys.readouterr()
