#!/usr/bin/env bash
# test.sh - README's second command: set up, build with warnings as errors, run every test: the
# formatting check (tools/dev/check_format.sh), the doctest suites through ctest, the pytest suites
# (the Python package's, tests/python, and the developer tools', tools/{bench,profile,dev}/tests),
# then the wheel on a machine without a toolkit (tests/packaging/wheel_without_toolkit.sh). GPU tests print
# "skipped: no CUDA device" where there is none (ctest and pytest list them as skipped).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" -DTSATTN_WERROR=ON
cd "$repo"
bash tools/dev/check_format.sh
ctest --test-dir "$repo/build" --output-on-failure -j "$(nproc)"
# The Python tests import the package from python/ and load build/libtsattn.so; they need torch
# (PyPI's default wheel), pytest and numpy, and transformers 5 for the integration's tests.
python3 -m pip install --quiet --disable-pip-version-check torch pytest numpy 'transformers>=5,<6'
python3 -m pytest -q -rs tests/python tools/bench/tests tools/profile/tests tools/dev/tests
# A new user's path: the wheel, installed where no CUDA toolkit is visible, compiling through pip's NVRTC.
bash tests/packaging/wheel_without_toolkit.sh "$(mktemp -d)"
