"""profile_call.py - one tsattn call to put under a profiler (ncu, nsys): B=1, S=8192, 32/8 heads.

    usage: python3 tools/profile/profile_call.py DTYPE HEAD_DIM MASK   (bf16|f16|fp8, 128|256, dense|causal)
The first call loads (or compiles) the kernel; profile the second, e.g.
    ncu --kernel-name regex:prefill --launch-skip 1 --launch-count 1 python3 tools/profile/profile_call.py fp8 128 causal
"""

import sys

import torch

import tsattn

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "fp8": torch.float8_e4m3fn}


def main() -> None:
    dtype, head_dim, mask = DTYPES[sys.argv[1]], int(sys.argv[2]), sys.argv[3]
    scale = 0.125 if dtype == torch.float8_e4m3fn else 0.2

    def rnd(heads):
        return (scale * torch.randn(1, 8192, heads, head_dim, device="cuda")).to(dtype)

    q, k, v = rnd(32), rnd(8), rnd(8)
    for _ in range(2):
        tsattn.batch_prefill(q, k, v, mask_type=mask, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()
    print(tsattn.last_kernel_name())


if __name__ == "__main__":
    main()
