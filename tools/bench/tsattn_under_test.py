"""Which tsattn the harness measures: this checkout's python/ package, or the installed one when
TSATTN_BENCH_INSTALLED=1. Importing this module makes the choice for this process (on sys.path);
a subprocess that imports tsattn gets CHECKOUT_PYTHON on its PYTHONPATH when FROM_CHECKOUT."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["CHECKOUT_PYTHON", "FROM_CHECKOUT", "tsattn"]

CHECKOUT_PYTHON = Path(__file__).resolve().parents[2] / "python"
FROM_CHECKOUT = os.environ.get("TSATTN_BENCH_INSTALLED") != "1"
if FROM_CHECKOUT:
    sys.path.insert(0, str(CHECKOUT_PYTHON))

import tsattn  # noqa: E402
