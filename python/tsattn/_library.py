"""Finding and loading libtsattn through ctypes, and the C ABI's structs and prototypes.

Nothing here runs at import time: ``import tsattn`` works without the library. The first call
that needs it runs :func:`library`, which searches, in order,

1. ``$TSATTN_LIBRARY`` (a path to libtsattn.so; if it is set and does not load, that is the error:
   an explicit choice never falls back to another copy),
2. next to the package: ``tsattn/lib/libtsattn.so*``,
3. the repository's build tree, ``<repo>/build/libtsattn.so``, when the package runs from a checkout,
4. ``ctypes.util.find_library("tsattn")`` (the system's library path),

and raises RuntimeError naming every place it looked when none loads.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path
from typing import Iterator, Optional, Tuple

ABI_VERSION = 2  # TSATTN_ABI_VERSION this binding was written for

# tsattn_status -> Python exception (docs/contract.md, "Errors")
STATUS_OK = 0
_STATUS_EXCEPTIONS = {
    1: TypeError,
    2: ValueError,
    3: NotImplementedError,
    4: RuntimeError,
}


class TensorView(ctypes.Structure):
    """tsattn_tensor_view"""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
    ]


class PrefillOptions(ctypes.Structure):
    """tsattn_prefill_options"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("mask_type", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("variable_window_token_starts", ctypes.POINTER(TensorView)),
        ("variable_window_token_ends", ctypes.POINTER(TensorView)),
        ("has_sm_scale", ctypes.c_int32),
        ("sm_scale", ctypes.c_double),
        ("output_scale", ctypes.c_double),
        ("out_dtype", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
        ("lse", ctypes.POINTER(TensorView)),
    ]


class PlanOptions(ctypes.Structure):
    """tsattn_prefill_plan_options"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device_id", ctypes.c_int32),
        ("layout", ctypes.c_int32),
        ("batch_size", ctypes.c_int64),
        ("max_seq_len_q", ctypes.c_int64),
        ("max_kv_len", ctypes.c_int64),
        ("num_qo_heads", ctypes.c_int32),
        ("num_kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("q_dtype", ctypes.c_int32),
        ("kv_dtype", ctypes.c_int32),
        ("out_dtype", ctypes.c_int32),
        ("mask_type", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("has_sm_scale", ctypes.c_int32),
        ("sm_scale", ctypes.c_double),
        ("output_scale", ctypes.c_double),
    ]


class PagedPlanOptions(ctypes.Structure):
    """tsattn_paged_prefill_plan_options"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device_id", ctypes.c_int32),
        ("batch_size", ctypes.c_int64),
        ("max_seq_len_q", ctypes.c_int64),
        ("max_kv_len", ctypes.c_int64),
        ("num_qo_heads", ctypes.c_int32),
        ("num_kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("q_dtype", ctypes.c_int32),
        ("kv_dtype", ctypes.c_int32),
        ("out_dtype", ctypes.c_int32),
        ("mask_type", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("has_sm_scale", ctypes.c_int32),
        ("sm_scale", ctypes.c_double),
        ("output_scale", ctypes.c_double),
        ("page_size", ctypes.c_int64),
        ("kv_layout", ctypes.c_int32),
    ]


class RunOptions(ctypes.Structure):
    """tsattn_prefill_run_options"""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("variable_window_token_starts", ctypes.c_void_p),
        ("variable_window_token_ends", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("validate", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
    ]


CACHE_STAT_FIELDS = (
    "memory_hits",
    "memory_misses",
    "compiles",
    "compile_failures",
    "disk_lookups",
    "disk_read_only_hits",
    "disk_writable_hits",
    "disk_misses",
    "disk_damaged",
    "disk_writes",
    "disk_write_failures",
    "modules_loaded",
)


class CacheStats(ctypes.Structure):
    """tsattn_cache_stats"""

    _fields_ = [("struct_size", ctypes.c_size_t)] + [(name, ctypes.c_uint64) for name in CACHE_STAT_FIELDS]


_VIEW_P = ctypes.POINTER(TensorView)
_I64_P = ctypes.POINTER(ctypes.c_int64)

# name -> (restype, argtypes); the optional ones may be missing from an older library.
_PROTOTYPES = {
    "tsattn_prefill_options_init": (None, [ctypes.POINTER(PrefillOptions)]),
    # Addresses as plain ints: calls pass views they keep at fixed addresses (_views.ViewBuffer).
    "tsattn_batch_prefill": (ctypes.c_int, [ctypes.c_void_p] * 7),
    "tsattn_prefill_plan_options_init": (None, [ctypes.POINTER(PlanOptions)]),
    "tsattn_prefill_plan_create": (ctypes.c_int, [ctypes.POINTER(PlanOptions), ctypes.POINTER(ctypes.c_void_p)]),
    "tsattn_prefill_plan_run": (ctypes.c_int, [ctypes.c_void_p] * 8),
    "tsattn_prefill_plan_destroy": (None, [ctypes.c_void_p]),
    "tsattn_last_error_message": (ctypes.c_char_p, []),
    "tsattn_version_string": (ctypes.c_char_p, []),
    "tsattn_abi_version": (ctypes.c_int32, []),
}
_OPTIONAL_PROTOTYPES = {
    "tsattn_get_cache_stats": (ctypes.c_int, [ctypes.POINTER(CacheStats)]),
    "tsattn_precompile": (
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int32, _I64_P, _I64_P, _I64_P],
    ),
    "tsattn_last_kernel_name": (ctypes.c_char_p, []),
    # Views and the stream as addresses, as tsattn_batch_prefill's.
    "tsattn_merge_state": (ctypes.c_int, [ctypes.c_void_p] * 7),
    "tsattn_merge_states": (ctypes.c_int, [ctypes.c_void_p] * 5),
    "tsattn_batch_prefill_with_paged_kv_cache": (
        ctypes.c_int,
        [ctypes.c_void_p] * 7 + [ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p],
    ),
    "tsattn_paged_prefill_plan_options_init": (None, [ctypes.POINTER(PagedPlanOptions)]),
    "tsattn_paged_prefill_plan_create": (
        ctypes.c_int,
        [ctypes.POINTER(PagedPlanOptions), ctypes.POINTER(ctypes.c_void_p)],
    ),
    "tsattn_paged_prefill_plan_run": (ctypes.c_int, [ctypes.c_void_p] * 10),
    "tsattn_paged_prefill_plan_destroy": (None, [ctypes.c_void_p]),
}

_lock = threading.Lock()
_loaded: Optional[Tuple[ctypes.CDLL, str]] = None


def repo_root() -> Optional[Path]:
    """The checkout this package runs from (python/tsattn/ inside the repository), if any."""
    root = Path(__file__).resolve().parent.parent.parent
    if (root / "include" / "tsattn" / "tsattn.h").is_file() and (root / "CMakeLists.txt").is_file():
        return root
    return None


def search_locations() -> Iterator[Tuple[str, Optional[str]]]:
    """(description, path or None) for each place searched after $TSATTN_LIBRARY, in order.
    A generator: find_library (which runs ldconfig) is only consulted when reached."""
    lib_dir = Path(__file__).resolve().parent / "lib"
    found = sorted(lib_dir.glob("libtsattn.so*"), key=lambda p: (len(p.name), p.name))
    if found:
        for p in found:
            yield "next to the package", str(p)
    else:
        yield "next to the package", str(lib_dir / "libtsattn.so*")
    root = repo_root()
    yield "repository build tree", None if root is None else str(root / "build" / "libtsattn.so")
    yield 'ctypes.util.find_library("tsattn")', ctypes.util.find_library("tsattn")


def _open(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)  # AttributeError: not a libtsattn
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, argtypes) in _OPTIONAL_PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes
    abi = lib.tsattn_abi_version()
    if abi != ABI_VERSION:
        raise OSError(f"ABI version {abi}, but this tsattn package needs ABI version {ABI_VERSION}")
    return lib


def _load() -> Tuple[ctypes.CDLL, str]:
    explicit = os.environ.get("TSATTN_LIBRARY")
    if explicit:
        try:
            return _open(explicit), explicit
        except (OSError, AttributeError) as e:
            raise RuntimeError(
                f"tsattn: TSATTN_LIBRARY={explicit!r} could not be loaded: {e}. "
                "Point TSATTN_LIBRARY at a libtsattn.so built from this repository "
                "(cmake --build build --target tsattn_shared), or unset it to search the default places."
            ) from None
    tried = ["$TSATTN_LIBRARY (not set)"]
    for description, path in search_locations():
        if path is None:
            tried.append(
                f"{description}: not available (not running from a checkout)"
                if description == "repository build tree"
                else f"{description}: not found"
            )
            continue
        if "*" in path or (os.sep in path and not os.path.exists(path)):
            tried.append(f"{description}: {path} (not found)")
            continue
        try:
            return _open(path), path
        except (OSError, AttributeError) as e:
            tried.append(f"{description}: {path} ({e})")
    raise RuntimeError(
        "tsattn: libtsattn.so was not found. Looked in:\n  - "
        + "\n  - ".join(tried)
        + "\nInstall the tsattn wheel (it carries the library in tsattn/lib/), build it in a checkout "
        "(cmake -S . -B build -G Ninja && cmake --build build --target tsattn_shared), "
        "or set TSATTN_LIBRARY to its path."
    )


def library() -> ctypes.CDLL:
    """The loaded libtsattn (loaded on first use; RuntimeError if it cannot be found)."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _load()
    return _loaded[0]


def library_path() -> str:
    """The path libtsattn was loaded from (loads it if needed)."""
    library()
    assert _loaded is not None
    return _loaded[1]


def function(name: str):
    """An optional entry point; RuntimeError if this libtsattn does not export it."""
    fn = getattr(library(), name, None)
    if fn is None:
        raise RuntimeError(
            f"tsattn: the loaded library ({library_path()}) does not export {name}(); "
            "rebuild libtsattn from a newer checkout"
        )
    return fn


def check(status: int) -> None:
    """Raises the contract's exception for a non-OK status, with the library's message."""
    if status == STATUS_OK:
        return
    message = library().tsattn_last_error_message()
    text = message.decode("utf-8", "replace") if message else ""
    exc = _STATUS_EXCEPTIONS.get(status, RuntimeError)
    if status not in _STATUS_EXCEPTIONS:
        text = f"tsattn returned unknown status {status}: {text}"
    raise exc(text or f"tsattn failed with status {status}")
