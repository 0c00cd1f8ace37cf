"""attn_implementation="tsattn" on a GPU: tiny random-weight transformers models in bfloat16
(Llama GQA D128, Qwen3 D128 with q/k norms, Mistral with a sliding window, Gemma3 D256 with
sliding and full layers, BERT and ModernBERT encoders, BART's encoder, decoder and cross-attention) against attn_implementation="sdpa" on the
same weights, for fixed, left- and right-padded and packed batches and for greedy generation with a
KV cache; Gemma2's soft-capping falls back to its eager attention with a warning.

"As accurate as SDPA": both run in bfloat16 and are compared with the same weights in float32
under SDPA; tsattn's relative error may not exceed SDPA's by more than a margin, and the two must
agree within the contract's bf16 norm bound. Every tsattn test also checks that the calls ran on
tsattn (no fallback)."""

import copy
import warnings

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="skipped: transformers is not installed (pip install 'tsattn[transformers]')"
)

import transformers_models as tm  # noqa: E402
from tsattn.integrations import transformers as hf  # noqa: E402

W = 64  # sliding windows shorter than the sequences, so that they bind
S = 200
BF16_NORM = 2e-2  # docs/contract.md's bf16 bound on the relative norm error


@pytest.fixture(autouse=True)
def registered():
    hf.register()
    hf.reset_stats()
    with torch.inference_mode():
        yield


def relative(a, e):
    return float((a.float() - e.float()).norm() / e.float().norm())


class Pair:
    """A model in float32 (the reference, under SDPA) and its bfloat16 copy."""

    def __init__(self, name, **overrides):
        base = "eager" if name in ("gemma2", "gpt_oss") else "sdpa"
        self.fp32 = tm.build(name, window=W, device="cuda", attn=base, **overrides)
        self.bf16 = copy.deepcopy(self.fp32).to(torch.bfloat16)
        self.base = base

    def outputs(self, impl, **inputs):
        self.bf16.set_attn_implementation(impl)
        return tm.outputs(self.bf16, **inputs)

    def check(self, valid=None, **inputs):
        """tsattn as accurate as SDPA on these inputs; returns the stats of the tsattn run."""
        reference = tm.outputs(self.fp32, **inputs)
        expected = self.outputs(self.base, **inputs)
        before = hf.stats()
        got = self.outputs("tsattn", **inputs)
        counts = {k: n - before.get(k, 0) for k, n in hf.stats().items() if n != before.get(k, 0)}
        if valid is not None:
            reference, expected, got = reference[valid], expected[valid], got[valid]
        err, base_err = relative(got, reference), relative(expected, reference)
        assert err <= 1.5 * base_err + 2e-3, f"tsattn error {err:.3g} vs {self.base} {base_err:.3g}"
        assert relative(got, expected) <= BF16_NORM
        return counts


def on_tsattn(counts, layout):
    assert counts and all(k == f"tsattn.{layout}" for k in counts), counts


@pytest.mark.parametrize("name", ["llama", "qwen3", "mistral", "gemma3", "bert", "modernbert", "bart"])
def test_models_fixed_and_padded(name):
    pair = Pair(name)
    ids, _ = tm.padded_batch(3, S, "left", device="cuda")
    on_tsattn(pair.check(input_ids=ids), "fixed")
    for side in ("left", "right"):
        ids, mask = tm.padded_batch(3, S, side, device="cuda")
        counts = pair.check(valid=mask.bool(), input_ids=ids, attention_mask=mask)
        if name == "bart":  # the decoder has no padding: its self-attention stays fixed
            assert counts == {"tsattn.packed": 4, "tsattn.fixed": 2}, counts
        else:
            on_tsattn(counts, "packed")


@pytest.mark.parametrize(
    "name,cache", [("llama", "dynamic"), ("mistral", "dynamic"), ("gemma3", "dynamic"), ("llama", "static")]
)
def test_greedy_generate_with_a_kv_cache(name, cache):
    """Left-padded prompts, greedy decoding on tsattn (prefill packed, then one query per step
    against the cache); each step's logits against SDPA's teacher-forced logits for the same tokens."""
    pair = Pair(name)
    ids, mask = tm.padded_batch(3, 90, "left", device="cuda")
    pair.bf16.set_attn_implementation("tsattn")
    steps = 12
    run = pair.bf16.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=steps,
        do_sample=False,
        pad_token_id=0,
        cache_implementation=cache,
        disable_compile=True,  # a static cache would compile the decoding forward (minutes)
        output_logits=True,
        return_dict_in_generate=True,
    )
    counts = hf.stats()
    assert not [k for k in counts if k.startswith("fallback.")] and sum(counts.values()) == steps * 2, counts
    full = run.sequences
    full_mask = torch.cat([mask, torch.ones(3, full.shape[1] - ids.shape[1], dtype=mask.dtype, device="cuda")], 1)
    # generate's position ids for left padding: count the real tokens
    pos = (full_mask.cumsum(-1) - 1).masked_fill(full_mask == 0, 0)
    generated = torch.stack(run.logits, dim=1)  # [B, steps, V]
    positions = slice(ids.shape[1] - 1, full.shape[1] - 1)
    inputs = dict(input_ids=full, attention_mask=full_mask, position_ids=pos)
    reference = tm.outputs(pair.fp32, **inputs)[:, positions]
    expected = pair.outputs("sdpa", **inputs)[:, positions]
    for step in range(steps):
        err = relative(generated[:, step], reference[:, step])
        base_err = relative(expected[:, step], reference[:, step])
        assert err <= 1.5 * base_err + 2e-3, f"step {step}: tsattn error {err:.3g} vs sdpa {base_err:.3g}"


def test_packed_sequences():
    pair = Pair("llama")
    ids, _ = tm.padded_batch(1, 3 * S, "left", device="cuda")
    pos = torch.cat([torch.arange(n) for n in (S, 150, 3 * S - S - 150)]).view(1, -1).cuda()
    on_tsattn(pair.check(input_ids=ids, position_ids=pos, use_cache=False), "packed")


def test_soft_capping_falls_back_with_a_warning():
    pair = Pair("gemma2")
    ids, mask = tm.padded_batch(3, S, "left", device="cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counts = pair.check(valid=mask.bool(), input_ids=ids, attention_mask=mask)
        pair.check(input_ids=ids)
    assert counts == {"fallback.softcap": 2}
    assert len([w for w in caught if issubclass(w.category, hf.FallbackWarning)]) == 1
