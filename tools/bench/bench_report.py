#!/usr/bin/env python3
"""Reports from a tools/bench/bench.py results file (bench.json): bench.md, PNG plots, the section for
docs/PERF.md and README's performance section. Needs no GPU and no torch.

usage: tools/bench/bench_report.py RESULTS/bench.json [--out DIR] [--readme README.md] [--no-plots]
                             [--plots-prefix perf/]
  --out DIR          where bench.md, perf_section.md, readme_section.md and the plots go
                     (default: the directory of bench.json)
  --readme PATH      also rewrite PATH between <!-- perf:begin --> and <!-- perf:end -->
  --plots-prefix P   how perf_section.md links the plots (default "perf/": copy the PNGs to docs/perf/)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_cases as bc  # noqa: E402  (torch is imported there; no GPU needed)
from nvml_sampler import flop_per_sm_cycle  # noqa: E402

BEGIN, END = "<!-- perf:begin -->", "<!-- perf:end -->"
SHORT = {"tsattn": "tsattn", "cudnn": "cuDNN", "fa2": "FA2", "flex": "Flex"}
COLORS = {"tsattn": "#d62728", "cudnn": "#1f77b4", "fa2": "#2ca02c", "flex": "#ff7f0e"}
MARKERS = {"tsattn": "o", "cudnn": "s", "fa2": "^", "flex": "D"}


# ---------------------------------------------------------------- figures from rows


def _ok(entry: Optional[dict]) -> bool:
    return bool(entry) and entry.get("status") == "ok" and (entry.get("tflops") or 0) > 0


def ratios(row: dict) -> Dict[str, float]:
    """tsattn TFLOP/s over each baseline's, where both ran (= baseline time / tsattn time)."""
    c = row.get("contenders", {})
    t = c.get("tsattn")
    if not _ok(t):
        return {}
    return {name: t["tflops"] / e["tflops"] for name, e in c.items() if name != "tsattn" and _ok(e)}


def geomean(xs: Sequence[float]) -> Optional[float]:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def layout_of(row: dict) -> str:
    """The row's layout: "packed" (ragged, indptrs) or "fixed" ([B, S, H, D])."""
    return "packed" if row.get("params", {}).get("packed") else "fixed"


def summarize(doc: dict) -> List[dict]:
    """Per (head dim, mask, layout): the geometric mean of tsattn / baseline over the cases where
    both ran. The layouts stay apart: a baseline's packed entry point may cost per call what its
    fixed one does not (torch's cuDNN varlen, serving_lines)."""
    groups: Dict[Tuple[int, str, str], List[dict]] = {}
    for row in doc.get("cases", []):
        p = row.get("params", {})
        groups.setdefault((p.get("head_dim"), p.get("mask"), layout_of(row)), []).append(row)

    def order(key):
        d, m, layout = key
        return (d if isinstance(d, int) else 0, bc.MASKS.index(m) if m in bc.MASKS else 99, str(m), layout != "fixed")

    out = []
    for key in sorted(groups, key=order):
        rows = groups[key]
        vs = {}
        for base in bc.BASELINES:
            pairs = [(r["name"], ratios(r)[base]) for r in rows if base in ratios(r)]
            g = geomean([x for _, x in pairs])
            vs[base] = {"geomean": g, "n": len(pairs), "cases": [n for n, _ in pairs]}
        out.append({"head_dim": key[0], "mask": key[1], "layout": key[2], "cases": len(rows), "vs": vs})
    return out


def _fmt_ratio(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def console_line(row: dict) -> str:
    cells = []
    for name, e in row.get("contenders", {}).items():
        st = str(e.get("status", "?"))
        cells.append(f"{SHORT.get(name, name)} {e['tflops']:.0f}" if _ok(e) else f"{SHORT.get(name, name)} {st[:48]}")
    r = row.get("ratios") or ratios(row)
    tail = ", ".join(f"x{v:.2f} vs {SHORT.get(k, k)}" for k, v in r.items())
    secs = f" [{row['case_seconds']:.1f} s]" if isinstance(row.get("case_seconds"), (int, float)) else ""
    return f"{row['name']:40s} " + " | ".join(cells) + (f"  ({tail})" if tail else "") + secs


def render_summary_text(doc: dict) -> str:
    lines = ["geometric mean of tsattn / baseline TFLOP/s, per (head dim, mask, layout), over cases where both ran:"]
    for s in doc.get("summary") or summarize(doc):
        parts = [f"vs {bc.LABELS.get(b, b)} {_fmt_ratio(v['geomean'])} (n={v['n']})" for b, v in s["vs"].items()]
        lines.append(f"  D{s['head_dim']} {s['mask']:6s} {s.get('layout', 'fixed'):6s}: " + ", ".join(parts))
    return "\n".join(lines)


# ---------------------------------------------------------------- markdown


class Notes:
    """Numbered footnotes for table cells that are not numbers (n/a reasons, WRONG, errors)."""

    def __init__(self):
        self.items: List[str] = []

    def ref(self, text: str) -> int:
        if text not in self.items:
            self.items.append(text)
        return self.items.index(text) + 1

    def render(self) -> List[str]:
        return [f"[{i}] {t}" + "  " for i, t in enumerate(self.items, 1)]


def _cell(entry: Optional[dict], notes: Notes, case_name: str) -> str:
    if not entry:
        return "-"
    st = str(entry.get("status", "?"))
    if _ok(entry):
        return f"{entry['tflops']:.0f}"
    if st.startswith("n/a"):
        return f"n/a [{notes.ref(st[4:].strip() if st.startswith('n/a:') else st)}]"
    if st.startswith("skipped"):
        return "skipped"
    kind = "WRONG" if st.startswith("WRONG") else "error"
    return f"{kind} [{notes.ref(f'{case_name}: {st}')}]"


def _env_line(doc: dict) -> str:
    m = doc.get("meta", {})
    v = m.get("versions", {})
    parts = [
        f"{m.get('gpu', 'unknown GPU')}" + (f" ({m['sm_count']} SMs)" if m.get("sm_count") else ""),
        f"torch {v.get('torch')} (CUDA {v.get('cuda')}, cuDNN {v.get('cudnn')})",
        f"triton {v.get('triton')}",
        f"tsattn {v.get('tsattn')} (library {v.get('tsattn_library')})",
    ]
    smi = (m.get("clocks_before") or [{}])[0]
    if smi.get("driver_version"):
        parts.append(f"driver {smi['driver_version']}")
    return "; ".join(parts)


def clocks_line(doc: dict) -> str:
    m = doc.get("meta", {})
    seen_sm, seen_mem = [], []
    for sample in [m.get("clocks_before")] + [r.get("clocks") for r in doc.get("cases", [])] + [m.get("clocks_after")]:
        if sample:
            s = sample[0]
            if isinstance(s.get("clocks.sm"), (int, float)):
                seen_sm.append(s["clocks.sm"])
            if isinstance(s.get("clocks.mem"), (int, float)):
                seen_mem.append(s["clocks.mem"])
    if not seen_sm:
        return "Clocks: not recorded (no nvidia-smi)."
    b = (m.get("clocks_before") or [{}])[0]
    a = (m.get("clocks_after") or [{}])[0]
    text = (
        f"Clocks seen (nvidia-smi, MHz): SM {min(seen_sm):.0f}..{max(seen_sm):.0f}, memory "
        f"{min(seen_mem):.0f}..{max(seen_mem):.0f} over {len(seen_sm)} samples "
        f"(before: SM {b.get('clocks.sm')}, after: SM {a.get('clocks.sm')}"
    )
    if b.get("clocks.max.sm"):
        text += f"; max SM {b['clocks.max.sm']}"
    return text + ")."


def ceiling_line(doc: dict) -> str:
    """The cuBLAS GEMM ceiling measured in the same run (tools/bench/gemm_ceiling.py), or ""."""
    parts = []
    for g in doc.get("ceiling") or []:
        if g.get("status") != "ok":
            parts.append(f"{g['dtype']} {g.get('status')}")
            continue
        state = g.get("gpu_state")
        where = f" at {state['sm_clock_mhz']:.0f} MHz" if state else ""
        parts.append(f"{g['dtype']} {g['tflops']:.0f} TFLOP/s{where}")
    if not parts:
        return ""
    n = doc["ceiling"][0]["n"]
    return (
        f"Tensor-core ceiling in this run (cuBLAS {n}x{n}x{n} GEMM, timed the same way; fp8: e4m3 in, "
        f"bf16 out): " + "; ".join(parts) + "."
    )


def gpu_state_table(doc: dict) -> List[str]:
    """Per case and contender, while its calls were timed: the median SM clock (MHz) and the work per
    SM cycle (FLOP per SM per clock cycle, TFLOP/s / (SMs x clock)). Empty without samples. Board
    power is left out: NVML averages it over a window longer than most timed runs here."""
    sms = doc.get("meta", {}).get("sm_count")
    names = list(bc.CONTENDERS)
    lines = ["| case | " + " | ".join(bc.LABELS[n] for n in names) + " |", "|" + "---|" * (1 + len(names))]
    any_row = False
    for r in doc.get("cases", []):
        cells = []
        for n in names:
            e = r.get("contenders", {}).get(n) or {}
            g = e.get("gpu_state")
            if not (_ok(e) and g and sms):
                cells.append("-")
                continue
            per_cycle = flop_per_sm_cycle(e["tflops"], sms, g["sm_clock_mhz"])
            cells.append(f"{g['sm_clock_mhz']:.0f} MHz, {per_cycle:.0f}")
            any_row = True
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return lines if any_row else []


def power_cap_line(doc: dict) -> str:
    """How often the power limit held the clock down while contenders were timed."""
    shares = [
        e["gpu_state"]["slowdown_share"].get("sw_power_cap", 0.0)
        for r in doc.get("cases", [])
        for e in r.get("contenders", {}).values()
        if _ok(e) and e.get("gpu_state")
    ]
    if not shares:
        return ""
    limits = doc.get("meta", {}).get("gpu_limits") or {}
    limit = f" of {limits['power_limit_w']:.0f} W" if limits.get("power_limit_w") else ""
    return (
        f"The power limit{limit} slowed the SM clock (NVML reason sw_power_cap) in "
        f"{100 * sum(shares) / len(shares):.0f}% of the samples taken while contenders were timed "
        f"(mean over {len(shares)} timed runs)."
    )


def _method_lines(doc: dict) -> List[str]:
    m = doc.get("meta", {}).get("method", {})
    if not m:
        return []
    return [
        f"Method: {m.get('timer')}; warm-up {m.get('warmup')} calls, repetitions {m.get('reps')}; "
        f"{m.get('rotation')}; inputs {m.get('inputs')}. {m.get('check')}. {m.get('first_call')}. "
        f"TFLOP/s: {m.get('flops')}."
    ]


def _heads(p: dict) -> str:
    return f"{p.get('hq')}/{p.get('hkv')}"


def summary_table(doc: dict) -> List[str]:
    lines = [
        "| head dim | mask | layout | tsattn / cuDNN SDPA | tsattn / FA2 | tsattn / FlexAttention |",
        "|---|---|---|---|---|---|",
    ]
    for s in doc.get("summary") or summarize(doc):
        cells = [
            f"{_fmt_ratio(s['vs'][b]['geomean'])} (n={s['vs'][b]['n']})" if s["vs"][b]["n"] else "n/a"
            for b in bc.BASELINES
        ]
        lines.append(f"| {s['head_dim']} | {s['mask']} | {s.get('layout', 'fixed')} | " + " | ".join(cells) + " |")
    return lines


def _tflops(row: Optional[dict], contender: str) -> Optional[float]:
    e = (row or {}).get("contenders", {}).get(contender)
    return e["tflops"] if _ok(e) else None


def _ratio_cell(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def serving_lines(doc: dict) -> List[str]:
    """The serving batches (--serving) in the figures they are judged by: each fixed batch's tsattn /
    cuDNN, and tsattn's packed twins against its own fixed figure (packed-*: every request S long, the
    layout's cost; ragged-*: lengths drawn around S, the cost of partly filled tiles too). Empty
    without serving cases. A baseline whose packed calls cost about what its first call did (median
    time at least half the first call's, and over 5 ms) is named: its packed ratios say nothing about
    kernels."""
    by_name = {r["name"]: r for r in doc.get("cases", [])}
    fixed = [
        r
        for r in doc.get("cases", [])
        if r.get("params", {}).get("shape") in bc.SERVING_SHAPES and layout_of(r) == "fixed"
    ]
    if not fixed:
        return []
    lines = [
        "| batch (fixed) | tsattn TFLOP/s | tsattn / cuDNN | packed / fixed | ragged / fixed | ragged: tsattn / FA2 |",
        "|---|---|---|---|---|---|",
    ]
    vs_cudnn, packed_share, ragged_share = [], [], []
    for r in fixed:
        p = r["params"]
        twin = {
            prefix: by_name.get(
                bc.Case(p["head_dim"], p["mask"], p["dtype"], p["hq"], p["hkv"], prefix + p["shape"]).name
            )
            for prefix in ("packed-", "ragged-")
        }
        t, c = _tflops(r, "tsattn"), _tflops(r, "cudnn")
        tp, tr = _tflops(twin["packed-"], "tsattn"), _tflops(twin["ragged-"], "tsattn")
        if t and c:
            vs_cudnn.append((t / c, r["name"]))
        if t and tp:
            packed_share.append(tp / t)
        if t and tr:
            ragged_share.append(tr / t)
        lines.append(
            f"| {r['name']} | {t:.0f} | {_ratio_cell(t, c)} | {_ratio_cell(tp, t)} | {_ratio_cell(tr, t)} | "
            f"{_ratio_cell(tr, _tflops(twin['ragged-'], 'fa2'))} |"
            if t
            else f"| {r['name']} | - | - | - | - | - |"
        )
    lines.append("")
    if vs_cudnn:
        low, low_name = min(vs_cudnn)
        lines.append(
            f"Fixed batches against cuDNN SDPA: geometric mean {geomean([x for x, _ in vs_cudnn]):.3f} over "
            f"{len(vs_cudnn)}, minimum {low:.2f} ({low_name}), {sum(x >= 1.0 for x, _ in vs_cudnn)} at 1.0 or more."
        )
    for label, shares in (("every request S long", packed_share), ("ragged lengths", ragged_share)):
        if shares:
            lines.append(
                f"Packed, {label}, against tsattn's fixed figure: {min(shares):.2f}-{max(shares):.2f}, "
                f"{sum(x >= 0.9 for x in shares)} of {len(shares)} within 10%."
            )
    replanning = {}
    for r in doc.get("cases", []):
        if r.get("params", {}).get("shape") not in bc.SERVING_SHAPES or layout_of(r) != "packed":
            continue
        for name, e in r.get("contenders", {}).items():
            first = e.get("first_call_ms") if _ok(e) else None
            if first and e["ms"] > 5.0 and e["ms"] >= 0.5 * first:
                replanning.setdefault(name, []).append(e["ms"])
    for name, times in replanning.items():
        lines.append(
            f"{bc.LABELS.get(name, name)} on packed batches: {min(times):.1f}-{max(times):.1f} ms per call in "
            f"{len(times)} cases, at least half its first call's time each, as if it planned again at every call: "
            "its packed ratios measure that, not its kernel."
        )
    return lines


def cases_table(doc: dict, notes: Notes, rows: Optional[List[dict]] = None) -> List[str]:
    rows = doc.get("cases", []) if rows is None else rows
    names = list(bc.CONTENDERS)
    head = (
        "| case | GFLOP | tsattn ms | "
        + " | ".join(bc.LABELS[n] for n in names)
        + " | "
        + " | ".join(f"tsattn/{SHORT[n]}" for n in bc.BASELINES)
        + " |"
    )
    lines = [head, "|" + "---|" * (3 + len(names) + len(bc.BASELINES))]
    for r in rows:
        c = r.get("contenders", {})
        t = c.get("tsattn")
        ms = f"{t['ms']:.3f}" if _ok(t) else "-"
        rat = r.get("ratios") or ratios(r)
        lines.append(
            f"| {r['name']} | {r.get('flops', 0) / 1e9:.1f} | {ms} | "
            + " | ".join(_cell(c.get(n), notes, r["name"]) for n in names)
            + " | "
            + " | ".join(_fmt_ratio(rat.get(b)) for b in bc.BASELINES)
            + " |"
        )
    return lines


def first_call_table(doc: dict) -> List[str]:
    names = list(bc.CONTENDERS)
    lines = ["| case | " + " | ".join(bc.LABELS[n] for n in names) + " |", "|" + "---|" * (1 + len(names))]
    any_row = False
    for r in doc.get("cases", []):
        c = r.get("contenders", {})
        cells = []
        for n in names:
            e = c.get(n) or {}
            if "first_call_ms" in e:
                extra = ""
                if n == "tsattn" and e.get("tsattn_cache", {}).get("compiles"):
                    extra = f" ({e['tsattn_cache']['compiles']} JIT compile)"
                cells.append(f"{e['first_call_ms']:.1f}{extra}")
                any_row = True
            else:
                cells.append("-")
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return lines if any_row else []


def jit_table(doc: dict) -> List[str]:
    jit = doc.get("jit") or {}
    if not jit:
        return []
    lines = ["| what | figure |", "|---|---|"]
    cold = jit.get("cold_compile")
    if isinstance(cold, list):
        for r in cold:
            what = (
                f"NVRTC compile of one kernel into an empty cache: {r['family']} {r['arch']} D{r['head_dim']} "
                f"{r['input_dtype']}->{r['output_dtype']} {r['mask']} {r['layout']}"
            )
            fig = f"{r['seconds']:.2f} s" if r.get("status") == "ok" else r.get("status", "?")
            lines.append(f"| {what} | {fig} |")
    elif isinstance(cold, dict):
        lines.append(f"| NVRTC compile | {cold.get('status')} |")
    fc = jit.get("first_call")
    if isinstance(fc, dict):
        prob = fc.get("problem", "")
        c = fc.get("cold") or {}
        if c.get("status") == "ok":
            lines.append(
                f"| first call of a fresh process, empty cache (NVRTC compile + load + launch + run), {prob} | "
                f"{c['first_call_ms']:.1f} ms |"
            )
        elif c:
            lines.append(f"| first call of a fresh process, empty cache | {c.get('status')} |")
        elif fc.get("status"):
            lines.append(f"| first call of a fresh process | {fc.get('status')} |")
        warm = [w for w in fc.get("warm") or [] if w.get("status") == "ok"]
        if warm:
            firsts = ", ".join(f"{w['first_call_ms']:.2f}" for w in warm)
            hits = warm[0].get("cache", {})
            lines.append(
                f"| first call of a fresh process, kernel served from the disk cache (TSATTN_DISABLE_JIT=1; "
                f"library already loaded; find + load + launch + run), {prob} | {firsts} ms "
                f"(disk hits {hits.get('disk_writable_hits', '?')}, compiles {hits.get('compiles', '?')}) |"
            )
            lines.append(
                "| library load (dlopen + symbol binding) in that process | "
                + ", ".join(f"{w['library_load_ms']:.2f}" for w in warm)
                + " ms |"
            )
            lines.append(
                "| second call in that process (kernel loaded), incl. synchronize | "
                + ", ".join(f"{w['second_call_ms']:.3f}" for w in warm)
                + " ms |"
            )
        for w in fc.get("warm") or []:
            if w.get("status") != "ok":
                lines.append(f"| first call from the disk cache | {w.get('status')} |")
    hc = jit.get("host_cost")
    if isinstance(hc, dict):
        for name, v in (hc.get("variants") or {}).items():
            if v.get("status") == "ok":
                fig = f"median {v['us_median']:.1f} us (p10 {v['us_p10']:.1f}, p90 {v['us_p90']:.1f})"
            else:
                fig = v.get("status", "?")
            lines.append(f"| host cost per call, {name}; {hc.get('problem')}, {hc.get('calls')} calls | {fig} |")
        if hc.get("status"):
            lines.append(f"| host cost per call | {hc['status']} |")
    return lines


def _gqa_note() -> str:
    return "GQA: " + "; ".join(f"{bc.LABELS[n]}: {bc.gqa_handling(n)}" for n in bc.CONTENDERS) + "."


def _run_notes(doc: dict) -> List[str]:
    run = doc.get("run", {})
    out = []
    if run.get("aborted"):
        out.append(f"**Run aborted:** {run['aborted']}.")
    if run.get("skipped"):
        out.append(
            f"**{len(run['skipped'])} case(s) not run** (time budget or abort): {', '.join(run['skipped'][:12])}"
            + (" ..." if len(run["skipped"]) > 12 else "")
            + "."
        )
    return out


def _via_notes(doc: dict) -> List[str]:
    seen: Dict[str, List[str]] = {}
    for r in doc.get("cases", []):
        for n, e in r.get("contenders", {}).items():
            if e.get("via"):
                seen.setdefault(n, [])
                if e["via"] not in seen[n]:
                    seen[n].append(e["via"])
    return [f"- {bc.LABELS.get(n, n)}: " + "; ".join(v) for n, v in seen.items()]


def render_report(
    doc: dict, plot_files: Sequence[str], prefix: str = "", level: int = 1, title: Optional[str] = None
) -> str:
    h = "#" * level
    notes = Notes()
    m = doc.get("meta", {})
    lines = [f"{h} {title or 'tsattn benchmark: ' + str(m.get('gpu', 'unknown GPU'))}", ""]
    ceiling = ceiling_line(doc)
    lines += [f"Run {m.get('started', '?')}: {_env_line(doc)}.  ", clocks_line(doc) + ("  " if ceiling else "")]
    lines += ([ceiling] if ceiling else []) + [""]
    lines += _method_lines(doc) + [""]
    notes_run = _run_notes(doc)
    lines += notes_run + ([""] if notes_run else [])
    lines += [
        f"{h}# Geometric mean of tsattn / baseline, per head dim, mask and layout",
        "",
        "Over the cases where both ran (all shapes, dtypes and head counts of that head dim, mask and layout); "
        "above 1 means tsattn is faster.",
        "",
    ]
    lines += summary_table(doc) + [""]
    serving = serving_lines(doc)
    if serving:
        lines += [f"{h}# Serving batches", ""] + serving + [""]
    lines += [
        f"{h}# All cases: TFLOP/s (docs/contract.md: 4 * Hq * D * visible pairs / median time)",
        "",
        "Case names: d{D}-{mask}-{dtype}-h{Hq}kv{Hkv}-{shape}; masks dense, causal (bottom-right), "
        "win1k/win4k (causal + window_left 1024/4096), vwin (per-row windows of 512..4096 keys); "
        "fp8 = e4m3 in, bf16 out; shapes b1-sN (B=1, S=N), b4-s4k, chunk-q256-k4k (Sq=256 after 3840 cached "
        "tokens, Sk=4096), ragged16 (16 packed requests of 128..4096 tokens); serving batches bB-sS (fixed), "
        "packed-bB-sS (packed, every request S long) and ragged-bB-sS (packed, lengths drawn in [S/2, 3S/2] "
        "summing to B x S).",
        "",
    ]
    lines += cases_table(doc, notes) + [""]
    lines += [_gqa_note(), ""]
    if notes.items:
        lines += ["Cells that are not numbers:  "] + notes.render() + [""]
    via = _via_notes(doc)
    if via:
        lines += ["How each contender was called:"] + via + [""]
    jt = jit_table(doc)
    if jt:
        lines += [f"{h}# JIT and host costs", ""] + jt + [""]
    if plot_files:
        lines += [f"{h}# TFLOP/s vs sequence length (B=1)", ""]
        lines += [f"![{Path(f).stem}]({prefix}{Path(f).name})" for f in plot_files] + [""]
    gs = gpu_state_table(doc)
    if gs:
        lines += (
            [
                f"{h}# SM clock while timed",
                "",
                "NVML samples every 10 ms during each contender's timed calls (tools/bench/nvml_sampler.py): median SM "
                "clock, and work per SM cycle (FLOP / SM / cycle = TFLOP/s / (SMs x clock); the dense tensor-core "
                "peak is 4096 for bf16/fp16, 8192 for fp8). " + power_cap_line(doc) + " The timed runs here are "
                "~0.1 s bursts after idle gaps; run back to back for seconds, every kernel measured on the H200 "
                "held its power limit at a lower clock (tools/bench/power_probe.py, docs/PERF.md sm90a v7).",
                "",
            ]
            + gs
            + [""]
        )
    fc = first_call_table(doc)
    if fc:
        lines += (
            [
                f"{h}# First call per case (ms: JIT compile or kernel load, cuDNN plan and K/V expansion, torch.compile; not in the timings)",
                "",
            ]
            + fc
            + [""]
        )
    return "\n".join(lines).rstrip() + "\n"


def headline_rows(doc: dict) -> List[dict]:
    hq, hkv = bc.PRIMARY_HEADS
    return [
        r
        for r in doc.get("cases", [])
        if r.get("params", {}).get("shape") == "b1-s8k"
        and r["params"].get("dtype") == "bf16"
        and r["params"].get("hq") == hq
        and r["params"].get("hkv") == hkv
    ]


def render_readme_section(doc: dict) -> str:
    m = doc.get("meta", {})
    v = m.get("versions", {})
    notes = Notes()
    lines = [
        f"Measured on {m.get('gpu', '?')} ({str(m.get('started', '?'))[:10]}; torch {v.get('torch')}, "
        f"cuDNN {v.get('cudnn')}) by `tools/bench/bench.py`, every contender in the same run on the same inputs, "
        "each output checked against an fp32 reference before timing. TFLOP/s = 4 * Hq * D * visible pairs / "
        "median time (docs/contract.md). Method, every case, JIT costs and plots: "
        "[docs/PERF.md](docs/PERF.md).",
        "",
        "Geometric mean of tsattn's speed over each baseline's (above 1: tsattn faster), per head dim, mask and "
        "layout:",
        "",
    ]
    lines += summary_table(doc) + [""]
    head = headline_rows(doc)
    if head:
        lines += [f"B=1, S=8192, bf16, {bc.PRIMARY_HEADS[0]}/{bc.PRIMARY_HEADS[1]} heads, TFLOP/s:", ""]
        lines += cases_table(doc, notes, head) + [""]
        if notes.items:
            lines += notes.render() + [""]
    lines += _run_notes(doc)
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- plots


def plot_groups(doc: dict) -> Dict[Tuple, List[dict]]:
    """(D, mask, dtype, Hq, Hkv) -> B=1 square rows with a sequence length, for groups with >= 2 lengths."""
    groups: Dict[Tuple, List[dict]] = {}
    for r in doc.get("cases", []):
        p = r.get("params", {})
        if p.get("seq_len"):
            groups.setdefault((p["head_dim"], p["mask"], p["dtype"], p["hq"], p["hkv"]), []).append(r)
    return {
        k: sorted(v, key=lambda r: r["params"]["seq_len"])
        for k, v in groups.items()
        if len({r["params"]["seq_len"] for r in v}) >= 2
    }


def make_plots(doc: dict, out_dir: Path) -> Tuple[List[str], Optional[str]]:
    """PNG per (D, mask[, dtype, heads]): TFLOP/s vs S, one line per contender. ([files], message)."""
    groups = plot_groups(doc)
    if not groups:
        return [], "no plot: no (head dim, mask) group has two or more B=1 sequence lengths"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return [], f"plots skipped: matplotlib unavailable ({type(e).__name__}: {e})"
    out_dir.mkdir(parents=True, exist_ok=True)
    gpu = doc.get("meta", {}).get("gpu", "")
    files = []
    for (d, mask, dtype, hq, hkv), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1:]))):
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        drawn = False
        for name in bc.CONTENDERS:
            pts = [
                (r["params"]["seq_len"], r["contenders"][name]["tflops"])
                for r in rows
                if _ok(r.get("contenders", {}).get(name))
            ]
            if not pts:
                continue
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker=MARKERS.get(name, "o"), color=COLORS.get(name), label=bc.LABELS.get(name, name))
            drawn = True
        if not drawn:
            plt.close(fig)
            continue
        ax.set_xscale("log", base=2)
        xt = sorted({r["params"]["seq_len"] for r in rows})
        ax.set_xticks(xt)
        ax.set_xticklabels([f"{x // 1024}K" if x % 1024 == 0 else str(x) for x in xt])
        ax.set_xlabel("sequence length S (B=1)")
        ax.set_ylabel("TFLOP/s (4 * Hq * D * visible pairs / time)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.set_title(f"D{d} {mask} {dtype}, Hq/Hkv {hq}/{hkv}" + (f" - {gpu}" if gpu else ""), fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        name = f"tflops-d{d}-{mask}-{dtype}-h{hq}kv{hkv}.png"
        fig.savefig(out_dir / name)
        plt.close(fig)
        files.append(name)
    return files, None


# ---------------------------------------------------------------- files


def replace_between_markers(text: str, section: str, begin: str = BEGIN, end: str = END) -> str:
    """text with everything between the begin and end markers replaced by section (ValueError when
    the markers are missing, repeated or out of order)."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"expected one {begin} followed by one {end}")
    a = text.index(begin) + len(begin)
    b = text.index(end)
    return text[:a] + "\n" + section.rstrip() + "\n" + text[b:]


def write_all(doc: dict, out_dir: Path, plots: bool = True, plots_prefix: str = "perf/") -> dict:
    """bench.md, perf_section.md, readme_section.md (and the plots) under out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files, msg = ([], None)
    if plots:
        files, msg = make_plots(doc, out_dir)
        if msg:
            print(f"bench_report: {msg}")
    (out_dir / "bench.md").write_text(render_report(doc, files, prefix=""))
    m = doc.get("meta", {})
    title = (
        f"{m.get('gpu', 'GPU')} run, {str(m.get('started', '?'))[:10]}: tsattn {m.get('versions', {}).get('tsattn')}"
    )
    perf = render_report(doc, files, prefix=plots_prefix, level=3, title=title)
    if files:
        perf += f"\n(Plots: copy {', '.join(files)} from the run's output directory to docs/{plots_prefix}.)\n"
    (out_dir / "perf_section.md").write_text(perf)
    (out_dir / "readme_section.md").write_text(render_readme_section(doc))
    return {"plots": files, "plot_message": msg}


def load(path: Path) -> dict:
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or "cases" not in doc:
        raise ValueError(f"{path}: not a tools/bench/bench.py results file (no 'cases')")
    for row in doc["cases"]:
        row.setdefault("ratios", ratios(row))
    doc["summary"] = summarize(doc)
    return doc


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="bench.json from tools/bench/bench.py")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--readme", type=Path, default=None)
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--plots-prefix", default="perf/")
    args = p.parse_args(argv)
    try:
        doc = load(args.results)
    except (OSError, ValueError) as e:
        print(f"bench_report: {e}", file=sys.stderr)
        return 2
    out = args.out or args.results.parent
    info = write_all(doc, out, plots=not args.no_plots, plots_prefix=args.plots_prefix)
    print(
        f"bench_report: wrote {out}/bench.md, perf_section.md, readme_section.md"
        + (f", {len(info['plots'])} plot(s)" if info["plots"] else "")
    )
    if args.readme:
        try:
            text = args.readme.read_text()
            args.readme.write_text(replace_between_markers(text, render_readme_section(doc)))
        except (OSError, ValueError) as e:
            print(f"bench_report: {args.readme}: {e}", file=sys.stderr)
            return 2
        print(f"bench_report: updated {args.readme} between {BEGIN} and {END}")
    print(render_summary_text(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
