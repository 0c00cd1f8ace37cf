#!/usr/bin/env bash
# test.sh - README's second command: set up, build with warnings as errors, run every test:
# the doctest suites through ctest, then the Python package's pytest suite. GPU tests print
# "skipped: no CUDA device" where there is none (ctest and pytest list them as skipped).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" -DTSATTN_WERROR=ON
cd "$repo"
ctest --test-dir "$repo/build" --output-on-failure -j "$(nproc)"
# The Python package needs no compiler; its tests need torch (PyPI's default wheel) and pytest.
python3 -m pip install --quiet --disable-pip-version-check "./python[test]"
python3 -m pytest -q -rs tests/python
