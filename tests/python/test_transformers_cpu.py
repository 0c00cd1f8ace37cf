"""No-GPU tests of attn_implementation="tsattn" inside transformers (tsattn/integrations/transformers.py):
registration, the mask function against transformers' own masks, and tiny random-weight models
whose tsattn calls run through reference_prefill (contract-checked fp64 batch_prefill on the
CPU), compared with the same weights under attn_implementation="sdpa" (or "eager"): fixed,
padded and packed batches, generation with dynamic and static caches, and every fallback."""

import warnings

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="skipped: transformers is not installed (pip install 'tsattn[transformers]')"
)

import reference_prefill  # noqa: E402
import transformers_models as tm  # noqa: E402
from tsattn.integrations import _transformers_plan as tp  # noqa: E402
from tsattn.integrations import transformers as hf  # noqa: E402
from transformers import masking_utils as mu  # noqa: E402

# The fallback warnings these tests cause on purpose; the tests of the warnings record them.
pytestmark = pytest.mark.filterwarnings("ignore::tsattn.integrations.transformers.FallbackWarning")

W = 5  # sliding windows shorter than the sequences below, so that they bind
TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def reference_backend():
    """tsattn's plans run on the CPU through reference_prefill, in float32."""
    hf.register()
    hf.reset_stats()
    with hf._use_backend(reference_prefill.batch_prefill, ("cpu",), (torch.float32,)), torch.no_grad():
        yield


def compare(model, base, valid=None, **inputs):
    """The model's outputs under `base` and under tsattn on the same inputs, compared where `valid`."""
    model.set_attn_implementation(base)
    expected = tm.outputs(model, **inputs)
    model.set_attn_implementation("tsattn")
    got = tm.outputs(model, **inputs)
    if valid is not None:
        expected, got = expected[valid], got[valid]
    torch.testing.assert_close(got, expected, **TOL)


def ran_on_tsattn():
    counts = hf.stats()
    assert not [k for k in counts if k.startswith("fallback.")], counts
    return counts


# ---------------------------------------------------------------- registration and masks


def test_register_adds_both_interfaces():
    assert hf.register() == "tsattn"
    attention = transformers.AttentionInterface._global_mapping["tsattn"]
    mask = mu.AttentionMaskInterface._global_mapping["tsattn"]
    assert hf.register() == "tsattn"  # twice is fine: the same functions
    assert transformers.AttentionInterface._global_mapping["tsattn"] is attention
    assert mu.AttentionMaskInterface._global_mapping["tsattn"] is mask
    # excluded from torch.compile's tracing, around tsattn's own functions
    assert attention.__wrapped__ is hf.attention_forward and mask.__wrapped__ is hf.make_mask


def _geometries():
    """(q_len, kv_len, q_offset, kv_offset, positions): no cache, a dynamic cache while decoding
    and chunking, a sliding-window cache, a static cache with unfilled slots."""
    yield 9, 9, 0, 0, 9
    yield 1, 10, 9, 0, 10
    yield 3, 10, 7, 0, 10
    yield 1, W, 11, 11 - W + 1, 12
    yield 3, W + 2, 9, 9 - W + 1, 12
    yield 4, 16, 0, 0, 4
    yield 1, 16, 6, 0, 7


@pytest.mark.parametrize("pattern", ["causal", "sliding", "bidirectional", "bidirectional_sliding"])
def test_mask_function_means_what_transformers_masks_mean(pattern):
    """For transformers' plain patterns make_mask returns None or a 2-D key mask whose meaning
    (reference_visibility, with the window the mask carries) is exactly transformers' SDPA mask."""
    functions = {
        "causal": (mu.causal_mask_function, True, None),
        "sliding": (mu.sliding_window_causal_mask_function(W), True, W),
        "bidirectional": (mu.bidirectional_mask_function, False, None),
        # the layer gets sliding_window = W + 1 for a mask of |i - j| <= W (ModernBERT, FA's reading)
        "bidirectional_sliding": (mu.sliding_window_bidirectional_mask_function(W), False, W + 1),
    }
    fn, causal, _ = functions[pattern]
    gen = torch.Generator().manual_seed(3)
    for q_len, kv_len, q_offset, kv_offset, positions in _geometries():
        if not causal and (q_offset, kv_offset, q_len) != (0, 0, kv_len):
            continue  # encoders have no cache
        for padded in (False, True):
            padding = torch.ones(3, positions, dtype=torch.bool)
            if padded:
                padding[1, : positions // 3] = False  # left padding
                padding[2] = torch.rand(positions, generator=gen) < 0.6
            args = dict(batch_size=3, q_length=q_len, kv_length=kv_len, q_offset=q_offset, kv_offset=kv_offset)
            args.update(mask_function=fn, attention_mask=padding)
            expected = mu.sdpa_mask(**args, allow_is_causal_skip=False)[:, 0]
            got = hf.make_mask(**args)
            assert got is None or (got.dim() == 2 and got.dtype == torch.bool)
            width = kv_len if got is None else got.shape[1]
            # the window rides on the mask where it cuts (the layer's sliding_window convention)
            window = None if got is None else getattr(got, hf.WINDOW_ATTRIBUTE, None)
            meaning = tp.reference_visibility(
                3,
                q_len,
                kv_len,
                causal=causal,
                sliding_window=window,
                padding=got,
                q_offset=width - q_len if causal else 0,
            )
            assert torch.equal(meaning, expected), (pattern, q_len, kv_len, q_offset, kv_offset, padded)


def test_other_patterns_get_transformers_full_mask():
    left = torch.zeros(2, dtype=torch.long)
    for fn in (
        mu.chunked_causal_mask_function(3, left),
        mu.or_masks(mu.causal_mask_function, lambda b, h, q, kv: kv == 0),
        mu.and_masks(mu.causal_mask_function, mu.causal_mask_function),
    ):
        args = dict(
            batch_size=2, q_length=7, kv_length=7, mask_function=fn, attention_mask=torch.ones(2, 7, dtype=torch.bool)
        )
        got = hf.make_mask(**args)
        assert torch.equal(got, mu.sdpa_mask(**args, allow_is_causal_skip=False))


# ---------------------------------------------------------------- models


@pytest.mark.parametrize("name", ["llama", "qwen3", "mistral", "gemma3", "bert", "modernbert"])
def test_fixed_and_padded_batches(name):
    model = tm.build(name, window=W)
    ids, _ = tm.padded_batch(3, 13, "left")
    compare(model, "sdpa", input_ids=ids)
    assert ran_on_tsattn() == {"tsattn.fixed": model.config.num_hidden_layers}
    for side in ("left", "right"):
        hf.reset_stats()
        ids, mask = tm.padded_batch(3, 13, side)
        compare(model, "sdpa", valid=mask.bool(), input_ids=ids, attention_mask=mask)
        assert ran_on_tsattn() == {"tsattn.packed": model.config.num_hidden_layers}


def test_a_window_only_the_mask_knows():
    """Qwen2-MoE builds sliding-window masks but does not pass sliding_window to the attention
    function; the window rides on the mask."""
    model = tm.build("qwen2_moe", window=W)
    assert model.config.layer_types[0] == "sliding_attention"
    for side in ("none", "left"):
        ids, mask = tm.padded_batch(3, 13, "left")
        mask = torch.ones_like(mask) if side == "none" else mask
        hf.reset_stats()
        compare(model, "sdpa", valid=mask.bool(), input_ids=ids, attention_mask=mask)
        assert sum(ran_on_tsattn().values()) == 2


def test_cross_attention_computes_every_query_row():
    """BART's one attention class serves the encoder, the decoder and the cross-attention; with a
    decoder as long as the padded encoder, a padding mask of the keys must not drop decoder rows."""
    model = tm.build("bart", window=W)
    ids, mask = tm.padded_batch(3, 10, "right")
    decoder_ids, _ = tm.padded_batch(3, 10, "left", seed=2)
    compare(model, "sdpa", input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_ids)
    assert ran_on_tsattn() == {"tsattn.packed": 4, "tsattn.fixed": 2}  # encoder and cross: packed


def test_inference_mode():
    """Masks made under torch.inference_mode have no version counter; plans are still cached per mask."""
    model = tm.build("mistral", window=W)
    ids, mask = tm.padded_batch(3, 13, "left")
    with torch.inference_mode():
        compare(model, "sdpa", valid=mask.bool(), input_ids=ids, attention_mask=mask)
    assert ran_on_tsattn() == {"tsattn.packed": 2}


@pytest.mark.parametrize(
    "name,cache,side",
    [
        ("llama", "dynamic", "left"),
        ("llama", "static", "left"),
        ("llama", "static", "none"),
        ("mistral", "dynamic", "left"),  # a sliding-window cache
        ("gemma3", "dynamic", "left"),  # sliding and full layers
        ("gemma3", "dynamic", "none"),
    ],
)
def test_generate_with_a_cache(name, cache, side):
    """Greedy generation: the same tokens and the same logits at every step as SDPA."""
    model = tm.build(name, window=W)
    ids, mask = tm.padded_batch(3, 9, "left")
    if side == "none":
        mask = torch.ones_like(mask)
    runs = []
    for impl in ("sdpa", "tsattn"):
        model.set_attn_implementation(impl)
        runs.append(
            model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=8,
                do_sample=False,
                pad_token_id=0,
                cache_implementation=cache,
                output_logits=True,
                return_dict_in_generate=True,
            )
        )
    expected, got = runs
    assert torch.equal(got.sequences, expected.sequences)
    for step, (a, e) in enumerate(zip(got.logits, expected.logits)):
        torch.testing.assert_close(a, e, **TOL, msg=lambda m: f"step {step}: {m}")
    counts = ran_on_tsattn()
    assert sum(counts.values()) == 8 * model.config.num_hidden_layers


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma3", "qwen3"])
def test_packed_sequences(name):
    """Sequences packed into one row, told by position ids restarting (transformers' own rule,
    without a cache) or by cu_seq_lens: one tsattn request each."""
    model = tm.build(name, window=W)
    ids, _ = tm.padded_batch(1, 14, "left")
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 0, 1, 2, 3]])
    compare(model, "sdpa", input_ids=ids, position_ids=pos, use_cache=False)
    assert ran_on_tsattn() == {"tsattn.packed": 2}
    hf.reset_stats()
    cu = torch.tensor([0, 7, 10, 14], dtype=torch.int32)
    lengths = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=7, max_length_k=7)
    compare(model, "sdpa", input_ids=ids, position_ids=pos, use_cache=False, **lengths)
    assert ran_on_tsattn() == {"tsattn.packed": 2}


def test_four_d_masks():
    """A 4-D mask passed by the caller: causal with padding runs packed; anything else on SDPA."""
    model = tm.build("llama", window=W)
    ids, mask = tm.padded_batch(3, 10, "left")
    dense = torch.tril(torch.ones(10, 10, dtype=torch.bool)) & mask.bool()[:, None, :]
    compare(model, "sdpa", valid=mask.bool(), input_ids=ids, attention_mask=dense[:, None])
    assert ran_on_tsattn() == {"tsattn.packed": 2}
    odd = dense.clone()
    odd[0, 6, 2] = False
    hf.reset_stats()
    compare(model, "sdpa", valid=mask.bool(), input_ids=ids, attention_mask=odd[:, None])
    assert hf.stats() == {"fallback.mask": 2}


def test_the_comparisons_see_a_wrong_window(monkeypatch):
    """The model tests fail when the window is off by one, so they do check the arithmetic."""
    ids, _ = tm.padded_batch(2, 13, "left")
    monkeypatch.setattr(tp, "causal_window_left", lambda w: -1 if w is None else int(w))
    with pytest.raises(AssertionError):
        compare(tm.build("mistral", window=W), "sdpa", input_ids=ids)
    monkeypatch.setattr(tp, "bidirectional_half_width", lambda w: None if w is None else int(w))
    with pytest.raises(AssertionError):
        compare(tm.build("modernbert", window=W), "sdpa", input_ids=ids)


# ---------------------------------------------------------------- fallbacks


def fallback_warnings(caught):
    return [w for w in caught if issubclass(w.category, hf.FallbackWarning)]


@pytest.mark.parametrize("name,reason", [("gemma2", "softcap"), ("gpt_oss", "sinks")])
def test_what_sdpa_lacks_runs_on_the_models_eager_attention(name, reason):
    model = tm.build(name, window=W, attn="eager")  # transformers 5.18+ refuses SDPA for these models
    ids, mask = tm.padded_batch(3, 11, "left")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compare(model, "eager", input_ids=ids)
        compare(model, "eager", valid=mask.bool(), input_ids=ids, attention_mask=mask)
    assert hf.stats() == {f"fallback.{reason}": 4}
    assert len(fallback_warnings(caught)) == 1, "one warning per reason"


def test_fallbacks_on_a_llama():
    ids, mask = tm.padded_batch(2, 9, "left")
    cases = [
        ("head_dim", tm.build("llama", window=W, head_dim=64)),
        ("dtype", tm.build("llama", window=W, dtype=torch.float64)),
    ]
    for reason, model in cases:
        hf.reset_stats()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):  # two forwards, one warning
                compare(model, "sdpa", valid=mask.bool(), input_ids=ids, attention_mask=mask)
        assert hf.stats() == {f"fallback.{reason}": 4}, reason
        warned = fallback_warnings(caught)
        assert len(warned) == 1 and tp.REASONS[reason] in str(warned[0].message), [str(w.message) for w in warned]

    # CPU tensors with tsattn itself: the device reason
    hf.reset_stats()
    with hf._use_backend(reference_prefill.batch_prefill, ("cuda",), (torch.float32,)):
        compare(tm.build("llama", window=W), "sdpa", valid=mask.bool(), input_ids=ids, attention_mask=mask)
    assert hf.stats() == {"fallback.device": 2}

    # dropout while training
    hf.reset_stats()
    model = tm.build("llama", window=W, attention_dropout=0.5).train()
    model.set_attn_implementation("tsattn")
    torch.manual_seed(0)
    model(input_ids=ids)
    assert hf.stats() == {"fallback.dropout": 2}

    # tsattn saying NotImplementedError (e.g. an old GPU)
    def refuse(*args, **kwargs):
        raise NotImplementedError("not on this GPU")

    hf.reset_stats()
    with hf._use_backend(refuse, ("cpu",), (torch.float32,)):
        compare(tm.build("llama", window=W), "sdpa", input_ids=ids)
    assert hf.stats() == {"fallback.not_implemented": 2}


def test_gradients_fall_back_and_train():
    """tsattn has no backward: with gradients on, the call runs on SDPA and trains like it."""
    ids, mask = tm.padded_batch(2, 9, "right")
    grads = []
    for impl in ("sdpa", "tsattn"):
        model = tm.build("llama", window=W, attn=impl)
        with torch.enable_grad():
            loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
            loss.backward()
        grads.append(model.model.layers[0].self_attn.q_proj.weight.grad)
    torch.testing.assert_close(grads[1], grads[0], **TOL)
    assert hf.stats() == {"fallback.autograd": 2}
