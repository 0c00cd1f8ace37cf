"""tools/dev/sass_compare.py on real cubins: a directory against itself, a missing kernel, and two
kernels whose machine code was swapped. Needs the build tree's tsattn CLI (NVRTC compiles llama3's
twelve modules: ten kernels, its merge and page gather modules; no GPU) and cuobjdump."""

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "tools" / "dev" / "sass_compare.py"
CLI = REPO / "build" / "tsattn"

sys.path.insert(0, str(SCRIPT.parent))
import sass_compare  # noqa: E402


@pytest.fixture(scope="module")
def precompiled(tmp_path_factory) -> Path:
    if not CLI.is_file():
        pytest.skip(f"skipped: no tsattn CLI at {CLI}")
    if not sass_compare.find_cuobjdump():
        pytest.skip("skipped: no cuobjdump (CUDA toolkit or Triton)")
    out = tmp_path_factory.mktemp("sass") / "llama3"
    subprocess.run(
        [str(CLI), "precompile", "--manifest", "llama3", "--arch", "sm_90a", "--out", str(out)],
        check=True,
        capture_output=True,
        env={"TSATTN_CACHE_DIR": str(out.parent / "user"), "PATH": "/usr/bin:/bin"},
    )
    return out


def compare(before: Path, after: Path):
    r = subprocess.run([sys.executable, str(SCRIPT), str(before), str(after)], capture_output=True, text=True)
    return r.returncode, r.stdout


def test_a_directory_against_itself_is_identical(precompiled):
    code, out = compare(precompiled, precompiled)
    assert code == 0, out
    assert out.splitlines()[0] == "12 kernels with identical SASS, 0 different, 0 in only one directory"


def test_a_missing_kernel_fails(precompiled, tmp_path):
    after = tmp_path / "after"
    shutil.copytree(precompiled, after)
    victim = sorted(after.rglob("*.tsk"))[0]
    name, _ = sass_compare.read_entry(victim)
    victim.unlink()
    code, out = compare(precompiled, after)
    assert code == 1
    assert f"only in BEFORE: {name}" in out


def test_different_machine_code_under_the_same_name_fails(precompiled, tmp_path):
    after = tmp_path / "after"
    shutil.copytree(precompiled, after)
    files = {sass_compare.read_entry(p)[0]: p for p in after.rglob("*.tsk")}
    fixed = files["prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed"]
    packed = files["prefill.sm80.sm_90a.d128.bf16_bf16.causal.fixed"]
    # Give the first entry the second one's cubin: same name, other machine code.
    data = bytearray(fixed.read_bytes())
    metadata_size = struct.unpack_from("<I", data, 84)[0]
    start = sass_compare.HEADER + metadata_size
    cubin = sass_compare.read_entry(packed)[1]
    data[start:] = cubin
    struct.pack_into("<Q", data, 44, len(cubin))
    fixed.write_bytes(bytes(data))
    code, out = compare(precompiled, after)
    assert code == 1
    assert "11 kernels with identical SASS, 1 different" in out
    assert "SASS differs: prefill.sm90a.sm_90a.d128.bf16_bf16.causal.fixed" in out
