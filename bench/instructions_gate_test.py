#!/usr/bin/env python3
"""The rules of bench/instructions_gate.py on made-up tables: that the gate
fails on a regression, a missing or new case and a missing reason, passes
within 3%, and that the doc's block is what `markdown` prints. No callgrind
run: the gate's own ctest entry (bench.instructions.gate) counts for real.

  python3 bench/instructions_gate_test.py
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import instructions_gate as gate  # noqa: E402

COUNTS = {"dtensor.add": 6351, "local.add": 5477, "tensor.add": 1268,
          "train.step.fsdp_tp_2x2": 7985060}


def table(counts, reason="the first counts", counted_with="GCC 12"):
    return gate.Table(dict(counts), reason, counted_with)


class CompareTest(unittest.TestCase):
    def test_same_counts_pass(self):
        lines, ok = gate.compare(table(COUNTS), table(COUNTS))
        self.assertTrue(ok, lines)
        self.assertIn("instructions gate passed: 4 cases", lines[-1])

    def test_baseline_lowered_by_10_percent_fails(self):
        # The synthetic regression: the program now costs 10% more than
        # the baseline says, in one case.
        base = dict(COUNTS, **{"tensor.add": int(COUNTS["tensor.add"] / 1.1)})
        lines, ok = gate.compare(table(base), table(COUNTS))
        self.assertFalse(ok)
        self.assertTrue(any(l.startswith("tensor.add ") and "REGRESSION" in l for l in lines))
        self.assertTrue(any("tensor.add: 1152 -> 1268" in l and "+10.1%" in l for l in lines),
                        lines)

    def test_growth_of_3_percent_passes_and_just_over_fails(self):
        now = dict(COUNTS, **{"train.step.fsdp_tp_2x2": 8224611})  # +2.99994%
        self.assertTrue(gate.compare(table(COUNTS), table(now))[1])
        now["train.step.fsdp_tp_2x2"] = 8224612  # +3.00007%
        self.assertFalse(gate.compare(table(COUNTS), table(now))[1])

    def test_faster_passes_with_a_note(self):
        now = dict(COUNTS, **{"dtensor.add": 5000})
        lines, ok = gate.compare(table(COUNTS), table(now))
        self.assertTrue(ok)
        self.assertTrue(any("faster" in l for l in lines))

    def test_missing_and_new_cases_fail(self):
        now = dict(COUNTS)
        del now["local.add"]
        lines, ok = gate.compare(table(COUNTS), table(now))
        self.assertFalse(ok)
        self.assertIn("  local.add: in the baseline, not counted now", lines)
        now = dict(COUNTS, **{"tensor.mul": 1300})
        lines, ok = gate.compare(table(COUNTS), table(now))
        self.assertFalse(ok)
        self.assertIn("  tensor.mul: counted now, not in the baseline", lines)

    def test_baseline_without_reason_fails(self):
        lines, ok = gate.compare(table(COUNTS, reason=""), table(COUNTS))
        self.assertFalse(ok)
        self.assertTrue(any("no '# reason:'" in l for l in lines))

    def test_other_toolchain_is_named(self):
        lines, ok = gate.compare(table(COUNTS), table(COUNTS), counted_with="GCC 14")
        self.assertTrue(ok)
        self.assertTrue(any("counted with GCC 12; this run with GCC 14" in l for l in lines))


class FilesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name, text=None):
        p = os.path.join(self.dir.name, name)
        if text is not None:
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
        return p

    def run_gate(self, *args):
        return subprocess.run([sys.executable, os.path.join(HERE, "instructions_gate.py"), *args],
                              capture_output=True, text=True)

    def test_write_then_compare_round_trips_and_fills_the_doc(self):
        now = self.path("now", "".join(f"{c} {n}\n" for c, n in COUNTS.items()))
        doc = self.path("doc.md", f"# Doc\n\n{gate.BEGIN}\nstale\n{gate.END}\n\nafter\n")
        base = self.path("baseline")
        r = self.run_gate("write", base, now, "--reason", " a  reason ", "--counted-with", "GCC 12",
                          "--doc", doc)
        self.assertEqual(r.returncode, 0, r.stderr)
        written = gate.read_table(base)
        self.assertEqual(written.counts, COUNTS)
        self.assertEqual(written.reason, "a reason")
        self.assertEqual(self.run_gate("compare", base, now).returncode, 0)
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("| `dtensor.add` | 6,351 | 874 |", text)
        self.assertNotIn("stale", text)
        self.assertTrue(text.endswith(f"{gate.END}\n\nafter\n"))
        # The doc is in sync; edited by hand, it is not.
        self.assertEqual(self.run_gate("doc", base, doc).returncode, 0)
        self.path("doc.md", text.replace("6,351", "6,300"))
        r = self.run_gate("doc", base, doc)
        self.assertEqual(r.returncode, 1)
        self.assertIn("differs from", r.stdout)

    def test_regression_through_the_command_line(self):
        lowered = dict(COUNTS, **{"dtensor.add": int(COUNTS["dtensor.add"] * 0.9)})
        base = self.path("baseline", "# reason: test\n" +
                         "".join(f"{c} {n}\n" for c, n in lowered.items()))
        now = self.path("now", "".join(f"{c} {n}\n" for c, n in COUNTS.items()))
        r = self.run_gate("compare", base, now)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("instructions gate FAILED", r.stdout)

    def test_write_refuses_an_empty_reason(self):
        now = self.path("now", "tensor.add 1\n")
        r = self.run_gate("write", self.path("baseline"), now, "--reason", "  ",
                          "--counted-with", "x")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("needs a reason", r.stderr)

    def test_malformed_line_is_named(self):
        r = self.run_gate("markdown", self.path("baseline", "# reason: x\ntensor.add many\n"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("baseline:2: expected 'NAME INSTRUCTIONS_PER_CALL', got 'tensor.add many'",
                      r.stderr)


class ReasonRuleTest(unittest.TestCase):
    def test_figures_changed_need_a_new_reason(self):
        changed = ("--- a/b\n+++ b/b\n@@ -1,3 +1,3 @@\n"
                   " # reason: old\n-tensor.add 1200\n+tensor.add 1268\n")
        self.assertTrue(gate.figures_changed_without_reason(changed))
        with_reason = changed.replace(" # reason: old\n", "-# reason: old\n+# reason: new\n")
        self.assertFalse(gate.figures_changed_without_reason(with_reason))
        header_only = "--- a/b\n+++ b/b\n@@ -1 +1 @@\n-# old words\n+# new words\n"
        self.assertFalse(gate.figures_changed_without_reason(header_only))


if __name__ == "__main__":
    unittest.main()
