"""The harness tests' shared fixtures: small shapes, windows and variable-window widths put into
bench_cases' tables, so that cases run on the CPU in moments and the windows clip inside them."""

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SMALL_SHAPES = {  # name: (q lengths, kv lengths, packed)
    "t-sq": ((64, 64), (64, 64), False),
    "t-chunk": ((24,), (80,), False),
    "t-packed": ((9, 0, 40, 16), (9, 0, 40, 33), True),
}


@pytest.fixture
def small(monkeypatch):
    """Small shapes, and windows / variable-window widths small enough to clip inside them."""
    # imported here, not at the top: the tests of nvml_sampler.py in this folder need no torch
    import bench_cases as bc

    for name, (q_lens, kv_lens, packed) in SMALL_SHAPES.items():
        monkeypatch.setitem(bc.SHAPES, name, bc.Shape(name, q_lens, kv_lens, packed))
    monkeypatch.setitem(bc.WINDOWS, "win1k", 6)
    monkeypatch.setitem(bc.WINDOWS, "win4k", 19)
    monkeypatch.setattr(bc, "VWIN_MIN", 2)
    monkeypatch.setattr(bc, "VWIN_MAX", 25)
    warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")


@pytest.fixture(params=list(SMALL_SHAPES))
def small_shape(request, small):
    """The name of each small shape in turn, with the small tables in place."""
    return request.param
