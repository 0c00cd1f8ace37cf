"""tools/bench/bench_report.py from a synthetic results file: geometric means, the Markdown tables and
footnotes, the README/PERF sections, marker replacement, plots (when matplotlib is installed) and
the command line. No GPU."""

import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import bench_cases as bc  # noqa: E402
import bench_report as br  # noqa: E402

# tsattn / cuDNN / FA2 / Flex TFLOP/s per case (None: not run; strings: the status)
FIGURES = {
    "d128-dense-bf16-h32kv8-b1-s1k": (200, 400, 250, 300),
    "d128-dense-bf16-h32kv8-b1-s8k": (330, 600, 330, 480),
    "d128-dense-bf16-h32kv8-b1-s16k": (340, 620, 335, 490),
    "d128-causal-bf16-h32kv8-b1-s8k": (310, 520, 290, 390),
    "d128-causal-bf16-h32kv8-b1-s16k": (320, 530, 300, 400),
    "d128-causal-bf16-h32kv8-chunk-q256-k4k": (
        100,
        "n/a: torch SDPA's cuDNN backend refused this case: RuntimeError: No available kernel",
        80,
        50,
    ),
    "d128-causal-bf16-h32kv8-ragged16": (300, "WRONG: relative norm error 0.5 > 0.02", 280, 260),
    "d128-causal-fp8-h32kv8-b1-s8k": (
        450,
        "n/a: torch SDPA takes no fp8 inputs",
        "n/a: FA2 takes no fp8 inputs",
        "n/a: FlexAttention takes no fp8 inputs",
    ),
    "d128-win1k-bf16-h32kv8-b1-s8k": (250, "n/a: torch SDPA has no sliding window", 200, 270),
    "d256-vwin-bf16-h32kv8-b1-s8k": (
        "error: RuntimeError: launch failed",
        "n/a: torch SDPA has no per-row window",
        "n/a: FA2 has no per-row window",
        300,
    ),
    "d256-causal-bf16-h16kv4-b1-s8k": (300, 630, 290, "error: setup: OutOfMemoryError: CUDA out of memory"),
}


def _entry(fig, flops):
    if isinstance(fig, str):
        return {"status": fig}
    ms = flops / fig / 1e9
    return {"status": "ok", "ms": ms, "tflops": fig, "reps": 30, "first_call_ms": 12.5, "via": "synthetic call"}


def synthetic_doc(skipped=("d256-dense-bf16-h32kv8-b1-s2k",)):
    cases = []
    for name, figs in FIGURES.items():
        case = bc.parse_name(name)
        fl = bc.flops(case)
        row = {
            "name": name,
            "params": case.params(),
            "flops": fl,
            "contenders": {n: _entry(f, fl) for n, f in zip(bc.CONTENDERS, figs)},
            "clocks": [{"clocks.sm": 1980, "clocks.mem": 3201}],
        }
        row["contenders"]["tsattn"]["tsattn_cache"] = {"compiles": 1} if name.endswith("s1k") else {}
        cases.append(row)
    for name in skipped:
        c = bc.parse_name(name)
        cases.append(
            {
                "name": name,
                "params": c.params(),
                "flops": bc.flops(c),
                "contenders": {n: {"status": "skipped: time budget (--budget-s 540) spent"} for n in bc.CONTENDERS},
            }
        )
    return {
        "schema": 1,
        "meta": {
            "gpu": "NVIDIA H200",
            "sm_count": 132,
            "started": "2026-12-01T10:00:00+00:00",
            "versions": {
                "torch": "2.11.0+cu130",
                "cuda": "13.0",
                "cudnn": 91900,
                "triton": "3.5.0",
                "tsattn": "0.1.0",
                "tsattn_library": "0.1.0",
            },
            "clocks_before": [
                {"clocks.sm": 1755, "clocks.mem": 3201, "clocks.max.sm": 1980, "driver_version": "580.95.05"}
            ],
            "clocks_after": [{"clocks.sm": 1980, "clocks.mem": 3201}],
            "method": {
                "timer": "CUDA events",
                "warmup": 5,
                "reps": "auto",
                "rotation": "rotated",
                "inputs": "0.2*randn",
                "check": "checked",
                "first_call": "apart",
                "flops": "docs/contract.md",
            },
        },
        "cases": cases,
        "jit": {
            "cold_compile": [
                {
                    "family": "sm90a",
                    "arch": "sm_90a",
                    "head_dim": 128,
                    "input_dtype": "bf16",
                    "output_dtype": "bf16",
                    "mask": "causal",
                    "layout": "fixed",
                    "status": "n/a: kernel family sm90a is not in this build",
                },
                {
                    "family": "sm80",
                    "arch": "sm_90a",
                    "head_dim": 128,
                    "input_dtype": "bf16",
                    "output_dtype": "bf16",
                    "mask": "causal",
                    "layout": "fixed",
                    "status": "ok",
                    "seconds": 0.84,
                },
            ],
            "first_call": {
                "problem": "B=1 S=1024",
                "cold": {"status": "ok", "first_call_ms": 910.0},
                "warm": [
                    {
                        "status": "ok",
                        "first_call_ms": 1.5,
                        "library_load_ms": 3.0,
                        "second_call_ms": 0.09,
                        "cache": {"disk_writable_hits": 1, "compiles": 0},
                    },
                    {"status": "error: rc=1: boom"},
                ],
            },
            "host_cost": {
                "problem": "tiny",
                "calls": 2000,
                "variants": {
                    "tsattn fixed layout (allocates out)": {
                        "status": "ok",
                        "us_median": 4.2,
                        "us_p10": 4.0,
                        "us_p90": 5.1,
                    },
                    "torch SDPA flash backend": {"status": "error: RuntimeError: x"},
                },
            },
        },
        "run": {"skipped": list(skipped), "budget_s": 540},
    }


def test_ratios_and_geometric_means():
    doc = synthetic_doc()
    row = doc["cases"][1]
    r = br.ratios(row)
    assert r == pytest.approx({"cudnn": 330 / 600, "fa2": 1.0, "flex": 330 / 480})
    assert br.ratios(doc["cases"][-1]) == {} and br.ratios(doc["cases"][9]) == {}  # skipped; tsattn error
    summary = {(s["head_dim"], s["mask"], s["layout"]): s for s in br.summarize(doc)}
    dense = summary[(128, "dense", "fixed")]["vs"]
    assert dense["cudnn"]["n"] == 3
    assert dense["cudnn"]["geomean"] == pytest.approx((200 / 400 * 330 / 600 * 340 / 620) ** (1 / 3))
    causal = summary[(128, "causal", "fixed")]["vs"]
    # chunk: cuDNN n/a; fp8: baselines n/a -> cuDNN over the two sweep cases only; the packed
    # ragged16 case has a row of its own, where cuDNN was WRONG
    assert causal["cudnn"]["n"] == 2 and causal["fa2"]["n"] == 3 and causal["flex"]["n"] == 3
    assert causal["fa2"]["geomean"] == pytest.approx(
        math.exp(sum(math.log(x) for x in (310 / 290, 320 / 300, 100 / 80)) / 3)
    )
    packed = summary[(128, "causal", "packed")]["vs"]
    assert packed["cudnn"]["n"] == 0 and packed["fa2"]["geomean"] == pytest.approx(300 / 280)
    assert summary[(256, "vwin", "fixed")]["vs"]["flex"] == {"geomean": None, "n": 0, "cases": []}
    d256_causal = summary[(256, "causal", "fixed")]["vs"]
    assert d256_causal["flex"]["n"] == 0 and d256_causal["cudnn"]["n"] == 1
    order = [(s["head_dim"], s["mask"], s["layout"]) for s in br.summarize(doc)]
    assert order == [
        (128, "dense", "fixed"),
        (128, "causal", "fixed"),
        (128, "causal", "packed"),
        (128, "win1k", "fixed"),
        (256, "dense", "fixed"),
        (256, "causal", "fixed"),
        (256, "vwin", "fixed"),
    ]
    assert br.geomean([]) is None and br.geomean([4.0, 1.0]) == pytest.approx(2.0)
    text = br.render_summary_text(doc)
    assert "D128 dense  fixed " in text and "vs cuDNN SDPA" in text and "(n=3)" in text


def test_markdown_report_tables_and_footnotes():
    doc = synthetic_doc()
    md = br.render_report(doc, ["tflops-d128-dense-bf16-h32kv8.png"], prefix="perf/")
    assert md.startswith("# tsattn benchmark: NVIDIA H200")
    assert "| d128-dense-bf16-h32kv8-b1-s8k | 1099.5 |" in md
    assert "| 330 | 600 | 330 | 480 | 0.55 | 1.00 | 0.69 |" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| d128-causal-fp8-h32kv8-b1-s8k"))
    assert line.count("n/a [") == 3 and line.endswith("| n/a | n/a | n/a |")
    assert "torch SDPA takes no fp8 inputs" in md and "FA2 takes no fp8 inputs" in md
    ragged = next(ln for ln in md.splitlines() if ln.startswith("| d128-causal-bf16-h32kv8-ragged16"))
    assert "WRONG [" in ragged
    assert "d128-causal-bf16-h32kv8-ragged16: WRONG: relative norm error 0.5" in md
    assert "d256-vwin-bf16-h32kv8-b1-s8k: error: RuntimeError: launch failed" in md
    assert "| d256-dense-bf16-h32kv8-b1-s2k |" in md and "skipped" in md and "1 case(s) not run" in md
    assert "K/V expanded to Hq heads" in md and "GQA:" in md  # the GQA note
    assert "Clocks seen (nvidia-smi, MHz): SM 1755..1980" in md
    assert "driver 580.95.05" in md
    assert "![tflops-d128-dense-bf16-h32kv8](perf/tflops-d128-dense-bf16-h32kv8.png)" in md
    # JIT section
    assert "NVRTC compile of one kernel into an empty cache: sm80 sm_90a D128 bf16->bf16 causal fixed | 0.84 s" in md
    assert "kernel family sm90a is not in this build" in md
    assert "910.0 ms" in md and "1.50 ms (disk hits 1, compiles 0)" in md and "error: rc=1: boom" in md
    assert "median 4.2 us (p10 4.0, p90 5.1)" in md and "error: RuntimeError: x" in md
    assert "12.5 (1 JIT compile)" in md  # first-call table
    # the summary table: one row per (D, mask, layout)
    g = br.geomean([200 / 400, 330 / 600, 340 / 620])
    assert f"| 128 | dense | fixed | {g:.2f} (n=3) |" in md
    assert "| 256 | vwin | fixed | n/a | n/a | n/a |" in md
    assert "| 128 | causal | packed | n/a | 1.07 (n=1) | 1.15 (n=1) |" in md
    assert "# Serving batches" not in md  # no serving case in this run


def test_serving_section_compares_fixed_with_cudnn_and_packed_with_fixed():
    # (tsattn, cuDNN, FA2) TFLOP/s; cuDNN's packed calls cost as much as its first call (it plans again)
    figures = {
        "b32-s256": (400, 440, 300),
        "packed-b32-s256": (380, 2, 280),
        "ragged-b32-s256": (240, 1, 200),
        "b16-s512": (510, 500, 380),
        "packed-b16-s512": (500, 3, 370),
        "ragged-b16-s512": (470, 2, 350),
    }
    doc = synthetic_doc(skipped=())
    for shape, figs in figures.items():
        case = bc.parse_name(f"d128-dense-bf16-h32kv8-{shape}")
        fl = bc.flops(case)
        contenders = {n: _entry(f, fl) for n, f in zip(bc.CONTENDERS, figs + ("n/a: not run",))}
        for entry in contenders.values():
            if "ms" in entry:
                entry["first_call_ms"] = (1.2 if case.shape.packed else 5.0) * entry["ms"]
        doc["cases"].append({"name": case.name, "params": case.params(), "flops": fl, "contenders": contenders})
    lines = br.serving_lines(doc)
    assert lines[2] == "| d128-dense-bf16-h32kv8-b32-s256 | 400 | 0.91 | 0.95 | 0.60 | 1.20 |"
    assert lines[3] == "| d128-dense-bf16-h32kv8-b16-s512 | 510 | 1.02 | 0.98 | 0.92 | 1.34 |"
    text = "\n".join(lines)
    g = br.geomean([400 / 440, 510 / 500])
    assert f"geometric mean {g:.3f} over 2, minimum 0.91 (d128-dense-bf16-h32kv8-b32-s256), 1 at 1.0 or more" in text
    assert "every request S long, against tsattn's fixed figure: 0.95-0.98, 2 of 2 within 10%" in text
    assert "ragged lengths, against tsattn's fixed figure: 0.60-0.92, 1 of 2 within 10%" in text
    replanning = [ln for ln in lines if "as if it planned again at every call" in ln]
    assert (
        len(replanning) == 1
        and replanning[0].startswith("cuDNN SDPA on packed batches:")
        and "in 4 cases" in replanning[0]
    )
    md = br.render_report(doc, [])
    assert "# Serving batches" in md and lines[2] in md
    assert br.serving_lines(synthetic_doc()) == []


def test_clock_and_power_table():
    doc = synthetic_doc()
    assert br.gpu_state_table(doc) == [] and br.power_cap_line(doc) == ""  # no samples: no section
    assert "SM clock while timed" not in br.render_report(doc, [])
    dense = doc["cases"][1]["contenders"]
    capped = {"sw_power_cap": 1.0, "hw_slowdown": 0.0}
    dense["tsattn"]["gpu_state"] = {"sm_clock_mhz": 1650.0, "power_w": 690.0, "slowdown_share": capped}
    dense["cudnn"]["gpu_state"] = {"sm_clock_mhz": 1500.0, "power_w": 680.0, "slowdown_share": {"sw_power_cap": 0.5}}
    doc["cases"][6]["contenders"]["cudnn"]["gpu_state"] = dict(dense["cudnn"]["gpu_state"])  # WRONG: not shown
    doc["meta"]["gpu_limits"] = {"power_limit_w": 700.0, "max_sm_clock_mhz": 1980}
    md = br.render_report(doc, [])
    assert "## SM clock while timed" in md
    # 330 TFLOP/s over 132 SMs at 1650 MHz is 1515 FLOP per SM cycle; 600 at 1500 MHz is 3030
    assert "| d128-dense-bf16-h32kv8-b1-s8k | 1650 MHz, 1515 | 1500 MHz, 3030 | - | - |" in md
    ragged = next(ln for ln in br.gpu_state_table(doc) if ln.startswith("| d128-causal-bf16-h32kv8-ragged16"))
    assert ragged.endswith("| - | - | - | - |")
    assert "Tensor-core ceiling" not in md  # not measured in this run
    doc["ceiling"] = [
        {
            "dtype": "bf16",
            "n": 8192,
            "status": "ok",
            "tflops": 725.4,
            "gpu_state": {"sm_clock_mhz": 1605.0, "power_w": 631.0, "slowdown_share": capped},
        },
        {"dtype": "fp8", "n": 8192, "status": "error: RuntimeError: no fp8 GEMM"},
    ]
    assert (
        "Tensor-core ceiling in this run (cuBLAS 8192x8192x8192 GEMM, timed the same way; fp8: e4m3 in, bf16 out): "
        "bf16 725 TFLOP/s at 1605 MHz; fp8 error: RuntimeError: no fp8 GEMM."
    ) in br.render_report(doc, [])
    # the two timed runs (not the WRONG one): (1 + 0.5) / 2
    assert "The power limit of 700 W slowed the SM clock (NVML reason sw_power_cap) in 75% of the samples" in md
    assert "(mean over 2 timed runs)" in md


def test_readme_and_perf_sections():
    doc = synthetic_doc()
    readme = br.render_readme_section(doc)
    assert "docs/PERF.md" in readme and "NVIDIA H200" in readme and "| 128 | causal |" in readme
    head = [ln for ln in readme.splitlines() if ln.startswith("| d")]
    assert [ln.split()[1] for ln in head] == [
        "d128-dense-bf16-h32kv8-b1-s8k",
        "d128-causal-bf16-h32kv8-b1-s8k",
        "d128-win1k-bf16-h32kv8-b1-s8k",
        "d256-vwin-bf16-h32kv8-b1-s8k",
    ]
    perf = br.render_report(doc, [], level=3, title="H200 run")
    assert perf.startswith("### H200 run") and "#### All cases" in perf and "\n# " not in perf


def test_replace_between_markers():
    text = f"intro\n{br.BEGIN}\nold\nstuff\n{br.END}\nafter\n"
    out = br.replace_between_markers(text, "new table\n")
    assert out == f"intro\n{br.BEGIN}\nnew table\n{br.END}\nafter\n"
    assert br.replace_between_markers(out, "new table") == out  # idempotent
    for bad in ("no markers", f"{br.END}\n{br.BEGIN}", f"{br.BEGIN}{br.BEGIN}{br.END}"):
        with pytest.raises(ValueError):
            br.replace_between_markers(bad, "x")


def test_readme_has_the_markers():
    text = (REPO / "README.md").read_text()
    assert text.count(br.BEGIN) == 1 and text.count(br.END) == 1 and text.index(br.BEGIN) < text.index(br.END)


def test_plot_groups_need_two_lengths():
    groups = br.plot_groups(synthetic_doc())
    assert set(groups) == {(128, "dense", "bf16", 32, 8), (128, "causal", "bf16", 32, 8)}
    assert [r["params"]["seq_len"] for r in groups[(128, "dense", "bf16", 32, 8)]] == [1024, 8192, 16384]


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    files, msg = br.make_plots(synthetic_doc(), tmp_path)
    assert msg is None
    assert sorted(files) == ["tflops-d128-causal-bf16-h32kv8.png", "tflops-d128-dense-bf16-h32kv8.png"]
    for f in files:
        assert (tmp_path / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_without_matplotlib_say_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    files, msg = br.make_plots(synthetic_doc(), tmp_path)
    assert files == [] and "matplotlib unavailable" in msg


def test_command_line_regenerates_everything(tmp_path, capsys):
    results = tmp_path / "run" / "bench.json"
    results.parent.mkdir()
    results.write_text(json.dumps(synthetic_doc()))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Performance\n\n{br.BEGIN}\nplaceholder\n{br.END}\n")
    out = tmp_path / "report"
    assert br.main([str(results), "--out", str(out), "--readme", str(readme)]) == 0
    for name in ("bench.md", "perf_section.md", "readme_section.md"):
        assert (out / name).stat().st_size > 200
    text = readme.read_text()
    assert "placeholder" not in text and "docs/PERF.md" in text and text.startswith("# x\n")
    assert (out / "readme_section.md").read_text().strip() in text
    assert "geometric mean" in capsys.readouterr().out
    bad = tmp_path / "README2.md"
    bad.write_text("no markers\n")
    assert br.main([str(results), "--out", str(out), "--readme", str(bad), "--no-plots"]) == 2
    (tmp_path / "junk.json").write_text("{}")
    assert br.main([str(tmp_path / "junk.json")]) == 2
    assert br.main([str(tmp_path / "missing.json")]) == 2


def test_reports_from_an_empty_or_minimal_run(tmp_path):
    doc = {"schema": 1, "meta": {}, "cases": [], "jit": {}, "run": {"aborted": "CUDA context lost: x", "skipped": []}}
    doc["summary"] = br.summarize(doc)
    assert doc["summary"] == []
    md = br.render_report(doc, [])
    assert "Run aborted" in md and "Clocks: not recorded" in md
    info = br.write_all(doc, tmp_path, plots=True)
    assert info["plots"] == [] and "no plot" in info["plot_message"]
    assert (tmp_path / "readme_section.md").exists()
