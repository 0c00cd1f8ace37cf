"""tsattn: one-shot prefill attention for NVIDIA Hopper GPUs, over libtsattn's C ABI (ctypes).

``batch_prefill`` is the one-shot call; ``BatchPrefillTSWrapper`` plans once and runs every layer;
``batch_prefill_with_paged_kv_cache`` and ``BatchPrefillPagedTSWrapper`` are the same over a paged KV cache;
``merge_state`` and ``merge_states`` combine partial attentions through their log-sum-exp.

``import tsattn`` never needs the library; the first call that does loads it (see ``_library``
for where it looks) and raises RuntimeError naming every place it looked if it is missing.
torch is imported with the first use of a call, a wrapper or a merge, so the
command line (``tsattn``, ``python -m tsattn``) and ``tsattn.precompile`` start without it.
"""

from typing import TYPE_CHECKING

from ._tools import cache_info, last_kernel_name, library_path, library_version, precompile

if TYPE_CHECKING:
    from ._api import batch_prefill, batch_prefill_with_paged_kv_cache
    from ._merge import merge_state, merge_states
    from ._wrapper import BatchPrefillPagedTSWrapper, BatchPrefillTSWrapper

__version__ = "0.1.0"

__all__ = [
    "BatchPrefillPagedTSWrapper",
    "BatchPrefillTSWrapper",
    "batch_prefill",
    "batch_prefill_with_paged_kv_cache",
    "cache_info",
    "last_kernel_name",
    "library_path",
    "library_version",
    "merge_state",
    "merge_states",
    "precompile",
    "__version__",
]


def __getattr__(name: str):
    if name in ("batch_prefill", "batch_prefill_with_paged_kv_cache"):
        from . import _api

        globals()[name] = getattr(_api, name)
        return globals()[name]
    if name in ("BatchPrefillTSWrapper", "BatchPrefillPagedTSWrapper"):
        from . import _wrapper

        globals()[name] = getattr(_wrapper, name)
        return globals()[name]
    if name in ("merge_state", "merge_states"):
        from . import _merge

        globals()["merge_state"], globals()["merge_states"] = _merge.merge_state, _merge.merge_states
        return globals()[name]
    raise AttributeError(f"module 'tsattn' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
