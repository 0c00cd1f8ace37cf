"""README's examples, run as written so that they cannot rot: the Python blocks on a GPU, and the
C and C++ blocks built as a downstream CMake project (README's cmake block) against `cmake
--install` of this checkout's build tree, then run on a GPU."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO, needs_cuda

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def readme_blocks(language: str):
    return [text for lang, text in BLOCK.findall((REPO / "README.md").read_text()) if lang == language]


def test_readme_has_one_example_of_each_kind():
    assert len(readme_blocks("python")) >= 1
    assert len(readme_blocks("cpp")) == 1 and len(readme_blocks("c")) == 1 and len(readme_blocks("cmake")) == 1
    cmake = readme_blocks("cmake")[0]
    assert "main.cpp" in cmake and "main.c" in cmake and "tsattn::tsattn" in cmake


def _uses_transformers(block: str) -> bool:
    return "tsattn.integrations.transformers" in block


def _run_python(tmp_path, blocks):
    script = tmp_path / "readme_examples.py"
    script.write_text("\n".join(blocks))
    env = dict(os.environ)
    if os.environ.get("TSATTN_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@needs_cuda
def test_python_examples_run(tmp_path):
    r = _run_python(tmp_path, [b for b in readme_blocks("python") if not _uses_transformers(b)])
    assert r.stdout.startswith("prefill.")


@needs_cuda
def test_transformers_example_runs(tmp_path):
    """The transformers example (its own block: it imports what it uses) where transformers is installed."""
    blocks = [b for b in readme_blocks("python") if _uses_transformers(b)]
    assert len(blocks) == 1
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("skipped: transformers is not installed (pip install 'tsattn[transformers]')")
    _run_python(tmp_path, blocks)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """The C and C++ examples, built against an installed tsattn; their folder."""
    build = REPO / "build"
    if not (build / "cmake_install.cmake").is_file():
        pytest.skip(f"skipped: no configured build tree at {build}")
    if shutil.which("cmake") is None:
        pytest.skip("skipped: no cmake")
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/include/cuda_runtime.h").is_file():
        pytest.skip("skipped: no CUDA toolkit (the examples allocate with the CUDA runtime)")
    work = tmp_path_factory.mktemp("readme")
    prefix = work / "prefix"
    subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix)], check=True, capture_output=True)
    project = work / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(readme_blocks("cmake")[0])
    (project / "main.cpp").write_text(readme_blocks("cpp")[0])
    (project / "main.c").write_text(readme_blocks("c")[0])
    for step in (
        [
            "cmake",
            "-S",
            str(project),
            "-B",
            str(work / "out"),
            f"-DCMAKE_PREFIX_PATH={prefix}",
            "-DCMAKE_C_FLAGS=-Wall -Werror",
            "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror",
        ],
        ["cmake", "--build", str(work / "out"), "-j2"],
    ):
        r = subprocess.run(step, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, " ".join(step) + "\n" + r.stdout + r.stderr
    return work / "out"


def test_c_and_cpp_examples_build_against_the_installed_package(examples):
    for name in ("example_cpp", "example_c"):
        assert (examples / name).is_file()
    # The installed tree is what find_package used: headers, the library and the package files.
    cache = (examples / "CMakeCache.txt").read_text()
    assert re.search(r"^tsattn_DIR:PATH=.*/prefix/lib\w*/cmake/tsattn$", cache, re.M), cache


@needs_cuda
@pytest.mark.parametrize("name", ["example_cpp", "example_c"])
def test_c_and_cpp_examples_run(examples, name):
    r = subprocess.run([str(examples / name)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("prefill.") and " ran; out[0] = 0x" in r.stdout
