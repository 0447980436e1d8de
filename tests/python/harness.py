"""harness.py — what the Python test scripts of tests/python/ share: a check
is a function run by the `case` decorator, which prints "ok NAME (T s)",
"skip NAME: why" (a `Skip` raised) or "FAIL NAME: traceback" for
tests/python.sh to count; `raises` asserts a DtpcError and its words."""
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
