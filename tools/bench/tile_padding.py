#!/usr/bin/env python3
"""The share of a tiled kernel's work that is real, per benchmark shape and tile shape (no GPU).

A kernel of BLOCK_M-row query tiles and BLOCK_N-key tiles computes whole tiles: a request's last query
tile is padded to BLOCK_M rows and each tile's key range to whole BLOCK_N tiles. The work it walks is
those padded (row, key) pairs; the work that counts (the FLOP convention of docs/contract.md) is the
visible pairs. Their ratio bounds what padding leaves of a kernel's speed per walked pair, and the
ratio of two shapes' shares bounds one's TFLOP/s against the other's when both run at the same speed
per walked pair: e.g. a ragged serving batch against the fixed batch of the same size.

    python3 tools/bench/tile_padding.py [--tiles 128x128,128x160,64x128] [--shapes GLOB,...]

Dense rows see every key of their request; causal rows (Sq == Sk) see keys 0..i. Each query tile walks
the key tiles up to its last row's last visible key, from key 0.
"""

import argparse
import fnmatch
from typing import Iterable, List, Sequence, Tuple

import bench_cases as bc


def _ceil_to(n: int, block: int) -> int:
    return -(-n // block) * block


MASKS = ("dense", "causal")


def _check_mask(mask: str) -> None:
    if mask not in MASKS:
        raise ValueError(f"mask {mask!r}: tile_padding counts {' and '.join(MASKS)} masks")


def walked_pairs(lengths: Iterable[int], mask: str, block_m: int, block_n: int) -> int:
    """(row, key) pairs a kernel of block_m x block_n tiles computes for requests of these lengths
    (Sq == Sk each)."""
    _check_mask(mask)
    total = 0
    for n in lengths:
        if n <= 0:
            continue
        if mask == "dense":
            total += _ceil_to(n, block_m) * _ceil_to(n, block_n)
        else:
            total += sum(block_m * _ceil_to(min(r0 + block_m, n), block_n) for r0 in range(0, n, block_m))
    return total


def visible_pairs(lengths: Iterable[int], mask: str) -> int:
    _check_mask(mask)
    return sum(n * n if mask == "dense" else n * (n + 1) // 2 for n in lengths if n > 0)


def real_share(lengths: Sequence[int], mask: str, block_m: int, block_n: int) -> float:
    """Visible pairs over walked pairs (1.0: no padding)."""
    walked = walked_pairs(lengths, mask, block_m, block_n)
    return visible_pairs(lengths, mask) / walked if walked else 1.0


def parse_tiles(text: str) -> List[Tuple[int, int]]:
    tiles = []
    for part in text.split(","):
        m, _, n = part.strip().partition("x")
        if not (m.isdigit() and n.isdigit() and int(m) > 0 and int(n) > 0):
            raise ValueError(f"--tiles: {part!r} is not BLOCK_MxBLOCK_N (e.g. 128x160)")
        tiles.append((int(m), int(n)))
    return tiles


def table(shapes: Sequence[str], tiles: Sequence[Tuple[int, int]]) -> List[str]:
    """Markdown: per shape and mask, the real share of each tile shape."""
    lines = [
        "| shape | mask | " + " | ".join(f"{m}x{n}" for m, n in tiles) + " |",
        "|---|---|" + "---|" * len(tiles),
    ]
    for name in shapes:
        shape = bc.SHAPES[name]
        for mask in MASKS:
            cells = [f"{real_share(shape.q_lens, mask, m, n):.3f}" for m, n in tiles]
            lines.append(f"| {name} | {mask} | " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--tiles", default="128x128,128x160,64x128,64x64", help="BLOCK_MxBLOCK_N,... (default: %(default)s)"
    )
    ap.add_argument("--shapes", default="*b*-s*", help="glob patterns over the shape names (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        tiles = parse_tiles(args.tiles)
    except ValueError as e:
        ap.error(str(e))
    patterns = [p for p in args.shapes.split(",") if p]
    shapes = [s for s in bc.SHAPES if any(fnmatch.fnmatchcase(s, p) for p in patterns)]
    if not shapes:
        ap.error(f"--shapes: {args.shapes!r} matches no shape of tools/bench/bench_cases.py")
    print("\n".join(table(shapes, tiles)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
