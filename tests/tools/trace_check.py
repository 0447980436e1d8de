"""trace_check.py TRACE.json WORLD — a merged trace of WORLD ranks: trace-event
JSON that Perfetto opens (an object with traceEvents; metadata and complete
"X" spans with name, cat, ts, dur, pid, tid), one named track per rank
0..WORLD-1, the same number of spans on each (the ranks replay one graph),
the earliest span at 0, and the clocks aligned: each collective over the
whole world (its k-th occurrence on every rank) ends within 100 ms on every
rank. Per-rank clocks off by more show up there. Exit 1 with the reason."""
import collections
import json
import sys

d = json.load(open(sys.argv[1]))
world = int(sys.argv[2])
ev = d["traceEvents"]
tracks = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert tracks == {r: f"rank {r}" for r in range(world)}, tracks
spans = [e for e in ev if e["ph"] == "X"]
for e in spans:
    assert {"name", "cat", "ts", "dur", "pid", "tid"} <= set(e), e
    assert e["dur"] >= 0 and e["tid"] in tracks, e
count = collections.Counter(e["tid"] for e in spans)
assert len(set(count.values())) == 1 and len(count) == world, count
assert min(e["ts"] for e in spans) == 0, "the earliest span should start at 0"
ends = collections.defaultdict(dict)
seen = collections.Counter()
for e in spans:
    if e["cat"] == "communication":
        k = (e["name"], seen[e["tid"], e["name"]])
        seen[e["tid"], e["name"]] += 1
        ends[k][e["tid"]] = e["ts"] + e["dur"]
whole = [v for v in ends.values() if len(v) == world]
assert whole, "no collective over the whole world"
worst = max(max(v.values()) - min(v.values()) for v in whole)
assert worst < 100e3, f"a world-wide collective ends {worst / 1e3:.1f} ms apart across ranks"
