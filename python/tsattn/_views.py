"""torch.Tensor -> tsattn_tensor_view, and the dtype codes of the C ABI (tsattn_dtype).

A call hands C its views and options through a ``ViewBuffer``: one pinned buffer at fixed addresses
that a call rewrites in place with ``struct.pack_into``, so a call builds no ctypes object.
"""

from __future__ import annotations

import ctypes
import struct
from typing import Dict, Optional

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

_DEVICE_CPU, _DEVICE_CUDA = 1, 2
MAX_RANK = 8  # tsattn_tensor_view's limit

_STRUCT_CODES = {
    ctypes.c_size_t: "N",
    ctypes.c_int32: "i",
    ctypes.c_int64: "q",
    ctypes.c_double: "d",
    ctypes.c_void_p: "P",
}


def packer_for(structure) -> struct.Struct:
    """A struct.Struct with the byte layout of a ctypes Structure (every field, in order, at the
    offset ctypes gives it), so that pack_into writes what C reads. Pointers pack as addresses."""
    parts, end = [], 0
    for name, field_type in structure._fields_:
        offset = getattr(structure, name).offset
        parts.append(f"{offset - end}x" if offset > end else "")
        code = "P" if issubclass(field_type, ctypes._Pointer) else _STRUCT_CODES[field_type]
        parts.append(code)
        end = offset + ctypes.sizeof(field_type)
    tail = ctypes.sizeof(structure) - end
    packer = struct.Struct("@" + "".join(parts) + (f"{tail}x" if tail else ""))
    assert packer.size == ctypes.sizeof(structure)
    return packer


_VIEW = packer_for(TensorView)
_SHAPE_BYTES = 8 * MAX_RANK
# A view and its dims in one pack: shape[0:n] right after the view, strides[0:n] _SHAPE_BYTES further
# (_STRIDED) or none (_CONTIGUOUS: a contiguous tensor's view has strides = NULL, compact row-major).
_VIEW_FORMAT = _VIEW.format
_STRIDED = [struct.Struct(f"{_VIEW_FORMAT}{n}q{8 * (MAX_RANK - n)}x{n}q") for n in range(MAX_RANK + 1)]
_CONTIGUOUS = [struct.Struct(f"{_VIEW_FORMAT}{n}q") for n in range(MAX_RANK + 1)]
_SLOT = _VIEW.size + 2 * _SHAPE_BYTES  # one view and its dims


def dtype_code(dtype: torch.dtype) -> int:
    return DTYPE_CODES.get(dtype, DTYPE_OTHER)


class ViewBuffer:
    """``slots`` tensor views and one options struct (packed by ``options``) in one buffer whose
    addresses never change. A call puts its tensors into slots and packs its options, then passes
    the addresses to C; the library keeps no pointer past the call, so the next call may rewrite
    them. One buffer serves one thread at a time."""

    def __init__(self, slots: int, options: struct.Struct) -> None:
        self._buffer = bytearray(_SLOT * slots + options.size)
        # The ctypes view pins the buffer: a bytearray cannot move while it is exported.
        self._memory = (ctypes.c_char * len(self._buffer)).from_buffer(self._buffer)
        base = ctypes.addressof(self._memory)
        self.addresses = [base + slot * _SLOT for slot in range(slots)]
        self._dims = [address + _VIEW.size for address in self.addresses]
        self._options = options
        self._options_offset = _SLOT * slots
        self.options_address = base + self._options_offset

    def put(self, slot: int, tensor: torch.Tensor, name: str, check_layout: bool = True) -> int:
        """Rewrites the view of `slot` for tensor (a CUDA tensor, or a host one: indptrs) and
        returns its address. Only Python can see a tensor that is not strided memory on the host or
        a CUDA device, or that has more dims than a view holds: those are ValueErrors here."""
        if check_layout and tensor.layout is not torch.strided:
            raise ValueError(f"{name} must be a dense strided tensor (got layout {tensor.layout})")
        device_id = tensor.get_device()  # -1: not a CUDA tensor
        if device_id >= 0:
            device_type = _DEVICE_CUDA
        elif tensor.is_cpu:
            device_type, device_id = _DEVICE_CPU, 0
        else:
            raise ValueError(f"{name} must be a CUDA tensor (got a tensor on {tensor.device})")
        shape = tensor.shape
        ndim = len(shape)
        if ndim > MAX_RANK:
            raise ValueError(f"{name}.ndim={ndim} is out of range [0, {MAX_RANK}]")
        dims = self._dims[slot]
        code = DTYPE_CODES.get(tensor.dtype, DTYPE_OTHER)
        if tensor.is_contiguous():
            _CONTIGUOUS[ndim].pack_into(
                self._buffer, slot * _SLOT, tensor.data_ptr(), code, device_type, device_id, ndim, dims, 0, *shape
            )
        else:
            _STRIDED[ndim].pack_into(
                self._buffer,
                slot * _SLOT,
                tensor.data_ptr(),
                code,
                device_type,
                device_id,
                ndim,
                dims,
                dims + _SHAPE_BYTES,
                *shape,
                *tensor.stride(),
            )
        return self.addresses[slot]

    def put_optional(self, slot: int, tensor: Optional[torch.Tensor], name: str, check_layout: bool = True):
        """put() for a tensor that may be None (-> None, C's NULL)."""
        return None if tensor is None else self.put(slot, tensor, name, check_layout)

    def pack_options(self, *values) -> int:
        """Writes the options struct (every field, in order) and returns its address."""
        self._options.pack_into(self._buffer, self._options_offset, *values)
        return self.options_address


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream(index: int) -> int:
    """torch's current stream of cuda:index, as the CUstream address (0: the legacy default stream)."""
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream
