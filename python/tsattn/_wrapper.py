"""BatchPrefillTSWrapper and BatchPrefillPagedTSWrapper: plan once, run every layer (docs/contract.md,
"Plan once, run every layer"; docs/paged_kv.md for the paged one).

``plan()`` checks the settings and has the library choose and load the kernel and allocate the
plan's workspace (``tsattn_prefill_plan_create``); it may take milliseconds (seconds when the kernel
is compiled). ``run()`` only hands tensors over: the ``tsattn_tensor_view``s and run options live in
one buffer at fixed addresses and are rewritten in place with ``struct.pack_into``, so a run builds
no ctypes object and calls one C function.
"""

from __future__ import annotations

import ctypes
import numbers
from typing import Optional

import torch

from . import _library
from ._args import (
    _is_bool,
    attention_dtype_code,
    check_page_size,
    check_paged_mask,
    check_paged_tensors,
    check_scalars,
    check_tensors,
    kv_layout_code,
)
from ._call import MASK_CODES
from ._views import CODE_DTYPES, DTYPE_UNSET, ViewBuffer, current_stream, packer_for

_Q, _K, _V, _OUT, _QO, _KV, _STARTS, _ENDS, _LSE = range(9)
_RUN_OPTIONS = packer_for(_library.RunOptions)
_RUN_OPTIONS_SIZE = ctypes.sizeof(_library.RunOptions)


def _check_int(value, name: str, bits: int) -> int:
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int (got {type(value).__name__}: {value!r})")
    value = int(value)
    # ctypes stores an int field modulo 2^bits, so C would see another value than the caller's.
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise ValueError(f"{name}={value} does not fit in int{bits}")
    return value


def _device_index(device) -> int:
    if _is_bool(device) or not isinstance(device, (torch.device, str, numbers.Integral)):
        raise TypeError(f"device must be a torch.device, str or int (got {type(device).__name__}: {device!r})")
    try:
        resolved = torch.device(int(device) if isinstance(device, numbers.Integral) else device)
    except RuntimeError as e:
        raise ValueError(f"device={device!r} is not a device: {e}") from None
    if resolved.type != "cuda":
        raise ValueError(f"device must be a CUDA device (got {resolved})")
    if resolved.index is not None:
        return resolved.index
    return torch.cuda.current_device() if torch.cuda.is_available() else 0


def _check_run_flags(return_lse, validate) -> None:
    if return_lse is not True and return_lse is not False:
        raise TypeError(f"return_lse must be a bool (got {type(return_lse).__name__}: {return_lse!r})")
    if validate is not True and validate is not False:
        raise TypeError(f"validate must be a bool (got {type(validate).__name__}: {validate!r})")


def _plan_options(options, settings: dict):
    """Checks the settings both wrappers' plan() share (device, capacities, heads, dtypes, mask and
    scales; ``settings``: plan()'s arguments by their names, its ``locals()``) and writes them into
    ``options`` (a plan options struct its ``_init`` filled); returns the device index and the checked
    scalars."""
    index = _device_index(settings["device"])
    capacities = [_check_int(settings[name], name, 64) for name in ("batch_size", "max_seq_len_q", "max_kv_len")]
    heads = [_check_int(settings[name], name, 32) for name in ("num_qo_heads", "num_kv_heads", "head_dim")]
    q_code = attention_dtype_code(settings["q_dtype"], "q_dtype")
    kv_code = attention_dtype_code(settings["kv_dtype"], "kv_dtype")
    s = check_scalars(
        settings["mask_type"],
        settings["window_left"],
        settings["sm_scale"],
        settings["output_scale"],
        settings["out_dtype"],
    )
    options.struct_size = ctypes.sizeof(type(options))
    options.device_id = index
    options.batch_size, options.max_seq_len_q, options.max_kv_len = capacities
    options.num_qo_heads, options.num_kv_heads, options.head_dim = heads
    options.q_dtype = q_code
    options.kv_dtype = kv_code
    options.out_dtype = s.out_dtype_code
    options.mask_type = MASK_CODES[s.mask_type]
    options.window_left = s.window_left
    options.has_sm_scale = 0 if s.sm_scale is None else 1
    options.sm_scale = 0.0 if s.sm_scale is None else s.sm_scale
    options.output_scale = s.output_scale
    return index, s


class BatchPrefillTSWrapper:
    """Plan once, run every layer: ``plan()`` fixes everything that does not depend on tensor
    values and capacities (batch size, per-request lengths) and owns the workspace; ``run()`` then
    only launches, on torch's current stream, as often as needed with any shapes within the
    capacities. One wrapper per stream or thread of use: its runs share its workspace, so they must
    be ordered on the device. ``run`` is bit for bit ``batch_prefill`` with the same arguments.
    """

    def __init__(self) -> None:
        self._handle: Optional[int] = None
        self._lib = None
        self._views = ViewBuffer(9, _RUN_OPTIONS)

    def plan(
        self,
        *,
        device,
        batch_size: int,
        max_seq_len_q: int,
        max_kv_len: int,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        q_dtype: torch.dtype,
        kv_dtype: torch.dtype,
        out_dtype: Optional[torch.dtype] = None,
        packed: bool = False,
        mask_type: str = "dense",
        window_left: int = -1,
        sm_scale: Optional[float] = None,
        output_scale: float = 1.0,
    ) -> None:
        """Checks the settings, chooses and loads the kernel (compiling it on first use) and
        allocates the workspace on ``device``. Replaces a previous plan; if it fails, the wrapper
        holds no plan."""
        if not isinstance(packed, bool):
            raise TypeError(f"packed must be a bool (got {type(packed).__name__}: {packed!r})")
        lib = _library.library()
        options = _library.PlanOptions()
        lib.tsattn_prefill_plan_options_init(ctypes.byref(options))
        index, s = _plan_options(options, locals())
        options.layout = 1 if packed else 0

        self._release()
        handle = ctypes.c_void_p()
        _library.check(lib.tsattn_prefill_plan_create(ctypes.byref(options), ctypes.byref(handle)))
        self._lib = lib
        self._run_c = lib.tsattn_prefill_plan_run
        self._handle = handle.value
        self._device_index = index
        self._out_dtype = q_dtype if s.out_dtype_code == DTYPE_UNSET else CODE_DTYPES[s.out_dtype_code]

    def run(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        qo_indptr: Optional[torch.Tensor] = None,
        kv_indptr: Optional[torch.Tensor] = None,
        *,
        variable_window_token_starts: Optional[torch.Tensor] = None,
        variable_window_token_ends: Optional[torch.Tensor] = None,
        out: Optional[torch.Tensor] = None,
        return_lse: bool = False,
        validate: bool = True,
    ):
        """out = attention(q, k, v) with the plan's settings, queued on torch's current stream of
        the plan's device; returns out (allocated when not given), or ``(out, lse)`` with
        ``return_lse=True``: lse float32 of q.shape[:-1], the natural-log log-sum-exp of each row's
        scaled scores, -inf for a row that sees no key. Tensors as ``batch_prefill`` takes them;
        shapes and host indptr values within the plan's capacities. ``validate=False`` skips the
        host checks (lengths beyond the capacities are clamped, never read out of bounds)."""
        _check_run_flags(return_lse, validate)
        handle = self._handle
        if handle is None:
            raise RuntimeError("BatchPrefillTSWrapper.run() needs a plan: call plan() first")
        starts, ends = variable_window_token_starts, variable_window_token_ends
        check_tensors(q, k, v, qo_indptr, kv_indptr, starts, ends, out)
        if out is None:
            out = torch.empty_like(q, dtype=self._out_dtype, memory_format=torch.contiguous_format)

        views = self._views
        put = views.put
        q_view = put(_Q, q, "q", validate)
        k_view = put(_K, k, "k", validate)
        v_view = put(_V, v, "v", validate)
        out_view = put(_OUT, out, "out", validate)
        qo = None if qo_indptr is None else put(_QO, qo_indptr, "qo_indptr", validate)
        kv = None if kv_indptr is None else put(_KV, kv_indptr, "kv_indptr", validate)
        lse = None
        if return_lse:
            lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
        options = views.pack_options(
            _RUN_OPTIONS_SIZE,
            0 if starts is None else put(_STARTS, starts, "variable_window_token_starts", validate),
            0 if ends is None else put(_ENDS, ends, "variable_window_token_ends", validate),
            0 if lse is None else put(_LSE, lse, "lse", validate),
            1 if validate else 0,
            current_stream(self._device_index),
        )
        status = self._run_c(handle, q_view, k_view, v_view, qo, kv, options, out_view)
        if status:
            _library.check(status)
        return (out, lse) if return_lse else out

    def _release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None and self._lib is not None:
            self._lib.tsattn_prefill_plan_destroy(handle)

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:  # interpreter shutdown: the library may already be gone
            pass


class BatchPrefillPagedTSWrapper:
    """``BatchPrefillTSWrapper`` for a paged KV cache (docs/paged_kv.md): ``plan()`` fixes the
    settings, the capacities (batch size, per-request query and key counts), the page size and the
    layout, and owns the workspace of its page tables (and, where the kernel cannot read pages, of
    the keys gathered from them: docs/paged_kv.md, "Memory"); ``run()`` then only launches, on
    torch's current stream. Within the capacities a run needs no re-plan; outside them it is a
    ValueError (``validate=True``) or clamped on the device (``validate=False``). With the tables on
    the GPU a run allocates nothing, never waits for the device and can be captured in a CUDA graph.
    ``run`` is bit for bit ``batch_prefill_with_paged_kv_cache`` with the same arguments.
    """

    def __init__(self) -> None:
        self._handle: Optional[int] = None
        self._lib = None
        self._views = ViewBuffer(9, _RUN_OPTIONS)

    def plan(
        self,
        *,
        device,
        batch_size: int,
        max_seq_len_q: int,
        max_kv_len: int,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        q_dtype: torch.dtype,
        kv_dtype: torch.dtype,
        out_dtype: Optional[torch.dtype] = None,
        page_size: int = 32,
        kv_layout: str = "HND",
        mask_type: str = "dense",
        window_left: int = -1,
        sm_scale: Optional[float] = None,
        output_scale: float = 1.0,
    ) -> None:
        """Checks the settings, chooses and loads the kernels (compiling them on first use) and
        allocates the workspace on ``device``: batch_size * max_kv_len keys of K and of V besides the
        attention's. Replaces a previous plan; if it fails, the wrapper holds no plan."""
        page = check_page_size(page_size)
        layout = kv_layout_code(kv_layout)
        lib = _library.library()
        options = _library.PagedPlanOptions()
        _library.function("tsattn_paged_prefill_plan_options_init")(ctypes.byref(options))
        index, s = _plan_options(options, locals())
        check_paged_mask(s.mask_type)
        options.page_size = page
        options.kv_layout = layout

        self._release()
        handle = ctypes.c_void_p()
        create = _library.function("tsattn_paged_prefill_plan_create")
        _library.check(create(ctypes.byref(options), ctypes.byref(handle)))
        self._lib = lib
        self._run_c = _library.function("tsattn_paged_prefill_plan_run")
        self._handle = handle.value
        self._device_index = index
        self._out_dtype = q_dtype if s.out_dtype_code == DTYPE_UNSET else CODE_DTYPES[s.out_dtype_code]

    def run(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        qo_indptr: torch.Tensor,
        paged_kv_indptr: torch.Tensor,
        paged_kv_indices: torch.Tensor,
        paged_kv_last_page_len: torch.Tensor,
        *,
        out: Optional[torch.Tensor] = None,
        return_lse: bool = False,
        validate: bool = True,
    ):
        """out = the paged attention with the plan's settings, queued on torch's current stream of
        the plan's device; returns out (allocated when not given), or ``(out, lse)`` with
        ``return_lse=True`` (lse as ``BatchPrefillTSWrapper.run`` returns it). Tensors as
        ``batch_prefill_with_paged_kv_cache`` takes them; shapes and host table values within the
        plan's capacities. ``validate=False`` skips the host checks (values beyond the capacities are
        clamped, never read out of bounds)."""
        _check_run_flags(return_lse, validate)
        handle = self._handle
        if handle is None:
            raise RuntimeError("BatchPrefillPagedTSWrapper.run() needs a plan: call plan() first")
        tables = (qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len)
        check_paged_tensors(q, k_cache, v_cache, tables, out)
        if out is None:
            out = torch.empty_like(q, dtype=self._out_dtype, memory_format=torch.contiguous_format)

        views = self._views
        put = views.put
        addresses = [
            put(slot, tensor, name, validate)
            for slot, (tensor, name) in enumerate(
                (
                    (q, "q"),
                    (k_cache, "k_cache"),
                    (v_cache, "v_cache"),
                    (qo_indptr, "qo_indptr"),
                    (paged_kv_indptr, "paged_kv_indptr"),
                    (paged_kv_indices, "paged_kv_indices"),
                    (paged_kv_last_page_len, "paged_kv_last_page_len"),
                    (out, "out"),
                )
            )
        ]
        lse = None
        if return_lse:
            lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
        options = views.pack_options(
            _RUN_OPTIONS_SIZE,
            0,
            0,
            0 if lse is None else put(8, lse, "lse", validate),
            1 if validate else 0,
            current_stream(self._device_index),
        )
        status = self._run_c(handle, *addresses[:7], options, addresses[7])
        if status:
            _library.check(status)
        return (out, lse) if return_lse else out

    def _release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None and self._lib is not None:
            _library.function("tsattn_paged_prefill_plan_destroy")(handle)

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:  # interpreter shutdown: the library may already be gone
            pass
