#!/usr/bin/env bash
# hide_toolkit.sh COMMAND... - runs COMMAND as on a machine that never had a CUDA toolkit: in a
# private mount namespace with an empty tmpfs over every /usr/local/cuda* folder, and without
# CUDA_HOME, CUDA_PATH, LD_LIBRARY_PATH or TSATTN_NVRTC_LIBRARY. Fails before running COMMAND if
# nvcc or any NVRTC the system loader knows can still be seen. Needs root (unshare -m).
exec unshare -m bash -euo pipefail -c '
  for d in /usr/local/cuda*; do [[ -d "$d" && ! -L "$d" ]] && mount -t tmpfs tmpfs "$d"; done
  unset LD_LIBRARY_PATH CUDA_HOME CUDA_PATH TSATTN_NVRTC_LIBRARY
  if command -v nvcc >/dev/null; then echo "nvcc is still visible: $(command -v nvcc)" >&2; exit 1; fi
  for lib in $(ldconfig -p | awk "/libnvrtc/ {print \$NF}"); do
    if [[ -e "$lib" ]]; then echo "a toolkit NVRTC is still visible: $lib" >&2; exit 1; fi
  done
  "$@"' hide_toolkit "$@"
