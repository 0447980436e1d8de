"""timeline_check.py TRACE.json PICTURE.svg — dtpc timeline's picture against
its trace: well-formed XML (xml.etree), one lane group per (pid, tid) that
holds spans, each with one rect per span of that row whose <title> starts
with the span's name, in the trace's order; one counter chart per (pid,
counter name); a time axis with ticks. Exit 1 with the reason."""
import json
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
ev = json.load(open(sys.argv[1]))["traceEvents"]
root = ET.parse(sys.argv[2]).getroot()
spans = [e for e in ev if e["ph"] == "X"]
rows = sorted({(e["pid"], e["tid"]) for e in spans})
groups = {c: [g for g in root.findall(NS + "g") if g.get("class") == c] for c in ("lane", "counter", "axis")}
assert len(groups["lane"]) == len(rows), f"{len(groups['lane'])} lanes for {len(rows)} rows"
for g, row in zip(groups["lane"], rows):
    want = [e["name"] for e in spans if (e["pid"], e["tid"]) == row]
    got = [r.find(NS + "title").text for r in g.findall(NS + "rect")]
    assert len(got) == len(want), f"row {row}: {len(got)} rects for {len(want)} spans"
    for w, t in zip(want, got):
        assert t.startswith(w + " ("), f"row {row}: '{t}' for span '{w}'"
counters = {(e["pid"], e["name"]) for e in ev if e["ph"] == "C"}
assert len(groups["counter"]) == len(counters), f"{len(groups['counter'])} charts for {len(counters)} counters"
assert len(groups["axis"]) == 1 and len(groups["axis"][0].findall(NS + "line")) >= 3, "no time axis with ticks"
