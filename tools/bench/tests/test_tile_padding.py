"""tools/bench/tile_padding.py: walked and visible (row, key) pairs of tiled kernels, by hand-counted
cases, and its command line. No GPU."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import tile_padding as tp  # noqa: E402


def test_walked_and_visible_pairs_by_hand():
    # dense: whole tiles both ways; 129 rows and keys take two 128-tiles each
    assert tp.walked_pairs([256], "dense", 128, 128) == 256 * 256
    assert tp.walked_pairs([129], "dense", 128, 128) == 256 * 256
    assert tp.walked_pairs([256], "dense", 128, 160) == 256 * 320
    # causal: tile 0 walks keys 0..127, tile 1 keys 0..255
    assert tp.walked_pairs([256], "causal", 128, 128) == 128 * 128 + 128 * 256
    # causal, 1 row: one tile of 128 rows over one key tile
    assert tp.walked_pairs([1], "causal", 128, 64) == 128 * 64
    assert tp.visible_pairs([256, 1], "causal") == 256 * 257 // 2 + 1
    assert tp.visible_pairs([3, 0], "dense") == 9
    assert tp.walked_pairs([0], "dense", 128, 128) == 0 and tp.real_share([], "dense", 64, 64) == 1.0
    assert tp.real_share([129], "dense", 128, 128) == pytest.approx(129 * 129 / (256 * 256))
    for bad in ("win1k", "vwin"):
        with pytest.raises(ValueError, match=f"mask '{bad}'"):
            tp.walked_pairs([8], bad, 64, 64)
        with pytest.raises(ValueError, match=f"mask '{bad}'"):
            tp.visible_pairs([8], bad)
    # longer requests waste less of their tiles
    assert tp.real_share([1000], "dense", 128, 128) > tp.real_share([200], "dense", 128, 128)


def test_tiles_argument_and_table():
    assert tp.parse_tiles("128x128, 64x80") == [(128, 128), (64, 80)]
    for bad in ("128", "128x", "0x64", "ax64"):
        with pytest.raises(ValueError, match="BLOCK_MxBLOCK_N"):
            tp.parse_tiles(bad)
    lines = tp.table(["b32-s256"], [(128, 128), (128, 160)])
    assert lines[0] == "| shape | mask | 128x128 | 128x160 |"
    assert lines[2] == "| b32-s256 | dense | 1.000 | 0.800 |"
    assert (
        lines[3]
        == f"| b32-s256 | causal | {256 * 257 / 2 / (128 * 128 + 128 * 256):.3f} | {256 * 257 / 2 / (128 * 160 + 128 * 320):.3f} |"
    )


def test_command_line(capsys):
    assert tp.main(["--shapes", "ragged-b32-s256", "--tiles", "64x64"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "| shape | mask | 64x64 |" and len(out) == 4
    with pytest.raises(SystemExit):
        tp.main(["--shapes", "nothing-*"])
    with pytest.raises(SystemExit):
        tp.main(["--tiles", "64"])
