#!/usr/bin/env python3
"""transformers_e2e.py - end-to-end prefill time of Hugging Face transformers models under
attn_implementation="sdpa" and "tsattn" (tsattn.integrations.transformers).

Each model is a few decoder layers at its real width, heads and head dim (random bf16 weights,
built from a config on the GPU: no downloads), run as its backbone (embeddings, the layers, the
final norm; no LM head) on B prompts of S tokens. Times are CUDA events around one forward, the
median of --reps after warm-up (tsattn's first calls compile their kernels). A third
implementation, an attention that does nothing ("none"), gives the rest of the model's time, so
each row also shows the attention's share: total minus that floor. The three take turns within
every repetition (sdpa, tsattn, none; then tsattn, none, sdpa; ...), so that a drift of the GPU's
clocks or of the host's speed during the run moves all three alike. Every tsattn run must have run all its attention
calls on tsattn (the counts are in the JSON), and its output is compared with SDPA's.

usage: TSATTN_LIBRARY=build/libtsattn.so PYTHONPATH=python python3 tools/bench/transformers_e2e.py \\
           [--models llama3-8b,qwen3-8b,mistral-7b,gemma3-12b] [--seq 2048,8192] [--batch 1]
           [--padded] [--layers 4] [--reps 20] [--json transformers_e2e.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import torch

# Layer shapes of the public models (config.json of each); the vocabulary does not change the
# backbone's time, so every model gets a small one.
MODELS = {
    "llama3-8b": (
        "LlamaConfig",
        dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8, head_dim=128),
    ),
    "qwen3-8b": (
        "Qwen3Config",
        dict(hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8, head_dim=128),
    ),
    # Mistral-7B-v0.1: a 4096-token sliding window in every layer
    "mistral-7b": (
        "MistralConfig",
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            sliding_window=4096,
        ),
    ),
    # Gemma-3-12B: head dim 256, 1024-token sliding windows, one full layer in six
    "gemma3-12b": (
        "Gemma3TextConfig",
        dict(
            hidden_size=3840,
            intermediate_size=15360,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=256,
            query_pre_attn_scalar=256,
            sliding_window=1024,
        ),
    ),
}
TINY = dict(hidden_size=256, intermediate_size=512)  # --tiny: the harness's own CPU test


def make_config(name: str, layers: int, tiny: bool = False):
    import transformers

    class_name, args = MODELS[name]
    args = dict(args, num_hidden_layers=layers, vocab_size=32000, max_position_embeddings=131072)
    if tiny:
        args.update(TINY, num_attention_heads=2, num_key_value_heads=1)
    if class_name == "Gemma3TextConfig":
        # one full layer in six, and at least one among the layers run
        types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]
        if "full_attention" not in types:
            types[-1] = "full_attention"
        args["layer_types"] = types
    return getattr(transformers, class_name)(**args)


def build(name: str, layers: int, device: str, tiny: bool = False):
    import transformers

    torch.manual_seed(0)
    cfg = make_config(name, layers, tiny)
    with torch.device(device):
        model = transformers.AutoModel.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    return model.eval()


def no_attention(module, query, key, value, attention_mask, **kwargs):
    """An attention that computes nothing: the model's time without attention."""
    return query.new_zeros(query.shape[0], query.shape[2], query.shape[1], value.shape[-1]), None


def forward_ms(call, device: str) -> float:
    """One forward's time (ms): CUDA events on an idle GPU, or the host's clock on the CPU."""
    if device == "cuda":
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop)
    t0 = time.perf_counter()
    call()
    return 1e3 * (time.perf_counter() - t0)


def inputs(batch: int, seq: int, padded: bool, device: str):
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 32000, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.long)
    if padded:  # left padding: row b is (b + 1) / B of the longest
        for b in range(batch):
            mask[b, : seq - seq * (b + 1) // batch] = 0
    return ids.to(device), (mask.to(device) if padded else None)


IMPLEMENTATIONS = ("sdpa", "tsattn", "none")


def measure(model, ids, mask, reps, warmup, device):
    """{implementation: (output, median ms)} of the backbone, and tsattn's counts of its first
    forward. The implementations take turns in every repetition, each starting the turn in order."""
    import tsattn.integrations.transformers as tsattn_hf

    def forward():
        return model(input_ids=ids, attention_mask=mask).last_hidden_state

    outs, times = {}, {impl: [] for impl in IMPLEMENTATIONS}
    with torch.inference_mode():
        for impl in IMPLEMENTATIONS:  # first calls: tsattn compiles or loads its kernels
            model.set_attn_implementation(impl)
            tsattn_hf.reset_stats()
            outs[impl] = forward()
            if impl == "tsattn":
                calls = tsattn_hf.stats()  # where one forward's attention calls ran
        for rep in range(warmup + reps):
            for turn in range(len(IMPLEMENTATIONS)):
                impl = IMPLEMENTATIONS[(rep + turn) % len(IMPLEMENTATIONS)]
                model.set_attn_implementation(impl)
                ms = forward_ms(forward, device)
                if rep >= warmup:
                    times[impl].append(ms)
    return {impl: (outs[impl], statistics.median(times[impl])) for impl in IMPLEMENTATIONS}, calls


def run(models, seqs, batch=1, padded=False, layers=4, reps=20, warmup=3, device="cuda", tiny=False):
    import transformers

    import tsattn.integrations.transformers as tsattn_hf

    tsattn_hf.register()
    transformers.AttentionInterface.register("none", no_attention)
    rows = []
    for name in models:
        model = build(name, layers, device, tiny)
        for seq in seqs:
            ids, mask = inputs(batch, seq, padded, device)
            row = dict(model=name, seq=seq, batch=batch, padded=padded, layers=layers)
            results, row["tsattn_calls"] = measure(model, ids, mask, reps, warmup, device)
            outs = {impl: out for impl, (out, _) in results.items()}
            row.update({f"{impl}_ms": ms for impl, (_, ms) in results.items()})
            floor = row["none_ms"]
            row["speedup"] = row["sdpa_ms"] / row["tsattn_ms"]
            row["sdpa_attention_ms"] = row["sdpa_ms"] - floor
            row["tsattn_attention_ms"] = row["tsattn_ms"] - floor
            row["attention_speedup"] = (
                row["sdpa_attention_ms"] / row["tsattn_attention_ms"] if row["tsattn_attention_ms"] > 0 else None
            )
            real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
            a, e = outs["tsattn"][real].float(), outs["sdpa"][real].float()
            row["relative_difference"] = float((a - e).norm() / e.norm())
            rows.append(row)
            print(format_row(row), flush=True)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


HEADER = (
    "| model | S | B | sdpa ms | tsattn ms | speedup | rest of model ms | sdpa attn ms | tsattn attn ms "
    "| attn speedup | rel. diff | tsattn calls |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def format_row(r) -> str:
    attn = f"{r['attention_speedup']:.2f}" if r["attention_speedup"] else "n/a"
    calls = ", ".join(f"{k} {v}" for k, v in sorted(r["tsattn_calls"].items()))
    return (
        f"| {r['model']} | {r['seq']} | {r['batch']}{' padded' if r['padded'] else ''} | {r['sdpa_ms']:.2f} "
        f"| {r['tsattn_ms']:.2f} | {r['speedup']:.2f} | {r['none_ms']:.2f} | {r['sdpa_attention_ms']:.2f} "
        f"| {r['tsattn_attention_ms']:.2f} | {attn} | {r['relative_difference']:.2e} | {calls} |"
    )


def metadata(device: str) -> dict:
    import transformers

    import tsattn

    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        torch=torch.__version__,
        transformers=transformers.__version__,
        tsattn=tsattn.__version__,
    )
    if device == "cuda":
        meta["gpu"] = torch.cuda.get_device_name()
    return meta


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--seq", default="2048,8192", help="prompt lengths, comma-separated")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--padded", action="store_true", help="left-padded prompts of different lengths (packed calls)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", default="transformers_e2e.json", help="where the results go")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny widths (the harness's own CPU test)")
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA device (--device cpu --tiny runs the harness on the CPU)")
    seqs = [int(s) for s in a.seq.split(",") if s]
    print(HEADER, flush=True)
    rows = run(models, seqs, a.batch, a.padded, a.layers, a.reps, a.warmup, a.device, a.tiny)
    Path(a.json).write_text(json.dumps(dict(metadata=metadata(a.device), rows=rows), indent=2) + "\n")
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
