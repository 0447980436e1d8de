"""report_ranks.py UNEVEN.json TEXT-REPORT ERROR.json NO-V.json — what the
report schema cannot say: `-v --format json` holds every rank in order, its
first and last rank equal the text report's rows, an uneven plan's ranks
differ; a compile with errors has no report, one without -v only its
(empty) diagnostics. An assertion names the first difference."""
import json, re, sys
r = json.load(open(sys.argv[1]))["report"]
text = open(sys.argv[2]).read()
assert [x["rank"] for x in r["ranks"]] == list(range(r["world"])), "not every rank, in order"
shown = {int(m.group(1)): m.end() for m in re.finditer(r"^rank (\d+), per forward pass:", text, re.M)}
assert sorted(shown) == [0, r["world"] - 1], shown
for rank, at in shown.items():
    rows = []
    for line in text[at:].splitlines()[1:]:
        m = re.match(r"  (\w+)\s+over (\S+)\s+(\d+) ops\s+(\d+) bytes", line)
        if not m:
            break
        rows.append((m.group(1), m.group(2), int(m.group(3)), int(m.group(4))))
    got = [(c["op"], c["axes"], c["ops"], c["bytes"]) for c in r["ranks"][rank]["communication"]]
    assert rows == got, (rank, rows, got)
byts = {tuple((c["op"], c["bytes"]) for c in x["communication"]) for x in r["ranks"]}
assert len(byts) > 1, "the uneven plan's ranks should differ"
e = json.load(open(sys.argv[3]))
assert e["errors"] >= 1 and "report" not in e, e
q = json.load(open(sys.argv[4]))
assert q == {"diagnostics": [], "errors": 0}, q
