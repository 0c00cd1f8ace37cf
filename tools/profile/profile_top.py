"""profile_top.py - summarise ncu's per-SASS-instruction stall samples (ncu --page source --csv).

    usage: python3 tools/profile/profile_top.py NAME.sass.csv
Prints the columns ncu gave, the samples per opcode, and the instructions holding the most
samples with the instructions just before them (a stall is charged to the instruction that waits,
so the cause is usually a producer of its operands a few lines up).
"""

import collections
import csv
import sys

TOP = 40
CONTEXT = 3


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> None:
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.reader(f))
    header_index = next(i for i, row in enumerate(rows) if any("Source" in cell for cell in row))
    header = rows[header_index]
    body = [row for row in rows[header_index + 1 :] if len(row) == len(header)]
    print("columns:", " | ".join(header))
    source = next(i for i, name in enumerate(header) if name.strip() == "Source")
    samples = next(i for i, name in enumerate(header) if "Warp Stall Sampling (All" in name)
    not_issued = next((i for i, name in enumerate(header) if "Not-issued" in name), None)
    total = sum(number(row[samples]) for row in body) or 1.0
    print(f"instructions: {len(body)}, samples: {total:.0f}")

    by_opcode = collections.Counter()
    for row in body:
        words = row[source].split()
        opcode = next((w for w in words if not w.startswith("@")), "?")
        by_opcode[opcode] += number(row[samples])
    print("\nsamples per opcode (% of all):")
    for opcode, count in by_opcode.most_common(25):
        print(f"  {100 * count / total:6.2f}  {opcode}")

    # ncu's stall_* columns split each instruction's samples by reason ("(Not Issued)" repeats them).
    reasons = [i for i, name in enumerate(header) if name.startswith("stall_") and "Not Issued" not in name]
    if reasons:
        by_reason = collections.Counter()
        reasons_of = collections.defaultdict(collections.Counter)
        for row in body:
            opcode = next((w for w in row[source].split() if not w.startswith("@")), "?")
            for i in reasons:
                by_reason[header[i]] += number(row[i])
                reasons_of[opcode][header[i]] += number(row[i])
        print(
            "\nstall reasons (% of all samples):",
            ", ".join(f"{k[6:]} {100 * v / total:.1f}" for k, v in by_reason.most_common(10)),
        )
        print("top reasons of the busiest opcodes:")
        for opcode, _ in by_opcode.most_common(12):
            top = reasons_of[opcode].most_common(4)
            print(f"  {opcode:45s} " + ", ".join(f"{k[6:]} {100 * v / total:.1f}" for k, v in top))

    print(
        f"\ntop {TOP} instructions (% of all samples; not-issued %; line: SASS), each after its {CONTEXT} predecessors:"
    )
    ranked = sorted(range(len(body)), key=lambda i: -number(body[i][samples]))[:TOP]
    for i in sorted(ranked):
        print("  ...")
        for j in range(max(0, i - CONTEXT), i + 1):
            row = body[j]
            share = 100 * number(row[samples]) / total
            idle = 100 * number(row[not_issued]) / total if not_issued is not None else 0.0
            mark = ">>" if j == i else "  "
            print(f"{mark} {share:6.2f} {idle:6.2f}  {j:5d}: {row[source].strip()}")


if __name__ == "__main__":
    main()
