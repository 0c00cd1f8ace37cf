"""tools/bench/ab_ratio.py: the ratios of an A/B run to its first build, on hand-written ab_bench.sh
lines, and its command line. No GPU."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import ab_ratio  # noqa: E402

LINES = """\
d128-dense-bf16-h32kv8-b16-s512            base       r1   500.0 ok err=0.0021
d128-dense-bf16-h32kv8-b16-s512            new        r1   520.0 ok err=0.0021
d128-dense-bf16-h32kv8-b16-s512            base       r2   502.0 ok err=0.0021
d128-dense-bf16-h32kv8-b16-s512            new        r2   510.0 ok err=0.0021
d128-causal-bf16-h32kv8-b32-s256           base       r1   225.0 ok err=0.0018
d128-causal-bf16-h32kv8-b32-s256           new        r1     0.0 WRONG err=0.5000
FAILED: .gpu/ab/other round 1
"""


def test_means_and_round_ranges_against_the_first_build():
    rounds, bad = ab_ratio.parse(LINES.splitlines())
    assert rounds["d128-dense-bf16-h32kv8-b16-s512"]["new"] == [520.0, 510.0]
    # the WRONG round and the failed build are reported, never counted
    assert [line.split()[0] for line in bad] == ["d128-causal-bf16-h32kv8-b32-s256", "FAILED:"]
    rows = ab_ratio.ratios(rounds, ["base", "new"])
    # the causal case has no good round of `new`: left out
    assert [case for case, _, _ in rows] == ["d128-dense-bf16-h32kv8-b16-s512"]
    _, base, [(build, mean, low, high)] = rows[0]
    assert base == pytest.approx(501.0)
    assert build == "new"
    assert mean == pytest.approx(515.0 / 501.0)
    assert (low, high) == (pytest.approx(510.0 / 501.0), pytest.approx(520.0 / 501.0))
    with pytest.raises(ValueError, match="at least one"):
        ab_ratio.ratios(rounds, ["base"])


def test_command_line(tmp_path, capsys):
    results = tmp_path / "ab.txt"
    results.write_text(LINES)
    assert ab_ratio.main([str(results), "base", "new"]) == 1  # some lines are not ok
    out = capsys.readouterr().out
    assert "not ok: FAILED: .gpu/ab/other round 1" in out
    assert "d128-dense-bf16-h32kv8-b16-s512" in out and "new 1.028 (1.018-1.038)" in out
    results.write_text("".join(line + "\n" for line in LINES.splitlines()[:4]))
    assert ab_ratio.main([str(results), "base", "new"]) == 0
