"""Tiny random-weight transformers models for the integration tests, built from configs (no
downloads): one per kind of attention the integration maps. Shared by the CPU tests (float32,
through reference_prefill) and the GPU tests (bfloat16, through tsattn)."""

import torch

VOCAB = 128

# name: (config class name, model class name, config arguments); head dims 128 or 256.
MODELS = {
    # GQA 4:2, head dim 128
    "llama": ("LlamaConfig", "AutoModelForCausalLM", dict(num_attention_heads=4, num_key_value_heads=2)),
    # q/k RMS norms, head dim 128
    "qwen3": ("Qwen3Config", "AutoModelForCausalLM", dict(num_attention_heads=4, num_key_value_heads=2)),
    # a sliding window in every layer
    "mistral": (
        "MistralConfig",
        "AutoModelForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=1, sliding_window="W"),
    ),
    # head dim 256, sliding and full layers
    "gemma3": (
        "Gemma3TextConfig",
        "AutoModelForCausalLM",
        dict(
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=256,
            sliding_window="W",
            layer_types=["sliding_attention", "full_attention"],
        ),
    ),
    # sliding-window masks on some layers, but no sliding_window argument to the attention function
    "qwen2_moe": (
        "Qwen2MoeConfig",
        "AutoModelForCausalLM",
        dict(
            num_attention_heads=4,
            num_key_value_heads=2,
            use_sliding_window=True,
            sliding_window="W",
            max_window_layers=2,
            num_experts=2,
            num_experts_per_tok=1,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=128,
        ),
    ),
    # a bidirectional encoder, head dim 128
    "bert": ("BertConfig", "AutoModel", dict(num_attention_heads=2)),
    # a bidirectional encoder with local (sliding) and global layers
    "modernbert": (
        "ModernBertConfig",
        "AutoModel",
        dict(
            num_attention_heads=2,
            num_hidden_layers=3,
            global_attn_every_n_layers=2,
            local_attention="2W",
            bos_token_id=1,
            eos_token_id=2,
            cls_token_id=1,
            sep_token_id=2,
        ),
    ),
    # an encoder-decoder: one attention class for encoder, decoder and cross-attention
    "bart": (
        "BartConfig",
        "AutoModel",
        dict(
            d_model=256,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_layers=2,
            decoder_layers=2,
            encoder_ffn_dim=256,
            decoder_ffn_dim=256,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=2,
        ),
    ),
    # logit soft-capping: falls back to the model's eager attention
    "gemma2": (
        "Gemma2Config",
        "AutoModelForCausalLM",
        dict(num_attention_heads=2, num_key_value_heads=1, sliding_window="W"),
    ),
    # attention sinks: falls back to the model's eager attention
    "gpt_oss": (
        "GptOssConfig",
        "AutoModelForCausalLM",
        dict(
            num_attention_heads=4, num_key_value_heads=2, sliding_window="W", num_local_experts=2, num_experts_per_tok=1
        ),
    ),
}

DECODERS = ("llama", "qwen3", "mistral", "gemma3", "gemma2", "gpt_oss")


def config(name: str, window: int, **overrides):
    import transformers

    config_class, _, arguments = MODELS[name]
    args = dict(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        vocab_size=VOCAB,
        pad_token_id=0,
        head_dim=128,
    )
    if name in ("bert", "modernbert", "bart"):
        del args["head_dim"]  # hidden_size / heads = 128
    for k, v in arguments.items():
        args[k] = {"W": window, "2W": 2 * window}.get(v, v) if isinstance(v, str) else v
    args.update(overrides)
    return getattr(transformers, config_class)(**args)


def build(name: str, *, window: int, dtype=torch.float32, device="cpu", seed=0, attn="sdpa", **overrides):
    """The model, eval mode, random weights from `seed`."""
    import transformers

    _, model_class, _ = MODELS[name]
    torch.manual_seed(seed)
    cfg = config(name, window, **overrides)
    model = getattr(transformers, model_class).from_config(cfg, attn_implementation=attn, dtype=dtype)
    return model.to(device).eval()


def outputs(model, **inputs) -> torch.Tensor:
    """Logits of a causal LM, last hidden states of an encoder."""
    out = model(**inputs)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def padded_batch(batch: int, length: int, side: str, device="cpu", seed=1):
    """(input_ids, attention_mask): rows of different lengths padded on `side` ("left", "right");
    the first row has no padding."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    for b in range(1, batch):
        n = (b * length) // (batch + 1)
        if side == "left":
            mask[b, :n] = 0
        else:
            mask[b, length - n :] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids.to(device), mask.to(device)
