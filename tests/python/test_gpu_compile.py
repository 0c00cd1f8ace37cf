"""GPU: torch.compile(fullgraph=True) of a small attention block calling tsattn.batch_prefill,
compared with eager (no graph break: fullgraph=True raises on any)."""

import os
import subprocess
import sys

import pytest
import torch

import tsattn

from support import assert_close_to_reference, reference
from tsattn import _ops

pytestmark = pytest.mark.skipif(not _ops.AVAILABLE, reason="skipped: torch.library.custom_op needs torch >= 2.4")


class AttentionBlock(torch.nn.Module):
    """linear -> fused QKV views -> batch_prefill (causal, GQA) -> linear."""

    def __init__(self, embed=256, hq=4, hkv=2, d=128):
        super().__init__()
        self.hq, self.hkv, self.d = hq, hkv, d
        self.qkv = torch.nn.Linear(embed, (hq + 2 * hkv) * d)
        self.proj = torch.nn.Linear(hq * d, embed)

    def attention_inputs(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, self.hq + 2 * self.hkv, self.d)
        return qkv[:, :, : self.hq], qkv[:, :, self.hq : self.hq + self.hkv], qkv[:, :, self.hq + self.hkv :]

    def forward(self, x):
        q, k, v = self.attention_inputs(x)
        o = tsattn.batch_prefill(q, k, v, mask_type="causal")
        return self.proj(o.reshape(x.shape[0], x.shape[1], self.hq * self.d))


def test_compiled_block_matches_eager():
    torch.manual_seed(21)
    torch._dynamo.reset()
    block = AttentionBlock().to(device="cuda", dtype=torch.float16)
    x = 0.2 * torch.randn(2, 129, 256, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        eager = block(x)
        compiled = torch.compile(block, fullgraph=True)(x)
        q, k, v = block.attention_inputs(x)
        attn = reference(q, k, v, mask_type="causal")
        oracle = block.proj(attn.to(torch.float16).reshape(2, 129, -1))
    torch.cuda.synchronize()
    assert compiled.shape == eager.shape and compiled.dtype == eager.dtype
    assert torch.isfinite(compiled).all()
    torch.testing.assert_close(compiled, eager, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(eager, oracle, rtol=2e-2, atol=2e-2)


def test_compiled_out_variant_and_packed():
    torch.manual_seed(22)
    torch._dynamo.reset()
    qo = torch.tensor([0, 17, 17, 146], dtype=torch.int32)
    kv = torch.tensor([0, 17, 20, 149], dtype=torch.int32)
    q = 0.2 * torch.randn(146, 4, 128, device="cuda", dtype=torch.bfloat16)
    k = 0.2 * torch.randn(149, 1, 128, device="cuda", dtype=torch.bfloat16)
    v = 0.2 * torch.randn(149, 1, 128, device="cuda", dtype=torch.bfloat16)

    def fn(q, k, v, out):
        tsattn.batch_prefill(q * 1.0, k, v, qo_indptr=qo, kv_indptr=kv, mask_type="causal", out=out)
        return out.float() * 2

    out = torch.full(q.shape, float("nan"), device="cuda", dtype=torch.float16)
    doubled = torch.compile(fn, fullgraph=True)(q, k, v, out)
    torch.cuda.synchronize()
    expected = reference(q, k, v, qo_indptr=qo, kv_indptr=kv, mask_type="causal")
    assert_close_to_reference(out, expected, torch.bfloat16, "compiled out= variant")
    torch.testing.assert_close(doubled, out.float() * 2)


def test_eager_first_call_skips_the_dispatcher_and_dynamo():
    """A fresh process's first eager call goes straight to the library: torch._dynamo (imported by
    the custom op's first call, seconds) stays unimported, and the output matches the reference."""
    script = r"""
import sys, torch, tsattn
from support import assert_close_to_reference, poisoned, randn, reference
q, k, v = (randn((1, 129, h, 128), torch.bfloat16) for h in (4, 2, 2))
out = poisoned(q.shape, torch.bfloat16)
tsattn.batch_prefill(q, k, v, mask_type="causal", out=out)
torch.cuda.synchronize()
assert_close_to_reference(out, reference(q, k, v, mask_type="causal"), torch.bfloat16, "fresh process")
print("dynamo imported:", "torch._dynamo" in sys.modules)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # this package, support.py
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "dynamo imported: False" in run.stdout, run.stdout
