#!/usr/bin/env python3
"""Compares the machine code of two precompiled cache directories, kernel by kernel.

A refactor of device code must leave the SASS of every kernel unchanged (or show an A/B run where it
does not). Precompile the same manifest with the tree before and after into two directories
(`tsattn precompile --manifest all --arch sm_90a --out DIR`), then:

    python3 tools/dev/sass_compare.py BEFORE_DIR AFTER_DIR

Entries are matched by canonical kernel name (their keys differ whenever any template byte does);
each cubin is disassembled with `cuobjdump -sass` and compared. Exit 0 when every kernel of BEFORE
has identical SASS in AFTER and the two hold the same kernels; 1 otherwise, listing the kernels; 2
when no cuobjdump is found (PATH, the toolkit, or the copy Triton's pip package bundles).
"""

import argparse
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict

HEADER = 120  # see src/jit/cache/entry_format.hpp
MAGIC = b"TSATTNK\0"


def read_entry(path: Path):
    """(canonical name, cubin bytes) of one cache entry file."""
    data = path.read_bytes()
    if data[:8] != MAGIC:
        raise ValueError(f"{path}: not a tsattn cache entry")
    payload_size = struct.unpack_from("<Q", data, 44)[0]
    metadata_size = struct.unpack_from("<I", data, 84)[0]
    metadata = json.loads(data[HEADER : HEADER + metadata_size])
    cubin = data[HEADER + metadata_size : HEADER + metadata_size + payload_size]
    return metadata["name"], cubin


def entries(root: Path) -> Dict[str, bytes]:
    found = {}
    for path in sorted(root.rglob("*.tsk")):
        name, cubin = read_entry(path)
        if name in found:
            raise ValueError(f"{root}: two entries for {name}")
        found[name] = cubin
    return found


def find_cuobjdump() -> str:
    """cuobjdump from PATH, the toolkit, or the copy Triton's pip package bundles ("" if none)."""
    places = [shutil.which("cuobjdump") or ""]
    places += [
        str(Path(root) / "bin" / "cuobjdump") for root in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda") if root
    ]
    triton = importlib.util.find_spec("triton")
    if triton is not None and triton.origin:
        places.append(str(Path(triton.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump"))
    return next((p for p in places if p and os.access(p, os.X_OK)), "")


def sass(cuobjdump: str, cubin: bytes, scratch: Path) -> str:
    path = scratch / "kernel.cubin"
    path.write_bytes(cubin)
    return subprocess.run([cuobjdump, "-sass", str(path)], check=True, capture_output=True, text=True).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    cuobjdump = find_cuobjdump()
    if not cuobjdump:
        print("sass_compare: cuobjdump was not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, triton)")
        return 2
    before, after = entries(args.before), entries(args.after)
    differ, missing = [], sorted(set(before) ^ set(after))
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(set(before) & set(after)):
            if before[name] == after[name]:
                continue  # the same bytes: the same machine code
            if sass(cuobjdump, before[name], Path(tmp)) != sass(cuobjdump, after[name], Path(tmp)):
                differ.append(name)
    same = len(set(before) & set(after)) - len(differ)
    print(f"{same} kernels with identical SASS, {len(differ)} different, {len(missing)} in only one directory")
    for name in differ:
        print(f"  SASS differs: {name}")
    for name in missing:
        print(f"  only in {'BEFORE' if name in before else 'AFTER'}: {name}")
    return 0 if not differ and not missing and before else 1


if __name__ == "__main__":
    sys.exit(main())
