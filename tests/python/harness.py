"""harness.py — what the Python test scripts of tests/python/ share: a check
is a function run by the `case` decorator, which prints "ok NAME (T s)",
"skip NAME: why" (a `Skip` raised) or "FAIL NAME: traceback" for
tests/python.sh to count; `raises` asserts a DtpcError and its words;
`mesh_cases` makes a case per mesh of a table, `mesh_world` counts a mesh's
ranks, `perturbed` gives the weights of a negative control."""
import sys
import time
import traceback

import dtpc


class Skip(Exception):
    pass


def case(fn):
    start = time.monotonic()
    try:
        fn()
        print(f"ok {fn.__name__} ({time.monotonic() - start:.1f} s)")
    except Skip as e:
        print(f"skip {fn.__name__}: {e}")
    except Exception:
        print(f"FAIL {fn.__name__}: {traceback.format_exc(limit=6)}")
    sys.stdout.flush()
    return fn


def raises(fn, *words, status=None):
    """fn() raises DtpcError whose message holds every word (and, given, whose
    status is status); returns it."""
    try:
        fn()
    except dtpc.DtpcError as e:
        assert all(w in str(e) for w in words), (words, str(e))
        assert status is None or e.status == status, (status, e.status, str(e))
        return e
    raise AssertionError(f"no DtpcError (wanted {words})")


def mesh_cases(prefix, meshes, check):
    """One case per row of meshes {NAME: row}: check(NAME, *row), named
    PREFIX_NAME (a script's comparison on each of its meshes)."""
    for name, row in meshes.items():
        def fn(name=name, row=row):
            check(name, *row)
        fn.__name__ = f"{prefix}_{name}"
        case(fn)


def mesh_world(mesh):
    """The ranks of a mesh as --mesh takes it: "ring = 2, ulysses = 2" is 4, None 1."""
    world = 1
    for axis in (mesh or "").split(","):
        if axis.strip():
            world *= int(axis.split("=")[1])
    return world


def perturbed(module, name, delta=0.25):
    """module's state_dict with row 0 of tensor `name` moved by delta (a copy of that
    tensor only): the weights of a negative control, bound to dtpc's copy alone."""
    sd = dict(module.state_dict())
    sd[name] = sd[name].clone()
    sd[name][0] += delta
    return sd
