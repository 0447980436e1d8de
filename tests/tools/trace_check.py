"""trace_check.py TRACE.json WORLD — a merged trace of WORLD ranks: trace-event
JSON that Perfetto opens (an object with traceEvents; metadata, complete "X"
spans with name, cat, ts, dur, pid, tid, and "C" counters), one process named
`rank R` per rank 0..WORLD-1 with two rows, compute (tid 0) and communication
(tid 1), each span on its category's row, the same number of spans on each
rank (the ranks replay one graph), the earliest span at 0; counters per rank:
`bytes on the wire` never falls and ends at the sum of the communication
spans' bytes, `arena` live bytes above 0; and the clocks aligned: each
collective over the whole world (its k-th occurrence on every rank) ends
within 100 ms on every rank. Per-rank clocks off by more show up there.
With --parts: the graph has ring attention, whose parts the executor times
(args "part"): each ring_attention span of a rank holds, within its time,
attention steps 0..P-1 (P >= 2) on the compute row and at least one K/V
transfer ("kv shift" or "kv all_gather", with bytes) on the communication
row; parts count apart from the ops above.
Exit 1 with the reason."""
import collections
import json
import sys

d = json.load(open(sys.argv[1]))
world = int(sys.argv[2])
want_parts = "--parts" in sys.argv[3:]
ev = d["traceEvents"]
meta = [e for e in ev if e["ph"] == "M"]
procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
assert procs == {r: f"rank {r}" for r in range(world)}, procs
rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
assert rows == {(r, t): n for r in range(world) for t, n in enumerate(["compute", "communication"])}, rows
every = [e for e in ev if e["ph"] == "X"]
for e in every:
    assert {"name", "cat", "ts", "dur", "pid", "tid"} <= set(e), e
    assert e["dur"] >= 0 and e["pid"] in procs, e
    assert e["tid"] == (e["cat"] == "communication"), f"a span off its category's row: {e}"
parts = [e for e in every if "part" in e.get("args", {})]
spans = [e for e in every if "part" not in e.get("args", {})]
rings = [e for e in spans if e["name"].startswith("ring_attention ")]
assert not want_parts or rings, "no ring_attention span"
for op in rings:
    inside = [p for p in parts if p["pid"] == op["pid"] and p["args"]["op"] == op["name"] and
              op["ts"] - 0.002 <= p["ts"] and p["ts"] + p["dur"] <= op["ts"] + op["dur"] + 0.002]
    steps = sorted(p["args"]["step"] for p in inside if p["args"]["part"] == "attention")
    moves = [p for p in inside if p["args"]["part"] in ("kv shift", "kv all_gather")]
    assert len(steps) >= 2 and steps == list(range(len(steps))), f"{op}: attention steps {steps}"
    assert moves and all(p["args"]["bytes"] > 0 for p in moves), f"{op}: transfers {moves}"
assert len(parts) == sum(1 for op in rings for p in parts
                         if p["pid"] == op["pid"] and p["args"]["op"] == op["name"] and
                         op["ts"] - 0.002 <= p["ts"] and p["ts"] + p["dur"] <= op["ts"] + op["dur"] + 0.002), \
    "a part outside its op's span"
count = collections.Counter(e["pid"] for e in spans)
assert len(set(count.values())) == 1 and len(count) == world, count
assert min(e["ts"] for e in spans) == 0, "the earliest span should start at 0"
for r in range(world):
    sent = [e["args"]["sent"] for e in ev if e["ph"] == "C" and e["pid"] == r and e["name"] == "bytes on the wire"]
    total = sum(e["args"]["bytes"] for e in spans if e["pid"] == r and e["cat"] == "communication")
    assert sent == sorted(sent) and sent and sent[-1] == total, f"rank {r}: bytes on the wire {sent[-3:]} vs {total}"
    live = [e["args"]["live bytes"] for e in ev if e["ph"] == "C" and e["pid"] == r and e["name"] == "arena"]
    assert live and min(live) > 0, f"rank {r}: arena counter {live[:3]}"
ends = collections.defaultdict(dict)
seen = collections.Counter()
for e in spans:
    if e["cat"] == "communication":
        k = (e["name"], seen[e["pid"], e["name"]])
        seen[e["pid"], e["name"]] += 1
        ends[k][e["pid"]] = e["ts"] + e["dur"]
whole = [v for v in ends.values() if len(v) == world]
assert whole, "no collective over the whole world"
worst = max(max(v.values()) - min(v.values()) for v in whole)
assert worst < 100e3, f"a world-wide collective ends {worst / 1e3:.1f} ms apart across ranks"
