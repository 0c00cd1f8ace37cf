"""pytest set-up for the tsattn Python tests.

The tests import the package from this checkout's python/ (so they test the tree they sit in, and
its build-tree discovery finds <repo>/build/libtsattn.so); set TSATTN_TEST_INSTALLED=1 to test an
installed copy instead. TSATTN_LIBRARY overrides where the library comes from.
GPU tests (files test_gpu_*.py) skip with "skipped: no CUDA device" without one.
"""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if os.environ.get("TSATTN_TEST_INSTALLED") != "1":
    sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import support  # noqa: E402


def pytest_report_header(config):
    return support.report_header()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(str(item.fspath)).name.startswith("test_gpu_"):
            item.add_marker(support.needs_cuda)
            item.add_marker(support.needs_library)
