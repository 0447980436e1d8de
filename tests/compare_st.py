#!/usr/bin/env python3
"""compare_st.py OUT REF TOL [NAME=TOL ...] — compares the tensors of a safetensors file dtpc
wrote (OUT) with a reference (REF), both float32: prints each REF tensor's
normwise max relative error, max|out - ref| / max|ref| (as `dtpc run
--verify`), and fails above TOL, on a missing tensor, on a shape or dtype
mismatch, or on a value that is not finite (NaN, Inf) in either file, wherever
it is (Python's max() drops a NaN that is not first: the error is not taken
over such values); NAME=TOL gives one tensor its own bound. Standard library
only (CI has no numpy). Used by tests/fixtures.sh (diffusers' outputs) and
tests/equiv.sh (PyTorch SDPA's)."""
import json, math, struct, sys
from array import array

def load(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        if v["dtype"] != "F32":
            sys.exit(f"{path}: {k}: dtype {v['dtype']}, want F32")
        s, e = v["data_offsets"]
        a = array("f")
        a.frombytes(b[8 + n + s:8 + n + e])
        if sys.byteorder != "little":
            a.byteswap()
        out[k] = (v["shape"], a)
    return out

got, ref = load(sys.argv[1]), load(sys.argv[2])
tol = float(sys.argv[3])
own = {k: float(v) for k, v in (a.split("=", 1) for a in sys.argv[4:])}
ok = True
for k, (shape, r) in ref.items():
    if k not in got:
        print(f"{k}: missing from dtpc's outputs")
        ok = False
        continue
    gshape, g = got[k]
    if gshape != shape:
        print(f"{k}: shape {gshape}, reference {shape}")
        ok = False
        continue
    bad = [i for i, (x, y) in enumerate(zip(g, r)) if not (math.isfinite(x) and math.isfinite(y))]
    if bad:
        i = bad[0]
        print(f"{k}: {len(bad)} values not finite, first at index {i}: dtpc {g[i]}, "
              f"reference {r[i]}")
        ok = False
        continue
    den = max((abs(x) for x in r), default=0.0)
    err = max((abs(x - y) for x, y in zip(g, r)), default=0.0) / (den if den > 0 else 1.0)
    print(f"{k}: max relative error {err:.3g}")
    ok = ok and err <= own.get(k, tol)
sys.exit(0 if ok else 1)
