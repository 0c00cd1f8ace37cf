"""torch.Tensor -> tsattn_tensor_view, and the dtype codes of the C ABI (tsattn_dtype)."""

from __future__ import annotations

import ctypes
from typing import Dict, List, Optional

import torch

from ._library import TensorView

DTYPE_UNSET = 0
DTYPE_OTHER = 255

DTYPE_CODES: Dict[torch.dtype, int] = {
    torch.float16: 1,
    torch.bfloat16: 2,
    torch.float32: 4,
    torch.float64: 5,
    torch.int32: 6,
    torch.int64: 7,
    torch.int16: 8,
    torch.int8: 9,
    torch.uint8: 10,
    torch.bool: 11,
}
FLOAT8_E4M3FN = getattr(torch, "float8_e4m3fn", None)  # torch >= 2.1
if FLOAT8_E4M3FN is not None:
    DTYPE_CODES[FLOAT8_E4M3FN] = 3
if getattr(torch, "float8_e5m2", None) is not None:
    DTYPE_CODES[torch.float8_e5m2] = 12

# The attention dtypes (q/k/v and out), in the C ABI's codes.
ATTENTION_DTYPES = tuple(d for d in (torch.float16, torch.bfloat16, FLOAT8_E4M3FN) if d is not None)
CODE_DTYPES: Dict[int, torch.dtype] = {DTYPE_CODES[d]: d for d in ATTENTION_DTYPES}

_DEVICE_CPU = 1
_DEVICE_CUDA = 2


def dtype_code(dtype: torch.dtype) -> int:
    return DTYPE_CODES.get(dtype, DTYPE_OTHER)


class ViewHolder:
    """Builds tensor views and keeps every tensor and ctypes array alive until it is dropped."""

    def __init__(self) -> None:
        self._keep: List[object] = []

    def view(self, tensor: Optional[torch.Tensor], name: str):
        """A pointer to a tsattn_tensor_view of tensor (None -> NULL)."""
        if tensor is None:
            return None
        # A tensor view is strided memory on the host or a CUDA device: C cannot be told of anything else.
        if tensor.layout != torch.strided:
            raise ValueError(f"{name} must be a dense strided tensor (got layout {tensor.layout})")
        device = tensor.device
        if device.type == "cuda":
            device_type, device_id = _DEVICE_CUDA, device.index if device.index is not None else 0
        elif device.type == "cpu":
            device_type, device_id = _DEVICE_CPU, 0
        else:
            raise ValueError(f"{name} must be a CUDA tensor (got a tensor on {device})")
        ndim = tensor.dim()
        shape = (ctypes.c_int64 * max(ndim, 1))(*tensor.shape)
        strides = (ctypes.c_int64 * max(ndim, 1))(*tensor.stride())
        view = TensorView(
            data=tensor.data_ptr() or None,
            dtype=dtype_code(tensor.dtype),
            device_type=device_type,
            device_id=device_id,
            ndim=ndim,
            shape=shape,
            strides=strides,
        )
        self._keep.extend((tensor, shape, strides, view))
        return ctypes.pointer(view)
