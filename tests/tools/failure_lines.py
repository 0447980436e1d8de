"""failure_lines.py WORLD R MESSAGE < LINES — the failure report of a job
where rank R failed with MESSAGE (its status's text and its message): each
line `dtpc: rank(s) LIST: TEXT`, no two alike; rank R's line is exactly
`dtpc: rank R: MESSAGE`; every other rank is on exactly one line, which
says the failure reached it: `communication failed: ...: rank R failed:`
and the message less its status. Exit 1 with the reason."""
import re
import sys

world, failed, message = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lines = sys.stdin.read().splitlines()
assert lines and len(set(lines)) == len(lines), f"lines repeat: {lines}"
seen = []
for line in lines:
    m = re.fullmatch(r"dtpc: ranks? ([0-9, -]+): (.*)", line)
    assert m, f"not a failure line: {line}"
    ranks = []
    for part in m.group(1).split(", "):
        a, _, b = part.partition("-")
        ranks += range(int(a), int(b or a) + 1)
    seen += ranks
    if failed in ranks:
        assert ranks == [failed] and m.group(2) == message, f"rank {failed}'s line: {line}"
    else:
        why = message.split(": ", 1)[1]
        assert re.fullmatch(r"communication failed: .*: rank %d failed: " % failed + re.escape(why),
                            m.group(2)), f"not a consequence of rank {failed}: {line}"
assert sorted(seen) == list(range(world)), f"ranks on the lines: {sorted(seen)}"
