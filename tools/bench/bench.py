#!/usr/bin/env python3
"""tsattn against the strongest baselines on the same GPU, the same inputs, in the same run.

Contenders: tsattn; PyTorch SDPA with the cuDNN backend; PyTorch's flash kernel (FA2, called as
aten._flash_attention_forward, the op behind SDPA's flash backend, which also takes windows,
bottom-right causal masks and cu_seqlens; torch.nn.attention.varlen.varlen_attn for ragged
batches where torch has it); FlexAttention (torch.compile'd, block masks). A contender that cannot
express a case says "n/a: reason" in the results, never disappears. GQA: cuDNN gets K/V expanded
to Hq heads before timing; FA2, FlexAttention and tsattn take GQA natively.

Method: inputs 0.2*randn (0.125 for fp8), several input sets rotated so that the data touched by a
call is not in L2 (sets together > 2x the 60 MB L2 of an H200); every contender's output is checked
against an fp32 torch reference (docs/contract.md's tolerances: rtol/atol per element and the relative norm)
before it is timed: a wrong answer is reported WRONG, with no time. Timing: the first call (JIT
compile, cuDNN plan, torch.compile) is reported separately, then warm-up calls, then per-call CUDA
events around each call, queued behind a GPU sleep so host overhead does not leak into the figures;
the median is reported. TFLOP/s follow docs/contract.md: 4 * Hq * D * visible (i, j) pairs / median time.
JIT figures: NVRTC compile of single kernels into empty caches, the first call of a fresh process
served from the disk cache, and the host cost per call with the kernel loaded. The ceiling: cuBLAS
8192^3 GEMMs (bf16, fp8) timed the same way. While anything is timed, NVML records the SM clock and
power (an H100/H200 under tensor load runs at its power limit and sets its clock by it).

Cases are named d{D}-{mask}-{dtype}-h{Hq}kv{Hkv}-{shape} (tools/bench/bench_cases.py); --list shows them.

usage: tools/bench/bench.py [--quick | --full | --serving] [--cases GLOB,...] [--skip-cases GLOB,...] [--contenders a,b]
                      [--out DIR] [--reps N] [--budget-s S] [--no-jit | --jit-only] [--no-ceiling] [--list]
Outputs under --out: bench.json (every figure), bench.md, PNG plots, perf_section.md (for
docs/PERF.md), readme_section.md; tools/bench/bench_report.py regenerates them from bench.json.
Exit status: 0 done (baseline failures are results), 1 a tsattn result is WRONG or an error,
2 usage / no CUDA device, 3 the CUDA context was lost (results so far are written).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))

import torch  # noqa: E402

import bench_cases as bc  # noqa: E402
import bench_report as br  # noqa: E402
from case_data import CaseData, compare, input_sets_for, make_case_data, reference  # noqa: E402
from contenders import PREPARERS, Prepared  # noqa: E402
from failures import ContextLost, context_alive, short_error  # noqa: E402
from gemm_ceiling import gemm_ceiling  # noqa: E402
from jit_figures import arch_for_device, jit_figures  # noqa: E402
from nvml_sampler import NvmlSampler  # noqa: E402
from run_metadata import collect_meta, smi_sample  # noqa: E402
from timing import cuda_index, cuda_timer, sync, time_stats, wall_timer  # noqa: E402
from tsattn_under_test import tsattn  # noqa: E402

SCHEMA = 1


# ---------------------------------------------------------------- running cases


def _warning_text(caught) -> str:
    msgs = []
    for w in caught:
        m = " ".join(str(w.message).split())
        if m and m not in msgs:
            msgs.append(m[:200])
    return " | ".join(msgs[:4])


def _cache_counters() -> Optional[dict]:
    try:
        return tsattn.cache_info()
    except Exception:  # noqa: BLE001
        return None


def run_contender(
    name: str,
    prepared: List[Prepared],
    data: CaseData,
    ref: torch.Tensor,
    timer,
    warmup: int,
    fixed_reps: Optional[int],
) -> dict:
    entry: dict = {}
    tried = []
    dev = data.device
    chosen, out, na = None, None, None
    before = _cache_counters() if name == "tsattn" else None
    for prep in prepared:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                t0 = time.perf_counter()
                out = prep.call(0)
                sync(dev)
                entry["first_call_ms"] = 1e3 * (time.perf_counter() - t0)
                chosen = prep
            except Exception as e:  # noqa: BLE001 - a contender's failure is a result
                if not context_alive(dev):
                    raise ContextLost(f"{name} via {prep.via}: {short_error(e)}") from e
                msg = short_error(e)
                wtext = _warning_text(caught)
                if wtext:
                    msg += f" [warnings: {wtext}]"
                tried.append(f"{prep.via}: {msg}")
                if any(p in str(e) for p in prep.na_if_error) and na is None:
                    na = f"n/a: {prep.na_prefix}: {msg}"
                continue
        break
    if tried:
        entry["failed_paths"] = tried
    if chosen is None:
        entry["status"] = na or f"error: {tried[-1] if tried else 'nothing to run'}"
        return entry
    entry["via"] = chosen.via
    if chosen.notes:
        entry["notes"] = list(chosen.notes)
    if before is not None:
        after = _cache_counters()
        if after:
            entry["tsattn_cache"] = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    tol_key = data.case.dtype  # the least precise of input and output dtype
    check = compare(out, ref, tol_key)
    del out
    entry["check"] = {k: v for k, v in check.items() if k not in ("ok", "reason")}
    if not check["ok"]:
        entry["status"] = f"WRONG: {check['reason']}"
        return entry
    try:
        # The clock and power while timed (tools/bench/nvml_sampler.py): under a power limit the clock
        # moves with the kernel, so the report can tell work per cycle from clock.
        with NvmlSampler(cuda_index(dev)) if dev.type == "cuda" else contextlib.nullcontext() as gpu:
            times = timer(chosen.call, len(data.sets), warmup, fixed_reps, dev)
        state = gpu.summary() if gpu is not None else None
        if state:
            entry["gpu_state"] = state
    except Exception as e:  # noqa: BLE001
        if not context_alive(dev):
            raise ContextLost(f"{name} via {chosen.via} (timing): {short_error(e)}") from e
        entry["status"] = f"error: while timing: {short_error(e)}"
        return entry
    entry.update(time_stats(times))
    entry["status"] = "ok"
    return entry


def run_case(
    case: bc.Case,
    contenders: Sequence[str],
    device,
    *,
    timer=None,
    warmup: int = bc.WARMUP,
    fixed_reps: Optional[int] = None,
    n_sets: Optional[int] = None,
    seed: int = 0,
    preparers: Optional[Dict[str, Callable]] = None,
    static_na=bc.static_na,
) -> dict:
    """Runs every contender on one case; returns the case's JSON row. Raises ContextLost only."""
    device = torch.device(device)
    timer = timer or (cuda_timer if device.type == "cuda" else wall_timer)
    preparers = preparers or PREPARERS
    fl = bc.flops(case)
    row = {
        "name": case.name,
        "params": case.params(),
        "flops": fl,
        "visible_pairs": bc.visible_pairs(case),
        "contenders": {},
    }
    t_case = time.perf_counter()
    n_sets = n_sets or input_sets_for(case)
    try:
        data = make_case_data(case, device, n_sets, seed)
        ref = reference(case, *data.sets[0], data.bounds)
    except Exception as e:  # noqa: BLE001
        if not context_alive(device):
            raise ContextLost(f"{case.name}: inputs/reference: {short_error(e)}") from e
        for name in contenders:
            row["contenders"][name] = {"status": f"error: inputs or reference failed: {short_error(e)}"}
        return row
    row["input_sets"] = n_sets
    row["set_bytes"] = data.set_bytes
    for name in contenders:
        na = static_na(name, case)
        if na:
            entry = {"status": na}
        else:
            try:
                prepared = preparers[name](data)
            except Exception as e:  # noqa: BLE001
                if not context_alive(device):
                    raise ContextLost(f"{case.name}: {name} setup: {short_error(e)}") from e
                prepared = f"error: setup: {short_error(e)}"
            if isinstance(prepared, str):
                entry = {"status": prepared}
            else:
                entry = run_contender(name, prepared, data, ref, timer, warmup, fixed_reps)
        if entry.get("status") == "ok":
            entry["tflops"] = fl / entry["ms"] / 1e9
        if case.group > 1 and name in bc.CONTENDERS:
            entry["gqa"] = bc.gqa_handling(name)
        row["contenders"][name] = entry
    row["ratios"] = br.ratios(row)
    row["case_seconds"] = time.perf_counter() - t_case
    del data, ref
    return row


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sel = p.add_mutually_exclusive_group()
    sel.add_argument("--quick", action="store_true", help="the smoke set (tools/dev/gpu_check.sh bench)")
    sel.add_argument("--full", action="store_true", help="the whole product of the axes (about two hours)")
    sel.add_argument("--serving", action="store_true", help="batched short prompts, fixed and packed (144 cases)")
    p.add_argument(
        "--cases",
        default="",
        help="comma-separated glob patterns over case names; without --quick/--full "
        "they select from the whole product (e.g. 'd128-causal-*-b1-s8k,*ragged16')",
    )
    p.add_argument("--skip-cases", default="", help="comma-separated glob patterns of cases to leave out")
    p.add_argument(
        "--contenders", default=",".join(bc.CONTENDERS), help="comma-separated subset of " + ", ".join(bc.CONTENDERS)
    )
    p.add_argument("--list", action="store_true", help="print the selected cases, what runs them, the estimate; exit")
    p.add_argument("--out", default="bench-results", help="output directory")
    p.add_argument("--reps", type=int, default=0, help="timed calls per contender and case (default: auto)")
    p.add_argument("--warmup", type=int, default=bc.WARMUP)
    p.add_argument(
        "--budget-s",
        type=float,
        default=540.0,
        help="stop starting cases after this many seconds from launch (0: no limit); the rest are recorded as skipped",
    )
    jit = p.add_mutually_exclusive_group()
    jit.add_argument("--no-jit", action="store_true", help="leave out the JIT figures")
    jit.add_argument("--jit-only", action="store_true", help="only the JIT figures")
    p.add_argument("--jit-host-calls", type=int, default=2000)
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-smi", action="store_true", help="do not call nvidia-smi for clocks")
    p.add_argument("--no-ceiling", action="store_true", help="do not time the cuBLAS GEMM ceiling (bf16, fp8)")
    p.add_argument("--assume-tflops", type=float, default=bc.Assumptions.tflops, help="for the --list estimate")
    p.add_argument("--seed", type=int, default=0)
    return p


def select_cases(args) -> Tuple[List[bc.Case], List[str]]:
    """(cases, problems): the base set (quick / full / default, or the whole product when only
    --cases is given) filtered by --cases and --skip-cases."""
    problems = []
    pats = bc.split_patterns(args.cases)
    if args.full:
        base = bc.full_catalog()
    elif args.serving:
        base = bc.serving_cases()
    elif args.quick:
        base = bc.quick_cases()
    elif pats:
        base = bc.full_catalog()
    else:
        base = bc.default_cases()
    cases = base
    if pats:
        cases, unmatched = bc.select(base, pats)
        problems += [f"--cases pattern {p!r} matches no case" for p in unmatched]
    skip = bc.split_patterns(args.skip_cases)
    if skip:
        dropped, unmatched = bc.select(cases, skip)
        cases = [c for c in cases if c not in dropped]
        problems += [f"--skip-cases pattern {p!r} matches no selected case" for p in unmatched]
    return cases, problems


def parse_contenders(text: str) -> List[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in bc.CONTENDERS]
    if bad or not names:
        raise ValueError(
            f"--contenders: unknown {', '.join(bad) or '(none given)'} (choose from {', '.join(bc.CONTENDERS)})"
        )
    return [n for n in bc.CONTENDERS if n in names]


def list_cases(cases: Sequence[bc.Case], contenders: Sequence[str], args) -> str:
    lines = []
    for c in cases:
        runs = [n for n in contenders if not bc.static_na(n, c)]
        nas = [n for n in contenders if bc.static_na(n, c)]
        lines.append(
            f"{c.name:40s} {bc.flops(c) / 1e9:10.1f} GFLOP  runs: {' '.join(runs):26s}"
            + (f" n/a: {' '.join(nas)}" if nas else "")
        )
    est = bc.estimate(
        cases, contenders, args.reps or None, bc.Assumptions(tflops=args.assume_tflops), with_jit=not args.no_jit
    )
    lines.append(
        f"{len(cases)} cases; estimate {est['total_s']:.0f} s ({est['total_s'] / 60:.1f} min) at "
        f"{est['assumed_tflops']:.0f} TFLOP/s for every contender: {est['calls']} calls, "
        f"timed {est['timed_s']:.0f} s + first calls {est['first_calls_s']:.0f} s + fixed {est['fixed_s']:.0f} s"
    )
    return "\n".join(lines)


def write_outputs(doc: dict, out_dir: Path, plots: bool) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    doc["summary"] = br.summarize(doc)
    tmp = out_dir / "bench.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(out_dir / "bench.json")
    br.write_all(doc, out_dir, plots=plots)


def _skipped_row(case: bc.Case, contenders: Sequence[str], why: str) -> dict:
    return {
        "name": case.name,
        "params": case.params(),
        "flops": bc.flops(case),
        "contenders": {k: {"status": f"skipped: {why}"} for k in contenders},
    }


def run_cases(
    doc: dict,
    cases: Sequence[bc.Case],
    contenders: Sequence[str],
    device,
    args,
    out_dir: Path,
    t_start: float,
    runner=None,
) -> int:
    """The JIT figures, then every case in order until the time budget is spent, rewriting the
    outputs after each; a lost CUDA context ends the run with what was measured. Returns 0 or 3."""
    runner = runner or run_case
    try:
        if not args.no_jit:
            doc["jit"] = jit_figures(device, arch_for_device(device), args.quick, args.jit_host_calls)
            write_outputs(doc, out_dir, plots=False)
        if args.jit_only:
            return 0
        for n, case in enumerate(cases):
            elapsed = time.perf_counter() - t_start
            if args.budget_s and elapsed > args.budget_s:
                doc["run"]["skipped"] = [c.name for c in cases[n:]]
                why = f"time budget (--budget-s {args.budget_s:.0f}) spent"
                doc["cases"] += [_skipped_row(c, contenders, why) for c in cases[n:]]
                print(f"bench: time budget spent after {elapsed:.0f} s; {len(cases) - n} cases skipped", flush=True)
                break
            try:
                row = runner(case, contenders, device, fixed_reps=args.reps or None, warmup=args.warmup, seed=args.seed)
            except ContextLost:
                raise
            except Exception as e:  # noqa: BLE001 - a harness bug in one case must not lose the run
                if not context_alive(torch.device(device)):
                    raise ContextLost(f"{case.name}: {short_error(e)}") from e
                row = _skipped_row(case, contenders, "")
                for entry in row["contenders"].values():
                    entry["status"] = f"error: harness: {short_error(e)}"
                row["traceback"] = traceback.format_exc()[-2000:]
            row["clocks"] = smi_sample(not args.no_smi)
            doc["cases"].append(row)
            print(br.console_line(row), flush=True)
            write_outputs(doc, out_dir, plots=False)
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
    except ContextLost as e:
        done = {r["name"] for r in doc["cases"]}
        rest = [c for c in cases if c.name not in done]
        doc["run"]["aborted"] = f"CUDA context lost: {e}"
        doc["run"]["skipped"] = [c.name for c in rest]
        doc["cases"] += [_skipped_row(c, contenders, "CUDA context lost earlier") for c in rest]
        print(f"bench: CUDA context lost ({e}); writing what was measured", file=sys.stderr, flush=True)
        return 3
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    t_start = time.perf_counter()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        contenders = parse_contenders(args.contenders)
    except ValueError as e:
        parser.error(str(e))
    cases, problems = select_cases(args)
    for msg in problems:
        print(f"bench: {msg}", file=sys.stderr)
    if args.list:
        print(list_cases(cases, contenders, args))
        return 2 if problems and not cases else 0
    if not cases and not args.jit_only:
        print("bench: no case selected", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench: no CUDA device (torch.cuda.is_available() is False); --list works without one", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is plain fp32
    torch.backends.cudnn.allow_tf32 = False
    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):  # one FlexAttention graph per case: never fall back to eager
            setattr(torch._dynamo.config, knob, 4096)

    out_dir = Path(args.out)
    doc = {"schema": SCHEMA, "meta": collect_meta(args, device), "cases": [], "jit": {}, "run": {}}
    doc["meta"]["clocks_before"] = smi_sample(not args.no_smi)
    doc["meta"]["estimate"] = bc.estimate(cases, contenders, args.reps or None, with_jit=not args.no_jit)
    doc["run"] = {
        "selected": [] if args.jit_only else [c.name for c in cases],
        "contenders": contenders,
        "budget_s": args.budget_s,
        "skipped": [],
    }
    print(
        f"bench: {len(cases)} cases x {len(contenders)} contenders on {doc['meta'].get('gpu')}, "
        f"estimate {doc['meta']['estimate']['total_s']:.0f} s; results in {out_dir}",
        flush=True,
    )
    if not (args.no_ceiling or args.jit_only):
        doc["ceiling"] = gemm_ceiling(device)
    rc = run_cases(doc, cases, contenders, device, args, out_dir, t_start)
    return finish_run(doc, args, out_dir, t_start, rc)


def finish_run(doc: dict, args, out_dir: Path, t_start: float, rc: int) -> int:
    """Final clocks, timestamps, every output file with plots, the summary; 1 when tsattn was WRONG
    or failed somewhere (and nothing worse happened)."""
    lost = doc["run"].get("aborted")
    doc["meta"]["clocks_after"] = smi_sample(not args.no_smi) if lost is None else None
    doc["meta"]["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    doc["run"]["elapsed_s"] = time.perf_counter() - t_start
    write_outputs(doc, out_dir, plots=not args.no_plots)
    print()
    print(br.render_summary_text(doc))
    print(
        f"bench: {doc['run']['elapsed_s']:.0f} s; wrote {out_dir}/bench.json, bench.md, perf_section.md, readme_section.md"
    )
    bad = [
        r["name"]
        for r in doc["cases"]
        if str(r["contenders"].get("tsattn", {}).get("status", "ok")).startswith(("WRONG", "error"))
    ]
    if bad and rc == 0:
        print(f"bench: tsattn WRONG or failed in {len(bad)} case(s): {', '.join(bad[:10])}", file=sys.stderr)
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
