"""The shapes of a stored check (Note [A check on a stored bool], memledger/trace/
fake_checks.py), as plain Python any interpreter runs: tests/unit/test_stored_checks.py runs
it under this venv's Python and under each CPython 3.12 and 3.13 it finds (3.13 fuses a store
and the load after it into STORE_FAST_LOAD_FAST), and compares the answers.

    python tests/unit/stored_checks.py memledger/trace/fake_checks.py   # prints JSON

`probe()` stands for the call that reads a bool off values (`torch.allclose`): it answers
what `passing_value` reads off its caller's bytecode (None: no answer, Rule 3's False)."""

import importlib.util
import json
import sys

spec = importlib.util.spec_from_file_location("fake_checks", sys.argv[1])
fake_checks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fake_checks)
ANSWERS = []


def probe():
    answer = fake_checks.passing_value(sys._getframe(1))
    ANSWERS.append(answer)
    return bool(answer)


def noop():
    return None


def local_at_once():
    ok = probe(); assert ok   # noqa: E702  (3.13: STORE_FAST_LOAD_FAST)


def local_a_call_between():
    ok = probe()
    noop()
    assert ok


def local_printed_first():
    ok = probe()
    str(ok)
    assert ok


def cell_a_call_between():
    ok = probe()

    def inner():
        return ok
    noop()
    if not ok:
        raise ValueError("differ")
    return inner


def cell_made_first():
    def inner():
        return ok
    ok = probe()
    noop()
    assert ok
    return inner


def cell_stored_again():
    ok = probe()

    def inner():
        return ok
    ok = True
    assert ok
    return inner


def global_a_call_between():
    global FLAG
    FLAG = probe()
    noop()
    assert FLAG


def branch_only():
    ok = probe()
    if ok:
        return 1
    return 0


TOP = """
flag = probe()
noop()
assert flag

other = probe()
noop()
other = True
assert other
"""

for case in (local_at_once, local_a_call_between, local_printed_first, cell_a_call_between,
             cell_made_first, cell_stored_again, global_a_call_between, branch_only):
    try:
        case()
    except (AssertionError, ValueError):   # no answer: the stand-in False fails the check
        pass
for src in TOP.split("\n\n"):
    try:
        exec(compile(src, "top", "exec"), {"probe": probe, "noop": noop})
    except AssertionError:
        pass
print(json.dumps(ANSWERS))
