#!/usr/bin/env python3
"""Ratios of an A/B run (tools/bench/ab_bench.sh's output) to its first build (no GPU).

ab_bench.sh prints one line per case, build and round: case, build, round, TFLOP/s, status and the
check's error. For every case each later build's mean TFLOP/s over its rounds is divided by the first
build's mean, with the range of its single rounds against that mean (the spread to compare a
difference with):

    python3 tools/bench/ab_ratio.py ab.txt BASE OTHER [OTHER ...]

prints `case  BASE's TFLOP/s  OTHER ratio (lowest round-highest round) ...`. A case is left out
when one of the builds has no good round of it; lines whose status is not `ok` (a wrong answer, a
failed build) are listed first, so that a missing figure is never silent. Exit status 1 when any
line is not `ok`.
"""

import argparse
import sys
from collections import defaultdict
from typing import Dict, Iterable, List, Tuple

Rounds = Dict[str, Dict[str, List[float]]]  # case -> build -> TFLOP/s of each good round


def parse(lines: Iterable[str]) -> Tuple[Rounds, List[str]]:
    """The good rounds per case and build, and every line that is not a good round."""
    rounds: Rounds = defaultdict(lambda: defaultdict(list))
    bad: List[str] = []
    for line in lines:
        fields = line.split()
        if not fields:
            continue
        if len(fields) >= 5 and fields[4] == "ok":
            try:
                rounds[fields[0]][fields[1]].append(float(fields[3]))
                continue
            except ValueError:
                pass
        bad.append(line.rstrip("\n"))
    return rounds, bad


def ratios(rounds: Rounds, builds: List[str]) -> List[Tuple[str, float, List[Tuple[str, float, float, float]]]]:
    """Per case with good rounds of every build: the first build's mean TFLOP/s and, for each later
    build, (build, mean ratio, lowest round ratio, highest round ratio)."""
    if len(builds) < 2:
        raise ValueError(f"builds {builds}: name the first build and at least one to compare with it")
    rows = []
    for case in sorted(rounds):
        per_build = rounds[case]
        if not all(per_build.get(b) for b in builds):
            continue
        base = sum(per_build[builds[0]]) / len(per_build[builds[0]])
        others = []
        for b in builds[1:]:
            values = per_build[b]
            others.append((b, sum(values) / len(values) / base, min(values) / base, max(values) / base))
        rows.append((case, base, others))
    return rows


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="ab_bench.sh's output")
    parser.add_argument("builds", nargs="+", help="build names as ab_bench.sh printed them; the first is the base")
    args = parser.parse_args(argv)
    with open(args.results) as f:
        rounds, bad = parse(f)
    for line in bad:
        print(f"not ok: {line}")
    try:
        rows = ratios(rounds, args.builds)
    except ValueError as error:
        parser.error(str(error))
    for case, base, others in rows:
        text = "".join(f"  {b} {mean:.3f} ({low:.3f}-{high:.3f})" for b, mean, low, high in others)
        print(f"{case:44s} {base:7.1f}{text}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
