#!/usr/bin/env python3
"""instructions_gate: the tables of bench/instructions.sh's gate.

bench/instructions.sh counts the cases under callgrind and hands this
script a table ("NAME INSTRUCTIONS_PER_CALL" lines); this script holds the
rules, so that they can be tested on made-up tables without a callgrind
run (bench/instructions_gate_test.py):

  compare BASELINE NOW [--counted-with TEXT]
      a table of case, baseline, now and change; exits 1 when a case grew
      more than 3%, a case of the baseline is missing from NOW, a case of
      NOW is missing from the baseline, or the baseline has no reason.
  write BASELINE NOW --reason TEXT --counted-with TEXT [--doc DOC]
      rewrites the baseline from NOW (and DOC's table from it).
  markdown BASELINE
      the table docs/PERFORMANCE.md shows.
  doc BASELINE DOC [--write]
      exits 1 when DOC's marked table is not `markdown BASELINE` (--write:
      rewrites it), or when the last change of BASELINE's figures in git
      did not change its reason line.

The baseline (bench/instructions.baseline) is the contract: comment lines
first, `# reason:` and `# counted with:` among them, then one
"NAME INSTRUCTIONS_PER_CALL" line per case.
"""

import argparse
import os
import re
import subprocess
import sys

TOLERANCE = 0.03  # a case may grow 3% before the gate fails

HEADER = """\
# Instructions per call of bench/instructions.cc's cases, counted under
# callgrind by bench/instructions.sh: the baseline CI's gate holds every
# commit to (docs/testing.md, "The instruction-count gate"). A case may grow
# at most 3% over its line here; a case missing here or from the program
# fails the gate too.
#
# Written only by `bench/instructions.sh --update "REASON"`, which keeps the
# two lines below at the top of the figures: why they last changed (say it
# in the commit message too) and the toolchain they were counted with. The
# gate compares with this file as the commit under test has it, so a commit
# that makes a case slower passes only by rewriting this file with a new
# reason (a test checks that the last change of the figures changed it).
"""

BEGIN = ("<!-- begin: bench/instructions.sh --markdown (rewritten by --update; "
         "ctest bench.instructions.baseline checks it) -->")
END = "<!-- end: bench/instructions.sh --markdown -->"


class Table:
    """A table of counts: the cases in file order, and the baseline's notes."""

    def __init__(self, counts, reason=None, counted_with=None):
        self.counts = counts  # dict, insertion order = file order
        self.reason = reason
        self.counted_with = counted_with


def read_table(path):
    counts, reason, counted_with = {}, None, None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line.startswith("# reason:"):
                reason = line[len("# reason:"):].strip()
            elif line.startswith("# counted with:"):
                counted_with = line[len("# counted with:"):].strip()
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                sys.exit(f"{path}:{number}: expected 'NAME INSTRUCTIONS_PER_CALL', got '{line}'")
            if parts[0] in counts:
                sys.exit(f"{path}:{number}: case '{parts[0]}' given twice")
            counts[parts[0]] = int(parts[1])
    return Table(counts, reason, counted_with)


def compare(base, now, counted_with=None):
    """The report's lines and whether the gate passes."""
    lines, failures = [], []
    if not base.reason:
        failures.append("the baseline has no '# reason:' line with a reason "
                        "(write it with bench/instructions.sh --update \"REASON\")")
    lines.append(f"{'case':<32} {'baseline':>12} {'now':>12} {'change':>9}")
    for case in list(base.counts) + [c for c in now.counts if c not in base.counts]:
        b, n = base.counts.get(case), now.counts.get(case)
        if n is None:
            lines.append(f"{case:<32} {b:>12} {'-':>12} {'missing':>9}")
            failures.append(f"{case}: in the baseline, not counted now")
        elif b is None:
            lines.append(f"{case:<32} {'-':>12} {n:>12} {'new':>9}")
            failures.append(f"{case}: counted now, not in the baseline")
        else:
            change = (n - b) / b if b else (0.0 if n == 0 else float("inf"))
            mark = ""
            if change > TOLERANCE:
                mark = "  REGRESSION"
                failures.append(f"{case}: {b} -> {n} instructions per call ({change:+.1%}), "
                                f"over the {TOLERANCE:.0%} allowed")
            elif change < -TOLERANCE:
                mark = "  faster"
            lines.append(f"{case:<32} {b:>12} {n:>12} {change:>+9.1%}{mark}")
    if counted_with and base.counted_with and counted_with != base.counted_with:
        lines.append(f"note: the baseline was counted with {base.counted_with}; "
                     f"this run with {counted_with}. Counts repeat exactly only on the same "
                     "toolchain; a difference may come from it.")
    if any(" faster" in line for line in lines) and not failures:
        lines.append("note: a case got more than 3% faster; bench/instructions.sh --update "
                     "\"REASON\" keeps the gain from being spent silently.")
    if failures:
        lines.append("instructions gate FAILED:")
        lines.extend(f"  {f}" for f in failures)
        lines.append("If the cost is meant, run bench/instructions.sh --update \"REASON\" and "
                     "commit the baseline with the reason in the message.")
    else:
        lines.append(f"instructions gate passed: {len(now.counts)} cases within "
                     f"{TOLERANCE:.0%} of the baseline")
    return lines, not failures


def overhead(counts, case):
    """A DTensor case minus the same local kernels run by hand on the shards."""
    part = case.split(".")
    if part[0] != "dtensor" or len(part) < 2:
        return None
    local = counts.get("local." + part[1])
    return None if local is None else counts[case] - local


def markdown(base):
    rows = ["| case | instructions per call | overhead over the local kernels |",
            "| --- | ---: | ---: |"]
    for case, n in base.counts.items():
        o = overhead(base.counts, case)
        rows.append(f"| `{case}` | {n:,} | {'' if o is None else f'{o:,}'} |")
    rows.append("")
    rows.append(f"Reason of the last change: {base.reason}. Counted with {base.counted_with}.")
    return "\n".join(rows) + "\n"


def doc_block(path):
    """The text of DOC and the span of its marked table."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        sys.exit(f"{path}: no block between '{BEGIN}' and '{END}'")
    return text, begin + len(BEGIN) + 1, end


def write_doc(path, base):
    text, start, stop = doc_block(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:start] + markdown(base) + text[stop:])


def write(path, now, reason, counted_with, doc=None):
    reason = " ".join(reason.split())
    if not reason:
        sys.exit("instructions_gate: --update needs a reason: "
                 "bench/instructions.sh --update \"REASON\"")
    with open(path, "w", encoding="utf-8") as f:
        f.write(HEADER)
        f.write(f"# reason: {reason}\n# counted with: {counted_with}\n")
        for case, n in now.counts.items():
            f.write(f"{case} {n}\n")
    if doc:
        write_doc(doc, read_table(path))


def figures_changed_without_reason(diff):
    """A diff of the baseline changes figure lines but adds no reason line."""
    changed = any(re.match(r"^[+-][^+#-]", line) for line in diff.splitlines())
    reason = any(re.match(r"^\+# reason:\s*\S", line) for line in diff.splitlines())
    return changed and not reason


def reason_problem(path):
    """Why the last change of the baseline's figures breaks the rule, or None.

    The change is the working tree's, when it differs from HEAD, else the
    last commit that touched the file. Outside a git checkout: None.
    """
    folder, name = os.path.split(os.path.abspath(path))

    def git(*args):
        return subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True)

    if git("rev-parse", "--git-dir").returncode != 0:
        return None
    diff = git("diff", "HEAD", "--", name).stdout
    where = "the uncommitted change"
    if not diff:
        commit = git("log", "-1", "--format=%h", "--", name).stdout.strip()
        if not commit:
            return None
        diff = git("show", "--format=", commit, "--", name).stdout
        where = f"commit {commit}"
    if figures_changed_without_reason(diff):
        return (f"{where} changes the figures of {path} without a new '# reason:' line "
                "(write the file with bench/instructions.sh --update \"REASON\")")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare")
    p.add_argument("baseline")
    p.add_argument("now")
    p.add_argument("--counted-with")
    p = sub.add_parser("write")
    p.add_argument("baseline")
    p.add_argument("now")
    p.add_argument("--reason", required=True)
    p.add_argument("--counted-with", required=True)
    p.add_argument("--doc")
    p = sub.add_parser("markdown")
    p.add_argument("baseline")
    p = sub.add_parser("doc")
    p.add_argument("baseline")
    p.add_argument("doc")
    p.add_argument("--write", action="store_true")
    args = parser.parse_args()

    if args.command == "compare":
        lines, ok = compare(read_table(args.baseline), read_table(args.now), args.counted_with)
        print("\n".join(lines))
        return 0 if ok else 1
    if args.command == "write":
        write(args.baseline, read_table(args.now), args.reason, args.counted_with, args.doc)
        return 0
    if args.command == "markdown":
        sys.stdout.write(markdown(read_table(args.baseline)))
        return 0
    base = read_table(args.baseline)
    if args.write:
        write_doc(args.doc, base)
        return 0
    status = 0
    if not base.reason:
        print(f"{args.baseline}: no '# reason:' line with a reason")
        status = 1
    problem = reason_problem(args.baseline)
    if problem:
        print(problem)
        status = 1
    text, start, stop = doc_block(args.doc)
    if text[start:stop] != markdown(base):
        print(f"{args.doc}: the instructions table differs from {args.baseline}; "
              f"rewrite it with bench/instructions.sh --markdown --write")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
