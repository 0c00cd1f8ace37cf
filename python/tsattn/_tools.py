"""Library-level helpers: version, the last kernel launched, kernel-cache counters, ahead-of-time compilation."""

from __future__ import annotations

import ctypes
import numbers
import os
from typing import Dict, Optional, Sequence, Union

from . import _library


def library_version() -> str:
    """tsattn_version_string() of the loaded libtsattn ("MAJOR.MINOR.PATCH")."""
    return _library.library().tsattn_version_string().decode()


def library_path() -> str:
    """Where libtsattn was loaded from."""
    return _library.library_path()


def last_kernel_name() -> str:
    """The canonical name of the kernel the last ``batch_prefill`` on this thread launched, e.g.
    ``"prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed"`` (family, cubin arch, head dim, input and
    output dtypes, mask, layout; ``.short_keys`` follows for the Hopper family's variant of narrower
    key tiles, chosen by the call's key lengths; ``.lse`` ends the name of a kernel that writes the
    log-sum-exp output); ``""`` before any call and after a call that failed or had nothing
    to launch. Shows which kernel family ran (Hopper GPUs run fp8 inputs, for one, on ``sm80``).
    """
    name = _library.function("tsattn_last_kernel_name")()
    return name.decode() if name else ""


def cache_info() -> Dict[str, int]:
    """This process's kernel-cache counters (tsattn_get_cache_stats) as a dict of ints."""
    fn = _library.function("tsattn_get_cache_stats")
    stats = _library.CacheStats()
    stats.struct_size = ctypes.sizeof(_library.CacheStats)
    _library.check(fn(ctypes.byref(stats)))
    return {name: int(getattr(stats, name)) for name in _library.CACHE_STAT_FIELDS}


def precompile(
    manifest_path: Union[str, "os.PathLike[str]"],
    archs: Union[str, Sequence[str]] = "sm_90a",
    out_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
    jobs: int = 0,
) -> Dict[str, int]:
    """Compiles every kernel of a manifest (a built-in name: "default", "all", "llama3", "gemma"; or
    a JSON file's path) for ``archs`` into ``out_dir``
    (None: the user cache). Needs no GPU. Returns ``dict(compiled=, cached=, failed=)``.
    ValueError for a bad manifest or arch list, RuntimeError if a kernel failed to compile.
    """
    if not isinstance(manifest_path, (str, os.PathLike)):
        raise TypeError(f"manifest_path must be a str or os.PathLike (got {type(manifest_path).__name__})")
    if isinstance(archs, str):
        arch_text = archs
    elif isinstance(archs, Sequence) and all(isinstance(a, str) for a in archs):
        arch_text = ",".join(archs)
    else:
        raise TypeError(f"archs must be a str or a sequence of str (got {archs!r})")
    if out_dir is not None and not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"out_dir must be a str, os.PathLike or None (got {type(out_dir).__name__})")
    if isinstance(jobs, bool) or not isinstance(jobs, numbers.Integral):
        raise TypeError(f"jobs must be an int (got {type(jobs).__name__}: {jobs!r})")
    # ctypes passes an int32 modulo 2^32, so C would see another value than the caller's.
    if not -(2**31) <= int(jobs) < 2**31:
        raise ValueError(f"jobs={jobs} does not fit in int32")
    fn = _library.function("tsattn_precompile")
    compiled, cached, failed = ctypes.c_int64(0), ctypes.c_int64(0), ctypes.c_int64(0)
    status = fn(
        os.fsencode(manifest_path),
        arch_text.encode(),
        None if out_dir is None else os.fsencode(out_dir),
        int(jobs),
        ctypes.byref(compiled),
        ctypes.byref(cached),
        ctypes.byref(failed),
    )
    _library.check(status)
    return {"compiled": compiled.value, "cached": cached.value, "failed": failed.value}
