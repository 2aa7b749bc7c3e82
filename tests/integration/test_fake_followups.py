"""`--fake` follow-ups of fix56b and fix56c: torch's warning on a fake's data pointer (Note
[torch's warning on a fake's data pointer, not shown], trace/fake_pointers.py), a bool
stored before it is checked (Note [A check on a stored bool], trace/fake_checks.py), and
the line a stand-in names where a library whose name begins with "torch" reads a value
(Note [The frame a stand-in names], trace/fake.py). Plain torch."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import memledger
from memledger.ledger.fake_info import fake_info
from memledger.trace.fake_checks import ANSWERED
from memledger.trace.script import run_script

ROOT = Path(__file__).resolve().parents[2]


def _fake_standins(tmp_path: Path, source: str, name: str = "train.py") -> list:
    script = tmp_path / name
    script.write_text(source)
    argv, path = list(sys.argv), list(sys.path)   # run_script sets both
    try:
        with memledger.trace(fake=True) as led:
            run_script(script, [])
    finally:
        sys.argv[:], sys.path[:] = argv, path
    return fake_info(led.ledger).standins


def test_torchs_warning_on_a_fake_data_pointer_is_not_shown(tmp_path):
    """A deep copy of a tensor (torchmetrics' `add_state`, tests/clients/
    train_ema_metrics.py) under --fake: torch's `Tensor.__deepcopy__` asks `data_ptr() ==
    0`, memledger's wrapper hands it torch's answer, and torch's "Accessing the data
    pointer of FakeTensor is deprecated ..." (once per process, hence a fresh one) was
    shown at memledger/trace/fake_pointers.py:52, a warning the real run does not have.
    Now nothing is shown, and the copy is the same."""
    script = tmp_path / "copies.py"
    script.write_text(textwrap.dedent("""\
        import copy
        import torch

        x = torch.zeros(3)
        y = copy.deepcopy(x)
        print("copied", tuple(y.shape), y.data_ptr() != x.data_ptr())
        """))
    run = textwrap.dedent(f"""\
        import sys, warnings
        warnings.simplefilter("always")
        import memledger
        from memledger.trace.script import run_script
        with memledger.trace(fake=True):
            run_script({str(script)!r}, [])
        """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "copied (3,) True" in r.stdout, r.stdout
    assert "data pointer" not in r.stderr, r.stderr
    assert "fake_pointers.py" not in r.stderr, r.stderr


STORED = """\
import torch

x = torch.nn.Linear(10, 10)(torch.ones(10)).detach()   # values no fake run has
ok = torch.allclose(x, x.clone())
assert ok, "differ"
caught = []


def check(a, b):
    same = torch.equal(a, b)
    n = a.numel()
    if not same:
        raise ValueError(f"differ over {n}")
    shown = torch.equal(a, b)
    print(shown)
    if not shown:
        raise ValueError("differ")
    return same


try:
    check(x, x.clone())
except ValueError:
    caught.append("shown")
flag = torch.allclose(x, x.clone())
print("between")
try:
    assert flag
except AssertionError:
    caught.append("flag")
mask = (x == x.clone()).all()
if not mask:
    raise ValueError("mask")
print(caught)
"""


def test_a_bool_stored_then_checked_gets_the_value_that_goes_on(tmp_path, capsys):
    """Rule 34 read the bool at the call that gives it, whose next instruction must be the
    jump: `ok = torch.allclose(...)` then `assert ok` (line 4, the script's top level) and
    `same = torch.equal(...)`, an unrelated line, then `if not same: raise` (line 10, a
    function's local) kept the stand-in False and the script stopped at line 5 ("differ").
    Now the store is followed to a load straight into the check's jump, and (helper
    fix57c) a module's variable with a call between its store and its check (line 25) too.
    Kept False (no answer): a local printed before its check (line 14). A bool tensor
    stored first (line 31) was answered already (its jump calls `__bool__`)."""
    got = [(s.line, s.op, s.value, s.why) for s in _fake_standins(tmp_path, STORED)]
    assert got == [
        (4, "aten.allclose.default", "True", ANSWERED),
        (10, "aten.equal.default", "True", ANSWERED),
        (14, "aten.equal.default", "False", ""),
        (25, "aten.allclose.default", "True", ANSWERED),
        (32, "aten._local_scalar_dense", "True", ANSWERED),
    ]
    assert capsys.readouterr().out.splitlines()[-1] == "['shown']"


def test_a_stand_in_names_the_line_of_a_library_named_torch_something(tmp_path):
    """Note [The frame a stand-in names]: a stand-in names the innermost frame outside
    torch and memledger, the library's line where a library reads the value, but a
    library whose directory name begins with torch's (torchmdnet's `resize_to_fit`,
    torchmetrics, torch_geometric) was taken for torch by a prefix test without the
    separator, and the line named was the script's. A library compiled under
    site-packages as `torch_memledger_test56f/reader.py` reads `.item()` at its line 2 and
    `bool()` at its line 3; torch's own `torch._assert` still names the script's line."""
    lib = os.path.join(sysconfig.get_paths()["purelib"], "torch_memledger_test56f",
                       "reader.py")
    source = ("import torch\nns = {'torch': torch}\n"
              f"exec(compile('def read(t):\\n    n = t.sum().item()\\n"
              f"    return n, bool(t.any())\\n', {lib!r}, 'exec'), ns)\n"
              "x = torch.nn.Linear(4, 4)(torch.ones(4)).detach()\n"   # unknown values
              "ns['read'](x)\n"
              "torch._assert((x > -100).all(), 'in range')\n")
    got = [(s.file, s.line, s.op, s.value) for s in _fake_standins(tmp_path, source)]
    script = str(tmp_path / "train.py")
    assert got == [
        (lib, 2, "aten._local_scalar_dense", "0.0"),
        (lib, 3, "aten._local_scalar_dense", "False"),
        (script, 6, "aten._local_scalar_dense", "True"),
    ]


def test_a_stored_check_at_a_models_init_gives_the_real_ledger(tmp_path):
    """hl-gauss-pytorch's init check (tests/integration/test_fake_checks.py) written with
    the bool stored first, `ok = torch.allclose(...)` then `if not ok: raise ...`, in a
    function: main stopped at the raise ("not the inverse"); now the fake ledger is the
    real one to the byte, 15,464 B at the peak, every category."""
    from tests.integration.test_fake_checks import CHECKED_TRANSFORM, _peaks

    spelled = '        assert torch.allclose(symexp(symlog(x)), x, atol=1e-4), "not the inverse"\n'
    stored = ('        ok = torch.allclose(symexp(symlog(x)), x, atol=1e-4)\n'
              '        if not ok:\n'
              '            raise ValueError("not the inverse")\n')
    assert spelled in CHECKED_TRANSFORM
    leds = _peaks(tmp_path, CHECKED_TRANSFORM.replace(spelled, stored))
    real, fake = leds[False], leds[True]
    assert fake.peak().bytes == real.peak().bytes == 15_464
    assert fake.ledger.at_peak() == real.ledger.at_peak()
    (si,) = [s for s in fake_info(fake.ledger).standins if s.op == "aten.allclose.default"]
    assert (si.value, si.why, si.line) == ("True", ANSWERED, 17)
