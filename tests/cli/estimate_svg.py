#!/usr/bin/env python3
"""`dtensor estimate --svg`: the picture of a small plan of three roles (a
vocabulary of 1001 over 2x4 ranks splits unevenly) is well-formed XML, has
one block per role of the report, each with a compute lane and a
communication lane that hold rectangles, and a memory line whose highest
point is the role's peak as --json prints it: by the line's attribute,
exactly, and by its drawn points read back through the chart's scale.

  estimate_svg.py DTENSOR WORKDIR
"""
import json
import os
import subprocess
import sys
import xml.dom.minidom


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def ranks_of(text):
    """'0-2, 5' -> [0, 1, 2, 5] (the report's ranks_text)."""
    out = []
    for part in text.split(", "):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def main():
    dtensor, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    svg = os.path.join(work, "step.svg")
    if os.path.exists(svg):
        os.remove(svg)
    run = subprocess.run(
        [dtensor, "estimate", "--mesh", "2x4", "--hidden", "128", "--heads", "4", "--layers", "2",
         "--seq", "64", "--batch", "8", "--vocab", "1001", "--json", "--svg", svg],
        capture_output=True, text=True)
    if run.returncode != 0:
        fail("dtensor estimate exited %d: %s" % (run.returncode, run.stderr))
    report = json.loads(run.stdout)
    doc = xml.dom.minidom.parse(svg)  # throws unless well-formed
    if doc.documentElement.tagName != "svg":
        fail("the document is a <%s>, not an <svg>" % doc.documentElement.tagName)
    blocks = [g for g in doc.getElementsByTagName("g") if g.getAttribute("class") == "role"]
    if len(report["roles"]) != 3 or len(blocks) != len(report["roles"]):
        fail("%d role blocks for %d roles (3 expected)" % (len(blocks), len(report["roles"])))
    for role, block in zip(report["roles"], blocks):
        name = block.getAttribute("data-ranks")
        if ranks_of(name) != role["ranks"]:
            fail("block of ranks %s for the role of ranks %s" % (name, role["ranks"]))
        lanes = [g for g in block.getElementsByTagName("g") if g.getAttribute("class") == "lane"]
        if [g.getAttribute("data-lane") for g in lanes] != ["compute", "communication"]:
            fail("ranks %s: lanes %s" % (name, [g.getAttribute("data-lane") for g in lanes]))
        for lane in lanes:
            spans = [r for r in lane.getElementsByTagName("rect")
                     if r.getElementsByTagName("title")]
            if not spans:
                fail("ranks %s: the %s lane is empty" % (name, lane.getAttribute("data-lane")))
        peak = role["memory"]["peak"]
        if int(block.getAttribute("data-peak-bytes")) != peak:
            fail("ranks %s: data-peak-bytes %s, the report's peak %d"
                 % (name, block.getAttribute("data-peak-bytes"), peak))
        lines = [p for p in block.getElementsByTagName("polyline")
                 if p.getAttribute("class") == "memory"]
        if len(lines) != 1:
            fail("ranks %s: %d memory lines" % (name, len(lines)))
        line = lines[0]
        if int(line.getAttribute("data-max-bytes")) != peak:
            fail("ranks %s: the memory line's highest point is %s bytes, the peak %d"
                 % (name, line.getAttribute("data-max-bytes"), peak))
        top = float(line.getAttribute("data-top-bytes"))
        bottom_y = float(line.getAttribute("data-y-bottom"))
        top_y = float(line.getAttribute("data-y-top"))
        ys = [float(p.split(",")[1]) for p in line.getAttribute("points").split()]
        drawn = (bottom_y - min(ys)) / (bottom_y - top_y) * top
        # Coordinates have two decimals: within 0.006 px of the peak.
        if abs(drawn - peak) > 0.006 * top / (bottom_y - top_y):
            fail("ranks %s: the line is drawn up to %.0f bytes, the peak is %d"
                 % (name, drawn, peak))
    print("ok: %d roles, each with its lanes and its peak" % len(blocks))


if __name__ == "__main__":
    main()
