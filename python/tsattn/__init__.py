"""tsattn: one-shot prefill attention for NVIDIA Hopper GPUs, over libtsattn's C ABI (ctypes).

``import tsattn`` never needs the library; the first call that does loads it (see ``_library``
for where it looks) and raises RuntimeError naming every place it looked if it is missing.
"""

from ._api import batch_prefill
from ._tools import cache_info, last_kernel_name, library_path, library_version, precompile

__version__ = "0.1.0"

__all__ = ["batch_prefill", "cache_info", "last_kernel_name", "library_path", "library_version", "precompile",
           "__version__"]
